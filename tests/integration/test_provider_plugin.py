"""A node provider added by one class, its settings and one registration line.

``BoxCluster`` is a provider of its own, defined here and nowhere else: its nodes are
processes on this machine named ``box0``, ``box1``, ... (loopback, like the local
cluster, but a different provider as far as the sweep can tell). Registered in
``profiler.cluster.PROVIDERS`` by one line (the fixture), it runs real sweeps (torch's
DDP over Gloo, two nodes) through the Python API and through ``edgeprof run
--cluster box`` without any other module knowing its name.
"""

from __future__ import annotations

import csv
import importlib.util
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Mapping, Sequence

import pytest
from click.testing import CliRunner

from profiler.cell import CellConfig
from profiler.cluster import PROVIDERS, cluster_settings
from profiler.cluster.base import Cluster, ClusterSettings, Node, NodeScope, popen_in_group
from profiler.errors import ConfigError
from profiler.sweep.grid import validate
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


@dataclass
class BoxSettings(ClusterSettings):
    """``--cluster box``: no options of its own."""

    name = "box"
    help = "local processes named box0, box1, ..."
    opened: list = None  # the clusters opened, for the test to look at

    @classmethod
    def cluster_type(cls) -> type[Cluster]:
        return BoxCluster

    def open(self, nodes_needed: int, cells: Sequence = ()) -> ContextManager[Cluster]:
        cluster = BoxCluster(nodes_needed)
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
        cluster_settings("box").check([CellConfig(**CELL, devices=1, straggler="0.5")])
