"""A cell's energy from its spools: measured where a node has a meter, else modelled.

Per node of the cell (every node with a spool), over the cell's own window [t_start,
t_end] (the summary's: first worker start to last worker end):

- **measured** when the node's agent wrote power points and those meters are the
  node's own: a power monitor (``power_hwmon``, summed over its channels: it sees the
  board's input) before the Pi 5's PMIC estimate (``power_pmic.board_w``) before RAPL
  (``power_rapl``, package + DRAM). Meters belong to a host: nodes of the cell that share
  one (the local cluster's slots) each get an equal share of it. An emulated node's host
  is not its board, so its meters are never its own (``NodePower.own_meters``);
- else **modelled** from the node's CPU use through its profile's ``PowerModel``:
  idle + (full - idle) x utilisation, linear. Where the node's spool has the CPU-time
  counter (``cpu.busy_s``, of all the board's cores, or of the emulated node's quota
  that stands for them) around the window, the model's integral is taken from it:
  idle x window + (full - idle) x the busy share x window, the share being the
  counter's rise interpolated at the window's ends (``counters.busy_share``, as the
  CPU mean's) over the window x the cores. That is exact for a linear model whatever
  the samples saw, so a cell of one or two ticks rests on the kernel's accounting.
  Without the counter (spools from before it), the sampled ``cpu.cpu_percent`` is
  modelled tick by tick and integrated (below);
- else None (a local slot on a host without RAPL): unknown, not 0.

A power or CPU sample describes the tick that ends at its timestamp, so a series is a
step function: each value holds back to the sample before it (the first one also before
it, the last one after it), and the energy is its integral over the window (exact for
windows shorter than a tick). A time-dilated cell (``--speedup`` k) ran k times faster
than its boards at the same utilisation: its energy is the window's x k, the board's.

A node's energy goes to the roles on it by their processes' CPU time in the window:
the rise of each process tree's CPU-time counter (``proc.cpu_s``) over it (from 0 for
a tree first seen after its start: it started inside it), else, in spools without
the counter, their sampled CPU (``proc.cpu_percent``); or to its one role (the roles
its points are tagged with, shared equally when it has no process points). The split
is a share of the node's energy, whose total does not depend on it. Columns: the group ``energy`` of
``profiler.results_schema``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..agent.spool_reader import read_points
from .counters import busy_share, value_at
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
    # (time_ms, fields) of the CPU-time counter (busy_s), every tick, and the cores it
    # is a share of (quota_cores on a cgroup node, else cores)
    busy: list[tuple[int, dict]] = field(default_factory=list)
    capacity: float = 0.0
    # proc tag -> (role, [(time_ms, fields with cpu_s)]), every tick
    proc_cpu_s: dict[str, tuple[str, list[tuple[int, dict]]]] = field(default_factory=dict)
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
        if name == "cpu" and "busy_s" in point.fields:
            series.busy.append((point.time_ms, point.fields))
            series.capacity = float(point.fields.get("quota_cores")
                                    or point.fields.get("cores") or 0)
        if name == "cpu" and "cpu_percent" in point.fields:
            series.cpu.append((point.time_ms, float(point.fields["cpu_percent"])))
            if point.time_ms > start_ms and point.tags.get("role"):
                series.role_tags[point.time_ms] = point.tags["role"]
        elif name == "proc" and "cpu_s" in point.fields and point.tags.get("proc"):
            role = point.tags.get("role", "")
            _, ticks = series.proc_cpu_s.setdefault(point.tags["proc"], (role, []))
            ticks.append((point.time_ms, point.fields))
        if name == "proc" and "cpu_percent" in point.fields and point.time_ms > start_ms:
            by_role = series.role_cpu.setdefault(point.time_ms, {})
            role = point.tags.get("role", "")
            by_role[role] = by_role.get(role, 0.0) + float(point.fields["cpu_percent"])
    series.cpu.sort()
    series.busy.sort(key=lambda tick: tick[0])
    for _, ticks in series.proc_cpu_s.values():
        ticks.sort(key=lambda tick: tick[0])
    return series


def _covering(by_time: dict, end_ms: int) -> list:
    """The values sampled in the window (those before it are not kept), or, for a window
    shorter than a tick, the first one after it, which covers it."""
    inside = [value for t, value in sorted(by_time.items()) if t <= end_ms]
    return inside or [value for _, value in sorted(by_time.items())[:1]]


def _role_cpu_s(series: _Series, start_ms: int, end_ms: int) -> dict[str, float]:
    """CPU seconds each role's process trees used in the window, from their ``cpu_s``
    counters at its ends (a tree first read after its start counts from 0, as it
    started inside it; one gone before its end keeps its last reading); {} when the
    spool has no such counter or no tree was read up to the window's end."""
    used: dict[str, float] = {}
    for role, ticks in series.proc_cpu_s.values():
        if ticks[0][0] > end_ms:
            continue
        before = value_at(ticks, "cpu_s", start_ms) if ticks[0][0] <= start_ms else 0.0
        used[role] = used.get(role, 0.0) + max(0.0, value_at(ticks, "cpu_s", end_ms) - before)
    return used


