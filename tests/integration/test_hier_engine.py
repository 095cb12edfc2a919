"""Hierarchical inference for real: ``hier`` cells through the cell runner on the local
cluster, every end device a ``workloads.train`` worker and every edge and cloud node a
``workloads.hier.serve`` server over loopback TCP, each tier's network trained first
(into a cache of this module's own); and the engine's bad inputs through the CLI."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from profiler.cluster.local import LocalCluster
from profiler.engines import get_engine
from profiler.engines.base import TrainOptions
from profiler.report.record_check import record_problem
from profiler.sweep.grid import CellConfig, validate
from profiler.sweep.runner import run_cell
from tests.conftest import assert_one_line, need, no_children_left

pytestmark = pytest.mark.integration
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
TEST_SAMPLES, BATCH, END_DEVICES = 400, 50, 2
DELAY_S = 0.3


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    old = os.environ.get("EDGEPROF_HIER_CACHE")
    os.environ["EDGEPROF_HIER_CACHE"] = str(tmp_path_factory.mktemp("hier-cache"))
    yield
    if old is None:
        os.environ.pop("EDGEPROF_HIER_CACHE")
    else:
        os.environ["EDGEPROF_HIER_CACHE"] = old


def _run(tmp_path, timeout_s=300, status="ok", **params):
    settings = {"scheme": "end-cloud", "exit_threshold": 0.5, "privacy": "off",
                "tiers": f"end={END_DEVICES},edge=1,cloud=1",
                "tier_models": "edge=lenet-cnn,cloud=lenet-example", "tier_delay": "0",
                **params}
    cell = validate(CellConfig(engine="hier", model="lenet-mlp", layers=None, devices=4,
                               batch=BATCH, max_samples=1000, dataset="fashion-mnist",
                               engine_params=tuple(settings.items())))
    engine = get_engine("hier")
    rec = run_cell(cell, LocalCluster(4), engine, tmp_path / cell.cell_id,
                   TrainOptions(val_samples=TEST_SAMPLES), sweep_id="t", timeout_s=timeout_s,
                   monitor_interval_s=None)
    assert rec["status"] == status, rec["reason"]
    assert no_children_left() == []
    return rec


def _consistent(rec) -> None:
    assert record_problem(rec) is None  # what the report refuses a sweep for
    [section] = get_engine("hier").report_sections([rec])
    assert len(section.rows) == 1 and len(section.rows[0][1]) == len(section.headings)
    assert sum(rec["hier_share"].values()) == pytest.approx(1, abs=1e-3)
    values = [rec["hier_end_accuracy"], rec["hier_coarse_accuracy"],
              *rec["hier_exit_coarse_accuracy"].values(),
              *(rec["hier_exit_fine_accuracy"] or {}).values()]
    assert all(0 <= v <= 1 for v in values), values
    # Trained networks, not chance (4 coarse labels, 10 fine ones).
    assert rec["hier_end_accuracy"] > 0.5 and rec["hier_coarse_accuracy"] > 0.5
    assert rec["hier_completion_s"] > 0
    assert 0 < rec["hier_latency_p50_ms"] <= rec["hier_latency_p95_ms"]
    assert rec["hier_infer_ms_per_image"]["end"] > 0
    # Table 1's sizes, from the devices' own build of each tier's network.
    assert rec["hier_params_by_tier"]["end"] == 108996  # lenet-mlp on 4 coarse labels
    assert rec["hier_weights_mb_by_tier"]["end"] > 108996 * 4 / 1e6
    # The record's validation accuracy: device 0's final coarse answers (the report and
    # compare read it as any cell's).
    assert 0.5 < rec["val_accuracy"] <= 1 and rec["val_accuracy_per_epoch"] == [
        rec["val_accuracy"]]


def test_schemes_early_exit_and_end_cloud_and_the_delay(tmp_path):
    early = _run(tmp_path, scheme="early-exit")
    cloud = _run(tmp_path)
    delayed = _run(tmp_path, tier_delay=f"cloud={DELAY_S}")
    private = _run(tmp_path, privacy="on")
    for rec in (early, cloud, delayed, private):
        _consistent(rec)
    # Early exit: the confident samples stay on the device, the others go to the edge.
    assert early["hier_share"]["end"] > 0
    assert early["hier_share"]["edge"] + early["hier_share"]["cloud"] < 1
    # End-Cloud: every sample answered by the cloud with a fine label, better than chance.
    assert cloud["hier_share"] == {"end": 0.0, "edge": 0.0, "cloud": 1.0}
    assert cloud["hier_fine_accuracy"] > 0.3 and cloud["hier_cloud_share"] == 1.0
    # Bytes: every raw 28x28 image goes up under End-Cloud, a few under early exit.
    sent_all = sum(cloud["hier_bytes_per_sample"].values())
    assert sent_all >= 28 * 28
    assert sum(early["hier_bytes_per_sample"].values()) < sent_all
    # The privacy module: the cloud network's first convolution (20 maps of 24x24) runs
    # on the device and its float32 features go up instead of the image; the answers
    # are the same network's, so the same.
    assert private["hier_bytes_per_sample"]["end-cloud"] >= 20 * 24 * 24 * 4
    assert private["hier_fine_accuracy"] == pytest.approx(cloud["hier_fine_accuracy"],
                                                          abs=2 / TEST_SAMPLES)
    assert private["hier_privacy_ms_per_image"] > 0 and cloud["hier_privacy_ms_per_image"] is None
    # The delay: every round trip to the cloud holds it back, so every sample sent up
    # waits at least that long, and each device's batches one after another.
    assert delayed["hier_latency_p50_ms"] >= DELAY_S * 1e3
    # The link as the device saw it, the networks' time out: the delay, held back once
    # a round trip (half each way), and a transfer far shorter than it.
    assert DELAY_S * 1e3 <= delayed["hier_round_trip_ms_by_link"]["end-cloud"] < 2 * DELAY_S * 1e3
    batches_per_device = TEST_SAMPLES // END_DEVICES // BATCH
    assert delayed["hier_completion_s"] >= batches_per_device * DELAY_S


def test_the_privacy_module_on_an_edge_node_between_device_and_cloud(tmp_path):
    """Zhang's Table 4, second row: the devices send raw images to the edge node, which
    runs the cloud network's first convolution and sends only its features on; the
    cloud answers every sample."""
    rec = _run(tmp_path, privacy="edge")
    _consistent(rec)
    sent = rec["hier_bytes_per_sample"]
    assert 28 * 28 <= sent["end-edge"] < 2 * 28 * 28  # the image and the framing
    assert sent["edge-cloud"] >= 20 * 24 * 24 * 4  # 20 float32 maps of 24x24
    assert "end-cloud" not in sent  # no image goes to the cloud
    assert rec["hier_share"] == {"end": 0.0, "edge": 0.0, "cloud": 1.0}
    assert rec["hier_fine_accuracy"] > 0.3 and rec["hier_privacy_ms_per_image"] > 0


def test_devices_that_fail_with_and_without_a_way_to_survive_it(tmp_path):
    """Zhang's Table 5 in small: 4 end devices, the last fails after half its batches.
    Monitoring hands its other batches to the others and the job finishes; with no
    method it cannot, says so in one line and stops at its time limit, nothing left."""
    settings = {"scheme": "end", "tiers": "end=4", "fail_devices": 1}
    monitored = _run(tmp_path, recovery="monitor", **settings)
    assert monitored["hier_answered_share"] == 1.0
    assert monitored["hier_batches_moved"] == TEST_SAMPLES // BATCH // 4 // 2
    assert monitored["hier_transfer_timeouts_s"] == 0
    stuck = _run(tmp_path, timeout_s=15, status="timeout", recovery="none", **settings)
    assert stuck["hier_answered_share"] < 1
    log = (tmp_path / stuck["cell_id"]).rglob("worker-0.log")
    assert any("the job cannot finish" in p.read_text() for p in log)


@pytest.mark.parametrize("args, words", [
    (["--scheme", "end-edge", "--tiers", "end=3,cloud=1"], ["end-edge", "edge tier"]),
    (["--scheme", "early-exit", "--exit-threshold", "1.5"],
     ["--exit-threshold 1.5", "0-ln(4) = 1.386", "nats"]),
    (["--model", "resnet"], ["resnet", "hier"]),
    (["--scheme", "end", "--tiers", "end=2,cloud=2", "--fail-devices", "2", "--recovery",
      "monitor"], ["more failures", "--fail-devices 1"]),
])
def test_bad_hierarchies_are_one_line(tmp_path, args, words):
    argv = ["sweep", "--engine", "hier", "--model", "lenet-mlp", "--devices", "4",
            "--cluster", "local", "--out", str(tmp_path / "out"), *args]
    done = subprocess.run(EDGEPROF + argv, capture_output=True, text=True, timeout=120)
    assert_one_line(done, *words)


MEMORY_PROFILES = """\
profiles:
  hm-end: {link_mbit: 100, memory_mb: 512, cpu_cores: 0.5, tier: end}
  hm-cloud: {link_mbit: 1000, memory_mb: 150, cpu_cores: 0.5, tier: cloud}
