"""Tiers of a hierarchy in the node profiles (``tier:``), links between tiers in mixes
(``links:``), the nodes' tiers, the relay's link model and the status lines."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from profiler.cluster import relay
from profiler.cluster.base import TIERS, Cluster, Node, TierLink, link_key, nodes_by_tier
from profiler.cluster.emulated import status_lines
from profiler.cluster.profiles import PACKAGED_PROFILES, load_catalog
from profiler.errors import ConfigError
from tests.conftest import assert_one_line

TIERED = """\
profiles:
  e: {link_mbit: 50, memory_mb: 512, cpu_cores: 0.1, tier: end}
  g: {link_mbit: 1000, memory_mb: 4096, cpu_cores: 0.5, tier: edge}
  c: {link_mbit: 1000, memory_mb: 8192, cpu_cores: 1, tier: cloud}
  plain: {link_mbit: 100, memory_mb: 1024, cpu_cores: 0.3}
mixes:
  h:
    nodes: [{profile: e, count: 2}, {profile: g}, {profile: c}]
    links:
      end-edge: {delay_ms: 200}
      cloud-end: {delay_ms: 400, mbit: 20}
"""


def _catalog(tmp_path, text: str):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return load_catalog([PACKAGED_PROFILES, path]), path


def test_packaged_hierarchy_is_zhangs_halved_with_his_delays():
    catalog = load_catalog([PACKAGED_PROFILES])
    tiers = [p.tier for p in catalog.node_profiles("ddnn-small", 7)]
    assert tiers == ["end"] * 4 + ["edge"] * 2 + ["cloud"]
    assert [p.tier for p in catalog.node_profiles("ddnn", 13)].count("end") == 8
    # An exchange (there and back) costs Zhang's 0.5 s to the edge and 1 s to the cloud.
    links = catalog.tier_links("ddnn-small")
    assert 2 * links["end-edge"].delay_ms == 500 and 2 * links["end-cloud"].delay_ms == 1000
    assert links["end-edge"].delay_ms + links["edge-cloud"].delay_ms == \
        links["end-cloud"].delay_ms
    assert catalog.tier_links("ddnn-small-wan")["end-cloud"].mbit == 20
    assert catalog.profiles["pi4"].tier is None and catalog.tier_links("pi4") == {}


def test_tiers_and_links_are_read_in_canonical_order(tmp_path):
    catalog, _ = _catalog(tmp_path, TIERED)
    assert [p.tier for p in catalog.node_profiles("h", 4)] == ["end", "end", "edge", "cloud"]
    assert catalog.tier_links("h") == {"end-edge": TierLink(200.0),
                                       "end-cloud": TierLink(400.0, 20.0)}
    assert catalog.profiles["plain"].tier is None
    assert link_key("cloud", "edge") == "edge-cloud" and TIERS[0] == "end"
    # A profile written back (calibration does) keeps its tier.
    assert catalog.profiles["e"].as_spec()["tier"] == "end"
    assert TierLink(5, 10).as_spec() == {"delay_ms": 5, "mbit": 10}


@pytest.mark.parametrize("change, message", [
    (("tier: end}", "tier: fog}"), "tier 'fog' is not a tier: give tier: end, edge, cloud"),
    (("end-edge: {delay_ms: 200}", "end-fog: {delay_ms: 200}"), "is not two tiers"),
    (("end-edge: {delay_ms: 200}", "end-end: {delay_ms: 200}"), "is not two tiers"),
    (("end-edge: {delay_ms: 200}", "end-edge: {mbit: 2}"), "needs delay_ms"),
    (("end-edge: {delay_ms: 200}", "end-edge: {delay_ms: 2, jitter_ms: 1}"), "nothing else"),
    (("end-edge: {delay_ms: 200}", "end-edge: {delay_ms: -1}"), "0 <= delay_ms"),
    (("end-edge: {delay_ms: 200}", "end-edge: {delay_ms: .nan}"), "0 <= delay_ms"),
    (("end-edge: {delay_ms: 200}", "end-edge: {delay_ms: soon}"), "must be numbers"),
    (("end-edge: {delay_ms: 200}", "end-edge: {delay_ms: 1" + "0" * 400 + "}"),
     "must be numbers"),
    (("mbit: 20}", "mbit: 0}"), "mbit > 0"),
    (("end-edge: {delay_ms: 200}", "edge-end: {delay_ms: 200}\n      end-edge: {delay_ms: 1}"),
     "given twice"),
    (("{profile: c}]", "{profile: plain}]"), "joins tier cloud, which no node of the mix"),
    (("    links:\n", "    links: [end-edge]\n    x:\n"), "links must be a mapping"),
])
def test_bad_tiers_and_links_name_the_file_and_the_fix(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message) as raised:
        _catalog(tmp_path, TIERED.replace(*change))
    assert str(tmp_path / "p.yaml") in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_bad_tier_is_one_line_and_exit_2_from_the_cli(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(TIERED.replace("tier: end}", "tier: fog}"))
    done = subprocess.run([sys.executable, "-m", "profiler.cli", "cluster", "profiles"],
                          capture_output=True, text=True,
                          env={**os.environ, "EDGEPROF_PROFILES": str(path)})
    assert_one_line(done, str(path), "tier 'fog'", "give tier: end, edge, cloud")


def test_nodes_carry_their_tier_and_group_by_it():
    nodes = [Node("n0", tier="end"), Node("n1", tier="edge"), Node("n2", tier="end"),
             Node("n3")]
    groups = nodes_by_tier(nodes)
    assert [n.name for n in groups["end"]] == ["n0", "n2"]
    assert [n.name for n in groups[None]] == ["n3"]
    # A provider with real networks dials the target itself and emulates no link.
    assert Cluster().link_address(nodes[0], Node("x", address="10.0.0.9"), 80) == (
        "10.0.0.9", 80)
    assert Cluster().tier_links() == {}


def test_the_wire_queues_a_burst_at_its_rate_then_adds_the_delay():
    wire = relay.Wire(delay_s=0.5, mbit=8)  # 1 MB/s
    assert wire.due(10.0, 1000) == pytest.approx(10.501)
    # Sent at once behind it: waits for the first to leave the wire.
    assert wire.due(10.0, 1000) == pytest.approx(10.502)
    # After the wire went idle: only its own time and the delay.
    assert wire.due(20.0, 2000) == pytest.approx(20.502)
    assert relay.Wire(0.25, None).due(3.0, 10**9) == 3.25


def test_the_relay_delays_each_direction_on_loopback():
    """The relay's own loop, here on loopback: an echo through a 50 ms route takes
    at least 100 ms (50 each way), and a route asked twice is the same listener."""
    async def main():
        async def echo(reader, writer):
            while data := await reader.read(100):
                writer.write(data)
                await writer.drain()
            writer.close()
            await writer.wait_closed()
        target = await asyncio.start_server(echo, "127.0.0.1", 0)
        to = target.sockets[0].getsockname()[:2]
        routes = relay.Relay("127.0.0.1")
        request = {"to": list(to), "delay_ms": 50, "mbit": None}
        port = (await routes.route(request))["port"]
        assert (await routes.route(request))["port"] == port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        began = loop.time()
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        took = loop.time() - began
        writer.close()
        await writer.wait_closed()
        # The close crosses the relay (50 ms each way) before every end is closed.
        await asyncio.sleep(0.3)
        for server in (target, *routes.servers):
            server.close()
            await server.wait_closed()
        return took
    took = asyncio.run(main())
    assert took >= 0.1


def test_status_lines_show_each_nodes_tier_and_the_links():
    node = dict(name="n0", address="10.213.4.1", profile="pizero2w", tier="end",
                link_mbit=36, cpu_cores=0.06, memory_mb=512, processes=0, cpu_used_s=0,
                mem_used_mb=0, oom_kills=0, rx_bytes=0, tx_bytes=0)
    info = dict(up=True, instance=4, profile="ddnn-small", host_cores=2, cpu_scale=0.25,
                cgroup_version=1, host_address="10.213.4.254",
                nodes=[node, {**node, "name": "n1", "tier": None}],
                links={"end-edge": {"delay_ms": 250}, "end-cloud": {"delay_ms": 20,
                                                                    "mbit": 20}})
    lines = status_lines(info)
    assert " tier " in lines[1]
    assert " end " in lines[2] and " - " in lines[3]
    assert "link end-cloud: 20 ms one way, 20 Mbit" in lines[4]
    assert "link end-edge: 250 ms one way (" in lines[5]


def _inventory(tier_vars: dict) -> dict:
    return {"master": {"hosts": ["m"]}, "workers": {"hosts": ["w1", "w2"]},
            "_meta": {"hostvars": {name: {"ansible_host": f"10.0.0.{i}", **tier_vars.get(
                name, {})} for i, name in enumerate(("m", "w1", "w2"), 1)}}}


def test_an_inventory_host_var_gives_a_real_node_its_tier():
    from profiler.cluster.inventory.hosts import hosts_from_inventory
    hosts = hosts_from_inventory(_inventory({"m": {"edgeprof_tier": "cloud"},
                                             "w1": {"edgeprof_tier": "end"}}), "inv.ini")
    assert [h.node().tier for h in hosts] == ["cloud", "end", None]
    with pytest.raises(ConfigError, match="host w2: edgeprof_tier 'fog' is not a tier: "
                                          "give one of end, edge, cloud"):
        hosts_from_inventory(_inventory({"w2": {"edgeprof_tier": "fog"}}), "inv.ini")


def test_the_relay_process_starts_serves_routes_and_stops(tmp_path):
    """The relay as ``cluster up`` starts it (here on loopback, without root): a route
    to a listener, the bytes through it, then ``stop_relay`` leaves nothing behind."""
    import socket
    import time

    from profiler.cluster import links
    from profiler.errors import ClusterError

    with socket.create_server(("127.0.0.1", 0)) as target:
        pid = links.start_relay(tmp_path, "127.0.0.1")
        try:
            assert links.relay_running(tmp_path)
            port = links.route(tmp_path, target.getsockname()[:2], TierLink(30.0))
            assert links.route(tmp_path, target.getsockname()[:2], TierLink(30.0)) == port
            began = time.monotonic()
            with socket.create_connection(("127.0.0.1", port)) as client:
                client.sendall(b"hello")
                peer, _ = target.accept()
                with peer:
                    peer.settimeout(10)
                    assert peer.recv(5) == b"hello"
            assert time.monotonic() - began >= 0.03
        finally:
            assert links.stop_relay(tmp_path) == f"links relay (pid {pid})"
    assert not links.relay_running(tmp_path) and not links.pid_path(tmp_path).exists()
    assert links.stop_relay(tmp_path) is None  # nothing to stop: nothing said
    with pytest.raises(ClusterError, match="does not answer"):
        links.route(tmp_path, ("127.0.0.1", 1), TierLink(1.0))
