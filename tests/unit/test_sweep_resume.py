"""What a sweep keeps about itself: identity checks on --resume, attempts, default timeouts,
and the stop request the signal handlers set."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from profiler.cell import CELL_FORMAT, CellConfig
from profiler.cluster import cluster_settings
from profiler.errors import ConfigError
from profiler.sweep.folder import next_attempt, prepare_sweep_dir
from profiler.sweep.interrupts import StopRequest, SweepInterrupted
from profiler.sweep.sweep import SweepSettings
from profiler.sweep.timeouts import cell_timeout_s, default_timeout_s


def _made(tmp_path, **kw) -> SweepSettings:
    settings = SweepSettings(cells=[CellConfig()], out_dir=tmp_path / "s", **kw)
    prepare_sweep_dir(settings)
    return settings


def _emulated(profile=None, speedup=1.0):
    return cluster_settings("emulated", profile=profile, speedup=speedup)


@pytest.mark.parametrize("first, change, words", [
    ({}, dict(cluster=_emulated()), ["--cluster emulated", "local"]),
    ({}, dict(threads_per_process=2), ["--threads 2", "1"]),
    ({}, dict(val_samples=100), ["--val-samples 100", "(none)"]),
    (dict(cluster=_emulated("pi3b")), dict(cluster=_emulated("pi4")),
     ["--profile pi4", "pi3b"]),
    (dict(cluster=_emulated()), dict(cluster=_emulated(speedup=4)), ["--speedup 4", "1.0"]),
])
def test_resume_with_other_settings_is_refused_naming_the_difference(tmp_path, first, change,
                                                                      words):
    _made(tmp_path, **first)
    again = SweepSettings(cells=[CellConfig()], out_dir=tmp_path / "s", resume=True, **change)
    with pytest.raises(ConfigError) as err:
        prepare_sweep_dir(again)
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_resume_with_the_same_settings_and_no_profile_is_accepted(tmp_path):
    _made(tmp_path, cluster=_emulated("pi3b"))
    again = SweepSettings(cells=[CellConfig()], out_dir=tmp_path / "s", resume=True,
                          cluster=_emulated())
    sweep_id, out = prepare_sweep_dir(again)
    assert out == tmp_path / "s" and sweep_id


def test_corrupt_sweep_json_is_one_line(tmp_path):
    _made(tmp_path)
    (tmp_path / "s" / "sweep.json").write_bytes(b"\x00garbage{")
    again = SweepSettings(cells=[CellConfig()], out_dir=tmp_path / "s", resume=True)
    with pytest.raises(ConfigError, match="corrupt"):
        prepare_sweep_dir(again)


def _rewrite_identity(tmp_path, change) -> bytes:
    """Apply ``change(identity)`` to the sweep's recorded identity; the new bytes."""
    path = tmp_path / "s" / "sweep.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))
    return path.read_bytes()


@pytest.mark.parametrize("change, shown", [
    (lambda meta: meta["identity"].pop("cell_format"), "cell format 1"),  # before formats
    (lambda meta: meta["identity"].update(cell_format=CELL_FORMAT + 1),
     f"cell format {CELL_FORMAT + 1}"),
    (lambda meta: meta.pop("identity"), "cell format 1"),  # before identities were kept
])
def test_resume_of_another_cell_format_is_refused_in_one_line(tmp_path, change, shown):
    _made(tmp_path)
    (tmp_path / "s" / "results.jsonl").write_text('{"cell_id": "x", "status": "ok"}\n')
    before = _rewrite_identity(tmp_path, change)
    again = SweepSettings(cells=[CellConfig()], out_dir=tmp_path / "s", resume=True)
    with pytest.raises(ConfigError) as err:
        prepare_sweep_dir(again)
    message = str(err.value)
    assert "\n" not in message
    assert "another edgeprof version" in message and shown in message
    assert f"this one {CELL_FORMAT}" in message
    assert "start a new sweep with another --out" in message
    # Refused before anything is written: the earlier sweep is as it was.
    assert (tmp_path / "s" / "sweep.json").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["results.jsonl", "sweep.json"]


def test_a_new_sweep_records_the_cell_format_it_was_written_with(tmp_path):
    _made(tmp_path)
    meta = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert meta["identity"]["cell_format"] == CELL_FORMAT
    assert all("momentum" in cell and "lr_scaling" in cell for cell in meta["cells"])


def test_attempts_count_started_attempts_only(tmp_path):
    root = tmp_path / "cells" / "abc"
    assert next_attempt(root) == 1
    (root / "attempt-1").mkdir(parents=True)
    assert next_attempt(root) == 1  # made by someone else (a mount point), never started
    (root / "attempt-1" / "cell.json").write_text("{}")
    (root / "attempt-3").mkdir()
    (root / "attempt-3" / "cell.json").write_text("{}")
    assert next_attempt(root) == 4


def test_default_timeout_grows_with_the_work_and_zero_means_none():
    small = CellConfig(model="lenet-mlp", layers=None, max_samples=2000)
    big = CellConfig(model="resnet", layers=110, epochs=5, dataset="cifar10")
    assert 300 < default_timeout_s(small) < 600
    # The study's ResNet-110 epoch took ~80,000 s on one Pi 3B: never cut that short.
    assert default_timeout_s(big) > 5 * 80_000
    assert cell_timeout_s(small, None) == default_timeout_s(small)
    assert cell_timeout_s(small, 0) is None and cell_timeout_s(small, 12.5) == 12.5