mixes:
  hm-mix:
    nodes: [{profile: hm-end, count: 2}, {profile: hm-cloud}]
"""


@pytest.mark.timeout(120)
def test_a_network_its_tier_s_node_cannot_hold_is_one_line(tmp_path, monkeypatch):
    """An emulated cloud node of 150 MB (its profile's memory, the cgroup's limit) cannot
    hold the cloud's network in a torch process (about 206 MB): the sweep says so in one
    line once its cluster is open, before any cell or sweep folder (exit 2)."""
    from profiler.cluster import emulated
    from tests.conftest import need_binary, need_root

    need_root()
    for binary in emulated.REQUIRED_BINARIES:
        need_binary(binary)
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(MEMORY_PROFILES)
    monkeypatch.setenv("EDGEPROF_PROFILES", str(profiles))
    emulated.down()  # this instance's own leftovers
    emulated.up(3, "hm-mix")
    try:
        done = subprocess.run(
            EDGEPROF + ["sweep", "--cluster", "emulated", "--engine", "hier", "--model",
                        "lenet-mlp", "--devices", "3", "--scheme", "end-cloud", "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=90)
    finally:
        emulated.down()
    assert_one_line(done, "--tier-models cloud=lenet-example does not fit the cloud tier's "
                    "node n2 (150 MB)", "a batch of 32", "smaller network")
    assert not (tmp_path / "out").exists()
