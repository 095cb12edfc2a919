"""``--swarm-links`` without a Swarm: the option read and refused, and the routing:
``link_address`` naming a relay port in the target's task, and the target's first task
starting that relay (tests/integration/test_swarm_tier_links.py measures the delay on a
real Swarm)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from profiler.cluster import cluster_settings
from profiler.errors import ConfigError
from tests.conftest import need

LINKS = '{"end-edge": {"delay_ms": 250}, "end-cloud": {"delay_ms": 500, "mbit": 20}}'


def test_the_option_is_a_mix_s_links_and_bad_ones_are_one_line():
    settings = cluster_settings("swarm", swarm_links=LINKS)
    assert settings.swarm_links == {"end-cloud": {"delay_ms": 500.0, "mbit": 20.0},
                                    "end-edge": {"delay_ms": 250.0}}
    assert settings.identity()["swarm_links"] == settings.swarm_links
    assert cluster_settings("swarm").swarm_links == {}
    for text, problem in (("{end-edge", "not JSON"), ('{"end-fog": {"delay_ms": 1}}',
                                                       "is not two tiers"),
                          ('{"end-edge": {"delay_ms": -1}}', "need 0 <= delay_ms"),
                          ("[1]", "links must be a mapping")):
        with pytest.raises(ConfigError, match=problem) as raised:
            cluster_settings("swarm", swarm_links=text)
        assert "\n" not in str(raised.value) and "--swarm-links" in str(raised.value)
    with pytest.raises(ConfigError, match="is a setting of --cluster swarm"):
        cluster_settings("local", swarm_links=LINKS)


def test_a_linked_target_is_dialled_at_its_task_s_relay_which_its_first_task_starts(
        tmp_path, monkeypatch):
    need("the Docker SDK for Python", importlib.util.find_spec("docker") is not None)
    from profiler.cluster.relay import parse_route
    from profiler.cluster.swarm.cluster import SwarmCluster, TaskSettings
    from profiler.cluster.swarm.engine import SwarmNode
    from profiler.cluster.swarm.links import RELAY_FIRST_PORT, parse_swarm_links

    monkeypatch.setattr("profiler.cluster.swarm.cluster.remove_left_behind",
                        lambda *_: None)
    settings = TaskSettings(None, "edgeprof:dev", "/opt/py", 1400, 64, "profile", (),
                            parse_swarm_links(LINKS))
    cluster = SwarmCluster(settings, [
        SwarmNode(f"id{i}", f"n{i}", "pi4", f"10.0.0.{i}", "worker", tier=tier)
        for i, tier in enumerate(("end", "end", "edge", "cloud"))])
    end, other_end, edge, cloud = cluster.nodes()
    assert set(cluster.tier_links()) == {"end-edge", "end-cloud"}
    assert cluster.link_address(end, edge, 7000) == ("n2", RELAY_FIRST_PORT)
    assert cluster.link_address(other_end, edge, 7000) == ("n2", RELAY_FIRST_PORT)
    assert cluster.link_address(end, edge, 7001) == ("n2", RELAY_FIRST_PORT + 1)
    assert cluster.link_address(end, cloud, 7000) == ("n3", RELAY_FIRST_PORT)
    # One tier, and tiers the option does not link: directly.
    assert cluster.link_address(end, other_end, 7000) == ("n1", 7000)
    assert cluster.link_address(edge, cloud, 7000) == ("n3", 7000)

    cell_dir = tmp_path / "sweep" / "cells" / "c1" / "attempt-1"
    log = cell_dir / "logs" / "s.log"
    argv = [sys.executable, "-m", "workloads.serve"]

    def command(node, alias):
        spec = cluster.service_spec(node, argv, {}, log, cell_dir, "net", alias, "s", True)
        return spec["task_template"]["ContainerSpec"]["Command"]

    wrapped = command(edge, "n2")  # the first task on the target: what link_address dials
    assert wrapped[-3:] == ["/opt/py", "-m", "workloads.serve"]
    relay = wrapped[wrapped.index(str(log.with_name("relay-n2.log"))) + 1]
    assert relay.startswith("/opt/py -m profiler.cluster.relay --host 0.0.0.0 ")
    routes = [parse_route(a) for a in relay.split()[6::2]]
    assert routes == [
        {"listen": RELAY_FIRST_PORT, "to": ["n2", 7000], "delay_ms": 250.0,
         "mbit": None},
        {"listen": RELAY_FIRST_PORT + 1, "to": ["n2", 7001], "delay_ms": 250.0,
         "mbit": None}]
    assert "relay" not in " ".join(command(edge, "n2-s1"))  # not dialled: no relay
    assert "relay" not in " ".join(command(other_end, "n1"))  # no route to it
