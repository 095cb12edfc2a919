"""What goes wrong with ``edgeprof sweep --script``, for real.

- Bad input: one line, exit status 2, nothing run (``run_sweep`` is a sentinel), for the
  script (missing, not ``.py``, not compiling: the line named), ``--script-args`` (a
  placeholder the grid has not, with the ones it has; unclosed quotes), ``--param``
  (no ``NAME=``, no values, a grid option's name) and options a script does not take
  (``--model``, ``--layers``, another ``--engine``, ``--sync async``).
- At run time on the local cluster: a script that raises is ``failed`` with its last
  line; one importing a package the node lacks is ``failed`` naming it; a script whose
  second rank never joins the process group while the first waits there ends at
  ``--timeout`` as ``timeout``. The environment and arguments each rank got are the
  ones torchrun would give it, with the grid's values.
- Ctrl-C of a script sweep on the emulated cluster (root) leaves no process behind.
- Over SSH into emulated nodes (root, sshd): the staged script is copied to each node,
  and removed after the sweep.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler.cli import cli
from tests.conftest import ROOT, assert_one_line, need_binary, need_root
from tests.faults.test_interrupts import _leftovers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
EXAMPLE = ROOT / "examples" / "ddp_train.py"

# A script that does what its --param says: every rank writes down what it was given,
# then fails, imports what is not there, or (rank 1 at two devices) never joins the
# process group that rank 0 waits in.
MISBEHAVING = '''
import json, os, sys, time
given = {"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items()
         if k.startswith("EDGEPROF_") or k in (
             "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS")}}
where = sys.argv[sys.argv.index("--where") + 1]
with open(os.path.join(where, f"{os.environ['EDGEPROF_MODE']}-{os.environ['RANK']}.json"),
          "w") as fh:
    json.dump(given, fh)
mode = os.environ["EDGEPROF_MODE"]
if mode == "raise":
    raise RuntimeError("no images under /data/missing: give --data-dir")
if mode == "import":
    import edgeprof_absent_package
if mode == "hang":
    if os.environ["RANK"] == "0":
        import torch.distributed as dist
        dist.init_process_group("gloo")
    time.sleep(3600)
'''


@pytest.fixture
def no_sweep(monkeypatch):
    """``run_sweep`` replaced by a sentinel: bad input must stop before it."""
    import profiler.sweep.sweep as sweep_module

    def refuse(*_args, **_kw):
        raise AssertionError("the sweep ran")
    monkeypatch.setattr(sweep_module, "run_sweep", refuse)


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``edgeprof sweep ARGS`` in this process, its outcome as ``assert_one_line`` reads it."""
    result = CliRunner().invoke(cli, ["sweep", *args])
    return subprocess.CompletedProcess(args, result.exit_code, "", result.output)


@pytest.fixture
def scripts(tmp_path) -> dict[str, Path]:
    files = {"good": "print('hi')\n", "syntax": "import os\n\ndef f(:\n    pass\n",
             "shell": "echo hi\n"}
    paths = {}
    for name, text in files.items():
        paths[name] = tmp_path / (f"{name}.sh" if name == "shell" else f"{name}.py")
        paths[name].write_text(text)
    return paths


BAD = [  # (extra args, words of the one line); {good} etc. name the scripts above
    (["--script", "{missing}"], ["--script", "no such file"]),
    (["--script", "{shell}"], ["not a Python file (.py)"]),
    (["--script", "{syntax}"], ["does not compile: line 3", "invalid syntax"]),
    (["--script", "{good}", "--script-args", "--hidden {hidden}"],
     ["{hidden}", "use {batch}, {devices}, {epochs}", "--param hidden="]),
    (["--script", "{good}", "--script-args", "--lr {lr}"], ["{lr}", "--lr gives {lr}"]),
    (["--script", "{good}", "--script-args", "--name 'a b"], ["cannot be split",
                                                               "close its quotes"]),
    (["--script", "{good}", "--param", "hidden"], ["--param 'hidden' has no NAME="]),
    (["--script", "{good}", "--param", "hidden="], ["--param hidden has no values"]),
    (["--script", "{good}", "--param", "batch=1,2"], ["--param batch", "use --batch"]),
    (["--script", "{good}", "--param", "a=1", "--param", "a=2"], ["given twice"]),
    (["--script", "{good}", "--model", "resnet"], ["--model does not apply to --script"]),
    (["--script", "{good}", "--layers", "20"], ["--layers does not apply to --script"]),
    (["--script", "{good}", "--engine", "torch-ddp"], ["--script runs on the script engine",
                                                       "drop --engine"]),
    (["--script", "{good}", "--sync", "sync,async"], ["--sync sync,async", "drop --sync"]),
    (["--engine", "script"], ["--engine script runs your own training script",
                              "give --script"]),
    (["--param", "hidden=1"], ["--param", "give --script"]),
    (["--script-args", "--epochs 2"], ["--script-args", "give --script"]),
]


