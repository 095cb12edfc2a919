"""The emulated links' frames and rate (``cluster.netns``): 9000-byte frames whose tbf
rate gives TCP's payload a 1500-byte Ethernet's pace, and a bucket that holds a frame.

Why jumbo frames (issue 47): the kernel's packet work is charged to the sending node's
CPU quota; at a fast host's quota 1500-byte frames outgrew it (the integration test
``test_exchange_probe`` measures the exchange at such a quota).
"""

from __future__ import annotations

import pytest

from profiler.cluster import netns


def _payload_mbit(rate_mbit: float, mtu: int) -> float:
    """TCP's payload a link of ``rate_mbit`` (tbf's count: Ethernet header on) carries."""
    payload = mtu - netns.TCP_IP_HEADER_BYTES
    return rate_mbit * payload / (mtu + netns.ETHERNET_HEADER_BYTES)


@pytest.mark.parametrize("link_mbit", [1, 100, 1000])
def test_jumbo_frames_carry_the_payload_of_a_1500_byte_ethernet(link_mbit):
    rate = netns.tbf_rate_mbit(link_mbit, netns.LINK_MTU)
    assert rate < link_mbit  # fewer header bytes: a lower rate for the same payload
    assert _payload_mbit(rate, netns.LINK_MTU) == pytest.approx(
        _payload_mbit(link_mbit, netns.ETHERNET_MTU))
    assert netns.tbf_rate_mbit(link_mbit, netns.ETHERNET_MTU) == link_mbit
    # 1448 of 1514 bytes is payload at 1500: a Pi's 100 Mbit carries 95.6 Mbit of it
    assert _payload_mbit(100, 1500) == pytest.approx(95.64, abs=0.01)


@pytest.mark.parametrize("link_mbit, mtu", [(1, 9000), (10, 9000), (100, 9000), (1, 1500)])
def test_the_bucket_holds_two_of_the_largest_frames(link_mbit, mtu):
    argv = netns.tbf_argv("eth0", link_mbit, mtu=mtu)
    burst = int(argv[argv.index("burst") + 1])
    # tbf drops a frame larger than its bucket: a slow link must still pass a jumbo one
    assert burst >= 2 * (mtu + netns.ETHERNET_HEADER_BYTES)
    assert argv[argv.index("rate") + 1] == f"{link_mbit * 1000}kbit"
