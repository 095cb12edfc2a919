"""An engine added by one class and one registration line runs a real sweep.

The engine below is defined here, as a new engine file would define it, and registered
with one line (``ENGINES[name] = engine``, what ``profiler/engines/__init__.py`` does for
the shipped ones). Nothing else learns its name: the grid's rules (its sync modes and
models), preflight's install check, the recorded versions and the CLI's ``--engine``
derive from the registry. It trains with PyTorch on one device (``--comm local``), a
real ``workloads.train`` process.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler.cell import CellConfig
from profiler.cluster.base import Node
from profiler.engines import ENGINES
from profiler.engines.base import Engine, Package, ProcessSpec, TrainOptions
from profiler.sweep.grid import validate
from tests.conftest import need

pytestmark = pytest.mark.integration


class SoloTorchEngine(Engine):
    """One torch worker per cell, no gradient exchange: a plugin's smallest form."""

    name = "torch-solo"
    description = "PyTorch on one device, no exchange (a test plugin)"
    framework = "torch"
    sync_modes = ("sync",)
    models = ("lenet-mlp",)
    packages = (Package("torch", "torch"),)

    def comm(self, cell: CellConfig) -> str:
        return "local"

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        return [ProcessSpec("worker", 0, nodes[0], self.train_argv(cell, cell_dir, options),
                            env={"OMP_NUM_THREADS": "1"})]


@pytest.fixture
def solo(monkeypatch):
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    monkeypatch.setitem(ENGINES, SoloTorchEngine.name, SoloTorchEngine())  # the one line


def test_a_registered_engine_runs_a_sweep(solo, tmp_path):
    from profiler.sweep.sweep import SweepSettings, run_sweep

    cell = validate(CellConfig(engine="torch-solo", model="lenet-mlp", layers=None,
                               devices=1, batch=32, max_samples=320))
    outcome = run_sweep(SweepSettings(cells=[cell], out_dir=tmp_path / "s",
                                      interval_s=None, val_samples=200), progress=False)
    record = outcome.records[0]
    assert record["status"] == "ok", record.get("reason")
    assert record["engine"] == "torch-solo"
    assert record["samples_per_s"] > 0 and 0 <= record["val_accuracy"] <= 1
    meta = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert "torch" in meta["versions"]  # from the plugin's packages


def test_its_rules_come_from_its_declaration(solo):
    from profiler.errors import ConfigError

    with pytest.raises(ConfigError, match="torch-solo"):
        validate(CellConfig(engine="torch-solo", model="lenet-mlp", layers=None,
                            devices=1, batch=32, sync="async"))


def test_the_cli_runs_it(solo, tmp_path):
    from profiler.cli import cli

    result = CliRunner().invoke(cli, [
        "run", "--engine", "torch-solo", "--model", "lenet-mlp", "--batch", "32",
        "--max-samples", "320", "--val-samples", "200", "--no-agent",
        "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    rows = (tmp_path / "cli" / "results.csv").read_text().splitlines()
    assert len(rows) == 2 and "torch-solo" in rows[1]
