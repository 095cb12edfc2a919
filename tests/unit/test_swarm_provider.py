"""``--cluster swarm`` without a Swarm: its options, refusals and the service a process
becomes (tests/integration/test_swarm_cluster.py runs it on a real Swarm)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from profiler.cluster import cluster_settings
from profiler.errors import ConfigError
from tests.conftest import need


def test_its_options_are_refused_on_another_provider():
    with pytest.raises(ConfigError, match="--swarm-image x:1 is a setting of --cluster swarm"):
        cluster_settings("local", swarm_image="x:1")


def test_a_process_becomes_a_one_task_service_pinned_to_its_node(tmp_path, monkeypatch):
    need("the Docker SDK for Python", importlib.util.find_spec("docker") is not None)
    from profiler.cluster.cgroups import cfs_quota_us
    from profiler.cluster.swarm.cluster import SwarmCluster, TaskSettings
    from profiler.cluster.swarm.engine import SwarmNode

    monkeypatch.setenv("PYTHONPATH", "relative/dir")
    monkeypatch.setattr("profiler.cluster.swarm.cluster.remove_left_behind",
                        lambda *_: None)
    settings = TaskSettings(None, "edgeprof:dev", "/opt/py", 1400, 64, "profile", ("/data",))
    cluster = SwarmCluster(settings, [SwarmNode("id0", "n0", "pi4", "10.0.0.1", "manager")])
    (node,) = cluster.nodes()
    assert node.address == "n0" and node.scope.interfaces == ("eth0",)
    cell_dir = tmp_path / "sweep" / "cells" / "c1" / "attempt-1"
    spec = cluster.service_spec(
        node, [sys.executable, "-m", "workloads.serve"],
        {"DMLC_ROLE": "scheduler", "DMLC_NODE_HOST": "n0"}, cell_dir / "logs" / "s.log",
        cell_dir, "edgeprof-net", "n0", "scheduler", True)
    task = spec["task_template"]
    container = task["ContainerSpec"]
    assert task["Placement"]["Constraints"] == ["node.id==id0"]
    assert task["RestartPolicy"]["Condition"] == "none"
    (network,) = task["Networks"]
    assert (network["Target"], network["Aliases"]) == ("edgeprof-net", ["n0"])
    assert container["Command"][-3:] == ["/opt/py", "-m", "workloads.serve"]
    env = dict(item.split("=", 1) for item in container["Env"])
    assert "DMLC_NODE_HOST" not in env and env["DMLC_INTERFACE"] == "eth0"
    assert env["DMLC_USE_KUBERNETES"] == "1"
    assert env["PYTHONPATH"] == str(Path("relative/dir").resolve())
    mounts = {m["Target"]: m for m in container["Mounts"]}
    assert mounts["/dev/shm"]["TmpfsOptions"]["SizeBytes"] == 64 * 1024 * 1024
    assert mounts[str(tmp_path / "sweep")]["ReadOnly"] is False
    assert mounts["/data"]["ReadOnly"] is True
    # The task's CPU limit never exceeds what an emulated node of the profile holds.
    quota_us, period_us = cfs_quota_us(node.cpu_cores)
    assert task["Resources"]["Limits"]["NanoCPUs"] / 1e9 <= quota_us / period_us
    assert task["Resources"]["Limits"]["MemoryBytes"] == 4096 * 1024 * 1024
    assert spec["labels"]["edgeprof.cell"] == str(cell_dir)
    assert spec["labels"]["edgeprof.sweep"] == "sweep"


def test_the_agent_is_a_service_reading_the_node_s_proc_and_cgroups(tmp_path, monkeypatch):
    """The metrics agent's service: on its node, no network, no limit, the node's /proc
    and cgroup tree read-only, told where the cell's containers are named."""
    need("the Docker SDK for Python", importlib.util.find_spec("docker") is not None)
    from profiler.cluster.swarm import cluster as swarm_cluster
    from profiler.cluster.swarm.cluster import SwarmCluster, TaskSettings
    from profiler.cluster.swarm.engine import SwarmNode

    monkeypatch.setattr(swarm_cluster, "remove_left_behind", lambda *_: None)
    posted = []
    monkeypatch.setattr(SwarmCluster, "_task_process",
                        lambda self, node, service, log, register=None:
                        posted.append((service, register)))
    settings = TaskSettings(None, "edgeprof:dev", "/opt/py", 1400, 64, "profile", ())
    cluster = SwarmCluster(settings, [SwarmNode("id1", "n1", "pi4", "10.0.0.2", "worker")])
    (node,) = cluster.nodes()
    assert node.scope.own_meters is False  # a profile's quota: an emulated board
    cell_dir = tmp_path / "sweep" / "cells" / "c1" / "attempt-1"
    argv = [sys.executable, "-m", "profiler.agent", "--node", "n1", "--spool",
            str(cell_dir / "metrics" / "n1")]
    cluster.start(node, argv, {}, cell_dir / "logs" / "agent-n1.log", confine=False)
    ((service, register),) = posted
    task = service["task_template"]
    container = task["ContainerSpec"]
    assert register is None and not task.get("Networks") and not task.get("Resources")
    assert task["Placement"]["Constraints"] == ["node.id==id1"]
    mounts = {m["Target"]: m for m in container["Mounts"]}
    assert (mounts["/host/proc"]["Source"], mounts["/host/proc"]["ReadOnly"]) == ("/proc", True)
    assert mounts["/host/sys/fs/cgroup"]["ReadOnly"] is True
    assert mounts[str(tmp_path / "sweep")]["ReadOnly"] is False
    command = container["Command"]
    assert command[command.index("--containers") + 1] == str(cell_dir / "containers" / "n1")
    assert command[command.index("--proc-root") + 1] == "/host/proc"
    assert service["labels"]["edgeprof.role"] == "agent"
    # Real boards (no limit) read their own meters.
    bare = SwarmCluster(TaskSettings(None, "i", "/py", 1400, 64, "none", ()),
                        [SwarmNode("id1", "n1", "pi4", "10.0.0.2", "worker")])
    assert bare.nodes()[0].scope.own_meters is True


