"""The hierarchy's decisions, as pure functions: where an end device's batches go under
each scheme, Zhang's Mapping (equations 4 and 5) and DDNN's early exit.

Schemes (Zhang 2018, section 3.4, and Teerapittayanon et al. 2017):

- ``end``: every batch is answered on its end device (coarse labels only).
- ``end-edge``: the end device answers coarsely, then sends the batch up to an edge
  device for the fine answer; end device i uses edge i mod N_edge (sequential order).
- ``end-cloud``: the same, up to the cloud (cloud i mod N_cloud).
- ``mapping``: each group of N_map end devices shares one edge device (eq. 4); the end
  devices left over once every edge device has its N_map go to the cloud, a share
  theta_cloud of the work (eq. 5).
- ``early-exit``: the end device answers the samples whose softmax is confident (its
  entropy, in nats, under the threshold) and sends only the others up, to its edge
  device when there is one (which exits or forwards to the cloud the same way), else
  to the cloud.
"""

from __future__ import annotations

import math

import numpy as np

SCHEMES = ("end", "end-edge", "end-cloud", "mapping", "early-exit")
TIERS = ("end", "edge", "cloud")
# The upper tiers each scheme needs a node of (early-exit: either, checked apart).
NEEDS = {"end": (), "end-edge": ("edge",), "end-cloud": ("cloud",),
         "mapping": ("edge", "cloud"), "early-exit": ()}
# The upper tiers each scheme sends to, when they have nodes: only their nodes serve.
USES = {"end": (), "end-edge": ("edge",), "end-cloud": ("cloud",),
        "mapping": ("edge", "cloud"), "early-exit": ("edge", "cloud")}


def n_map(edge_round_trip_s: float, end_round_trip_s: float) -> int:
    """Zhang's equation (4): N_map = ceil((t^c_edge + t^p_edge) / (t^c_end + t^p_end)),
    the end devices one edge device takes, each side's communication and processing
    time of one batch (at least 1)."""
    if end_round_trip_s <= 0:
        return 1
    return max(1, math.ceil(edge_round_trip_s / end_round_trip_s - 1e-9))


def cloud_share(n_end: int, n_edge: int, nmap: int) -> float:
    """Zhang's equation (5): theta_cloud = (N_end - N_edge * N_map) / N_end, the share of
    the end devices (and so of the work) sent to the cloud; 0 when the edge devices take
    them all (the equation goes negative there)."""
    return max(0.0, (n_end - n_edge * nmap) / n_end) if n_end else 0.0


def mapped_upper(index: int, n_edge: int, nmap: int) -> tuple[str, int]:
    """Where end device ``index`` sends its batches under Mapping: ``("edge", j)`` for
    the first N_edge * N_map devices (N_map a group), ``("cloud", 0)`` for the rest."""
    if index < n_edge * nmap:
        return "edge", index // nmap
    return "cloud", 0


def upper(scheme: str, index: int, counts: dict[str, int]) -> tuple[str, int] | None:
    """Where end device ``index`` sends its batches under ``scheme`` (not ``mapping``,
    which needs N_map: ``mapped_upper``): ``(tier, index in the tier)``, None for
    ``end``."""
    if scheme == "end":
        return None
    if scheme == "end-edge":
        return "edge", index % counts["edge"]
    if scheme == "end-cloud":
        return "cloud", index % counts["cloud"]
    if scheme == "early-exit":
        tier = "edge" if counts.get("edge") else "cloud"
        return tier, index % counts[tier]
    raise ValueError(f"scheme {scheme!r} has no fixed upper tier")


def entropy(probs: np.ndarray) -> np.ndarray:
    """DDNN's exit criterion per sample: the softmax's entropy in nats, in [0, ln(classes)]
    (0: certain, ln(classes): uniform)."""
    p = np.clip(np.asarray(probs, dtype=np.float64), 1e-12, 1.0)
    return -(p * np.log(p)).sum(axis=1)


def exits(probs: np.ndarray, threshold_nats: float) -> np.ndarray:
    """Which samples are answered here: entropy strictly under ``threshold_nats`` (0: none
    exits, ln(classes): all but the perfectly uniform ones)."""
    return entropy(probs) < threshold_nats
