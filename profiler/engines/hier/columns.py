"""A hierarchical cell's own columns, from its end devices' step lines (one a batch,
``workloads.hier.device``) and start events.

- **completion**: from the first batch's start on any device to the last batch's answer
  on any (the lines' ``t`` are on the controller's clock);
- **latency** per sample: a sample answered on its device waits for the end network
  (``local_s``), one sent up for the whole step (the link's delay included); p50 and p95
  over every sample of the cell;
- **inference time per image** of each tier: the end network's time over the device's
  samples, each upper node's time in its network (its reply says) over its images; the
  privacy module's (the upper network's first convolution, on the device) over the
  samples sent up;
- **accuracy**: of the end network's quick coarse answer on every sample; at each exit,
  coarse and (edge, cloud) fine over the samples that tier answered; overall, coarse
  over every sample and fine over the samples that got a fine answer;
- **share** of the samples each tier answered (they sum to 1);
- **round trip** of each device link: a batch's way up and back with every network's
  time taken out (the delay held back and the transfer), the median over batches;
- **bytes per sample** of each link, both ways, over all the cell's samples;
- **Mapping**: the N_map used (``--map-devices``, else equation (4)'s) and equation
  (4)'s as the devices measured it (their median), equation (5)'s cloud share from the
  one used, beside the share that went to the cloud;
- **sizes**: each tier's network's parameters and weights file, as the devices built
  them (``nets.tier_sizes``, Zhang's Table 1).
"""

from __future__ import annotations

import statistics

import numpy as np

from workloads.hier import schemes

from ...column import Column

LINKS = ("end-edge", "end-cloud", "edge-cloud")


def _column(name: str, kind: str, unit: str, description: str) -> Column:
    return Column(name, kind, unit, description, __name__, "hier")


COLUMNS = tuple(_column(*row) for row in [
    ("hier_nodes", "map", "", "nodes per tier (end, edge, cloud)"),
    ("hier_models", "map", "", "each tier's network"),
    ("hier_completion_s", "float", "s", "the whole test set streamed, first batch to last answer"),
    ("hier_latency_p50_ms", "float", "ms", "a sample's latency, median"),
    ("hier_latency_p95_ms", "float", "ms", "a sample's latency, 95th percentile"),
    ("hier_infer_ms_per_image", "map", "ms", "each tier's time in its network per image"),
    ("hier_privacy_ms_per_image", "float", "ms",
     "the privacy module on the device per image sent up (--privacy on)"),
    ("hier_round_trip_ms_by_link", "map", "ms",
     "median round trip of a batch on each device link, the networks' time taken out"),
    ("hier_end_accuracy", "float", "", "the end network's coarse accuracy on every sample"),
    ("hier_exit_coarse_accuracy", "map", "", "coarse accuracy of the samples each tier answered"),
    ("hier_exit_fine_accuracy", "map", "", "fine accuracy of the samples edge and cloud answered"),
    ("hier_coarse_accuracy", "float", "", "coarse accuracy of the final answers, every sample"),
    ("hier_fine_accuracy", "float", "", "fine accuracy over the samples given a fine answer"),
    ("hier_share", "map", "", "share of the samples each tier answered (sums to 1)"),
    ("hier_bytes_per_sample", "map", "bytes", "bytes per sample on each link, both ways"),
    ("hier_batches_moved", "int", "",
     "--recovery: batches answered by another end device than their first one"),
    ("hier_transfer_timeouts_s", "float", "s",
     "--recovery reassign: time the assigner spent on transfers to failed devices"),
    ("hier_answered_share", "float", "", "share of the test set's samples answered"),
    ("hier_params_by_tier", "map", "", "each tier's network's parameters (Table 1)"),
    ("hier_weights_mb_by_tier", "map", "MB",
     "each tier's network's weights file, as torch.save writes its state_dict (Table 1)"),
    ("hier_n_map", "int", "", "Mapping: end devices per edge node, as used (given by "
     "--map-devices, else eq. 4's)"),
    ("hier_n_map_eq4", "int", "", "Mapping: end devices per edge node, eq. (4) from the "
     "devices' measured times"),
    ("hier_cloud_share_predicted", "float", "", "Mapping: eq. (5)'s share sent to the cloud"),
    ("hier_cloud_share", "float", "", "share of the samples sent to the cloud, measured"),
])


