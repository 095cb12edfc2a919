"""A sweep folder as the report reads it: its settings, the last record of every cell
(in grid order), and each cell's per-node time series from its spools.

Only files the sweep itself wrote are read (``sweep.json``, ``results.jsonl``,
``cells/<id>/attempt-<N>/metrics/<node>/``), so a report works on a copied folder, on
another machine, with no server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..agent.spool_reader import read_points
from ..errors import ConfigError
from ..sweep.store import ResultsStore
from .record_check import record_problem, with_defaults

# What the per-node plots show: (measurement, field) → series name.
SERIES = {("cpu", "cpu_percent"): "cpu_percent", ("mem", "used_mb"): "mem_used_mb"}
NET_FIELDS = {"sent_bytes_per_s": "net_sent_kb_per_s", "recv_bytes_per_s": "net_recv_kb_per_s"}
MEASUREMENTS = frozenset({m for m, _ in SERIES} | {"net"})  # the only ones parsed


@dataclass
class Sweep:
    path: Path
    settings: dict
    records: list[dict]  # the last record of each cell, grid order first

    @property
    def sweep_id(self) -> str:
        return str(self.settings.get("sweep_id") or self.path.name)

    @property
    def identity(self) -> dict:
        return self.settings.get("identity") or {}

    def cell_dir(self, record: dict) -> Path:
        return self.path / "cells" / record["cell_id"] / f"attempt-{record.get('attempt', 1)}"


def load_sweep(path: Path) -> Sweep:
    """Read a sweep folder; one-line ``ConfigError`` when it is not one or has no cell."""
    path = Path(path)
    settings_file = path / "sweep.json"
    if not path.is_dir() or not settings_file.is_file():
        raise ConfigError(f"{path} is not a sweep folder (no sweep.json): give the --out "
                          "folder of an `edgeprof sweep` (runs/<sweep id> by default)")
    try:
        settings = json.loads(settings_file.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{settings_file} cannot be read ({exc}): is the folder a "
                          "complete copy of the sweep?") from None
    if not isinstance(settings, dict):
        raise ConfigError(f"{settings_file} is not a sweep's settings (not a JSON object): "
                          "is the folder a complete copy of the sweep?")
    for key, kind in (("identity", dict), ("extra", dict), ("versions", dict),
                      ("cells", list), ("created", (int, float))):
        if settings.get(key) is not None and not isinstance(settings[key], kind):
            raise ConfigError(f"{settings_file}: its {key} is {type(settings[key]).__name__}, "
                              "not what the sweep writes: is the folder a complete copy?")
    latest = ResultsStore(path).latest()
    if not latest:
        raise ConfigError(f"{path} has no finished cell yet (results.jsonl is empty): "
                          "let the sweep run, or `edgeprof sweep --resume --out "
                          f"{path}` to finish it")
    for cell_id, record in latest.items():
        problem = record_problem(record)
        if problem:
            raise ConfigError(f"{path / 'results.jsonl'}: cell {cell_id}'s {problem}: the "
                              "file was changed after the sweep; restore it from the sweep")
    order = {cell_id: i for i, cell_id in enumerate(_grid_ids(settings))}
    records = sorted(map(with_defaults, latest.values()),
                     key=lambda r: (order.get(r["cell_id"], len(order)),
                                    r.get("launched_at") or 0))
    return Sweep(path=path, settings=settings, records=records)


def _grid_ids(settings: dict) -> list[str]:
    from ..cell import CellConfig
    ids = []
    cells = settings.get("cells")
    for cell in cells if isinstance(cells, list) else []:
        try:
            ids.append(CellConfig.from_fields(cell).cell_id)
        except (TypeError, ValueError):
            continue  # a cell of an older format (or damaged): keep the records' order
    return ids


def read_cell_series(metrics_dir: Path, record: dict) -> dict:
    """Per node: series name → [(seconds since the cell's launch, value)] in its window."""
    if not metrics_dir.is_dir():
        return {}
    start_ms = int((record.get("launched_at") or 0) * 1000)
    end_ms = int((record.get("reaped_at") or 0) * 1000) or None
    nodes = {}
    for node_dir in sorted(p for p in metrics_dir.iterdir() if p.is_dir()):
        series = _node_series(node_dir, start_ms, end_ms)
        if series:
            nodes[node_dir.name] = series
    return nodes


def _node_series(node_dir: Path, start_ms: int, end_ms: int | None
                 ) -> dict[str, list[tuple[float, float]]]:
    """One node's series from its spool, in the window (a tick past its end kept)."""
    series: dict[str, list[tuple[float, float]]] = {}
    net: dict[int, dict[str, dict[str, float]]] = {}
    for _base, point in read_points(node_dir, MEASUREMENTS):
        if not _in_window(point.time_ms, start_ms, end_ms):
            continue
        if point.measurement == "net":
            net.setdefault(point.time_ms, {})[point.tags.get("interface", "")] = point.fields
            continue
        _add_point(series, point, (point.time_ms - start_ms) / 1000)
    _add_net(series, net, start_ms)
    return series


def _in_window(time_ms: int, start_ms: int, end_ms: int | None) -> bool:
    """Whether a point is the cell's: from its launch to a tick after its reaping (no
    end: the cell was not reaped)."""
    return not (time_ms < start_ms or (end_ms and time_ms > end_ms + 1000))


def _add_point(series: dict[str, list[tuple[float, float]]], point, t_s: float) -> None:
    """Append the values of ``SERIES`` a point carries, at ``t_s``."""
    for (measurement, name), column in SERIES.items():
        if point.measurement == measurement and name in point.fields:
            series.setdefault(column, []).append((t_s, float(point.fields[name])))


def _add_net(series: dict[str, list[tuple[float, float]]],
             net: dict[int, dict[str, dict[str, float]]], start_ms: int) -> None:
    """Append the ``NET_FIELDS`` series, in KiB/s summed over the node's interfaces, by
    time: its own NICs when it has one; the local cluster has only loopback."""
    for time_ms, interfaces in sorted(net.items()):
        counted = {k: v for k, v in interfaces.items() if k != "lo"} or interfaces
        for name, column in NET_FIELDS.items():
            total = sum(float(f.get(name, 0)) for f in counted.values())
            series.setdefault(column, []).append(((time_ms - start_ms) / 1000,
                                                  total / 1024))


def config_label(r: dict) -> str:
    """A cell's configuration in one line, as the report's tables name it
    (``lenet-mlp b64 x2 sync mxnet``)."""
    depth = f"-{r['layers']}" if r.get("layers") else ""
    # A script's --param values tell its cells apart (``train.py b32 x2 ... seed=1``).
    params = "".join(f" {name}={value}" for name, value in r.get("params") or ())
    repeat = f" r{r['repeat'] + 1}" if r.get("repeat") else ""  # a study's --repeats
    return (f"{r['model']}{depth} b{r['batch']} x{r['devices']} {r['sync']} {r['engine']}"
            f"{params}{repeat}")
