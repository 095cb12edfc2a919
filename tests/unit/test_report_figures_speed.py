"""What makes a large sweep's report fast must not change what it shows: the per-cell
figure drawn again on one reused canvas keeps nothing of the cell before, the pool of
processes draws the same PNGs as one process, and the spool reader's measurement filter
reads the same points as reading them all. Spools are written by the agent's own writer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from profiler.agent import lineproto
from profiler.agent.spool import SpoolWriter
from profiler.agent.spool_reader import read_points
from profiler.report.build import build_report
from profiler.report.figures import node_series
from profiler.report.sweep_data import MEASUREMENTS, read_cell_series

LAUNCHED_S = 1_800_000_000.0
TICKS = 12


def _write_spool(spool_dir: Path, node: str, scale: float) -> None:
    writer = SpoolWriter(spool_dir, {"node": node, "sweep": "s"})
    for tick in range(TICKS):
        time_ms = int((LAUNCHED_S + 0.5 * tick) * 1000)
        writer.append([
            lineproto.encode("cpu", {}, {"cpu_percent": scale * (20 + tick)}, time_ms),
            lineproto.encode("cpu_core", {"core": "0"}, {"cpu_percent": 99.0}, time_ms),
            lineproto.encode("mem", {}, {"used_mb": scale * (300.0 + 5 * tick)}, time_ms),
            lineproto.encode("net", {"interface": "eth0"},
                             {"sent_bytes_per_s": scale * 1024.0 * tick,
                              "recv_bytes_per_s": scale * 2048.0}, time_ms),
            lineproto.encode("net", {"interface": "lo"},
                             {"sent_bytes_per_s": 1e9, "recv_bytes_per_s": 1e9}, time_ms),
            lineproto.encode("proc", {"role": "worker"}, {"rss_mb": 150.0}, time_ms)])
    writer.close()


def _sweep(root: Path, cells: int) -> Path:
    """A sweep folder of ``cells`` 2-device cells, 1 to 3 nodes each with real spools."""
    sweep = root / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"sweep_id": "s"}))
    records = []
    for i in range(cells):
        record = {"cell_id": f"cell{i:02d}", "engine": "mxnet", "model": "lenet-mlp",
                  "layers": None, "batch": 32 + i, "devices": 2, "sync": "sync",
                  "epochs": 1, "status": "ok", "reason": "", "dataset": "mnist",
                  "train_s": 5.0 + i, "val_accuracy": 0.9, "attempt": 1,
                  "launched_at": LAUNCHED_S, "reaped_at": LAUNCHED_S + TICKS / 2}
        records.append(record)
        for n in range(1 + i % 3):
            _write_spool(sweep / "cells" / record["cell_id"] / "attempt-1" / "metrics" /
                         f"n{n}", f"n{n}", scale=1 + i + n)
    (sweep / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return sweep


def _pngs(page: Path) -> list[tuple[str, bytes]]:
    folder = page.parent / f"{page.stem}-figures"
    return [(p.name, p.read_bytes()) for p in sorted(folder.glob("*.png"))]


def test_a_pool_draws_the_same_figures_as_one_process(tmp_path):
    sweep = _sweep(tmp_path, cells=6)
    alone = build_report(sweep, tmp_path / "alone.html", workers=1)
    pooled = build_report(sweep, tmp_path / "pooled.html", workers=2)
    assert _pngs(alone) == _pngs(pooled)
    names = [name for name, _ in _pngs(alone)]
    assert [n for n in names if n.startswith("fig-cell-")] == \
        [f"fig-cell-cell{i:02d}.png" for i in range(6)]
    # The page embeds every PNG written, the cells' in grid order.
    page = pooled.read_text()
    assert page.count("<img") == len(names)
    assert re.findall(r"id=\"fig-cell-(cell\d+)\"", page) == [f"cell{i:02d}" for i in range(6)]


def test_the_reused_canvas_keeps_nothing_of_the_cell_before(tmp_path):
    sweep = _sweep(tmp_path, cells=3)
    record = {"cell_id": "x", "model": "lenet-mlp", "batch": 32, "sync": "sync",
              "engine": "mxnet", "devices": 2, "status": "ok", "launched_at": LAUNCHED_S,
              "reaped_at": LAUNCHED_S + TICKS / 2}
    small = read_cell_series(sweep / "cells" / "cell00" / "attempt-1" / "metrics", record)
    big = read_cell_series(sweep / "cells" / "cell02" / "attempt-1" / "metrics", record)
    assert len(small) == 1 and len(big) == 3
    lone = {"n9": {"mem_used_mb": [(0.0, 1.0), (1.0, 2.0)]}}  # no CPU line: no legend
    first, first_lone = node_series(record, small).png, node_series(record, lone).png
    node_series(record, big)  # three nodes, other values: other limits, a longer legend
    assert node_series(record, lone).png == first_lone
    node_series(record, big)
    assert node_series(record, small).png == first


def test_the_measurement_filter_reads_the_same_points(tmp_path):
    _write_spool(tmp_path / "n0", "n0", scale=1.0)
    everything = [(b, p) for b, p in read_points(tmp_path / "n0")
                  if p.measurement in MEASUREMENTS]
    filtered = list(read_points(tmp_path / "n0", MEASUREMENTS))
    assert filtered == everything and len(filtered) == 4 * TICKS
    assert {p.measurement for _, p in filtered} == {"cpu", "mem", "net"}
    assert all(b == {"node": "n0", "sweep": "s"} for b, _ in filtered)
