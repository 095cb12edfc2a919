"""A finished sweep's cells as the step model reads them, grouped by what it fits.

A group is one (model, depth, batch, engine, sync, placement, partition, dataset): the
cells that differ only in their device count. Only ``ok`` cells count; each is read in
the board's time (``sweep.board_time``: a dilated cell's times x its ``speedup``). A
cell's step is the one its robust rate gives (``robust_s_per_sample``: slow moments
left out, docs/timeline.md) times the samples a worker trains per training-set sample,
else ``steady_step_ms``. A one-device cell is the same for every sync mode and
placement (the engine trains alone): it is every such group's base.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..engines import cell_of_record, get_engine
from ..errors import ConfigError
from ..report.sweep_data import load_sweep
from ..sweep import board_time
from ..cell import CellConfig
from .boards import OneDevice
from .scheme import SCHEMES, Scheme

# A pipeline's own settings (None in other engines' cells) keep its configurations apart.
PIPE_FIELDS = ("microbatches", "schedule", "replicas", "split", "task", "weights")
GROUP_FIELDS = ("model", "layers", "batch", "engine", "sync", "placement", "data_partition",
                "dataset", *PIPE_FIELDS)
BASE_FIELDS = ("model", "layers", "batch", "engine", "data_partition", "dataset")
CELL_DEFAULTS = {f.name: f.default for f in fields(CellConfig)}
# A percentile spread is a standard deviation only over enough timed steps.
MIN_STEPS_FOR_SPREAD = 20
Z95 = 1.645


@dataclass(frozen=True)
class Cell:
    """What the model takes from one ok record (times in ms on the board)."""

    devices: int
    step_ms: float
    sigma_ms: float | None  # a worker's compute spread from step to step
    parameters: int | None
    train_samples: int | None
    board: str | None  # the workers' node profile (None: the local cluster)
    cpu_percent: float | None
    cell_id: str
    record: dict = field(repr=False, compare=False, hash=False)


@dataclass
class Group:
    """The cells of one configuration, and the one-device cells it starts from."""

    key: tuple
    scheme: Scheme | None  # None: an exchange the model does not know (a pipeline)
    cells: list[Cell]
    base: list[Cell]
    # Fields its label names because another group of the sweep differs only there.
    tell_apart: tuple[str, ...] = ()

    @property
    def fields(self) -> dict:
        return {**dict.fromkeys(GROUP_FIELDS), **dict(zip(GROUP_FIELDS, self.key))}

    @property
    def label(self) -> str:
        """``lenet-mlp b64 mxnet sync``; a parameter server's placement when it is not
        the default (``colocated``); a pipeline's micro-batches, schedule and split as
        its engine labels them (``torch-pipe M4 gpipe``); and any other field another
        configuration of the sweep differs in alone (``tell_apart``)."""
        f = self.fields
        depth = f"-{f['layers']}" if f["layers"] else ""
        engine, extra = f["engine"], []
        if self.scheme is not None and self.scheme.pipeline:
            engine = _engine_label(f)  # its placement is not its own: it has no servers
        elif f["placement"] not in (None, CELL_DEFAULTS["placement"]):
            extra.append(str(f["placement"]))
        extra += [f"{name}={f[name]}" for name in self.tell_apart]
        return " ".join([f"{f['model']}{depth} b{f['batch']} {engine} {f['sync']}", *extra])


def _tell_apart(groups: list[Group]) -> None:
    """Where two groups would print the same label, each names the fields they differ in."""
    by_label: dict[str, list[Group]] = {}
    for group in groups:
        by_label.setdefault(group.label, []).append(group)
    for same in by_label.values():
        if len(same) > 1:
            differ = tuple(name for i, name in enumerate(GROUP_FIELDS)
                           if len({g.key[i] for g in same}) > 1)
            for group in same:
                group.tell_apart = differ


def measured_ms(group: Group) -> dict[int, float]:
    """The measured step at each device count (the mean of its repeats), one device's
    (the base) included."""
    by_n: dict[int, list[float]] = {}
    for cell in [*group.base, *group.cells]:
        by_n.setdefault(cell.devices, []).append(cell.step_ms)
    return {n: statistics.fmean(steps) for n, steps in by_n.items()}


def read_groups(sweep_dir: Path) -> tuple[list[Group], str]:
    """Every multi-device configuration of the sweep, with its one-device base, and the
    cluster it ran on."""
    sweep = load_sweep(sweep_dir)
    if not any(r.get("status") == "ok" for r in sweep.records):
        raise ConfigError(f"{sweep_dir} has no ok cell to fit: rerun its failed cells "
                          f"(`edgeprof sweep --resume --out {sweep_dir}`)")
    return groups_of(sweep.records)


def groups_of(records: list[dict]) -> tuple[list[Group], str]:
    """``read_groups`` of records already read (the report's): no group without an ok
    cell."""
    ok = [board_time.record(r) for r in records if r.get("status") == "ok"]
    base: dict[tuple, list[Cell]] = {}
    groups: dict[tuple, Group] = {}
    for r in ok:
        cell = to_cell(r)
        if cell.devices == 1:
            base.setdefault(tuple(r.get(f) for f in BASE_FIELDS), []).append(cell)
            continue
        key = tuple(r.get(f) for f in GROUP_FIELDS)
        if key not in groups:
            groups[key] = Group(key, scheme_of(r), [], [])
        groups[key].cells.append(cell)
    for group in groups.values():
        group.base = base.get(base_key(group), [])
    # One-device cells that no configuration uses still name one (nothing to fit on).
    used = {base_key(g) for g in groups.values()}
    for one_key, cells in base.items():
        if one_key not in used:
            r = cells[0].record
            groups[tuple(r.get(f) for f in GROUP_FIELDS)] = Group(
                tuple(r.get(f) for f in GROUP_FIELDS), scheme_of({**r, "devices": 2}), [],
                cells)
    cluster = str(ok[0].get("cluster") or "") if ok else ""
    _tell_apart(list(groups.values()))
    return sorted(groups.values(), key=lambda g: tuple(map(str, g.key))), cluster


def _engine_label(fields: dict) -> str:
    """The engine's own label of a series over the device count (no stage count)."""
    try:
        return get_engine(str(fields["engine"])).label(fields, stages=False)
    except (KeyError, TypeError):
        return str(fields["engine"])


def scheme_of(record: dict) -> Scheme | None:
    """The record's exchange, as its engine names it (None: not one modelled here)."""
    try:
        comm = get_engine(str(record["engine"])).comm(cell_of_record(record))
    except (KeyError, ValueError, TypeError, ConfigError):
        return None
    if comm not in SCHEMES:
        return None
    return Scheme(comm, str(record.get("placement") or "master"))


def to_cell(r: dict) -> Cell:
    """One ok record, in the board's time."""
    devices = int(r["devices"])
    return Cell(devices=devices, step_ms=step_ms(r), sigma_ms=_sigma_ms(r),
                parameters=r.get("parameters"), train_samples=r.get("train_samples"),
                board=_board(r), cpu_percent=r.get("cpu_percent_mean"),
                cell_id=str(r.get("cell_id")), record=r)


def step_ms(r: dict) -> float:
    """A worker's step in ms: from the robust rate, else the epochs' mean step."""
    per_sample = r.get("robust_s_per_sample")
    if isinstance(per_sample, (int, float)) and per_sample > 0:
        # The rate is per training-set sample: a sharded cell's N workers share each
        # one, a replicated cell's each pass over the whole set; a pipeline's stages
        # pass the same batches, its R pipelines share the set.
        shared = r["devices"] if r.get("data_partition") == "shard" else 1
        scheme = scheme_of(r)
        if scheme is not None and scheme.pipeline:
            shared = r.get("replicas") or 1
        return per_sample * r["batch"] * shared * 1e3
    steady = r.get("steady_step_ms")
    if isinstance(steady, (int, float)) and steady > 0:
        return float(steady)
    raise ConfigError(f"cell {r.get('cell_id')} has no step time (robust_s_per_sample, "
                      "steady_step_ms): was it run by an edgeprof older than the breakdown?")


def _sigma_ms(r: dict) -> float | None:
    """The workers' compute spread, a normal's sigma from its median and 95th
    percentile, when enough steps were timed."""
    p50, p95 = r.get("compute_ms_p50"), r.get("compute_ms_p95")
    if (r.get("breakdown_steps") or 0) < MIN_STEPS_FOR_SPREAD or None in (p50, p95):
        return None
    return max(0.0, (p95 - p50) / Z95)


def _board(r: dict) -> str | None:
    """The profile of the workers' nodes; a mix names its profiles joined by '+'."""
    profiles = r.get("node_profiles") or {}
    nodes = (r.get("worker_nodes") or {}).values() or profiles
    names = sorted({profiles[n] for n in nodes if n in profiles})
    return "+".join(names) if names else None


def one_device_steps(sweep_dirs: list[Path]) -> dict[tuple, OneDevice]:
    """Each configuration's one-device step on each board the sweeps ran it on, by the
    configuration's ``BASE_FIELDS``: the rates ``--rates-from`` scales boards by."""
    return one_device_of([(str(d), read_groups(Path(d))[0]) for d in sweep_dirs])


def one_device_of(sweeps: list[tuple[str, list[Group]]]) -> dict[tuple, OneDevice]:
    """``one_device_steps`` of groups already read, each with where it was read: the
    mean of a configuration's one-device cells on one board (ms on the board)."""
    ms: dict[tuple, dict[str, float]] = {}
    sources: dict[tuple, dict[str, str]] = {}
    for source, groups in sweeps:
        for group in groups:
            boards = {c.board for c in group.base}
            if len(boards) != 1 or None in boards:
                continue  # none, a local sweep's, or a mix's: no one board's rate
            key, board = base_key(group), boards.pop()
            ms.setdefault(key, {})[board] = statistics.fmean(c.step_ms for c in group.base)
            sources.setdefault(key, {})[board] = source
    return {key: OneDevice(ms[key], sources[key]) for key in ms}


def base_key(group: Group) -> tuple:
    """The fields a configuration shares with its one-device cells."""
    return tuple(group.fields[f] for f in BASE_FIELDS)
