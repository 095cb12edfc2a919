"""Fashion-MNIST's label hierarchy: its ten fine labels grouped into four coarse ones.

The end tier answers the coarse question (what kind of thing), the edge and the cloud
the fine one (which thing); a fine answer is also a coarse answer (``to_coarse``), so
every tier's coarse accuracy can be set side by side. The grouping (issue 51):

- 0 tops: T-shirt/top (0), pullover (2), coat (4), shirt (6)
- 1 bottoms and dresses: trouser (1), dress (3)
- 2 footwear: sandal (5), sneaker (7), ankle boot (9)
- 3 bags: bag (8)
"""

from __future__ import annotations

import numpy as np

FINE_NAMES = ("T-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt",
              "sneaker", "bag", "ankle boot")
COARSE_NAMES = ("tops", "bottoms and dresses", "footwear", "bags")
# fine label -> coarse label, indexed by the fine label
FINE_TO_COARSE = (0, 1, 0, 1, 0, 2, 0, 2, 3, 2)
LABELS = ("coarse", "fine")  # which labels a tier's network is trained on
CLASSES = {"coarse": len(COARSE_NAMES), "fine": len(FINE_NAMES)}
TIER_LABELS = {"end": "coarse", "edge": "fine", "cloud": "fine"}  # each tier's network's


def to_coarse(fine) -> np.ndarray:
    """The coarse labels of fine labels (an array or a list of ints)."""
    return np.asarray(FINE_TO_COARSE, dtype=np.int64)[np.asarray(fine, dtype=np.int64)]


def relabel(fine, labels: str) -> np.ndarray:
    """Fine labels as a network trained on ``labels`` (coarse or fine) is taught them."""
    return to_coarse(fine) if labels == "coarse" else np.asarray(fine, dtype=np.int64)
