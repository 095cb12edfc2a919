"""The hierarchy's section of the report: each finished ``hier`` cell's scheme, time,
latency, per-tier inference time, shares, accuracies and bytes, one row a cell.

The values are the cell's own results columns (``.columns`` says how each is measured);
a per-tier map is shown in the order end / edge / cloud (a link map: end-edge /
end-cloud / edge-cloud), a tier without a value as none. Times are as measured (the
hierarchy's delays are the application's own, not dilated). A sweep without a finished
hierarchical cell gets no section.
"""

from __future__ import annotations

from workloads.hier.schemes import TIERS

from ...status import Status
from ..base import ReportSection
from .columns import LINKS

# (heading, results column, the keys of a map column in order or None)
TABLE = [("completion s", "hier_completion_s", None),
         ("latency p50 ms", "hier_latency_p50_ms", None),
         ("latency p95 ms", "hier_latency_p95_ms", None),
         ("infer ms/image", "hier_infer_ms_per_image", TIERS),
         ("share answered", "hier_share", TIERS),
         ("coarse acc at exit", "hier_exit_coarse_accuracy", TIERS),
         ("fine acc at exit", "hier_exit_fine_accuracy", ("edge", "cloud")),
         ("coarse acc", "hier_coarse_accuracy", None),
         ("fine acc", "hier_fine_accuracy", None),
         ("bytes/sample", "hier_bytes_per_sample", LINKS),
         ("round trip ms", "hier_round_trip_ms_by_link", ("end-edge", "end-cloud")),
         ("answered", "hier_answered_share", None),
         ("batches moved", "hier_batches_moved", None),
         ("N_map", "hier_n_map", None),
         ("N_map eq. 4", "hier_n_map_eq4", None),
         ("cloud share eq. 5", "hier_cloud_share_predicted", None),
         ("cloud share", "hier_cloud_share", None)]
NOTE = ("Each finished hierarchical cell (hier; docs/tiers.md): the whole test set's "
        "completion, a sample's latency, each tier's time in its network per image, the "
        "share of samples each tier answered, coarse and fine accuracy at each exit and "
        "overall, the bytes per sample on each link, each device link's round trip with "
        "the networks' time out, and Mapping's N_map as used and as eq. (4) gives it, and "
        "the cloud share eq. (5) gives beside the measured share. Per-tier values are end / "
        "edge / cloud; links end-edge / end-cloud / edge-cloud.")


def sections(records: list[dict], engine: str) -> list[ReportSection]:
    shown = [r for r in records if r.get("status") == Status.OK
             and r.get("engine") == engine and r.get("hier_share")]
    if not shown:
        return []
    rows = [(r, [_value(r.get(column), keys) for _, column, keys in TABLE]) for r in shown]
    return [ReportSection("hierarchy", "Hierarchical inference", NOTE,
                          [heading for heading, _, _ in TABLE], rows, None,
                          [column for _, column, _ in TABLE])]


def _value(value, keys):
    """A map as a list in ``keys``' order (the page joins a list with /)."""
    if keys is None or not isinstance(value, dict):
        return value
    return [value.get(key) for key in keys]
