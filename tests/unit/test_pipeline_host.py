"""The inventory check of ``torch-pipe`` hosts: torch before 2.10 (the Pi's 2.9.1) builds
no pipeline schedule with fewer micro-batches than stages, GPipe's included, so such
cells are refused in one line naming the host and the fix before anything runs."""

from __future__ import annotations

import pytest

from profiler import __version__
from profiler.cell import CellConfig
from profiler.cluster.inventory.hosts import Host
from profiler.cluster.inventory.probe import check_hosts
from profiler.engines.pipeline import few_microbatches_problem
from profiler.errors import ClusterError
from profiler.sweep.needs import grid_needs


def _cell(devices=2, microbatches=1, schedule="gpipe", replicas=1) -> CellConfig:
    return CellConfig(engine="torch-pipe", model="lenet-cnn", layers=None, devices=devices,
                      engine_params={"microbatches": microbatches, "schedule": schedule,
                                     "replicas": replicas, "split": "balanced"})


@pytest.mark.parametrize("version, cell, refused", [
    ("2.9.1", _cell(), True),
    ("2.9.1", _cell(microbatches=2), False),
    ("2.9.1", _cell(devices=4, microbatches=2, replicas=2), False),  # 2 stages each
    ("2.9.1", _cell(devices=4, microbatches=2), True),
    ("2.8.0", _cell(devices=4, microbatches=3, schedule="1f1b"), True),
    ("2.10.0", _cell(), False),
    ("2.13.0+cpu", _cell(), False),
    ("", _cell(), False),  # no version known: the cell's own failure says it
])
def test_few_microbatches_on_an_old_torch(version, cell, refused):
    problem = few_microbatches_problem(version, [cell])
    assert (problem is not None) == refused, problem
    if refused:
        stages = cell.devices // cell.param("replicas")
        assert f"give --microbatches {stages} or more" in problem and version in problem


def test_the_inventory_check_names_the_host_with_the_old_torch():
    hosts = [Host("pi0", "10.0.0.1"), Host("pi1", "10.0.0.2")]
    answers = {h.name: {"version": __version__,
                        "engines": {"torch-pipe": {"ok": True, "torch": "2.13.0"}}}
               for h in hosts}
    answers["pi1"]["engines"]["torch-pipe"]["torch"] = "2.9.1"
    with pytest.raises(ClusterError) as err:
        check_hosts(hosts, grid_needs([_cell(microbatches=4), _cell(microbatches=1)]),
                    answers)
    line = str(err.value)
    assert "\n" not in line and line.startswith("host pi1 cannot run --engine torch-pipe")
    assert "torch 2.9.1 runs a pipeline of 2 stages only with --microbatches 2" in line
    check_hosts(hosts, grid_needs([_cell(microbatches=4)]), answers)  # enough: no problem
