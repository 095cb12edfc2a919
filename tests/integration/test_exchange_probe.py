"""The exchange check for real: the probe between two emulated nodes of pi3b-park2019.

First at the profile's own link, where the step's exchange must take what the 100 Mbit
link predicts (measured on this host: 1.00-1.15 x at k 1 and 2, tolerance x/÷1.25), and
is recorded; then at the quota a host about twice as fast calibrates a Pi 3B to, where
the links' 9000-byte frames must carry a step in a sixth of 1500-byte frames' packets
(issue 47: at 1500 bytes the kernel's packet work outgrew such a quota, 1.43-1.90 x the
link; the time is bench_link_frames.py's to measure); then on a cluster whose links were shaped at a
quarter of the rate the profile says (the cluster of the check's name is up already: the
check takes it as it is), where the exchange takes about 4 x and the check must catch
it: ``refuse`` in one line, ``recalibrate`` with a warning and the record.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiler.calibrate.check import check_links, with_quota
from profiler.cell import CellConfig
from profiler.errors import ConfigError
from profiler.report.build import profile_check_said
from tests.conftest import need_binary, need_root

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
PROFILE = "pi3b-park2019"
TWO = [CellConfig(model="lenet-mlp", layers=None, batch=64, devices=2, placement="colocated")]


@pytest.fixture
def no_cluster():
    """No emulated cluster of this instance before or after: the check brings up its own."""
    need_root()
    from profiler.cluster import emulated
    list(map(need_binary, emulated.REQUIRED_BINARIES))
    emulated.down()  # an idle one another test left
    yield emulated
    emulated.down()


def test_the_check_measures_a_two_node_exchange_at_the_links_rate(no_cluster):
    said = []
    [check] = check_links(PROFILE, TWO, "refuse", 1.0, said.append)
    print(check.line())
    assert check.within, check.line()
    assert check.rounds >= 5 and check.bytes_per_step == 4 * 109386
    # what the wire predicts is most of it: one message costs under a tenth of a round
    assert check.per_message_ms < check.wire_ms / 10
    assert said and said[0].startswith("ok: ")
    record = check.as_record()
    assert record["check"] == "exchange" and record["measured_ms"] > 0
    assert "lenet-mlp's exchange" in profile_check_said([record])
    assert not no_cluster.STATE_FILE.exists()  # the check took its cluster down


# A third of this host's LeNet-MLP quota (0.0611 cores, packaged), half the 0.0405 cores
# a host 1.8 x as fast re-calibrated it to.
FAST_HOST_CORES = 0.02
ROUNDS = 10


def test_a_fast_host_s_small_quota_pays_for_jumbo_frames_not_ethernet_s(
        no_cluster, tmp_path, monkeypatch):
    """At a fast host's quota the kernel's packet work of 1500-byte frames outgrew the
    node's CPU (a round took an extra CFS period: 1.43-2.14 x the wire at 0.02 cores);
    the emulated links' 9000-byte frames keep it inside (1.00-1.01 x beside two busy
    loops, benchmarks/bench_link_frames.py). That time is the benchmark's to measure: in
    the whole suite's load both frame sizes took 1.43 x in one CI run. What makes it hold
    is checked here, where no load moves it: the probe's step crosses the node's link in
    a sixth of the packets, each of which the node's quota pays for. The probe runs at
    the fast host's quota at both frame sizes (``netns.LINK_MTU`` patched to 1500 for the
    first cluster), and the worker node's own counters are compared."""
    from profiler.calibrate.exchange import probe_exchange, step_bytes
    from profiler.cluster import netns, profiled_provider
    from profiler.cluster.base import GridNeeds
    from profiler.cluster.profiles import load_catalog

    profile = with_quota(load_catalog().profiles[PROFILE], "lenet-mlp", 1, FAST_HOST_CORES)
    assert profile.cpu_cores_for("lenet-mlp", 1) == FAST_HOST_CORES
    size = step_bytes("lenet-mlp", None)
    packets = {}
    for mtu in (netns.ETHERNET_MTU, netns.LINK_MTU):
        monkeypatch.setattr(netns, "LINK_MTU", mtu)  # read as the nodes' links are made
        settings = profiled_provider()(profile=replace(profile, name=f"{PROFILE}-frames"))
        with settings.open(GridNeeds(nodes=2)) as cluster:
            worker = cluster.nodes()[1]
            before = netns.interface_counters(worker.scope.netns)
            probe_exchange(cluster, "lenet-mlp", 1.0, size, profile.link_mbit,
                           tmp_path / str(mtu), rounds=ROUNDS)
            after = netns.interface_counters(worker.scope.netns)
        moved = {key: after[key] - before[key] for key in after}
        print(mtu, moved)
        # every round's bytes went out and came back through this node's link
        assert moved["tx_bytes"] >= ROUNDS * size and moved["rx_bytes"] >= ROUNDS * size
        packets[mtu] = moved["tx_packets"] + moved["rx_packets"]
    # 8948- against 1448-byte segments: 6.2 x as many at 1500 (5.5 x with the ACKs here);
    # 3 leaves room for however a loaded host's delayed ACKs fall, and 1 would fail it
    assert packets[1500] >= 3 * packets[9000], packets


def test_a_link_slower_than_the_profile_says_is_caught(no_cluster):
    from profiler.cluster.profiles import load_catalog

    profile = load_catalog().profiles[PROFILE]
    # The check's own cluster name, with links at a quarter of the profile's rate.
    no_cluster.up(2, replace(profile, name=f"{PROFILE}-exchange",
                             link_mbit=profile.link_mbit / 4))
    with pytest.raises(ConfigError, match=r"lenet-mlp's exchange .* x the 70 ms its 100 "
                                          r"Mbit link predicts.*not the profile's"):
        check_links(PROFILE, TWO, "refuse", 1.0, lambda line: None)
    said = []
    [check] = check_links(PROFILE, TWO, "recalibrate", 1.0, said.append)
    print(check.line())
    assert not check.within and check.ratio > 2 and check.action == "warned"
    assert any("cannot be re-calibrated" in line for line in said)
    assert check.as_record()["within"] is False