def _role_shares(series: _Series, start_ms: int, end_ms: int) -> dict[str, float]:
    """The share of the node's energy each role on it gets: by its processes' CPU time
    (counters, else samples), else equal among the roles its points carry ("none" when
    it ran nothing)."""
    busy = _role_cpu_s(series, start_ms, end_ms)
    if not any(busy.values()):
        busy = {}
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
    nodes = _spooled_nodes(metrics)
    if not nodes or end_ms <= start_ms:
        return row
    read = {node: _read(metrics / node, start_ms) for node in nodes}
    cell = _cell_power(read, power, start_ms, work.speedup)
    by_node = {node: (round(cell.joules(node, end_ms), 3) if node in cell.watts else None)
               for node in nodes}
    row["energy_j_by_node"] = by_node
    row["energy_j_by_role"] = _energy_by_role(read, by_node, start_ms, end_ms)
    row["energy_source"] = _energy_source(cell.sources)
    if any(joules is None for joules in by_node.values()):
        return row  # a total without some nodes would pass for the cell's
    row.update(_cell_totals(cell, by_node, work, start_ms, end_ms))
    return row


def _spooled_nodes(metrics: Path) -> list[str]:
    """The nodes with a spool directory under ``metrics``, sorted (none: no such folder)."""
    return sorted(p.name for p in metrics.iterdir() if p.is_dir()) if metrics.is_dir() else []


@dataclass(frozen=True)
class _CellPower:
    """The cell's nodes' watts: where each node's come from (``measured``/``modelled``;
    a node with neither is in none of these), their step series, how many of the
    cell's nodes share its meters (1 when modelled), and the modelled nodes' model
    and spool (their CPU-time counter, when they have one)."""

    sources: dict[str, str]
    watts: dict[str, list[tuple[int, float]]]
    sharing: dict[str, int]
    start_ms: int
    speedup: float
    modelled: dict[str, tuple["PowerModel", _Series]] = field(default_factory=dict)

    def joules(self, node: str, until_ms: int) -> float:
        """The node's energy from the window's start to ``until_ms``, its board's (x the
        dilation), its share of its host's meters."""
        joules = self._counted_j(node, until_ms)
        if joules is None:
            joules = integrate_j(self.watts[node], self.start_ms, until_ms)
        return joules * self.speedup / self.sharing[node]

    def _counted_j(self, node: str, until_ms: int) -> float | None:
        """A modelled node's energy from its CPU-time counter: the linear model's
        integral, idle x window + (full - idle) x busy share x window; None without a
        counter around [start, until_ms]."""
        if node not in self.modelled:
            return None
        model, series = self.modelled[node]
        share = busy_share(series.busy, "busy_s", series.capacity, self.start_ms, until_ms)
        if share is None:
            return None
        return model.watts(share) * (until_ms - self.start_ms) / 1000.0


