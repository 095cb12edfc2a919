"""A cell's energy from its spools: measured where a node has a meter, else modelled.

Per node of the cell (every node with a spool), over the cell's own window [t_start,
t_end] (the summary's: first worker start to last worker end):

- **measured** when the node's agent wrote power points and those meters are the
  node's own: a power monitor (``power_hwmon``, summed over its channels: it sees the
  board's input) before the Pi 5's PMIC estimate (``power_pmic.board_w``) before RAPL
  (``power_rapl``, package + DRAM). Meters belong to a host: nodes of the cell that share
  one (the local cluster's slots) each get an equal share of it. An emulated node's host
  is not its board, so its meters are never its own (``NodePower.own_meters``);
- else **modelled** from the node's CPU use (``cpu.cpu_percent``, of all the board's
  cores, or of the emulated node's quota that stands for them) through its profile's
  ``PowerModel``: idle + (full - idle) x utilisation, linear;
- else None (a local slot on a host without RAPL): unknown, not 0.

A power or CPU sample describes the tick that ends at its timestamp, so a series is a
step function: each value holds back to the sample before it (the first one also before
it, the last one after it), and the energy is its integral over the window (exact for
windows shorter than a tick). A time-dilated cell (``--speedup`` k) ran k times faster
than its boards at the same utilisation: its energy is the window's x k, the board's.

A node's energy goes to the roles on it by their processes' CPU in the window
(``proc.cpu_percent``), or to its one role (the roles its points are tagged with,
shared equally when it has no process points). Columns: the group ``energy`` of
``profiler.results_schema``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..agent.spool_reader import read_points
from ..results_schema import columns_of

if TYPE_CHECKING:
    from ..cluster.profiles import PowerModel

# A node's meters, most direct first: the one found is its power.
METERS = ("power_hwmon", "power_pmic", "power_rapl")
_METER_FIELD = {"power_hwmon": "power_w", "power_pmic": "board_w", "power_rapl": "power_w"}


@dataclass(frozen=True)
class NodePower:
    """What a node's energy can come from: its profile's model (None: none known),
    whether the meters its agent reads are its own (False on an emulated node), and the
    machine they are on (nodes of one ``host`` share its meters; None: its own)."""

    model: "PowerModel | None" = None
    own_meters: bool = True
    host: str | None = None


@dataclass(frozen=True)
class CellWork:
    """What the energy is divided by: the samples the workers trained, the time rank 0
    first reached the cell's final accuracy, and the cell's time dilation."""

    samples: int | None = None
    accuracy_t: float | None = None
    speedup: float = 1.0


def cell_work(events, speedup: float | None = 1.0) -> CellWork:
    """The ``CellWork`` of a cell's ``CellEvents`` (``profiler.sweep.events``)."""
    samples = events.samples_trained()  # the record's samples_trained
    epochs = sorted((e for e in events.by_rank.get(0, []) if e.get("event") == "epoch"),
                    key=lambda e: e.get("epoch", 0))
    accuracies = [e.get("val_accuracy") for e in epochs]
    accuracy_t = None
    if accuracies and accuracies[-1] is not None:
        accuracy_t = next(e["t"] for e, a in zip(epochs, accuracies)
                          if a is not None and a >= accuracies[-1])
    return CellWork(samples, accuracy_t, float(speedup or 1.0))


def integrate_j(samples: list[tuple[int, float]], start_ms: int, end_ms: int) -> float:
    """The integral over [start_ms, end_ms] of a step series of watts, in joules.

    Sample i's value holds over (t[i-1], t[i]]; the first one's also before it, the
    last one's after it. ``samples`` sorted by time, not empty."""
    total_wms = 0.0
    previous_ms = float("-inf")
    for time_ms, watts in samples:
        low, high = max(previous_ms, start_ms), min(time_ms, end_ms)
        if high > low:
            total_wms += watts * (high - low)
        previous_ms = time_ms
        if time_ms >= end_ms:
            break
    else:
        low = max(previous_ms, start_ms)
        if end_ms > low:
            total_wms += samples[-1][1] * (end_ms - low)
    return total_wms / 1000.0


@dataclass
class _Series:
    """One node's spool as energy needs it."""

    cpu: list[tuple[int, float]] = field(default_factory=list)  # (time_ms, cpu_percent)
    # measurement -> {time_ms: watts, summed over the meter's channels}
    meters: dict[str, dict[int, float]] = field(default_factory=dict)
    # time_ms -> {role: its processes' cpu_percent}, and the roles node-level points
    # carry ("server+worker"), at and after the window's start
    role_cpu: dict[int, dict[str, float]] = field(default_factory=dict)
    role_tags: dict[int, str] = field(default_factory=dict)


def meter_watts(point, meters: dict[str, dict[int, float]]) -> bool:
    """Add a meter's point to ``meters`` (measurement -> {time_ms: watts summed over its
    channels}); False when the point is no meter's."""
    name = _METER_FIELD.get(point.measurement)
    if name is None or name not in point.fields:
        return False
    by_time = meters.setdefault(point.measurement, {})
    by_time[point.time_ms] = by_time.get(point.time_ms, 0.0) + float(point.fields[name])
    return True


