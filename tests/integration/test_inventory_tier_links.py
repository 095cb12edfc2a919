"""Delayed links between tiers on real nodes over SSH (``edgeprof_links`` of an
inventory), for real: two emulated nodes serving sshd (``tests.support.sshd``, as in
test_inventory_cluster), an end device and a cloud node by their ``edgeprof_tier``, a
200 ms end-cloud link. ``link_address`` starts the links relay on the cloud host over
SSH; a probe on the end host dials it; after the cluster closes, or its controller is
killed, nothing of the relay is left on either host.

The delay is a lower bound (the relay never forwards early); the upper bound is
generous (a loaded 2-core host delays the probe's own processes) and the direct
exchange is compared within the run.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import psutil
import pytest

from profiler.cluster import link_probe
from profiler.cluster.base import TierLink
from tests.conftest import ROOT, sshd_nodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
DELAY_MS = 200
GONE_WITHIN_S = 15.0
RELAY_MARK = "profiler.cluster.relay"
SOCKETS = "/tmp/edgeprof-links-*.sock"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """n0 an end device (the master), n1 a cloud node, linked by a 200 ms delay."""
    work = tmp_path_factory.mktemp("ssh")
    for sshd in sshd_nodes(work, 2):
        tiers = {"n0": "end", "n1": "cloud"}
        host_vars = {n: {"edgeprof_workdir": str(work / f"remote-{n}"),
                         "edgeprof_python": sys.executable, "edgeprof_tier": tier}
                     for n, tier in tiers.items()}
        links = json.dumps({"end-cloud": {"delay_ms": DELAY_MS}})
        inventory = sshd.write_inventory(work / "inventory.ini",
                                         {"master": ["n0"], "workers": ["n1"]},
                                         host_vars=host_vars,
                                         group_vars_all={"edgeprof_links": links})
        yield {"inventory": inventory, "sshd": sshd}


def _relays_left(hosts) -> list[str]:
    return [line for line in hosts["sshd"].processes() if RELAY_MARK in line]


def _wait_gone(hosts) -> list[str]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := _relays_left(hosts)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_a_probe_through_link_address_pays_the_delay_both_ways(hosts, tmp_path):
    from profiler.cluster.inventory.cluster import InventoryCluster
    from profiler.cluster.inventory.hosts import read_inventory

    sockets_before = set(glob.glob(SOCKETS))
    cluster = InventoryCluster(read_inventory(hosts["inventory"]))
    # The runner's layout (<sweep>/cells/<id>/attempt-N/logs): the nodes' work folders.
    logs = tmp_path / "sweep" / "cells" / "probe" / "attempt-1" / "logs"
    try:
        end, cloud = cluster.nodes()
        assert (end.tier, cloud.tier) == ("end", "cloud")
        assert cluster.tier_links() == {"end-cloud": TierLink(DELAY_MS)}
        server = link_probe.start_server(cluster, cloud, 7300, logs / "server.log")
        try:
            host, port = cluster.link_address(end, cloud, 7300)
            assert host == cloud.address and port != 7300  # the relay, on the cloud host
            assert cluster.link_address(end, cloud, 7300) == (host, port)  # asked once
            assert cluster.link_address(cloud, cloud, 7300) == (cloud.address, 7300)
            assert [line for line in _relays_left(hosts) if line.startswith("n1 ")]
            args = ["ping", "--count", "8", "--interval-s", "0.01", "--to"]
            delayed = link_probe.run_client(cluster, end, [*args, f"{host}:{port}"],
                                            logs / "delayed.log")
            direct = link_probe.run_client(cluster, end, [*args, f"{cloud.address}:7300"],
                                           logs / "direct.log")
        finally:
            link_probe.stop(server)
    finally:
        cluster.close()
    rtt = delayed["rtt_ms"]
    assert min(rtt) >= 2 * DELAY_MS, delayed
    assert median(rtt) < 2 * 2 * DELAY_MS, delayed
    # Within the run: the same exchange without the link pays no delay.
    assert median(direct["rtt_ms"]) < median(rtt) - DELAY_MS, (direct, delayed)
    assert _wait_gone(hosts) == []
    assert set(glob.glob(SOCKETS)) == sockets_before  # the relay removed its socket


def test_a_relay_that_stopped_mid_sweep_is_named_with_the_fix(hosts):
    from profiler.cluster.inventory.cluster import InventoryCluster
    from profiler.cluster.inventory.hosts import read_inventory
    from profiler.errors import ClusterError

    sockets_before = set(glob.glob(SOCKETS))
    cluster = InventoryCluster(read_inventory(hosts["inventory"]))
    try:
        end, cloud = cluster.nodes()
        cluster.link_address(end, cloud, 7302)
        # The relay itself, not remote_exec above it (whose command names it too).
        (line,) = [line for line in _relays_left(hosts) if "remote_exec" not in line]
        os.kill(int(line.split()[1].rstrip(":")), signal.SIGKILL)  # the relay we started
        with pytest.raises(ClusterError, match="node n1: .* run the sweep again"):
            # Its ssh ends a moment later; before, its socket does not answer.
            cluster.link_address(end, cloud, 7303)
    finally:
        cluster.close()
    assert _wait_gone(hosts) == []
    # The killed relay could not remove its socket: closing the cluster did.
    assert set(glob.glob(SOCKETS)) == sockets_before


def test_cluster_status_shows_the_tiers_and_the_link(hosts):
    """Through Ansible's INI parser and the CLI, as a user checks the inventory."""
    done = subprocess.run([sys.executable, "-m", "profiler.cli", "cluster", "status",
                           "--inventory", str(hosts["inventory"])], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "tiers: n0=end n1=cloud" in done.stdout, done.stdout
    assert f"link end-cloud: {DELAY_MS} ms one way (through a relay" in done.stdout


_CONTROLLER = """
import sys, time
from profiler.cluster.inventory.cluster import InventoryCluster
from profiler.cluster.inventory.hosts import read_inventory
cluster = InventoryCluster(read_inventory(sys.argv[1]))
end, cloud = cluster.nodes()
print(cluster.link_address(end, cloud, 7301), cluster._connections.control_dir, flush=True)
time.sleep(600)
"""


def test_a_killed_controller_leaves_no_relay_behind(hosts, tmp_path):
    sockets_before = set(glob.glob(SOCKETS))
    controller = subprocess.Popen([sys.executable, "-c", _CONTROLLER, str(hosts["inventory"])],
                                  cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
    control_dir = None
    try:
        line = controller.stdout.readline()
        assert line, "the controller printed nothing"
        control_dir = line.split()[-1]
        assert _relays_left(hosts)
        controller.send_signal(signal.SIGKILL)
        controller.wait()
        assert _wait_gone(hosts) == []
        assert set(glob.glob(SOCKETS)) == sockets_before
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        controller.stdout.close()
        # A killed controller leaves its SSH masters for ControlPersist (connections.py):
        # this test's own are ended here, by pid.
        if control_dir:
            for proc in psutil.process_iter(["pid", "cmdline"]):
                if control_dir in " ".join(proc.info["cmdline"] or []):
                    proc.kill()
            Path(control_dir).exists() and subprocess.run(["rm", "-rf", control_dir])