@pytest.mark.parametrize("args,words", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_script_input_is_one_line(no_sweep, scripts, tmp_path, args, words):
    names = {**{k: str(v) for k, v in scripts.items()}, "missing": str(tmp_path / "none.py")}
    out = tmp_path / "out"
    done = _cli(*[a.format(**names) if a.startswith("{") else a for a in args],
                "--out", str(out))
    assert_one_line(done, *words)
    assert not out.exists()


def _sweep(out: Path, *args: str, timeout_s: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", "--no-agent",
                           "--out", str(out), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout_s)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_failing_scripts_are_failed_with_their_last_line(tmp_path):
    script = tmp_path / "misbehave.py"
    script.write_text(MISBEHAVING)
    done = _sweep(tmp_path / "out", "--script", str(script), "--param", "mode=raise,import",
                  "--script-args", f"--where {tmp_path} --batch {{batch}}")
    assert done.returncode == 0, done.stderr[-3000:]
    raised, imported = _records(tmp_path / "out")
    assert raised["status"] == imported["status"] == "failed"
    assert raised["reason"].startswith("worker-0 exited 1: ")
    assert raised["reason"].endswith("RuntimeError: no images under /data/missing: "
                                     "give --data-dir")
    assert "No module named 'edgeprof_absent_package'" in imported["reason"]
    assert "failed: " in done.stderr and "edgeprof_absent_package" in done.stderr
    # One device: torchrun's environment for one process, the grid's values beside it.
    given = json.loads((tmp_path / "raise-0.json").read_text())
    assert given["argv"] == ["--where", str(tmp_path), "--batch", "32"]
    assert {k: given["env"].get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                             "LOCAL_WORLD_SIZE", "EDGEPROF_BATCH",
                                             "EDGEPROF_DEVICES", "EDGEPROF_EPOCHS",
                                             "EDGEPROF_MODE")} == {
        "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "EDGEPROF_BATCH": "32", "EDGEPROF_DEVICES": "1", "EDGEPROF_EPOCHS": "1",
        "EDGEPROF_MODE": "raise"}
    assert "EDGEPROF_LR" not in given["env"]  # no --lr: the script keeps its own


def test_a_rank_that_never_joins_ends_at_the_time_limit(tmp_path):
    script = tmp_path / "misbehave.py"
    script.write_text(MISBEHAVING)
    t0 = time.monotonic()
    done = _sweep(tmp_path / "out", "--script", str(script), "--param", "mode=hang",
                  "--devices", "2", "--lr", "0.05", "--timeout", "8", "--script-args",
                  f"--where {tmp_path} --name 'two words' --lr {{lr}} --d {{devices}}")
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = _records(tmp_path / "out")
    assert record["status"] == "timeout", record["reason"]
    assert record["reason"].startswith("no result within --timeout 8 s")
    assert time.monotonic() - t0 < 60
    ranks = [json.loads((tmp_path / f"hang-{rank}.json").read_text()) for rank in (0, 1)]
    for rank, given in enumerate(ranks):
        # A quoted argument stays one; the grid's values filled in per cell.
        assert given["argv"] == ["--where", str(tmp_path), "--name", "two words",
                                 "--lr", "0.05", "--d", "2"]
        env = given["env"]
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == (str(rank), "2", "0")
        assert env["GLOO_SOCKET_IFNAME"] == "lo" and env["OMP_NUM_THREADS"] == "1"
        assert env["EDGEPROF_LR"] == "0.05" and env["EDGEPROF_DEVICES"] == "2"
    assert ranks[0]["env"]["MASTER_ADDR"] == ranks[1]["env"]["MASTER_ADDR"] == "127.0.0.1"
    assert ranks[0]["env"]["MASTER_PORT"] == ranks[1]["env"]["MASTER_PORT"]


