"""A cell's resource columns, computed from its spools alone (no server needed).

For each worker node, over the training window [t_start, t_end] (first worker start to
last worker end):

- ``cpu_percent``: the node's CPU (host, or the node's cgroup as % of its quota): the
  mean from its CPU-time counter (``cpu.busy_s``: the cgroup's ``cpuacct.usage`` or
  ``cpu.stat`` ``usage_usec``, the host's /proc/stat busy time) interpolated at t_start
  and t_end, as the network counters are (the ``cpu_percent`` samples' mean where the
  samples do not bracket the window), and the highest sample; ``node_cores``: how
  many cores that % is a share of (the host's, or the board an emulated node stands
  for, when its profile says: a Pi 3B's 4, where one busy core shows 25%);
- ``mem_used_mb``: the node's ``mem.used_mb`` (host or cgroup): mean and peak, sampled;
  ``node_mem_peak_mb``: the node's cgroup's own high-water mark (page cache included),
  where it has one;
- ``rss_mb``: the summed RSS of the node's worker processes (with their descendants)
  at each tick: mean; the peak is the largest of the highest tick, the sum of their
  kernel high-water marks (``proc.rss_hwm_mb``, VmHWM) and the ``maxrss_mb`` the
  node's workers reported in their ``end`` (or ``error``) events (their own VmHWM), the
  last two upper bounds of the processes' simultaneous peak (each one's own peak,
  summed), and no sampling can miss them;
- ``net_*``: the counters of the interfaces the agent counted, interpolated linearly
  at t_start and t_end, summed over interfaces; KB = 1024 bytes. ``net_*_per_s`` are the
  same totals divided by the window's length: rates, which is what the study's Ganglia
  ``bytes_in``/``bytes_out`` report (its "KB" are KB/s), so they compare across cells
  of different lengths and with the study.

Each column is then the mean over the worker nodes that have data (None if none).
``samples_in_window`` is the fewest ticks a worker node's sampled figures (CPU peak,
memory means and sampled peaks, the CPU mean where it has no counter) rest on, and
``sampled_figures_thin`` says it is fewer than ``THIN_SAMPLES`` (3): such figures are
marked in the table and the report (remedy: a shorter ``--interval``).

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
from pathlib import Path
from statistics import fmean

from ..results_schema import columns_of
from .energy import CellWork, NodePower, energy_columns
from .reducers import REDUCERS, Window, throttled_during
from ..agent.spool_reader import read_points

# throttled_during is re-exported: its tests import it from here, where it was first.
__all__ = ["SUMMARY_COLUMNS", "PACKETS_PER_REQUEST", "THIN_SAMPLES", "summarize_cell",
           "throttled_during"]

# The worker nodes' means first, then what is over every node of the cell (see the
# module doc), then the cell's energy (profiler.metrics.energy): profiler.results_schema
# describes each.
SUMMARY_COLUMNS = list(columns_of("summary", "energy"))
_MEAN_COLUMNS = SUMMARY_COLUMNS[:SUMMARY_COLUMNS.index("throttled_nodes")]
PACKETS_PER_REQUEST = 4
# A sampled figure resting on fewer ticks than this is marked as such.
THIN_SAMPLES = 3


def summarize_cell(cell_dir: Path, worker_nodes: list[str], t_start: float,
                   t_end: float, *, traffic_file: Path | None = None,
                   power: dict[str, NodePower] | None = None,
                   work: CellWork | None = None,
                   worker_maxrss_mb: dict[str, float] | None = None) -> dict:
    """The cell's ``SUMMARY_COLUMNS`` (floats, ints or None) from ``cell_dir/metrics``.

    ``traffic_file``: the live shipper's ``shipper-traffic.jsonl`` (the sweep's
    ``agent.shipping.TRAFFIC_FILE``) whose loopback bytes are taken out of ``lo``; None
    when nothing shipped live. ``power`` and ``work``: what the energy columns need
    (``energy.energy_columns``). ``worker_maxrss_mb``: per node, the ``maxrss_mb`` its
    workers reported (summed), a floor under its ``rss_mb_peak``.
    """
    cell_dir = Path(cell_dir)
    start_ms, end_ms = int(t_start * 1000), int(t_end * 1000)
    window = Window(start_ms, end_ms, _shipper_traffic(traffic_file, start_ms, end_ms))
    metrics = cell_dir / "metrics"
    spools = sorted(p.name for p in metrics.iterdir() if p.is_dir()) if metrics.is_dir() else []
    by_name = {name: _node(metrics / name, window)
               for name in dict.fromkeys([*worker_nodes, *spools])}
    for name, reported in (worker_maxrss_mb or {}).items():
        node = by_name.get(name)
        if node and reported:
            node["rss_mb_peak"] = max(node.get("rss_mb_peak") or 0.0, reported)
    per_node = [by_name[name] for name in worker_nodes if by_name[name]]
    row: dict = {column: None for column in SUMMARY_COLUMNS}
    row["metrics_nodes"] = len(per_node)
    counts = [node["samples_in_window"] for node in per_node if "samples_in_window" in node]
    if counts:
        row["samples_in_window"] = min(counts)
        row["sampled_figures_thin"] = min(counts) < THIN_SAMPLES
    row.update(_throttle_columns(by_name))
    row.update(_mhz_columns(by_name))
    row.update(_means(per_node))
    row.update(energy_columns(cell_dir, t_start, t_end, power, work))
    return row


def _throttle_columns(by_name: dict[str, dict]) -> dict:
    """Which nodes throttled and how; nothing when no node reported (not Pis)."""
    flags = {name: node["throttle_flags"] for name, node in by_name.items()
             if "throttle_flags" in node}
    if not flags:
        return {}
    return {"throttled_nodes": sorted(name for name, found in flags.items() if found),
            "throttle_flags_by_node": {n: f for n, f in sorted(flags.items()) if f}}


def _mhz_columns(by_name: dict[str, dict]) -> dict:
    """The lowest CPU frequency over the nodes, and each node's."""
    mhz = {name: node["cpu_mhz_min"] for name, node in by_name.items()
           if "cpu_mhz_min" in node}
    if not mhz:
        return {}
    return {"cpu_mhz_min": min(mhz.values()), "cpu_mhz_min_by_node": dict(sorted(mhz.items()))}


def _means(per_node: list[dict]) -> dict:
    """Each of ``_MEAN_COLUMNS`` over the worker nodes that have it (packets whole)."""
    row = {}
    for column in _MEAN_COLUMNS:
        values = [node[column] for node in per_node if node.get(column) is not None]
        if values:
            mean = fmean(values)
            row[column] = round(mean) if column.endswith("_packets") else round(mean, 3)
    return row


def _node(spool_dir: Path, window: Window) -> dict:
    """One node's columns: each measurement's samples through its reducer."""
    reducers = {name: make() for name, make in REDUCERS.items()}
    # Only the reducers' measurements are parsed (read_points skips the others' lines).
    for _base, point in read_points(spool_dir, reducers):
        reducers[point.measurement].add(point, window)
    out: dict = {}
    for reducer in reducers.values():
        out.update(reducer.columns(window))
    return out


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
