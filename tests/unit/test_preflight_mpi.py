"""Who needs Open MPI for ``--horovod-ops mpi``: the machine that runs ``mpirun``. On
the local and emulated clusters that is this one (no ``mpirun`` here: one line, before
anything runs); on nodes with an install of their own (the inventory's) it is node 0,
which the hosts' own check judges, so this controller needs none."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pytest

import profiler.engines.horovod as horovod
from profiler.cluster.base import ClusterSettings, GridNeeds
from profiler.errors import ClusterError
from profiler.sweep.grid import CellConfig, validate
from profiler.sweep.preflight import preflight
from profiler.sweep.sweep import SweepSettings
from tests.conftest import need


@dataclass
class _Boards(ClusterSettings):
    """Nodes with an install of their own, whose hosts' check has passed."""

    name = "boards"
    own_install = True

    def check(self, needs: GridNeeds) -> None:
        pass


@dataclass
class _Here(_Boards):
    own_install = False


@pytest.mark.parametrize("settings, refused", [(_Here(), True), (_Boards(), False)])
def test_mpirun_is_needed_where_it_runs(settings, refused, tmp_path, monkeypatch):
    need("Horovod built with MXNet", importlib.util.find_spec("horovod.mxnet") is not None)
    monkeypatch.setattr(horovod.shutil, "which", lambda name: None)  # no mpirun here
    monkeypatch.setattr(horovod, "mpi_built", lambda: True)
    cell = validate(CellConfig(engine="horovod", model="lenet-mlp", layers=None, devices=2,
                               batch=32, max_samples=640,
                               engine_params=(("horovod_ops", "mpi"),)))
    sweep = SweepSettings(cells=[cell], out_dir=tmp_path / "out", cluster=settings)
    if refused:
        with pytest.raises(ClusterError, match="needs Open MPI's mpirun"):
            preflight(sweep)
    else:
        preflight(sweep)
    assert not (tmp_path / "out").exists()
