"""Delayed links between tiers on a real Swarm (``--swarm-links``): two emulated Pi 4
nodes labelled ``edgeprof.tier`` edge and end, a link probe's server in a task on the
edge node and its client in a task on the end device, dialling what ``link_address``
gave (the relay inside the server's task, ``swarm/links.py``), against the same
exchange dialled directly within the run.

The delay is a lower bound (the relay never forwards early); the upper bound is
generous (a loaded 2-core host delays the probe's own processes). The Swarm, the
development image and the leftover check are ``test_swarm_cluster``'s. Needs root,
dockerd, mmdebstrap (and a Debian mirror, once a session) and the Docker SDK.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from statistics import median

import pytest

from tests.conftest import ROOT, need, need_binary, need_root
from tests.integration.test_swarm_cluster import (IMAGE, dev_image_tar,  # noqa: F401
                                                  nothing_left)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
DELAY_MS = 150
SLACK_MS = 300  # what a loaded host may add to one exchange of small messages
PORT = 7300
TIERS = {"n0": "edge", "n1": "end"}
WAIT_S = 120


@pytest.fixture(scope="module")
def swarm(tmp_path_factory, dev_image_tar):  # noqa: F811
    from profiler.cluster import emulated
    from tests.support.swarm import swarm_on_emulated

    need_root()
    need("the Docker SDK for Python (scripts/setup.sh)",
         importlib.util.find_spec("docker") is not None)
    for binary in (*emulated.REQUIRED_BINARIES, "dockerd", "iptables"):
        need_binary(binary)
    labels = lambda name: {"edgeprof.profile": "pi4", "edgeprof.node": name,  # noqa: E731
                           "edgeprof.tier": TIERS[name]}
    with swarm_on_emulated(2, Path(tmp_path_factory.mktemp("swarm", numbered=True)),
                           dev_image_tar, IMAGE, labels=labels) as swarm:
        yield swarm


@pytest.fixture
def cluster(swarm):
    from profiler.cluster.swarm import SwarmSettings
    from profiler.cluster.swarm.links import parse_swarm_links
    from tests.support.swarm import dev_mounts

    settings = SwarmSettings(
        swarm_host=swarm.manager_url, swarm_image=IMAGE, swarm_python=sys.executable,
        swarm_mounts=tuple(dev_mounts(ROOT)),
        swarm_links=parse_swarm_links(json.dumps({"end-edge": {"delay_ms": DELAY_MS}})))
    from profiler.cluster.swarm.cluster import SwarmCluster, TaskSettings
    from profiler.cluster.swarm.engine import connect, swarm_nodes

    with connect(swarm.manager_url) as client:
        found = swarm_nodes(client, swarm.manager_url)
    cluster = SwarmCluster(TaskSettings(**{o.name: getattr(settings, o.name)
                                           for o in settings.options}), found)
    try:
        yield cluster
    finally:
        cluster.close()


def _wait_line(path: Path, word: str, process) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and process.poll() is None:
        if path.exists() and word in path.read_text(errors="replace").split():
            return
        time.sleep(0.1)
    raise AssertionError(f"no {word!r} in {path} (exit {process.poll()})")


def _ping(cluster, node, to: str, log: Path) -> dict:
    from profiler.cluster import link_probe

    process = cluster.start(node, [sys.executable, link_probe.__file__, "ping", "--count",
                                   "8", "--interval-s", "0.01", "--to", to], {}, log,
                            role="client")
    assert process.wait(timeout=WAIT_S) == 0, log.read_text(errors="replace")
    return json.loads(log.read_text().strip().splitlines()[-1])


def test_a_delayed_link_holds_through_the_relay_in_the_target_s_task(cluster, tmp_path):
    from profiler.cluster import link_probe

    nodes = {n.name: n for n in cluster.nodes()}
    edge, end = nodes["n0"], nodes["n1"]
    assert (edge.tier, end.tier) == ("edge", "end")
    assert cluster.tier_links()["end-edge"].delay_ms == DELAY_MS
    # Asked before the target's task starts, as an engine's plan asks it.
    host, port = cluster.link_address(end, edge, PORT)
    assert host == edge.address and port != PORT
    assert cluster.link_address(end, edge, PORT) == (host, port)  # the same route
    assert cluster.link_address(edge, edge, PORT) == (edge.address, PORT)

    cell_dir = tmp_path / "sweep" / "cells" / "c1" / "attempt-1"
    logs = cell_dir / "logs"
    logs.mkdir(parents=True)
    server = cluster.start(edge, [sys.executable, link_probe.__file__, "serve", "--port",
                                  str(PORT)], {}, logs / "server.log", role="server")
    try:
        _wait_line(logs / "server.log", "ready", server)
        _wait_line(logs / f"relay-{edge.name}.log", "ready", server)
        delayed = _ping(cluster, end, f"{host}:{port}", logs / "delayed.log")
        direct = _ping(cluster, end, f"{edge.address}:{PORT}", logs / "direct.log")
    finally:
        link_probe.stop(server)
        left = cluster.collect(cell_dir, list(nodes.values()))
    assert not left, left
    print(f"\nround trip through the relay: median {median(delayed['rtt_ms']):.1f} ms "
          f"(min {min(delayed['rtt_ms']):.1f}), direct {median(direct['rtt_ms']):.1f} ms")
    for way in ("up_ms", "down_ms"):
        assert min(delayed[way]) >= DELAY_MS, delayed
    assert min(delayed["rtt_ms"]) >= 2 * DELAY_MS, delayed
    assert median(delayed["rtt_ms"]) < 2 * DELAY_MS + SLACK_MS, delayed
    assert median(direct["rtt_ms"]) < median(delayed["rtt_ms"]) - DELAY_MS, direct


def test_the_hier_engine_s_device_reaches_the_edge_through_the_delayed_link(
        cluster, tmp_path, monkeypatch):
    """An End-Edge cell of ``--engine hier`` on the Swarm, tiers from the nodes' labels
    and no delay of its own (``--tier-delay 0``): its end device dials what
    ``link_address`` gave in the engine's plan, so every round trip to the edge pays the
    relay's delay both ways, as its own column measures."""
    from profiler.engines import get_engine
    from profiler.engines.base import TrainOptions
    from profiler.sweep.grid import CellConfig, validate
    from profiler.sweep.runner import run_cell

    monkeypatch.setenv("EDGEPROF_HIER_CACHE", str(tmp_path / "hier-cache"))
    settings = {"scheme": "end-edge", "exit_threshold": 0.5, "privacy": "off",
                "tiers": "end=1,edge=1", "tier_models": "edge=lenet-mlp", "tier_delay": "0"}
    cell = validate(CellConfig(engine="hier", model="lenet-mlp", layers=None, devices=2,
                               batch=50, max_samples=200, dataset="fashion-mnist",
                               engine_params=tuple(settings.items())))
    rec = run_cell(cell, cluster, get_engine("hier"), tmp_path / "sweep" / "cells" /
                   cell.cell_id, TrainOptions(val_samples=100), sweep_id="t",
                   timeout_s=300, monitor_interval_s=None)
    assert rec["status"] == "ok", rec["reason"]
    round_trips = rec["hier_round_trip_ms_by_link"]
    print(f"\nhier end-edge round trip: {round_trips['end-edge']:.1f} ms")
    assert round_trips["end-edge"] >= 2 * DELAY_MS, round_trips
    assert rec["hier_share"]["edge"] == pytest.approx(1), rec["hier_share"]