def test_ctrl_c_of_a_script_sweep_on_the_emulated_cluster_leaves_nothing(tmp_path):
    from profiler.cluster import emulated

    need_root()
    for binary in emulated.REQUIRED_BINARIES:
        need_binary(binary)
    up, brought_up = emulated.ensure_cluster(2)
    out = tmp_path / "sweep"
    try:
        # Long enough to be training when the signal comes: 8 epochs of 6,000 images.
        proc = subprocess.Popen(
            [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "emulated",
             "--script", str(EXAMPLE), "--devices", "2", "--interval", "0.5",
             "--script-args", "--epochs 8 --batch {batch} --max-samples 6000 "
                              "--val-samples 100", "--out", str(out)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not list(out.glob("cells/*/attempt-1/events/steps-worker-1.jsonl")):
            assert proc.poll() is None and time.monotonic() < deadline, \
                proc.communicate()[1][-2000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
        assert proc.returncode == 130, stderr[-2000:]
        assert "Traceback" not in stderr and "--resume" in stderr
        [record] = _records(out)
        assert record["status"] == "failed" and "interrupted" in record["reason"]
        deadline = time.monotonic() + 3
        while _leftovers(out) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _leftovers(out) == []
    finally:
        if brought_up:
            emulated.down()


# Over SSH: each rank says where its script is, then the first cell ends and the second
# waits until it is stopped.
WHERE_AM_I = '''
import os, sys, time
print("script file:", __file__, file=sys.stderr, flush=True)
if os.environ["EDGEPROF_MODE"] == "wait":
    time.sleep(3600)
'''


def test_over_ssh_the_script_goes_to_each_node_and_nothing_is_left(tmp_path):
    """``--cluster inventory`` into two emulated nodes serving sshd (unconfined: the
    test is about files and processes, not speed): each rank runs its node's own copy of
    the staged script; Ctrl-C during the second cell stops it, and neither a process
    nor the copy is left on a node."""
    from tests.conftest import sshd_nodes
    from tests.integration.test_inventory_cluster import _leftovers as node_leftovers

    script = tmp_path / "where.py"
    script.write_text(WHERE_AM_I)
    out, work = tmp_path / "sweep", tmp_path / "ssh"
    work.mkdir()
    for sshd in sshd_nodes(work, 2, confine=False):
        host_vars = {n: {"edgeprof_workdir": str(work / f"remote-{n}"),
                         "edgeprof_python": sys.executable} for n in ("n0", "n1")}
        inventory = sshd.write_inventory(work / "inventory.ini",
                                         {"master": ["n0"], "workers": ["n1"]},
                                         host_vars=host_vars)
        proc = subprocess.Popen(
            [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "inventory",
             "--inventory", str(inventory), "--script", str(script), "--devices", "2",
             "--param", "mode=end,wait", "--no-agent", "--out", str(out)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        staged = f"script-{hashlib.sha256(script.read_bytes()).hexdigest()[:12]}.py"
        remote = {n: work / f"remote-{n}" / "sweep" / "inputs" / staged for n in ("n0", "n1")}
        deadline = time.monotonic() + 180
        while not _second_cell_waiting(out):
            assert proc.poll() is None and time.monotonic() < deadline, \
                proc.communicate()[1][-3000:]
            time.sleep(0.2)
        # The second cell is waiting: each node holds its copy of the script.
        assert all(path.is_file() for path in remote.values()), remote
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130, stderr[-3000:]
        first, second = _records(out)
        assert first["status"] == "ok", first["reason"]
        # It never called edgeprof_hooks.log: the row says accuracy was not reported.
        assert first["accuracy_reported"] is False and first["val_accuracy"] is None
        assert second["status"] == "failed" and "interrupted" in second["reason"]
        for record in (first, second):
            logs = out / "cells" / record["cell_id"] / "attempt-1" / "logs"
            for rank, node in enumerate(("n0", "n1")):
                assert f"script file: {remote[node]}" in _text(logs / f"worker-{rank}.log")
        assert not any(path.parent.exists() for path in remote.values())
        hosts = {"sshd": sshd}
        deadline = time.monotonic() + 10
        while node_leftovers(hosts, str(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert node_leftovers(hosts, str(out)) == []


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _second_cell_waiting(out: Path) -> bool:
    """The first cell recorded, and both ranks of the second one said where they are."""
    if not (out / "results.jsonl").exists() or len(_records(out)) != 1:
        return False
    done = _records(out)[0]["cell_id"]
    second = [p for p in out.glob("cells/*/attempt-1") if p.parent.name != done]
    return len(second) == 1 and all("script file:" in _text(second[0] / "logs" / f"worker-{r}.log")
                                    for r in (0, 1))
