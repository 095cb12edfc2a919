"""Tiers and delayed links on the emulated cluster, for real: a small hierarchy (2 end
devices, an edge, a cloud) brought up from a tiered mix, the nodes' tiers, and messages
across a link through the delaying relay (``Cluster.link_address``) against the same
exchange between two end devices, which talk directly.

The delay is a lower bound (the relay never forwards early); the upper bounds are
generous (a loaded 2-core host delays the probe's own processes) and the direct
exchange is compared within the run. Needs root, like every emulated-cluster test.
"""

from __future__ import annotations

import subprocess
import sys
from statistics import median

import pytest

from profiler.cluster import link_probe
from tests.conftest import need_binary, need_root

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
DELAY_MS = 200
# The end-edge link's own rate, well under the nodes' links, so that it is the limit.
LINK_MBIT = 20
# Above the delay, what a loaded host may add to one exchange of small messages.
SLACK_MS = 300
PROFILES = f"""\
profiles:
  tl-end: {{link_mbit: 100, memory_mb: 256, cpu_cores: 0.05, tier: end}}
  tl-edge: {{link_mbit: 1000, memory_mb: 256, cpu_cores: 0.05, tier: edge}}
  tl-cloud: {{link_mbit: 1000, memory_mb: 256, cpu_cores: 0.05, tier: cloud}}
mixes:
  tl-mix:
    nodes: [{{profile: tl-end, count: 2}}, {{profile: tl-edge}}, {{profile: tl-cloud}}]
    links:
      end-edge: {{delay_ms: {DELAY_MS // 2}, mbit: {LINK_MBIT}}}
      end-cloud: {{delay_ms: {DELAY_MS}}}
"""


@pytest.fixture(scope="module")
def hierarchy(tmp_path_factory):
    from profiler.cluster import emulated, links

    need_root()
    for binary in emulated.REQUIRED_BINARIES:
        need_binary(binary)
    path = tmp_path_factory.mktemp("profiles") / "profiles.yaml"
    path.write_text(PROFILES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEPROF_PROFILES", str(path))
        emulated.down()  # this instance's own leftovers
        cluster = emulated.up(4, "tl-mix")
        try:
            yield cluster
        finally:
            emulated.down()
        assert not links.relay_running(emulated.STATE_DIR)


def test_nodes_get_their_profiles_tiers_and_status_shows_them(hierarchy):
    assert [n.tier for n in hierarchy.nodes()] == ["end", "end", "edge", "cloud"]
    assert hierarchy.tier_links()["end-cloud"].delay_ms == DELAY_MS
    assert hierarchy.tier_links()["end-edge"].mbit == LINK_MBIT
    done = subprocess.run([sys.executable, "-m", "profiler.cli", "cluster", "status"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[2:]}
    assert [rows[f"n{i}"][3] for i in range(4)] == ["end", "end", "edge", "cloud"]
    assert f"link end-cloud: {DELAY_MS} ms one way" in done.stdout


def test_a_delayed_link_holds_each_direction_and_a_tier_talks_directly(hierarchy, tmp_path):
    end, other_end, _, cloud = hierarchy.nodes()
    servers = [link_probe.start_server(hierarchy, node, 7200, tmp_path / f"{node.name}.log")
               for node in (other_end, cloud)]
    try:
        host, port = hierarchy.link_address(end, cloud, 7200)
        assert (host, port) != (cloud.address, 7200)  # through the relay
        assert hierarchy.link_address(end, other_end, 7200) == (other_end.address, 7200)
        args = ["ping", "--count", "8", "--interval-s", "0.01", "--to"]
        delayed = link_probe.run_client(hierarchy, end, [*args, f"{host}:{port}"],
                                        tmp_path / "delayed.log")
        direct = link_probe.run_client(hierarchy, end, [*args, f"{other_end.address}:7200"],
                                       tmp_path / "direct.log")
    finally:
        for server in servers:
            link_probe.stop(server)
    for way in ("up_ms", "down_ms"):
        assert min(delayed[way]) >= DELAY_MS, delayed
        assert median(delayed[way]) < DELAY_MS + SLACK_MS, delayed
    assert min(delayed["rtt_ms"]) >= 2 * DELAY_MS
    assert median(delayed["rtt_ms"]) < 2 * DELAY_MS + SLACK_MS
    # Within the run: the same exchange inside one tier pays no link delay.
    assert median(direct["rtt_ms"]) < median(delayed["rtt_ms"]) - DELAY_MS


def test_a_rated_link_holds_its_rate(hierarchy, tmp_path):
    """About a second of the link's traffic: not faster than its rate (the nodes' own
    links would carry 100 Mbit; 1.2 x allows for the relay's loop stalling on a busy
    host as the first bytes arrive, which shortens the measured span) and not far
    below it."""
    end, _, edge, _ = hierarchy.nodes()
    server = link_probe.start_server(hierarchy, edge, 7201, tmp_path / "server.log")
    try:
        host, port = hierarchy.link_address(end, edge, 7201)
        size = LINK_MBIT * 1_000_000 // 8
        got = link_probe.run_client(hierarchy, end, ["bulk", "--to", f"{host}:{port}",
                                                     "--bytes", str(size)],
                                    tmp_path / "bulk.log")
    finally:
        link_probe.stop(server)
    assert 0.5 * LINK_MBIT < got["mbit"] <= 1.2 * LINK_MBIT, got


def test_the_hier_engine_s_devices_reach_the_cloud_through_the_delayed_link(
        hierarchy, tmp_path, monkeypatch):
    """An End-Cloud cell of ``--engine hier`` on the tiered mix, tiers from the nodes
    and no delay of its own (``--tier-delay 0``): its devices dial what
    ``link_address`` gives, so every round trip to the cloud pays the relay's delay
    both ways, as its own column measures."""
    from profiler.engines import get_engine
    from profiler.engines.base import TrainOptions
    from profiler.sweep.grid import CellConfig, validate
    from profiler.sweep.runner import run_cell

    monkeypatch.setenv("EDGEPROF_HIER_CACHE", str(tmp_path / "hier-cache"))
    settings = {"scheme": "end-cloud", "exit_threshold": 0.5, "privacy": "off",
                "tiers": "auto", "tier_models": "edge=lenet-mlp,cloud=lenet-mlp",
                "tier_delay": "0"}
    cell = validate(CellConfig(engine="hier", model="lenet-mlp", layers=None, devices=4,
                               batch=50, max_samples=300, dataset="fashion-mnist",
                               engine_params=tuple(settings.items())))
    rec = run_cell(cell, hierarchy, get_engine("hier"), tmp_path / cell.cell_id,
                   TrainOptions(val_samples=200), sweep_id="t", timeout_s=240,
                   monitor_interval_s=None)
    assert rec["status"] == "ok", rec["reason"]
    round_trips = rec["hier_round_trip_ms_by_link"]
    assert round_trips["end-cloud"] >= 2 * DELAY_MS, round_trips
    assert rec["hier_share"]["cloud"] == pytest.approx(1), rec["hier_share"]