def columns(workers: dict[int, list[dict]], starts: dict[int, dict]) -> dict:
    """The hierarchy's columns (empty for a cell whose devices streamed nothing)."""
    lines = [line for rank in sorted(workers) for line in workers[rank] if "n" in line]
    first = next((s.get("hier") for s in starts.values() if s.get("hier")), None)
    if not lines or first is None:
        return {}
    total = sum(line["n"] for line in lines)
    answered = {tier: _sum(lines, f"ans_{tier}") for tier in schemes.TIERS}
    fine_answered = answered["edge"] + answered["cloud"]
    sent_up = _sum(lines, "up")
    out = {
        "hier_nodes": first["counts"],
        "hier_models": {t: m for t, m in first["models"].items() if first["counts"].get(t)},
        "hier_completion_s": round(max(x["t"] + x["step_s"] for x in lines)
                                   - min(x["t"] for x in lines), 4),
        **_latency(lines),
        "hier_infer_ms_per_image": _infer_ms(lines, total),
        "hier_privacy_ms_per_image": (round(_sum(lines, "privacy_s") / sent_up * 1e3, 4)
                                      if sent_up and first.get("privacy") else None),
        "hier_round_trip_ms_by_link": _round_trips(lines),
        "hier_end_accuracy": _ratio(_sum(lines, "end_coarse_ok"), total),
        "hier_exit_coarse_accuracy": {t: _ratio(_sum(lines, f"coarse_ok_{t}"), answered[t])
                                      for t in schemes.TIERS if answered[t]},
        "hier_exit_fine_accuracy": {t: _ratio(_sum(lines, f"fine_ok_{t}"), answered[t])
                                    for t in ("edge", "cloud") if answered[t]} or None,
        "hier_coarse_accuracy": _ratio(sum(_sum(lines, f"coarse_ok_{t}")
                                           for t in schemes.TIERS), total),
        "hier_fine_accuracy": (_ratio(_sum(lines, "fine_ok_edge") + _sum(lines, "fine_ok_cloud"),
                                      fine_answered) if fine_answered else None),
        "hier_share": {t: _ratio(answered[t], total) for t in schemes.TIERS},
        "hier_bytes_per_sample": {link: round(_sum(lines, _bytes_field(link)) / total, 1)
                                  for link in LINKS if _sum(lines, _bytes_field(link))}
        or None,
        "hier_cloud_share": _ratio(_sum(lines, "img_cloud"), total),
        "hier_answered_share": _ratio(total, first.get("samples") or total),
        **_sizes(first.get("sizes") or {}),
    }
    if any("moved" in line for line in lines):
        out["hier_batches_moved"] = int(_sum(lines, "moved"))
        out["hier_transfer_timeouts_s"] = round(_sum(lines, "timeouts_s"), 3)
    out.update(_mapping(starts, first))
    return out


def _sizes(sizes: dict[str, dict]) -> dict:
    if not sizes:
        return {}
    return {"hier_params_by_tier": {t: s["params"] for t, s in sizes.items()},
            "hier_weights_mb_by_tier": {t: s["weights_mb"] for t, s in sizes.items()}}


def _bytes_field(link: str) -> str:
    return "bytes_" + link.replace("-", "_")


def _sum(lines: list[dict], key: str) -> float:
    return sum(line.get(key) or 0 for line in lines)


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None


def _latency(lines: list[dict]) -> dict:
    """p50 and p95 of every sample's latency: a batch's local answers wait ``local_s``,
    its samples sent up the whole step."""
    values = np.concatenate([np.repeat([line["local_s"], line["step_s"]],
                                       [line["n"] - line.get("up", 0), line.get("up", 0)])
                             for line in lines])
    p50, p95 = np.percentile(values, [50, 95])
    return {"hier_latency_p50_ms": round(float(p50) * 1e3, 3),
            "hier_latency_p95_ms": round(float(p95) * 1e3, 3)}


def _round_trips(lines: list[dict]) -> dict:
    """Per device link, the median of its batches' way up and back with every network's
    time (the privacy module's, the upper nodes') taken out: the delay held back plus
    the transfer, so ``--tier-delay edge=0.5`` shows as about 500 ms on ``end-edge``."""
    trips: dict[str, list[float]] = {}
    for line in lines:
        if line.get("link"):
            trips.setdefault(line["link"], []).append(
                line["exchange_s"] - line.get("privacy_s", 0.0) - line["upper_infer_s"])
    return {link: round(statistics.median(values) * 1e3, 3)
            for link, values in trips.items()} or None


def _infer_ms(lines: list[dict], total: int) -> dict:
    out = {"end": round(_sum(lines, "compute_s") / total * 1e3, 4)}
    for tier in ("edge", "cloud"):
        images = _sum(lines, f"img_{tier}")
        if images:
            out[tier] = round(_sum(lines, f"infer_{tier}_s") / images * 1e3, 4)
    return out


def _mapping(starts: dict[int, dict], first: dict) -> dict:
    """N_map as used and as eq. (4) gives it (the devices' median: each measured its
    own), and eq. (5) from the one used."""
    def median(key: str) -> int | None:
        values = [s["hier"][key] for s in starts.values()
                  if (s.get("hier") or {}).get(key) is not None]
        return int(statistics.median_low(values)) if values else None

    nmap = median("n_map")
    if nmap is None:
        return {}
    counts = first["counts"]
    return {"hier_n_map": nmap, "hier_n_map_eq4": median("n_map_eq4") or nmap,
            "hier_cloud_share_predicted": round(schemes.cloud_share(
                counts["end"], counts["edge"], nmap), 4)}