def _read(spool_dir: Path, start_ms: int) -> _Series:
    series = _Series()
    # Only the points energy reads are parsed (the summary reads the spool too).
    for _base, point in read_points(spool_dir, ("cpu", "proc", *METERS)):
        name = point.measurement
        if meter_watts(point, series.meters):
            continue
        if name == "cpu" and "cpu_percent" in point.fields:
            series.cpu.append((point.time_ms, float(point.fields["cpu_percent"])))
            if point.time_ms > start_ms and point.tags.get("role"):
                series.role_tags[point.time_ms] = point.tags["role"]
        elif name == "proc" and "cpu_percent" in point.fields and point.time_ms > start_ms:
            by_role = series.role_cpu.setdefault(point.time_ms, {})
            role = point.tags.get("role", "")
            by_role[role] = by_role.get(role, 0.0) + float(point.fields["cpu_percent"])
    series.cpu.sort()
    return series


def _covering(by_time: dict, end_ms: int) -> list:
    """The values sampled in the window (those before it are not kept), or, for a window
    shorter than a tick, the first one after it, which covers it."""
    inside = [value for t, value in sorted(by_time.items()) if t <= end_ms]
    return inside or [value for _, value in sorted(by_time.items())[:1]]


def _role_shares(series: _Series, end_ms: int) -> dict[str, float]:
    """The share of the node's energy each role on it gets: by its processes' CPU, else
    equal among the roles its points carry ("none" when it ran nothing)."""
    busy: dict[str, float] = {}
    for by_role in _covering(series.role_cpu, end_ms):
        for role, cpu in by_role.items():
            busy[role] = busy.get(role, 0.0) + cpu
    busy = {role: cpu for role, cpu in busy.items() if cpu > 0}
    if busy:
        total = sum(busy.values())
        return {role: cpu / total for role, cpu in busy.items()}
    roles = sorted({role for tag in _covering(series.role_tags, end_ms)
                    for role in tag.split("+")})
    roles = [role for role in roles if role != "none"] or ["none"]
    return {role: 1.0 / len(roles) for role in roles}


def energy_columns(cell_dir: Path, t_start: float, t_end: float,
                   power: dict[str, NodePower] | None = None,
                   work: CellWork | None = None) -> dict:
    """The cell's energy columns (``columns_of("energy")``) from ``cell_dir/metrics/<node>``.

    ``power``: each node's ``NodePower`` (a node not in it has no model, and its meters
    count); ``work``: the samples, accuracy time and dilation (``cell_work``)."""
    power, work = power or {}, work or CellWork()
    start_ms, end_ms = int(t_start * 1000), int(t_end * 1000)
    row: dict = dict.fromkeys(columns_of("energy"))
    metrics = Path(cell_dir) / "metrics"
    nodes = sorted(p.name for p in metrics.iterdir() if p.is_dir()) if metrics.is_dir() else []
    if not nodes or end_ms <= start_ms:
        return row
    read = {node: _read(metrics / node, start_ms) for node in nodes}
    sources: dict[str, str] = {}
    watts: dict[str, list[tuple[int, float]]] = {}
    for node, series in read.items():
        node_power = power.get(node, NodePower())
        meter = next((m for m in METERS if series.meters.get(m)), None) \
            if node_power.own_meters else None
        if meter is not None:
            sources[node] = "measured"
            watts[node] = sorted(series.meters[meter].items())
        elif node_power.model is not None and series.cpu:
            sources[node] = "modelled"
            watts[node] = [(t, node_power.model.watts(cpu / 100.0)) for t, cpu in series.cpu]
    # A host's meters measure it once, however many of the cell's nodes read them.
    host = {node: power.get(node, NodePower()).host or node for node in nodes}
    sharing: dict[str, int] = {}
    for node in watts:
        if sources[node] == "measured":
            sharing[host[node]] = sharing.get(host[node], 0) + 1

    def node_j(node: str, until_ms: int) -> float:
        share = sharing[host[node]] if sources[node] == "measured" else 1
        return integrate_j(watts[node], start_ms, until_ms) * work.speedup / share

    by_node = {node: (round(node_j(node, end_ms), 3) if node in watts else None)
               for node in nodes}
    row["energy_j_by_node"] = by_node
    by_role: dict[str, float] = {}
    for node, joules in by_node.items():
        for role, share in _role_shares(read[node], end_ms).items() if joules is not None \
                else ():
            by_role[role] = by_role.get(role, 0.0) + joules * share
    row["energy_j_by_role"] = {role: round(j, 3) for role, j in sorted(by_role.items())} or None
    found = set(sources.values())
    row["energy_source"] = (None if not found else found.pop() if len(found) == 1
                            else "mixed")
    if any(joules is None for joules in by_node.values()):
        return row  # a total without some nodes would pass for the cell's
    energy_j = sum(by_node.values())
    row["energy_j"] = round(energy_j, 3)
    row["avg_power_w"] = round(energy_j / ((end_ms - start_ms) / 1000 * work.speedup), 3)
    if work.samples:
        row["j_per_sample"] = round(energy_j / work.samples, 6)
    if work.accuracy_t is not None:
        until_ms = min(end_ms, int(work.accuracy_t * 1000))
        row["energy_to_accuracy_j"] = round(sum(node_j(node, until_ms) for node in nodes), 3)
    return row
