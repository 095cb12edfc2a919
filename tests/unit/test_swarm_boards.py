"""Emulated boards on Swarm hosts without a Swarm: the label's refusals, and a task whose
link cannot be shaped (tests/integration/test_swarm_hosts.py runs boards on two hosts)."""

from __future__ import annotations

import subprocess

import pytest

from profiler.cluster.swarm.boards import (NOT_SHAPED_STATUS, board_count, board_names,
                                           shaped_command)
from profiler.errors import ConfigError


def test_a_host_label_gives_its_boards_and_a_bad_one_is_refused():
    assert board_count({}, "n0", "abc") == 0  # a real board
    assert board_names("h1", board_count({"edgeprof.boards": "3"}, "h1", "x")) == [
        "h1-b0", "h1-b1", "h1-b2"]
    for bad in ("0", "lots", "-2", "251"):
        with pytest.raises(ConfigError, match=f"edgeprof.boards={bad}: give the number"):
            board_count({"edgeprof.boards": bad}, "h1", "0123456789abcdef")


def test_a_task_whose_link_cannot_be_shaped_ends_before_the_trainer(tmp_path):
    log = tmp_path / "worker-0.log"
    command = shaped_command(["/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', str(log),
                              "touch", str(tmp_path / "trainer-ran")], 100, 1400)
    # No tc on the PATH: an image without iproute2.
    done = subprocess.run(command, env={"PATH": str(tmp_path)})
    assert done.returncode == NOT_SHAPED_STATUS
    assert "cannot shape the emulated board's link (100 Mbit)" in log.read_text()
    assert not (tmp_path / "trainer-ran").exists()


@pytest.mark.parametrize("mtu", [1400, 8950])
def test_a_board_shapes_its_link_for_the_overlay_s_frames(mtu):
    """The bucket holds two of the overlay's frames (tbf drops a larger one), and the rate
    gives TCP's payload a 1500-byte Ethernet's pace, as the emulated links do."""
    from profiler.cluster.netns import ETHERNET_HEADER_BYTES, tbf_rate_mbit

    script = shaped_command(["/bin/sh", "-c", "true", "log"], 100, mtu)[2]
    tc = script.split(" >>")[0].split()
    burst = int(tc[tc.index("burst") + 1])
    assert burst >= 2 * (mtu + ETHERNET_HEADER_BYTES)
    assert tc[tc.index("rate") + 1] == f"{int(tbf_rate_mbit(100, mtu) * 1000)}kbit"