def _soon(condition, within_s: float = 2.0) -> bool:
    deadline = time.monotonic() + within_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_stop_request_records_the_first_signal_and_a_second_asks_for_haste():
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)  # handled: the test process lives on
        assert _soon(lambda: stop.requested) and not stop.hurry
        os.kill(os.getpid(), signal.SIGINT)
        assert _soon(lambda: stop.hurry)
        assert stop.hurry and stop.signum == signal.SIGTERM
        with pytest.raises(SweepInterrupted) as err:
            stop.raise_if_requested()
    assert err.value.exit_status == 143 and "SIGTERM" in stop.reason
    # After a stop, further stop signals are ignored while the process winds down.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    signal.signal(signal.SIGTERM, before)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with StopRequest():
        pass
    assert signal.getsignal(signal.SIGTERM) == before  # restored when nothing happened


def test_a_sweep_written_before_providers_were_plugins_still_resumes(tmp_path):
    """sweep.json's identity keeps its keys (cluster, profile, inventory, speedup): a
    folder written by the edgeprof before this one resumes with the same options."""
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sweep.json").write_text(json.dumps({
        "sweep_id": "20260101-000000", "cells": [], "identity": {
            "cell_format": CELL_FORMAT, "cluster": "emulated", "profile": "pi3b",
            "data_dir": None, "threads": 1, "seed": 42, "val_samples": None,
            "inventory": None, "speedup": 2.0}}))
    again = SweepSettings(cells=[CellConfig()], out_dir=tmp_path / "s", resume=True,
                          cluster=_emulated(speedup=2))
    assert prepare_sweep_dir(again) == ("20260101-000000", tmp_path / "s")
    # The provider's options are its own now: the key the emulated cluster lacks is not
    # compared, the ones it has still are.
    assert set(again.identity()) == {"cell_format", "cluster", "profile", "speedup",
                                     "data_dir", "threads", "seed", "val_samples"}
    other = SweepSettings(cells=[CellConfig()], out_dir=tmp_path / "s", resume=True,
                          cluster=_emulated(speedup=4))
    with pytest.raises(ConfigError, match="--speedup 4 differs from the sweep's 2.0"):
        prepare_sweep_dir(other)


def test_resume_rewrites_sweep_json_keeping_its_id_identity_and_first_versions(tmp_path):
    first_cell, second_cell = CellConfig(batch=32), CellConfig(batch=64)
    prepare_sweep_dir(SweepSettings(cells=[first_cell], out_dir=tmp_path / "s",
                                    timeout_s=100.0, extra={"study": "park2019", "scale": 1}))
    path = tmp_path / "s" / "sweep.json"
    before = json.loads(path.read_text())
    before["versions"]["edgeprof"] = "0.0-the-first-run"  # as an older install wrote it
    path.write_text(json.dumps(before))
    again = SweepSettings(cells=[second_cell, first_cell], out_dir=tmp_path / "s",
                          resume=True, timeout_s=250.0, interval_s=5.0,
                          extra={"scale": 2})
    assert prepare_sweep_dir(again) == (before["sweep_id"], tmp_path / "s")
    after = json.loads(path.read_text())
    for kept in ("sweep_id", "created", "identity", "versions"):
        assert after[kept] == before[kept], kept
    # The resumed run's settings; extra's keys merged; the new cell after the recorded.
    assert (after["timeout_s"], after["interval_s"]) == (250.0, 5.0)
    assert after["extra"] == {"study": "park2019", "scale": 2}
    assert [c["batch"] for c in after["cells"]] == [32, 64]
    [resumed] = after["resumed"]
    assert resumed["cells_added"] == 1 and resumed["timeout_s"] == 250.0
    assert resumed["versions"]["edgeprof"] != "0.0-the-first-run"
    # A second resume adds its own entry; nothing to add to the grid.
    prepare_sweep_dir(again)
    assert [r["cells_added"] for r in json.loads(path.read_text())["resumed"]] == [1, 0]


def test_resume_removes_the_temporary_files_a_killed_run_left(tmp_path):
    _made(tmp_path)
    sweep = tmp_path / "s"
    attempt = sweep / "cells" / "abc" / "attempt-1"
    (attempt / "pids").mkdir(parents=True)
    (attempt / "cell.json").write_text("{}")
    stale = [sweep / ".results.csv.k3j2_x.tmp", sweep / ".sweep.json.q9a.tmp",
             attempt / ".cell.json.zz1.tmp", attempt / ".trace.json.a1.tmp",
             attempt / "pids" / ".n1.json.b2.tmp"]
    kept = [sweep / ".report.html.c3.tmp",  # a report may be being written meanwhile
            attempt / "pids" / "n1.json", attempt / "cell.json",
            attempt / "metrics" / "n1" / ".ship-x.json.d4.tmp"]  # the shipper's, locked
    for path in stale + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("half")
    again = SweepSettings(cells=[CellConfig()], out_dir=sweep, resume=True)
    prepare_sweep_dir(again)
    assert [p for p in stale if p.exists()] == []
    assert all(p.exists() for p in kept)
    assert not list(sweep.glob(".sweep.json.*.tmp"))  # its own rewrite left none