def _cell_power(read: dict[str, _Series], power: dict[str, NodePower], start_ms: int,
                speedup: float) -> _CellPower:
    """Each node's watts, measured before modelled, and its meters' sharing."""
    sources: dict[str, str] = {}
    watts: dict[str, list[tuple[int, float]]] = {}
    modelled: dict[str, tuple[PowerModel, _Series]] = {}
    for node, series in read.items():
        node_power = power.get(node, NodePower())
        found = _node_watts(series, node_power)
        if found is not None:
            sources[node], watts[node] = found
            if found[0] == "modelled":
                modelled[node] = (node_power.model, series)
    return _CellPower(sources, watts, _meter_sharing(sources, power, list(read)),
                      start_ms, speedup, modelled)


def _own_meter(series: _Series, node_power: NodePower) -> str | None:
    """The most direct meter with points in the node's spool, if its meters are its own."""
    if not node_power.own_meters:
        return None
    return next((m for m in METERS if series.meters.get(m)), None)


def _node_watts(series: _Series, node_power: NodePower
                ) -> tuple[str, list[tuple[int, float]]] | None:
    """(source, step series of watts) of one node: its own meter's, else its model's
    from its CPU use; None when it has neither."""
    meter = _own_meter(series, node_power)
    if meter is not None:
        return "measured", sorted(series.meters[meter].items())
    if node_power.model is not None and series.cpu:
        return "modelled", [(t, node_power.model.watts(cpu / 100.0)) for t, cpu in series.cpu]
    return None


def _meter_sharing(sources: dict[str, str], power: dict[str, NodePower],
                   nodes: list[str]) -> dict[str, int]:
    """By node with watts: how many of the cell's measured nodes read its host's meters
    (a host's meters measure it once, however many nodes read them); 1 when modelled."""
    host = {node: power.get(node, NodePower()).host or node for node in nodes}
    readers: dict[str, int] = {}
    for node, source in sources.items():
        if source == "measured":
            readers[host[node]] = readers.get(host[node], 0) + 1
    return {node: readers[host[node]] if source == "measured" else 1
            for node, source in sources.items()}


def _energy_by_role(read: dict[str, _Series], by_node: dict[str, float | None],
                    start_ms: int, end_ms: int) -> dict[str, float] | None:
    """The nodes' energy (those known) shared among the roles on them, by role name;
    None when no node's is known."""
    by_role: dict[str, float] = {}
    for node, joules in by_node.items():
        if joules is None:
            continue
        for role, share in _role_shares(read[node], start_ms, end_ms).items():
            by_role[role] = by_role.get(role, 0.0) + joules * share
    return {role: round(j, 3) for role, j in sorted(by_role.items())} or None


def _energy_source(sources: dict[str, str]) -> str | None:
    """``measured``/``modelled`` when every node with watts has that, ``mixed`` when
    both, None when none has any."""
    found = set(sources.values())
    if not found:
        return None
    return found.pop() if len(found) == 1 else "mixed"


def _cell_totals(cell: _CellPower, by_node: dict[str, float], work: CellWork,
                 start_ms: int, end_ms: int) -> dict:
    """The columns of the whole cell (every node's energy known): its energy, mean
    power, per sample (when samples are known) and to its accuracy (when reached)."""
    energy_j = sum(by_node.values())
    totals = {"energy_j": round(energy_j, 3),
              "avg_power_w": round(energy_j / ((end_ms - start_ms) / 1000 * work.speedup), 3)}
    if work.samples:
        totals["j_per_sample"] = round(energy_j / work.samples, 6)
    if work.accuracy_t is not None:
        until_ms = min(end_ms, int(work.accuracy_t * 1000))
        totals["energy_to_accuracy_j"] = round(
            sum(cell.joules(node, until_ms) for node in by_node), 3)
    return totals
