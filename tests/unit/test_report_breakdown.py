"""The report's step breakdown: its two figures, its table with the slowest worker and a
link to each cell's trace, all in the board's time; none of it for a sweep without."""

from __future__ import annotations

import json
import os
from pathlib import Path

from profiler.sweep import board_time
from profiler.report.build import build_report
from profiler.report.figures import Figure, Skipped, step_breakdown_vs_devices, wait_by_worker
from profiler.report.html import render
from profiler.report.sweep_data import config_label as _config


def _record(devices: int, model: str = "lenet-mlp", **overrides) -> dict:
    ranks = [str(r) for r in range(devices)]
    record = {"cell_id": f"{model}-{devices}-{overrides.get('straggler', 'none')}",
              "engine": "torch", "model": model, "layers": 20 if model == "resnet" else None,
              "batch": 32, "devices": devices, "sync": "sync", "epochs": 1, "status": "ok",
              "reason": "", "dataset": "mnist", "straggler": "none", "speedup": 2.0,
              "breakdown": "every step", "data_ms_mean": 0.5, "compute_ms_mean": 10.0,
              "comm_ms_mean": 4.0 * (devices - 1), "wait_ms_mean": 3.0 * (devices - 1),
              "wait_ms_p95": 9.0, "step_ms_mean": 15.0, "steady_step_ms": 15.2,
              "breakdown_vs_step": 0.99,
              "wait_ms_by_worker": {r: 3.0 * int(r) for r in ranks},
              "worker_nodes": {r: f"n{int(r) + 1}" for r in ranks},
              "slowest_worker": "n1", "trace_file": None}
    return {**record, **overrides}


RECORDS = [_record(1), _record(2), _record(4), _record(1, "resnet"), _record(4, "resnet"),
           _record(4, straggler="0.5", straggler_node="n4", slowest_worker="n4")]


def test_figures_drawn_from_cells_that_timed_their_steps():
    figure = step_breakdown_vs_devices(RECORDS)
    assert isinstance(figure, Figure) and figure.png.startswith(b"\x89PNG")
    waits = wait_by_worker(RECORDS)
    assert isinstance(waits, Figure) and waits.png.startswith(b"\x89PNG")
    plain = [{k: v for k, v in r.items() if "_ms" not in k} for r in RECORDS]
    assert isinstance(step_breakdown_vs_devices(plain), Skipped)
    assert isinstance(wait_by_worker(plain), Skipped)


def test_table_names_the_slowest_worker_and_links_the_trace_in_board_time():
    page = render(title="t", environment={}, records=RECORDS, config_of=_config, figures=[],
                  cell_figures=[],
                  traces={"lenet-mlp-4-0.5": "cells/x/attempt-1/trace.json"})
    table = page.split("<h2>Where the time goes</h2>", 1)[1].split("</table>", 1)[0]
    row = next(line for line in table.split("<tr>") if "n4 x0.5" in line)
    assert "href='cells/x/attempt-1/trace.json'" in row
    # 10 ms of compute at speedup 2 is 20 ms on the board; wait 9 ms x 2 = 18 (4 workers).
    assert "<td>20.000</td>" not in row and "<td>20.0</td>" in row
    assert "<td>18.0</td>" in row and "n4" in row
    assert "Where the time goes" not in render(
        title="t", environment={}, records=[{k: v for k, v in r.items() if "_ms" not in k}
                                            for r in RECORDS],
        config_of=_config, figures=[], cell_figures=[])


def test_dilated_cells_read_back_per_worker_in_board_time():
    board = board_time.record(_record(2))
    assert board["compute_ms_mean"] == 20.0 and board["wait_ms_p95"] == 18.0
    assert board["wait_ms_by_worker"] == {"0": 0.0, "1": 6.0}
    assert board["breakdown_vs_step"] == 0.99  # a ratio stays


def test_report_links_each_trace_relative_to_its_page(tmp_path):
    sweep = tmp_path / "sweep"
    trace = sweep / "cells" / "c1" / "attempt-1" / "trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps({"traceEvents": []}))
    record = {**_record(2), "cell_id": "c1", "sweep_id": "s",
              "trace_file": "cells/c1/attempt-1/trace.json"}
    (sweep / "results.jsonl").write_text(json.dumps(record) + "\n")
    (sweep / "sweep.json").write_text(json.dumps({"sweep_id": "s"}))
    elsewhere = tmp_path / "pages" / "r.html"
    elsewhere.parent.mkdir()
    page = build_report(sweep, elsewhere).read_text()
    href = os.path.relpath(trace, elsewhere.parent)
    assert f"href='{href}'" in page
    assert (elsewhere.parent / href).resolve() == trace.resolve()
    assert Path(sweep / "report.html").exists() is False
