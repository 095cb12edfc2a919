"""A node provider added by one class, its settings and one registration line.

``BoxCluster`` is a provider of its own, defined here and nowhere else: its nodes are
processes on this machine named ``box0``, ``box1``, ... (loopback, like the local
cluster, but a different provider as far as the sweep can tell), and it has an option
of its own, ``--rack`` (part of the sweep's identity, as a kubeconfig or an image would
be). Registered in ``profiler.cluster.PROVIDERS`` by one line (the fixture), it runs
real sweeps (torch's DDP over Gloo) through the Python API and through ``edgeprof run``
and ``edgeprof sweep --cluster box --rack R``, which resumes, and refuses a bad value or
another rack on ``--resume`` with one line, without any other module knowing its name.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Mapping, Sequence

import pytest
from click.testing import CliRunner

from profiler.cell import CellConfig
from profiler.cluster import PROVIDERS, cluster_settings
from profiler.cluster.base import (Cluster, ClusterSettings, GridNeeds, Node, NodeScope,
                                   ProviderOption, popen_in_group)
from profiler.errors import ConfigError
from profiler.sweep.grid import validate
from profiler.sweep.needs import grid_needs
from tests.conftest import need


class BoxCluster(Cluster):
    """``count`` processes-as-nodes on this machine, named ``box0`` ... ``boxN``."""

    name = "box"

    def __init__(self, count: int):
        self.count = count
        self.started: list[tuple[str, str | None]] = []  # (node, role) of every start

    def nodes(self) -> list[Node]:
        return [Node(f"box{i}", scope=NodeScope(interfaces=("lo",)))
                for i in range(self.count)]

    def start(self, node: Node, argv: Sequence[str], env: Mapping[str, str],
              log_path: Path, *, confine: bool = True,
              role: str | None = None) -> subprocess.Popen:
        self.started.append((node.name, role))
        return popen_in_group(argv, env, log_path)


def _rack(text: str) -> str:
    if not text.isalnum():
        raise ConfigError(f"--rack {text!r}: give a rack name of letters and digits, "
                          "e.g. --rack r1")
    return text


@dataclass
class BoxSettings(ClusterSettings):
    """``--cluster box``, with an option of its own: ``--rack``."""

    rack: str = "r0"
    opened: list = None  # the clusters opened, for the test to look at

    name = "box"
    help = "local processes named box0, box1, ..."
    options = (ProviderOption("rack", default="r0", parse=_rack, identity=True,
                              metavar="NAME", help="The rack the box nodes stand in."),)

    @classmethod
    def cluster_type(cls) -> type[Cluster]:
        return BoxCluster

    def open(self, needs: GridNeeds) -> ContextManager[Cluster]:
        cluster = BoxCluster(needs.nodes)
        if self.opened is not None:
            self.opened.append(cluster)
        return self.closing(cluster)


@pytest.fixture
def box(monkeypatch):
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    monkeypatch.setitem(PROVIDERS, BoxSettings.name, BoxSettings)  # the one registration


CELL = dict(engine="torch-ddp", model="lenet-mlp", layers=None, batch=32, max_samples=256,
            dataset="synthetic")


def test_a_provider_registered_in_one_line_runs_a_sweep(box, tmp_path):
    from profiler.sweep.preflight import preflight
    from profiler.sweep.sweep import SweepSettings, run_sweep

    provider = cluster_settings("box")
    provider.opened = []
    cell = validate(CellConfig(**CELL, devices=2))
    settings = SweepSettings(cells=[cell], out_dir=tmp_path / "s", cluster=provider,
                             interval_s=0.5, val_samples=64)
    preflight(settings)
    record = run_sweep(settings, progress=False).records[0]
    assert record["status"] == "ok", record["reason"]
    assert record["cluster"] == "box" and record["devices"] == 2
    (cluster,) = provider.opened
    # Both workers and an agent beside each ran on the box nodes, through its start().
    assert sorted(cluster.started, key=str) == [("box0", "worker"), ("box0", None),
                                                ("box1", "worker"), ("box1", None)]
    attempt = tmp_path / "s" / "cells" / cell.cell_id / "attempt-1"
    assert {p.name for p in (attempt / "metrics").iterdir()} == {"box0", "box1"}
    assert record["cpu_percent_mean"] is not None  # the agents sampled the box nodes


def test_the_cli_takes_the_provider_by_name_and_refuses_options_it_does_not_take(
        box, tmp_path):
    from profiler.cli import cli

    out = tmp_path / "run"
    args = ["run", "--cluster", "box", "--engine", "torch-ddp", "--model", "lenet-mlp",
            "--devices", "1", "--max-samples", "256", "--dataset", "synthetic",
            "--val-samples", "64", "--no-agent", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "on the box cluster" in result.output
    with open(out / "results.csv", newline="") as f:
        (row,) = csv.DictReader(f)
    assert (row["cluster"], row["status"]) == ("box", "ok")
    # An option of another provider is refused by that provider's own line.
    refused = CliRunner().invoke(cli, [*args[:-1], str(tmp_path / "other"), "--speedup", "2"])
    assert refused.exit_code == 2
    assert "--speedup 2 applies to the emulated cluster only" in refused.output
    # It cannot slow a node: --straggler is refused before anything runs.
    with pytest.raises(ConfigError, match="the box cluster's nodes share this host's"):
        cluster_settings("box").check(grid_needs([CellConfig(**CELL, devices=1,
                                                             straggler="0.5")]))


def test_its_own_option_is_taken_recorded_resumed_and_refused_in_one_line(box, tmp_path):
    from profiler.cli import cli

    out = tmp_path / "sweep"
    args = ["sweep", "--cluster", "box", "--engine", "torch-ddp", "--model", "lenet-mlp",
            "--devices", "1", "--max-samples", "256", "--dataset", "synthetic",
            "--val-samples", "64", "--no-agent", "--out", str(out)]
    # A bad value: its own parse refuses it while the command line is read.
    bad = CliRunner().invoke(cli, [*args, "--rack", "r 1"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        "edgeprof: error: --rack 'r 1': give a rack name of letters and digits, "
        "e.g. --rack r1"]
    assert not out.exists()
    # Another provider's cluster refuses it (and says whose it is).
    other = CliRunner().invoke(cli, [*args[:2], "local", *args[3:], "--rack", "r1"])
    assert other.exit_code == 2 and len(other.output.strip().splitlines()) == 1
    assert "--rack r1 is a setting of --cluster box" in other.output
    # Taken: the sweep runs and keeps it in its identity.
    done = CliRunner().invoke(cli, [*args, "--rack", "r1"])
    assert done.exit_code == 0, done.output
    assert json.loads((out / "sweep.json").read_text())["identity"]["rack"] == "r1"
    # Resumed with another rack: refused in one line; with the same: nothing left to run.
    moved = CliRunner().invoke(cli, [*args, "--rack", "r2", "--resume"])
    assert moved.exit_code == 2 and moved.output.strip().splitlines() == [
        "edgeprof: error: --resume: --rack r2 differs from the sweep's r1: resume with "
        "--rack r1, or start a new sweep with another --out"]
    again = CliRunner().invoke(cli, [*args, "--rack", "r1", "--resume"])
    assert again.exit_code == 0, again.output
    assert "1 cell(s) already done, skipped" in again.output
