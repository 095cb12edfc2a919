"""The ``edgeprof`` command end to end: bad input, help, a real sweep, resume, Ctrl-C."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import click
import psutil
import pytest
from click.testing import CliRunner

from profiler.cli import cli
from profiler.sweep.divergence import MIN_JUDGED_STEPS

pytestmark = pytest.mark.e2e
EDGEPROF = [sys.executable, "-m", "profiler.cli"]


@pytest.mark.parametrize("args, words", [
    (["--model", "resnet", "--layers", "33"], ["--layers 33", "6n+2"]),
    (["--model", "lenet-mlp", "--layers", "32"], ["--layers", "lenet-mlp", "drop --layers"]),
    (["--batch", "0"], ["--batch 0", "at least 1"]),
    (["--devices", "0"], ["--devices 0"]),
    (["--model", "alexnet"], ["alexnet", "lenet-mlp, lenet-cnn, lenet-example, resnet"]),
    (["--sync", "eventual"], ["eventual", "sync"]),
    (["--engine", "horovod", "--sync", "async", "--devices", "2"], ["horovod trains sync only"]),
    (["--data-dir", "/nonexistent/data"], ["/nonexistent/data", "edgeprof data fetch"]),
    (["--batch", "abc"], ["--batch 'abc'"]),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    result = CliRunner().invoke(cli, ["sweep", "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[0]


def test_corrupt_dataset_is_rejected_before_anything_runs(tmp_path):
    data = tmp_path / "data" / "mnist"
    data.mkdir(parents=True)
    (data / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03garbage")
    result = CliRunner().invoke(cli, ["sweep", "--model", "lenet-mlp", "--out",
                                      str(tmp_path / "o"), "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "edgeprof data fetch" in result.output or "mnist" in result.output.lower()
    assert not (tmp_path / "o" / "results.jsonl").exists()


def test_unwritable_out_is_rejected(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = CliRunner().invoke(cli, ["sweep", "--out", str(blocker / "sub")])
    assert result.exit_code == 2 and "--out" in result.output and "Traceback" not in result.output


def _commands(group, prefix):
    """Every registered command under ``group`` (groups too), with its argv path."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # lazy groups list what they have not loaded
        command = group.get_command(ctx, name)
        yield prefix + [name], command
        if hasattr(command, "commands"):
            yield from _commands(command, prefix + [name])


def test_every_command_has_help_with_an_example():
    for path, command in _commands(cli, []):
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, path
        if not hasattr(command, "commands"):
            assert "Example:" in result.output, f"`edgeprof {' '.join(path)}` has no example"


def _example_lines(command) -> list[str]:
    """The non-blank lines after ``Example:`` in a command's docstring, without ``\\b``."""
    _, found, block = (command.help or "").partition("Example:")
    return [line.strip() for line in block.splitlines() if line.strip() not in ("", "\b")]


@pytest.mark.parametrize("width", [80, 60])
def test_help_shows_every_example_line_as_written(width):
    """Click re-wraps docstring paragraphs; an example block must come out verbatim.

    Each example line of each command's docstring must appear as one whole line of its
    ``--help`` (same text after stripping the indent), at a usual and a narrow terminal.
    Fails for a block without Click's ``\\b`` marker (e.g. ``agent``'s three-line command).
    """
    commands = [([], cli), *_commands(cli, [])]
    checked = 0
    for path, command in commands:
        result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=width)
        assert result.exit_code == 0, (path, result.output)
        shown = {line.strip() for line in result.output.splitlines()}
        for line in _example_lines(command):
            assert line in shown, (f"`edgeprof {' '.join(path)} --help` breaks the example "
                                   f"line {line!r}:\n{result.output}")
            checked += 1
    assert checked >= len(commands)  # every command, groups included, has an example


