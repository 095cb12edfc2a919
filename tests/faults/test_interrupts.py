"""Stopping a sweep: Ctrl-C, SIGTERM, SIGHUP and ``kill -9`` of the controller, for real.

Each trial runs ``edgeprof sweep`` as a user would (a subprocess on the local cluster:
MXNet scheduler, server, two workers and their metrics agents) and signals the
controller at a different moment of a cell: while its processes start, while they
train, around the end of the first cell (reaping, the next cell's start), and with a
second signal during the reaping. After each trial: the exit status is 128 + the
signal's number within 10 s, the running cell is recorded as ``failed (interrupted)``,
no traceback, and no process of the sweep is left anywhere on the machine.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT
from workloads.events import read_events

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
EXIT_WITHIN_S = 10.0
# Moments of the sweep to signal at: (what it has reached, seconds after). Each is an
# event the sweep's own files show, not seconds after its launch, so that a fast host
# and a slow one are signalled at the same moment of the cell: while the first cell's
# processes start (``launch``: its attempt exists), while it trains (``training``: its
# worker 0 took a first step), while it is reaped (``ended``: its worker 0 wrote its
# end) and while the second cell starts (``next``: its attempt exists). Seconds after a
# launch (0 to 10 s) landed around the first cell's end on a slow host, all past it on
# a faster one (its first cell ended 5 s after launch), and its sweep, over 25 s after
# launch there, would have ended before the last of them on a host 3 x as fast again
# (issue 46).
MOMENTS = [("launch", 0.0), ("launch", 0.1), ("launch", 0.3), ("launch", 0.7),
           ("training", 0.0), ("training", 0.5), ("ended", 0.0), ("ended", 0.1),
           ("ended", 0.3), ("next", 0.0), ("next", 0.5)]
FIRST_BATCH = 64


def _start_sweep(out: Path, *extra: str) -> subprocess.Popen:
    # Two cells: a short one (batch 64: 92 steps a worker, 3.4 s from launch to reap on
    # an idle 2-core host) and a long one that every test here stops: batch 1, 6,000
    # steps a worker, 4.7 ms a step on that host (28 s of training), so still 7 s on a
    # host 4 x as fast: >10 x the latest a signal comes after its start (``next`` +
    # 0.5 s), and past the fixed delays below (launch + 3 s at most).
    cmd = [*EDGEPROF, "sweep", "--model", "lenet-mlp", "--devices", "2", "--batch",
           f"{FIRST_BATCH},1", "--max-samples", "6000", "--val-samples", "200",
           "--epochs", "2", "--interval", "0.5", "--out", str(out), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _attempts(out: Path) -> dict[int, Path]:
    """The sweep's first attempts so far, by their cell's batch."""
    found = {}
    for cell_json in out.glob("cells/*/attempt-1/cell.json"):
        try:
            found[json.loads(cell_json.read_text())["batch"]] = cell_json.parent
        except (OSError, ValueError, KeyError):
            continue  # being written
    return found


def _reached(out: Path, anchor: str) -> bool:
    attempts = _attempts(out)
    if anchor == "launch":
        return bool(attempts)
    if anchor == "next":
        return len(attempts) == 2
    first = attempts.get(FIRST_BATCH)
    if first is None:
        return False
    events = {e["event"] for e in read_events(first / "events" / "worker-0.jsonl")}
    return {"training": "first_step", "ended": "end"}[anchor] in events


def _wait_for(out: Path, proc: subprocess.Popen, anchor: str,
              timeout_s: float = 120.0) -> None:
    """Wait until the sweep has reached ``anchor`` (``MOMENTS``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _reached(out, anchor):
            return
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.02)
    pytest.fail(f"the sweep never reached {anchor!r}")


def _first_launch(out: Path, proc: subprocess.Popen) -> None:
    """Wait until the first cell attempt exists (its processes are being started)."""
    _wait_for(out, proc, "launch")


def _leftovers(out: Path) -> list[str]:
    """Processes anywhere on the machine that belong to the sweep in ``out``."""
    mark = str(out)
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if mark in cmdline:
            found.append(f"{p.info['pid']}: {cmdline[:160]}")
    return found


