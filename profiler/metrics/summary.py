"""A cell's resource columns, computed from its spools alone (no server needed).

For each worker node, over the training window [t_start, t_end] (first worker start to
last worker end):

- ``cpu_percent``: the node's ``cpu.cpu_percent`` samples in the window (host, or the
  node's cgroup as % of its quota): mean, and the highest sample; ``node_cores``: how
  many cores that % is a share of (the host's, or the board an emulated node stands
  for, when its profile says: a Pi 3B's 4, where one busy core shows 25%);
- ``mem_used_mb``: the node's ``mem.used_mb`` (host or cgroup): mean and peak;
- ``rss_mb``: the summed RSS of the node's worker processes (with their descendants)
  at each tick: mean and peak;
- ``net_*``: the counters of the interfaces the agent counted, interpolated linearly
  at t_start and t_end, summed over interfaces; KB = 1024 bytes. ``net_*_per_s`` are the
  same totals divided by the window's length: rates, which is what the study's Ganglia
  ``bytes_in``/``bytes_out`` report (its "KB" are KB/s), so they compare across cells
  of different lengths and with the study.

Each column is then the mean over the worker nodes that have data (None if none).

Over every node of the cell with a spool (servers' too: a slow server paces everyone):

- ``throttled_nodes``: the nodes whose Raspberry Pi firmware reported under-voltage,
  frequency capping, throttling or the soft temperature limit during the window: a
  current bit set in a sample of the window, or a sticky ``*_occurred`` bit that was
  clear in the last sample before it (``vcgencmd`` is read every few seconds; the sticky
  bits catch what happened between readings). ``throttle_flags_by_node`` says which.
  Empty when the nodes reported and none throttled, None when none reported (not Pis);
- ``cpu_mhz_min``: the lowest CPU frequency sampled in the window (``cpu_freq``), over
  all nodes, and ``cpu_mhz_min_by_node`` per node (on the local and emulated clusters the
  host's, every node alike).

Over every node of the cell too, its energy (``energy_j``, by node and role, J per
sample, to the final accuracy, measured or modelled): ``profiler.metrics.energy``.

The live shipper's own traffic is not training traffic: when it ships to a loopback
address and a node counts ``lo`` (the local cluster), the bytes it recorded in the
sweep's ``shipper-traffic.jsonl`` (passed as ``traffic_file``) during the window are
subtracted from both directions of ``lo`` (on loopback every byte is counted once sent
and once received), and 4
packets per HTTP request. On emulated nodes the shipper (in the host's namespace)
never crosses a node's ``eth0``, and agents started by the sweep do not ship.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from pathlib import Path
from statistics import fmean, median

from .energy import ENERGY_COLUMNS, CellWork, NodePower, energy_columns
from .spool_reader import read_points

SUMMARY_COLUMNS = [
    "cpu_percent_mean", "cpu_percent_peak",
    "mem_used_mb_mean", "mem_used_mb_peak",
    "rss_mb_mean", "rss_mb_peak",
    "net_sent_kb", "net_recv_kb", "net_sent_packets", "net_recv_packets",
    "net_sent_kb_per_s", "net_recv_kb_per_s", "net_sent_packets_per_s",
    "net_recv_packets_per_s",
    "node_cores",
    # Not means: over every node of the cell (see the module doc).
    "throttled_nodes", "throttle_flags_by_node", "cpu_mhz_min", "cpu_mhz_min_by_node",
    "metrics_nodes",
    # The cell's energy, over every node (profiler.metrics.energy).
    *ENERGY_COLUMNS,
]
_MEAN_COLUMNS = SUMMARY_COLUMNS[:SUMMARY_COLUMNS.index("throttled_nodes")]
# The firmware's current conditions; each has a sticky ``<name>_occurred`` bit too.
THROTTLE_CONDITIONS = ("under_voltage", "freq_capped", "throttled", "soft_temp_limit")
PACKETS_PER_REQUEST = 4
_COUNTERS = ("sent_bytes", "recv_bytes", "sent_packets", "recv_packets")


def summarize_cell(cell_dir: Path, worker_nodes: list[str], t_start: float,
                   t_end: float, *, traffic_file: Path | None = None,
                   power: dict[str, NodePower] | None = None,
                   work: CellWork | None = None) -> dict:
    """The cell's ``SUMMARY_COLUMNS`` (floats, ints or None) from ``cell_dir/metrics``.

    ``traffic_file``: the live shipper's ``shipper-traffic.jsonl`` (the sweep's
    ``metrics.TRAFFIC_FILE``) whose loopback bytes are taken out of ``lo``; None when nothing
    shipped live. ``power`` and ``work``: what the energy columns need
    (``energy.energy_columns``).
    """
    cell_dir = Path(cell_dir)
    start_ms, end_ms = int(t_start * 1000), int(t_end * 1000)
    shipper = _shipper_traffic(traffic_file, start_ms, end_ms)
    metrics = cell_dir / "metrics"
    spools = sorted(p.name for p in metrics.iterdir() if p.is_dir()) if metrics.is_dir() else []
    by_name = {name: _node(metrics / name, start_ms, end_ms, shipper)
               for name in dict.fromkeys([*worker_nodes, *spools])}
    per_node = [by_name[name] for name in worker_nodes if by_name[name]]
    row: dict = {column: None for column in SUMMARY_COLUMNS}
    row["metrics_nodes"] = len(per_node)
    flags = {name: node["throttle_flags"] for name, node in by_name.items()
             if "throttle_flags" in node}
    if flags:
        row["throttled_nodes"] = sorted(name for name, found in flags.items() if found)
        row["throttle_flags_by_node"] = {n: f for n, f in sorted(flags.items()) if f}
    mhz = {name: node["cpu_mhz_min"] for name, node in by_name.items()
           if "cpu_mhz_min" in node}
    if mhz:
        row["cpu_mhz_min"] = min(mhz.values())
        row["cpu_mhz_min_by_node"] = dict(sorted(mhz.items()))
    for column in _MEAN_COLUMNS:
        values = [node[column] for node in per_node if node.get(column) is not None]
        if values:
            mean = fmean(values)
            row[column] = round(mean) if column.endswith("_packets") else round(mean, 3)
    row.update(energy_columns(cell_dir, t_start, t_end, power, work))
    return row


def _node(spool_dir: Path, start_ms: int, end_ms: int, shipper: dict) -> dict:
    cpu: list[tuple[int, float]] = []
    cores: list[float] = []
    mem: list[tuple[int, float]] = []
    rss_by_time: dict[int, float] = {}
    before_rss: dict[int, float] = {}
    counters: dict[str, list[tuple[int, dict]]] = {}
    throttle: list[tuple[int, int]] = []
    mhz: list[tuple[int, float]] = []
    for _base, point in read_points(spool_dir):
        if point.measurement == "net":
            # Counters are interpolated at the window's edges: keep the samples around it.
            counters.setdefault(point.tags.get("interface", ""), []).append(
                (point.time_ms, point.fields))
        elif point.measurement == "throttle" and "flags" in point.fields:
            # The sample before the window is the sticky bits' baseline: keep it too.
            throttle.append((point.time_ms, int(point.fields["flags"])))
        elif point.time_ms < start_ms:
            if point.measurement == "proc" and point.tags.get("role") == "worker":
                before_rss[point.time_ms] = before_rss.get(point.time_ms, 0.0) + \
                    point.fields["rss_mb"]
            continue
        elif point.measurement == "cpu_freq" and "freq_mhz" in point.fields:
            mhz.append((point.time_ms, float(point.fields["freq_mhz"])))
        elif point.measurement == "cpu" and "cpu_percent" in point.fields:
            cpu.append((point.time_ms, point.fields["cpu_percent"]))
            if "cores" in point.fields:
                cores.append(float(point.fields["cores"]))
        elif point.measurement == "mem" and "used_mb" in point.fields:
            mem.append((point.time_ms, point.fields["used_mb"]))
        elif point.measurement == "proc" and point.tags.get("role") == "worker":
            rss_by_time[point.time_ms] = rss_by_time.get(point.time_ms, 0.0) + point.fields["rss_mb"]
    out: dict = {}
    # A CPU sample covers the interval before it, so the window's first one also holds
    # what the processes did before training: on the emulated cluster their start-up,
    # outside the node's quota (workloads/node_limits.py). Skip it when others remain.
    interval_ms = median(b[0] - a[0] for a, b in zip(cpu, cpu[1:])) if len(cpu) > 1 else 0
    later = [(t, v) for t, v in cpu if t >= start_ms + interval_ms]
    cpu_values = _in_window(later if any(t <= end_ms for t, _ in later) else cpu, end_ms)
    if cpu_values:
        out.update(cpu_percent_mean=fmean(cpu_values), cpu_percent_peak=max(cpu_values))
    if cores:
        out["node_cores"] = cores[-1]
    mem_values = _in_window(mem, end_ms)
    if mem_values:
        out.update(mem_used_mb_mean=fmean(mem_values), mem_used_mb_peak=max(mem_values))
    # A cell shorter than the interval whose workers were gone by the next sample has
    # no worker sample in or after its window: the last one before it (the workers
    # loaded, about to train) is the nearest reading of their memory there is.
    rss_values = _in_window(sorted(rss_by_time.items()), end_ms) or (
        [before_rss[max(before_rss)]] if before_rss else [])
    if rss_values:
        out.update(rss_mb_mean=fmean(rss_values), rss_mb_peak=max(rss_values))
    if counters:
        out.update(_net(counters, start_ms, end_ms, shipper))
    mhz_values = _in_window(mhz, end_ms)
    if mhz_values:
        out["cpu_mhz_min"] = round(min(mhz_values), 1)
    if throttle:
        out["throttle_flags"] = throttled_during(throttle, start_ms, end_ms)
    return out


def throttled_during(samples: list[tuple[int, int]], start_ms: int, end_ms: int) -> list[str]:
    """The conditions (``THROTTLE_CONDITIONS``) a node's ``get_throttled`` words show
    during [start_ms, end_ms]: set in a sample of the window, or newly set in its sticky
    ``_occurred`` bit since the last sample before the window."""
    from ..agent.collectors.pi_throttling import THROTTLE_BITS

    before = [flags for t, flags in samples if t < start_ms]
    inside = _in_window([(t, flags) for t, flags in samples if t >= start_ms], end_ms)
    baseline = before[-1] if before else None
    found = set()
    for flags in inside:
        for name in THROTTLE_CONDITIONS:
            sticky = THROTTLE_BITS[f"{name}_occurred"]
            if flags >> THROTTLE_BITS[name] & 1 or (
                    baseline is not None and flags >> sticky & 1 and not baseline >> sticky & 1):
                found.add(name)
    return [name for name in THROTTLE_CONDITIONS if name in found]


def _in_window(samples: list[tuple[int, float]], end_ms: int) -> list[float]:
    """Values sampled in the window (samples before it are already dropped).

    A sample describes the interval that ends at its timestamp, so when the window is
    shorter than the interval and holds no sample, the first one after it covers it.
    """
    inside = [value for time_ms, value in samples if time_ms <= end_ms]
    return inside or [value for _, value in samples[:1]]


def _net(counters: dict[str, list[tuple[int, dict]]], start_ms: int, end_ms: int,
         shipper: dict) -> dict:
    totals = dict.fromkeys(_COUNTERS, 0.0)
    for series in counters.values():
        for name in _COUNTERS:
            totals[name] += _value_at(series, name, end_ms) - _value_at(series, name, start_ms)
    if "lo" in counters:
        both_bytes = shipper["sent_bytes"] + shipper["recv_bytes"]
        totals["sent_bytes"] -= both_bytes
        totals["recv_bytes"] -= both_bytes
        totals["sent_packets"] -= shipper["packets"]
        totals["recv_packets"] -= shipper["packets"]
    out = {"net_sent_kb": max(0.0, totals["sent_bytes"]) / 1024,
           "net_recv_kb": max(0.0, totals["recv_bytes"]) / 1024,
           "net_sent_packets": max(0.0, totals["sent_packets"]),
           "net_recv_packets": max(0.0, totals["recv_packets"])}
    window_s = (end_ms - start_ms) / 1000
    if window_s > 0:
        out.update({f"{name}_per_s": value / window_s for name, value in list(out.items())})
    return out


def _value_at(series: list[tuple[int, dict]], name: str, time_ms: int) -> float:
    """A counter at ``time_ms``, linear between the samples around it (clamped at ends)."""
    times = [t for t, _ in series]
    index = bisect_left(times, time_ms)
    if index == 0:
        return float(series[0][1].get(name, 0))
    if index >= len(series):
        return float(series[-1][1].get(name, 0))
    (t0, f0), (t1, f1) = series[index - 1], series[index]
    v0, v1 = f0.get(name, 0), f1.get(name, 0)
    return v0 + (v1 - v0) * (time_ms - t0) / max(t1 - t0, 1)


def _shipper_traffic(path: Path | None, start_ms: int, end_ms: int) -> dict:
    """The live shipper's loopback bytes and estimated packets inside the window."""
    total = {"sent_bytes": 0, "recv_bytes": 0, "packets": 0}
    if path is None:
        return total
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return total
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line torn by a crash
        if record.get("loopback") and start_ms <= record.get("t_ms", 0) <= end_ms:
            total["sent_bytes"] += record.get("sent_bytes", 0)
            total["recv_bytes"] += record.get("recv_bytes", 0)
            total["packets"] += PACKETS_PER_REQUEST * record.get("requests", 0)
    return total