@pytest.mark.parametrize("host", ["manager:2375", "not a url", "ftp://manager", "tcp://"])
def test_a_manager_address_that_is_not_one_is_refused(host):
    from profiler.cluster.swarm import _host

    with pytest.raises(ConfigError, match=f"--swarm-host {host} is not the address of an "
                                          "Engine API.*tcp://HOST:2375"):
        _host(host)
    assert _host("ssh://pi@manager") == "ssh://pi@manager"


def test_an_mpi_launcher_s_rank_command_gets_the_image_s_python(tmp_path, monkeypatch):
    """``mpirun ... python -m workloads.mpi rank``: the rank's Python is the image's too."""
    need("the Docker SDK for Python", importlib.util.find_spec("docker") is not None)
    from profiler.cluster.swarm.cluster import SwarmCluster, TaskSettings
    from profiler.cluster.swarm.engine import SwarmNode

    monkeypatch.setattr("profiler.cluster.swarm.cluster.remove_left_behind",
                        lambda *_: None)
    settings = TaskSettings(None, "edgeprof:dev", "/opt/py", 1400, 64, "profile", ())
    cluster = SwarmCluster(settings, [SwarmNode("id0", "n0", "pi4", "10.0.0.1", "manager")])
    cell_dir = tmp_path / "sweep" / "cells" / "c1" / "attempt-1"
    spec = cluster.service_spec(
        cluster.nodes()[0], [sys.executable, "-m", "workloads.mpi", "launch", "n0,n1", "--",
                             "mpirun", "-np", "2", sys.executable, "-m", "workloads.mpi"],
        {}, cell_dir / "logs" / "l.log", cell_dir, "net", "n0", "launcher", True)
    command = spec["task_template"]["ContainerSpec"]["Command"]
    assert sys.executable not in command and command.count("/opt/py") == 2


def _api_node(node_id: str, name: str, **labels: str) -> dict:
    """A ready, active node as the Engine API lists it (``GET /nodes``)."""
    return {"ID": node_id, "Spec": {"Labels": {"edgeprof.node": name, **labels},
                                    "Availability": "active", "Role": "worker"},
            "Status": {"State": "ready", "Addr": "10.0.0.9"},
            "Description": {"Hostname": "h"}}


class _Api:
    """The node listing of a Swarm manager (the rest of the SDK client is not used)."""

    def __init__(self, nodes: list[dict]):
        self.api = self
        self._nodes = nodes

    def nodes(self) -> list[dict]:
        return self._nodes


def test_a_node_s_tier_is_its_label_else_its_profile_s_and_a_bad_one_is_refused(monkeypatch):
    need("the Docker SDK for Python", importlib.util.find_spec("docker") is not None)
    from profiler.cluster.swarm.cluster import SwarmCluster, TaskSettings
    from profiler.cluster.swarm.engine import TIER_LABEL, swarm_nodes

    monkeypatch.setattr("profiler.cluster.swarm.cluster.remove_left_behind",
                        lambda *_: None)
    listing = [_api_node("id0", "n0", **{"edgeprof.profile": "pi4", TIER_LABEL: "end"}),
               _api_node("id1", "n1", **{"edgeprof.profile": "pi5"}),   # pi5: tier edge
               _api_node("id2", "n2", **{"edgeprof.profile": "pi4"})]   # untiered
    nodes = swarm_nodes(_Api(listing), None)
    assert [n.tier for n in nodes] == ["end", None, None]
    settings = TaskSettings(None, "edgeprof:dev", "/opt/py", 1400, 64, "profile", ())
    cluster = SwarmCluster(settings, nodes)
    assert [n.tier for n in cluster.nodes()] == ["end", "edge", None]
    end, edge, _ = cluster.nodes()
    # No links on the Swarm: its overlay is the real network.
    assert cluster.link_address(end, edge, 7000) == (edge.address, 7000)
    bad = [_api_node("id3", "n3", **{"edgeprof.profile": "pi4", TIER_LABEL: "fog"})]
    with pytest.raises(ConfigError, match=r"Swarm node n3 \(id3\) has edgeprof.tier=fog, not "
                                          "a tier: `docker node update --label-add "
                                          "edgeprof.tier=end id3`") as raised:
        swarm_nodes(_Api(bad), None)
    assert "\n" not in str(raised.value)