def _no_leftovers(out: Path, within_s: float = 3.0) -> None:
    deadline = time.monotonic() + within_s
    while _leftovers(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _leftovers(out) == []


def _records(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _signal_and_check(proc: subprocess.Popen, out: Path, signals: list[int],
                      gap_s: float = 0.3) -> None:
    assert len(_records(out)) < 2 and proc.poll() is None, \
        "the sweep ended before the signal: make its second cell longer"
    for index, sig in enumerate(signals):
        if index:
            time.sleep(gap_s)
        if proc.poll() is None:
            proc.send_signal(sig)
    t_signal = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=EXIT_WITHIN_S + 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the sweep did not exit within {EXIT_WITHIN_S} s of {signals}")
    took_s = time.monotonic() - t_signal
    assert took_s <= EXIT_WITHIN_S, f"exit took {took_s:.1f} s"
    assert proc.returncode == 128 + signals[0], (proc.returncode, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "--resume" in stderr
    records = _records(out)
    # The cell that was running is recorded as interrupted; a signal that fell between
    # two cells finds no cell running and leaves only finished ones.
    last = records[-1] if records else None
    if last is not None and last["status"] != "ok":
        assert last["status"] == "failed" and "interrupted" in last["reason"], last
        assert signal.Signals(signals[0]).name in last["reason"]
    assert len(records) < 2 or records[-1]["status"] != "ok", "the sweep was not stopped"
    _no_leftovers(out)


@pytest.mark.parametrize("anchor, delay_s", MOMENTS)
def test_ctrl_c_at_any_moment_stops_within_10_s_and_leaves_nothing(tmp_path, anchor, delay_s):
    out = tmp_path / "sweep"
    proc = _start_sweep(out)
    _wait_for(out, proc, anchor)
    time.sleep(delay_s)
    _signal_and_check(proc, out, [signal.SIGINT])


@pytest.mark.parametrize("delay_s", [0.5, 3.0])
def test_second_ctrl_c_during_the_reaping_is_safe(tmp_path, delay_s):
    out = tmp_path / "sweep"
    proc = _start_sweep(out)
    _first_launch(out, proc)
    time.sleep(delay_s)
    _signal_and_check(proc, out, [signal.SIGINT, signal.SIGINT], gap_s=0.2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_behave_like_ctrl_c(tmp_path, sig):
    out = tmp_path / "sweep"
    proc = _start_sweep(out)
    _first_launch(out, proc)
    time.sleep(2.0)
    _signal_and_check(proc, out, [sig])


# The PyTorch engines' cells (a parameter server and its workers, or DDP workers) stop
# the same way: a few moments of a cell each, and SIGTERM.
@pytest.mark.parametrize("engine, sig, delay_s", [
    ("torch", signal.SIGINT, 0.1), ("torch", signal.SIGTERM, 3.0),
    ("torch-ddp", signal.SIGINT, 1.2)])
def test_torch_cells_stop_the_same_way(tmp_path, engine, sig, delay_s):
    out = tmp_path / "sweep"
    proc = _start_sweep(out, "--engine", engine)
    _first_launch(out, proc)
    time.sleep(delay_s)
    _signal_and_check(proc, out, [sig])


@pytest.mark.parametrize("engine", ["mxnet", "torch"])
def test_kill_9_then_resume_reruns_only_the_interrupted_cell(tmp_path, engine):
    """``kill -9`` cannot be handled: the kernel's parent-death signal takes the cell's
    processes and agents with the controller. ``--resume`` keeps the finished cell,
    reruns the interrupted one as attempt 2 (attempt 1's folder stays), and it ends ``ok``."""
    out = tmp_path / "sweep"
    args = ["--model", "lenet-mlp", "--devices", "2", "--batch", "64,8", "--max-samples",
            "12000", "--val-samples", "200", "--epochs", "2", "--interval", "0.5",
            "--engine", engine]
    proc = subprocess.Popen([*EDGEPROF, "sweep", *args, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(out.glob("cells/*/attempt-1"))) < 2:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.1)
    first_cell = _records(out)[0]
    # Killed as the second cell trains (its worker 0's first step), not a fixed time
    # after its start: its 1,500 steps a worker then still lie ahead on any host.
    second = next(p for p in out.glob("cells/*/attempt-1")
                  if p.parent.name != first_cell["cell_id"])
    while "first_step" not in {e["event"] for e in read_events(
            second / "events" / "worker-0.jsonl")}:
        assert proc.poll() is None and time.monotonic() < deadline, \
            "the second cell ended or never trained before the kill"
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    _no_leftovers(out, within_s=5.0)

    resumed = subprocess.run([*EDGEPROF, "sweep", *args, "--out", str(out), "--resume"],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    records = _records(out)
    assert len(records) == 2 and records[0] == first_cell  # not rerun
    assert records[1]["status"] == "ok" and records[1]["attempt"] == 2, records[1]
    assert records[1]["cell_id"] != first_cell["cell_id"]
    # The killed attempt's folder stays for diagnosis, beside the rerun's.
    cell_root = out / "cells" / records[1]["cell_id"]
    assert (cell_root / "attempt-1" / "cell.json").exists()
    assert (cell_root / "attempt-2" / "events" / "worker-0.jsonl").exists()
    _no_leftovers(out)