def _sweep(out, *extra, check=True):
    cmd = [*EDGEPROF, "sweep", "--model", "lenet-mlp,resnet", "--layers", "8",
           "--batch", "32,64", "--devices", "1,2", "--sync", "sync,async",
           "--max-samples", "512", "--val-samples", "200", "--interval", "0.5",
           "--out", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_real_sweep_then_resume(tmp_path):
    out = tmp_path / "sweep"
    proc = _sweep(out)
    rows = list(csv.DictReader(open(out / "results.csv")))
    # per model: batch 32/64 x (1 device, 2 devices sync, 2 devices async) = 6 cells
    assert len(rows) == 12
    assert {r["status"] for r in rows} == {"ok"}, [r["reason"] for r in rows]
    assert {(r["model"], r["devices"], r["sync"]) for r in rows} == {
        (m, d, s) for m in ("lenet-mlp", "resnet") for d, s in
        (("1", "sync"), ("2", "sync"), ("2", "async"))}
    for r in rows:
        assert float(r["elapsed_s"]) > 0 and float(r["samples_per_s"]) > 0
        # --dataset auto: real images for LeNet (Debian's Fashion-MNIST), no offline CIFAR-10.
        expected = "fashion-mnist" if r["model"] == "lenet-mlp" else "synthetic"
        assert r["dataset"] == expected and r["val_accuracy"] != ""
        steps = 512 // int(r["devices"]) // int(r["batch"])
        # Judged from 10 steps a worker on (sweep/divergence.py); shorter epochs are not.
        judged = ("true", "false") if steps >= MIN_JUDGED_STEPS else ("",)
        assert r["diverged"] in judged and r["train_loss_per_epoch"] != ""
        assert float(r["syncs_per_worker"]) == steps
        if float(r["train_s"]) >= 2 * 0.5:  # at least two samples of the 0.5 s interval
            assert float(r["cpu_percent_mean"]) > 0 and float(r["rss_mb_peak"]) > 50
        if r["devices"] == "2" and r["model"] == "resnet":  # parameters cross loopback
            assert float(r["net_sent_kb"]) > 100 and int(r["metrics_nodes"]) == 2
            # The rate is the total over the training window (within rounding).
            window_s = float(r["net_sent_kb"]) / float(r["net_sent_kb_per_s"])
            assert 0 < window_s < float(r["elapsed_s"]) + 1, r
    assert "val_acc" in proc.stdout and proc.stdout.count("ok") >= 12

    again = _sweep(out, "--resume")
    assert "12 cell(s) already done" in again.stdout
    assert len(open(out / "results.jsonl").read().splitlines()) == 12


def _second_cell_trains(out) -> bool:
    """The first cell recorded, and the second's worker 0 has taken its first step."""
    from workloads.events import read_events

    try:
        first = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    except (OSError, IndexError, ValueError):
        return False
    return any("first_step" in {e["event"] for e in read_events(attempt / "events" /
                                                               "worker-0.jsonl")}
               for attempt in out.glob("cells/*/attempt-1")
               if attempt.parent.name != first["cell_id"])


def test_ctrl_c_keeps_finished_cells_and_leaves_no_process(tmp_path):
    out = tmp_path / "sweep"
    cmd = [*EDGEPROF, "sweep", "--model", "lenet-mlp,resnet", "--layers", "56", "--devices",
           "1,2", "--max-samples", "20000", "--epochs", "3", "--out", str(out), "--no-agent"]
    # The first cell (LeNet MLP, 1 device) ends quickly; the second (2 devices, 937
    # steps a worker) is stopped at its first step, so that it is training on any host
    # (3 s after the first cell's end, a host fast enough could find it ended and the
    # sweep between two cells, with no cell to record as interrupted).
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not _second_cell_trains(out):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    assert _second_cell_trains(out), "the second cell never started training"
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert "--resume" in stderr and "Traceback" not in stderr
    records = [json.loads(ln) for ln in open(out / "results.jsonl")]
    assert records[0]["status"] == "ok"
    assert records[-1]["status"] == "failed" and "interrupted" in records[-1]["reason"]
    time.sleep(0.5)
    alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert os.path.exists(out / "results.csv")
