"""A user's own ``torch.nn.Module`` (``--model PATH.py:FACTORY``) through ``edgeprof sweep``.

``examples/cnn_model.py:make_model`` trains on real Fashion-MNIST (Debian's IDX files)
under the torch engines' own loops: the parameter server sync and async, its server on a
master node or beside every worker, and DDP, at 1 and 2 devices; the same file as a
module (``examples.cnn_model:make_model``, importable on every node through
``PYTHONPATH``); one cell on the emulated cluster, where the server and the workers run
in network namespaces of their own. Every bad input is one line and exit status 2 before
anything runs. (Over SSH: tests/integration/test_inventory_cluster.py.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT, assert_one_line, emulated_nodes, need
from workloads.datasets import idx
from workloads.datasets.catalog import DEBIAN_FASHION_DIR

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
EXAMPLE = ROOT / "examples" / "cnn_model.py"
FACTORY = "examples/cnn_model.py:make_model"
SMALL = ("--dataset", "fashion-mnist", "--batch", "32", "--max-samples", "256",
         "--val-samples", "100", "--no-agent")


def _need_data_and_torch() -> None:
    need("torch (scripts/setup.sh)", importlib.util.find_spec("torch") is not None)
    need("Debian's dataset-fashion-mnist", idx.has_set(DEBIAN_FASHION_DIR))


def _sweep(out: Path, *args: str, timeout: float = 300) -> list[dict]:
    done = subprocess.run([*EDGEPROF, "sweep", *args, "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _parameters() -> int:
    spec = importlib.util.spec_from_file_location("cnn_model_here", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sum(p.numel() for p in module.make_model(num_classes=10).parameters())


def _trained_as_a_built_in_model(out: Path, rec: dict, label: str) -> None:
    """An ok cell of the user's model: its label, digest and parameters in the results,
    the steps timed, the breakdown and the trace made."""
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["model"] == label and rec["dataset"] == "fashion-mnist"
    assert rec["model_digest"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert rec["parameters"] == _parameters() == 105_866
    assert rec["breakdown"] == "every step" and rec["compute_ms_mean"] > 0
    cell = out / "cells" / rec["cell_id"] / "attempt-1"
    steps = sorted(p.name for p in (cell / "events").glob("steps-*.jsonl"))
    workers = [f"steps-worker-{r}.jsonl" for r in range(rec["devices"])]
    servers = {"master": ["steps-server-0.jsonl"],
               "colocated": [f"steps-server-{r}.jsonl" for r in range(rec["devices"])]}
    expected = servers[rec["placement"]] if rec["engine"] == "torch" and rec["devices"] > 1 \
        else []
    assert steps == sorted(expected + workers), steps
    assert (cell / "trace.json").exists()
    start = json.loads((cell / "events" / "worker-0.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["param_count"] == rec["parameters"]


def test_a_factory_file_trains_on_the_parameter_server_and_ddp(tmp_path):
    _need_data_and_torch()
    out = tmp_path / "sweep"
    records = _sweep(out, "--model", FACTORY, "--engine", "torch,torch-ddp",
                     "--devices", "1,2", "--sync", "sync,async", *SMALL)
    assert sorted((r["engine"], r["devices"], r["sync"]) for r in records) == [
        ("torch", 1, "sync"), ("torch", 2, "async"), ("torch", 2, "sync"),
        ("torch-ddp", 1, "sync"), ("torch-ddp", 2, "sync")]
    for rec in records:
        _trained_as_a_built_in_model(out, rec, "cnn_model.py:make_model")
    # The file went with the sweep, under its digest; sweep.json says where it came from.
    digest = records[0]["model_digest"]
    staged = out / "inputs" / f"model-{digest[:12]}.py"
    assert staged.read_bytes() == EXAMPLE.read_bytes()
    inputs = json.loads((out / "sweep.json").read_text())["inputs"]
    assert inputs == [{"kind": "model", "source": str(EXAMPLE), "sha256": digest,
                       "staged": staged.name}]


def test_a_factory_module_trains_with_a_server_beside_every_worker(tmp_path):
    """``package.module:FACTORY``: importable on every node (here through PYTHONPATH,
    which tests/conftest.py sets to the checkout), not shipped. Async, with two servers
    each holding half the parameters (sync's colocated servers differ only in that)."""
    _need_data_and_torch()
    out = tmp_path / "sweep"
    (rec,) = _sweep(out, "--model", "examples.cnn_model:make_model", "--engine", "torch",
                    "--devices", "2", "--sync", "async", "--placement", "colocated", *SMALL)
    _trained_as_a_built_in_model(out, rec, "examples.cnn_model:make_model")
    assert not (out / "inputs").exists()


@pytest.fixture(scope="module")
def emulated_cluster():
    """The emulated cluster that is up (3 nodes at least), or one brought up here."""
    yield from emulated_nodes(3)


def test_a_factory_file_trains_in_the_emulated_nodes_namespaces(emulated_cluster, tmp_path):
    """The server on n0 and the workers on n1, n2, each in its own network namespace,
    import the staged file at the sweep's path (emulated nodes share this filesystem)."""
    _need_data_and_torch()
    out = tmp_path / "sweep"
    (rec,) = _sweep(out, "--cluster", "emulated", "--model", FACTORY, "--engine", "torch",
                    "--devices", "2", *SMALL)
    assert rec["cluster"] == "emulated"
    _trained_as_a_built_in_model(out, rec, "cnn_model.py:make_model")
    assert sorted(rec["worker_nodes"].values()) == ["n1", "n2"]


# What a bad model is: (the file's text or None for no file, the --model item after the
# file's path, extra options, the words its one line must hold).
NET = """
from torch import nn

def make_model(num_classes=10):
    return nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))
"""
BAD = {
    "missing file": (None, ":make_model", (), ("no such file",)),
    "no factory named": (NET, "", (), ("PATH.py:FACTORY",)),
    "empty factory": (NET, ":", (), ("PATH.py:FACTORY",)),
    "import error": ("import edgeprof_no_such_package\n" + NET, ":make_model", (),
                     ("raised ModuleNotFoundError: No module named "
                      "'edgeprof_no_such_package'",)),
    "factory not found": (NET, ":make_modle", (), ("has no function make_modle",
                                                   "it defines make_model")),
    "factory raising": ("def make_model(num_classes=10):\n    raise ValueError('no "
                        "layers given')\n", ":make_model", (),
                        ("make_model(num_classes=10) raised ValueError: no layers given",)),
    "not a module": ("def make_model():\n    return [1, 2]\n", ":make_model", (),
                     ("make_model() returned list, not a torch.nn.Module",)),
    "wrong output": (NET.replace("num_classes))", "5))"), ":make_model", (),
                     ("gave an output of shape 2x5", "not 2x10")),
    "wrong input": (NET.replace("784", "3 * 32 * 32"), ":make_model",
                    ("--dataset", "fashion-mnist"),
                    ("forward pass on a batch of 2x1x28x28 (fashion-mnist) raised "
                     "RuntimeError",)),
    "no shape fits": (NET.replace("784", "5"), ":make_model", (),
                      ("2x1x28x28", "2x3x32x32", "give --dataset")),
    "mxnet engine": (NET, ":make_model", ("--engine", "mxnet,horovod"),
                     ("is a torch.nn.Module: it runs on the torch, torch-ddp",
                      "--engine torch,torch-ddp")),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_model_is_one_line_before_anything_runs(case, tmp_path, monkeypatch):
    """In-process (Click's runner) with ``run_sweep`` replaced by a sentinel that fails."""
    from profiler.cli import cli
    from profiler.sweep import sweep
    from workloads import models

    need("torch (scripts/setup.sh)", importlib.util.find_spec("torch") is not None)
    text, tail, extra, words = BAD[case]
    path = tmp_path / "net.py"
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("a sweep ran"))
    try:
        result = CliRunner().invoke(cli, ["sweep", "--model", f"{path}{tail}",
                                          "--engine", "torch", *extra,
                                          "--out", str(tmp_path / "out")])
    finally:
        for name, spec in list(models.REGISTRY.items()):
            if spec.factory is not None:
                models.unregister(name)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "Traceback" not in result.output and lines[0].startswith("edgeprof: error:")
    for word in words:
        assert word in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_the_real_command_refuses_a_factory_that_does_not_import(tmp_path):
    path = tmp_path / "net.py"
    path.write_text("import edgeprof_no_such_package\n")
    done = subprocess.run([*EDGEPROF, "sweep", "--engine", "torch", "--model",
                           f"{path}:make_model", "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert_one_line(done, "--model", "net.py", "ModuleNotFoundError")
    assert not (tmp_path / "out").exists()
