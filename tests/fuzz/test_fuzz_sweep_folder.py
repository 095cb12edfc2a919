"""Fuzz: a sweep folder from outside (``sweep.json``, ``results.jsonl``, ``cells/``), read by
``edgeprof report DIR`` (in-process, Click's CliRunner) and by what ``edgeprof sweep
--resume`` reads before it runs a cell (``check_sweep_dir``, the results store's
finished cells, ``next_attempt``).

Property: exit 0, or exit 2 with one ``edgeprof: error:`` line; no other exception; no
file written or changed outside the sweep folder. ~6 s.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from profiler.cell import CellConfig
from profiler.errors import EdgeprofError
from profiler.sweep.folder import check_sweep_dir, next_attempt
from profiler.sweep.store import ResultsStore
from tests.fuzz.hostile import (
    DEEP_JSON,
    FUZZ,
    corrupted_text,
    json_values,
    line_of,
    mutated,
    snapshot,
    writes_outside,
)

CELL = CellConfig(model="lenet-mlp", layers=None)
RECORD = {"cell_id": CELL.cell_id, "status": "ok", "engine": "mxnet", "model": "lenet-mlp",
          "layers": None, "batch": 32, "devices": 1, "sync": "sync", "epochs": 1,
          "attempt": 1, "elapsed_s": 1.5, "val_accuracy": 0.9, "samples_per_s": 100.0,
          "val_accuracy_per_epoch": [0.9], "epoch_s": [1.2], "launched_at": 1.0e9,
          "reaped_at": 1.0e9 + 2, "trace_file": None, "reason": ""}
META = {"sweep_id": "20261126-034000", "created": 1.0e9, "timeout_s": None,
        "identity": {"cell_format": 2}, "cells": [{"model": "lenet-mlp", "layers": None}],
        "versions": {"edgeprof": "0"}}

CASES = {"report": 0, "resume": 0}


@st.composite
def sweep_folder(draw) -> tuple[bytes, bytes]:
    """(sweep.json bytes, results.jsonl bytes), each valid, mutated or corrupted."""
    meta = draw(st.one_of(st.just(META), st.builds(lambda: None).flatmap(
        lambda _: st.just(None)).map(lambda _: mutated(META, draw)), json_values))
    records = draw(st.lists(st.one_of(st.just(RECORD), json_values,
                                      st.just(None).map(lambda _: mutated(RECORD, draw))),
                            min_size=1, max_size=3))
    return (draw(corrupted_text([line_of(meta)])),
            draw(corrupted_text([line_of(r) for r in records])))


def _folder(root: Path, meta: bytes, results: bytes) -> Path:
    sweep = root / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_bytes(meta)
    (sweep / "results.jsonl").write_bytes(results)
    (root / "beside").mkdir()  # a neighbour whose content must not change
    (root / "beside" / "keep.txt").write_text("keep")
    return sweep


@settings(FUZZ, max_examples=80)
@given(sweep_folder())
@example((line_of(META).encode(), (line_of({**RECORD, "cell_id": "../../beside"}) + "\n"
                                   ).encode())).via("a cell_id with path traversal")
@example((line_of(META).encode(), b"5\n[1]\n\"text\"\n")).via("results lines not objects")
@example((line_of(META).encode(), (line_of({"status": "ok"}) + "\n").encode())
         ).via("a record without cell_id")
@example((line_of(META).encode(), (line_of({**RECORD, "cell_id": [1]}) + "\n").encode())
         ).via("an unhashable cell_id")
@example((line_of(META).encode(), (DEEP_JSON + "\n").encode())).via("deeply nested results")
@example((DEEP_JSON.encode(), (line_of(RECORD) + "\n").encode())).via("deeply nested sweep.json")
@example((line_of(META).encode(), (line_of({**RECORD, "trace_file": "../beside/keep.txt"})
                                   + "\n").encode())).via("a trace_file outside the folder")
@example((line_of(META).encode(), (line_of({**RECORD, "elapsed_s": "fast",
                                            "val_accuracy": float("nan"),
                                            "samples_per_s": 10 ** 400}) + "\n").encode())
         ).via("numbers of the wrong type, NaN and huge")
@example((line_of([1, 2]).encode(), (line_of(RECORD) + "\n").encode())).via("sweep.json a list")
@example((b'{"cells": true}\n', (line_of(RECORD) + "\n").encode())).via("cells not a list")
@example((line_of(META).encode(), (line_of({k: v for k, v in RECORD.items() if k != "devices"})
                                   + "\n").encode())).via("a record without devices")
def test_report_refuses_or_reads_a_hostile_sweep_folder(folder):
    CASES["report"] += 1
    from profiler.cli import cli
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sweep = _folder(root, *folder)
        before = snapshot(root)
        done = CliRunner().invoke(cli, ["report", str(sweep)])
        assert isinstance(done.exception, (SystemExit, type(None))), _traceback(done)
        assert done.exit_code in (0, 2), done.output
        if done.exit_code == 2:
            lines = done.output.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("edgeprof: error:"), done.output
        assert writes_outside(before, snapshot(root), sweep) == []


@settings(FUZZ, max_examples=60)
@given(sweep_folder(), st.lists(st.sampled_from(
    ["attempt-1", "attempt-x", "attempt-", "attempt-99999999999999999999", "attempt-١",
     "attempt-2/cell.json", "attempt-3"]), max_size=3))
@example((DEEP_JSON.encode(), b""), []).via("deeply nested sweep.json on --resume")
@example(((line_of({**META, "identity": [1]})).encode(), b""), []
         ).via("an identity that is not a mapping")
@example((line_of(META).encode(), b"[]\n"), []).via("a results line that is a list")
@example((line_of(META).encode(), b""), ["attempt-\u0661"]).via("an attempt with an Arabic digit")
def test_resume_refuses_or_reads_a_hostile_sweep_folder(folder, attempts):
    """What ``edgeprof sweep --resume`` reads before running: sweep.json, the finished
    cells of results.jsonl, the attempts already started."""
    CASES["resume"] += 1
    from profiler.sweep.sweep import SweepSettings
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sweep = _folder(root, *folder)
        cell_root = sweep / "cells" / CELL.cell_id
        for name in attempts:
            (cell_root / name).mkdir(parents=True, exist_ok=True)
            (cell_root / name / "cell.json").write_text("{}")
        before = snapshot(root)
        try:
            check_sweep_dir(SweepSettings(cells=[CELL], out_dir=sweep, resume=True))
            store = ResultsStore(sweep)
            store.finished_ids()
            store.latest()
            assert next_attempt(cell_root) >= 1
        except EdgeprofError as exc:
            assert "\n" not in str(exc)
        assert writes_outside(before, snapshot(root), sweep) == []


def _traceback(done) -> str:
    import traceback
    return "".join(traceback.format_exception(*done.exc_info)) if done.exc_info else ""


def teardown_module() -> None:
    print(f"\nfuzz cases: {json.dumps(CASES)}")


@settings(FUZZ, max_examples=30)
@given(st.sampled_from(["results.jsonl", "cells", "cells/CELL", "cells/CELL/attempt-1",
                        "cells/CELL/attempt-2"]),
       st.sampled_from(["a folder outside", "a file outside", "nowhere", "inside"]))
@example("cells", "a folder outside").via("cells/ a link out of the sweep folder")
@example("results.jsonl", "a file outside").via("results.jsonl a link out of the folder")
def test_resume_never_writes_through_a_link_out_of_the_sweep_folder(where, target):
    """``--resume`` appends to results.jsonl and makes cells/<id>/attempt-<N>: with a
    link planted in the folder, it refuses, or those paths stay inside it."""
    CASES["resume"] += 1
    from profiler.sweep.sweep import SweepSettings
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sweep = _folder(root, line_of(META).encode(), (line_of(RECORD) + "\n").encode())
        (root / "outside").mkdir()
        (root / "outside.txt").write_text("")
        (sweep / "inside").mkdir()
        link = sweep / where.replace("CELL", CELL.cell_id)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists():
            link.unlink()
        link.symlink_to({"a folder outside": root / "outside",
                         "a file outside": root / "outside.txt",
                         "nowhere": root / "missing", "inside": sweep / "inside"}[target])
        try:
            check_sweep_dir(SweepSettings(cells=[CELL], out_dir=sweep, resume=True))
        except EdgeprofError as exc:
            assert "\n" not in str(exc)
            return
        attempt = next_attempt(sweep / "cells" / CELL.cell_id)
        inside = sweep.resolve()
        for path in (sweep / "results.jsonl",
                     sweep / "cells" / CELL.cell_id / f"attempt-{attempt}"):
            assert path.resolve().is_relative_to(inside), (path, path.resolve())
