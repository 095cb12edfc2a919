"""The sampling loop survives bad samples: a failing ``vcgencmd``, a malformed pids file.

The failures are real: a ``vcgencmd`` script on PATH that fails or hangs (as on a Pi
whose firmware interface is busy), and pids files written with the wrong shape.
"""

import json
import logging
import os
import time
from pathlib import Path

import pytest

from profiler.agent import collectors as c
from profiler.agent.sampler import AgentConfig, Sampler
from profiler.agent.spool_reader import read_points


def _vcgencmd(tmp_path: Path, monkeypatch, body: str) -> Path:
    """Put a ``vcgencmd`` running ``body`` (sh) first on PATH; returns its call log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "vcgencmd-calls"
    script = bin_dir / "vcgencmd"
    script.write_text(f"#!/bin/sh\necho call >> {calls}\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # On a Pi the firmware's sysfs file would be read instead: point it away.
    monkeypatch.setattr(c.pi_throttling, "THROTTLED_SYSFS", tmp_path / "no-get_throttled")
    return calls


def _sampler(tmp_path: Path, pids_file: Path | None = None) -> Sampler:
    return Sampler(AgentConfig(node="n1", spool_dir=tmp_path / "spool", interval_s=0.1,
                               pids_file=pids_file, interfaces=["lo"]))


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_failing_vcgencmd_costs_its_collector_one_tick_and_one_warning(
        tmp_path, monkeypatch, caplog):
    calls = _vcgencmd(tmp_path, monkeypatch, "echo 'VCHI init failed' >&2; exit 1")
    sampler = _sampler(tmp_path)
    assert any(isinstance(x, c.PiThrottling) for x in sampler.collectors)
    with caplog.at_level(logging.WARNING):
        written = [sampler.tick() for _ in range(3)]
    sampler.spool.close()
    assert all(n > 0 for n in written)  # every other collector still sampled
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "PiThrottling" in warnings[0], warnings
    assert "CalledProcessError" in warnings[0]
    measurements = {p.measurement for _, p in read_points(tmp_path / "spool")}
    assert {"cpu", "mem", "net", "agent"} <= measurements and "throttle" not in measurements
    # A failed call is not retried on every tick (spawning costs more than a tick).
    assert len(calls.read_text().splitlines()) == 1


def test_hanging_vcgencmd_times_out_and_sampling_goes_on(tmp_path, monkeypatch, caplog):
    _vcgencmd(tmp_path, monkeypatch, "sleep 30")
    monkeypatch.setattr(c.PiThrottling, "VCGENCMD_TIMEOUT_S", 0.3)
    sampler = _sampler(tmp_path)
    with caplog.at_level(logging.WARNING):
        sampler.tick()
        started = time.monotonic()
        sampler.tick()  # within VCGENCMD_EVERY_S: no new spawn, no new wait
        second_tick_s = time.monotonic() - started
    sampler.spool.close()
    assert second_tick_s < 0.25
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "TimeoutExpired" in warnings[0]


def test_working_vcgencmd_gives_the_flags(tmp_path, monkeypatch):
    _vcgencmd(tmp_path, monkeypatch, "echo throttled=0x50005")
    sampler = _sampler(tmp_path)
    sampler.tick()
    sampler.spool.close()
    throttle = [p for _, p in read_points(tmp_path / "spool") if p.measurement == "throttle"]
    assert throttle[0].fields["flags"] == 0x50005
    assert throttle[0].fields["under_voltage"] is True
    assert throttle[0].fields["throttled_occurred"] is True


@pytest.mark.parametrize("content", ["[1]", '{"worker": "x"}', '{"worker": ["x"]}',
                                     '{"worker": [true]}', '"worker"', "{not json"])
def test_malformed_pids_file_means_no_roles_with_one_warning(tmp_path, caplog, content):
    pids = tmp_path / "pids.json"
    pids.write_text(content)
    sampler = _sampler(tmp_path, pids)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert sampler.tick() > 0
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and str(pids) in warnings[0], warnings
    # Rewritten correctly: picked up at once.
    pids.write_text(json.dumps({"worker": [os.getpid()]}))
    os.utime(pids, ns=(time.time_ns(), time.time_ns() + 10**9))  # a distinct mtime
    sampler.tick()
    sampler.spool.close()
    points = [p for _, p in read_points(tmp_path / "spool")]
    assert {p.tags["role"] for p in points if p.measurement == "cpu"} == {"none", "worker"}
    assert any(p.measurement == "proc" and p.tags["proc"] == "worker-0" for p in points)


def test_a_throttled_board_is_named_in_the_cell_summary(tmp_path, monkeypatch):
    """Two nodes' agents sample a Pi's throttling word and CPU frequency; the cell's
    summary names the node whose firmware throttled during the cell.

    No Raspberry Pi here: a ``vcgencmd`` script on PATH stands in for the firmware,
    answering ``get_throttled`` with the word a test file holds (throttled, then
    recovered, between two readings: only the sticky bit 18 still shows it).
    """
    from profiler.metrics.summary import summarize_cell

    word = tmp_path / "throttled-word"
    word.write_text("0x0")
    _vcgencmd(tmp_path, monkeypatch, f'echo "throttled=$(cat {word})"')
    monkeypatch.setattr(c.PiThrottling, "VCGENCMD_EVERY_S", 0.0)
    metrics = tmp_path / "cell" / "metrics"
    samplers = {name: Sampler(AgentConfig(node=name, spool_dir=metrics / name,
                                          interval_s=0.1, interfaces=["lo"]))
                for name in ("n1", "n2")}
    for sampler in samplers.values():
        sampler.tick()  # before the cell: the sticky bits' baseline
    time.sleep(0.05)
    t_start = time.time()
    time.sleep(0.05)
    word.write_text("0x40000")  # n1 was throttled since the last reading, and recovered
    samplers["n1"].tick()
    word.write_text("0x0")
    samplers["n2"].tick()
    t_end = time.time()
    for sampler in samplers.values():
        sampler.spool.close()
    row = summarize_cell(tmp_path / "cell", ["n1", "n2"], t_start, t_end)
    assert row["throttled_nodes"] == ["n1"]
    assert row["throttle_flags_by_node"] == {"n1": ["throttled"]}
    if any(isinstance(x, c.CpuFreq) for x in samplers["n1"].collectors):
        assert row["cpu_mhz_min"] > 0 and set(row["cpu_mhz_min_by_node"]) == {"n1", "n2"}
    # Nodes that report no throttling word at all (not Pis): unknown, not "none".
    monkeypatch.setenv("PATH", os.environ["PATH"].split(os.pathsep, 1)[1])
    plain = Sampler(AgentConfig(node="n3", spool_dir=tmp_path / "plain" / "metrics" / "n3",
                                interval_s=0.1, interfaces=["lo"]))
    assert not any(isinstance(x, c.PiThrottling) for x in plain.collectors)
    plain.tick()
    plain.spool.close()
    row = summarize_cell(tmp_path / "plain", ["n3"], t_start, time.time())
    assert row["throttled_nodes"] is None and row["throttle_flags_by_node"] is None


def test_ticks_within_one_millisecond_get_distinct_timestamps(tmp_path, monkeypatch):
    """The last sample on stop can follow a tick within the millisecond; InfluxDB keeps
    one point per series and timestamp, so the second would overwrite the first."""
    sampler = _sampler(tmp_path)
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0004)  # a clock that stands
    for _ in range(3):
        sampler.tick()
    sampler.spool.close()
    stamps = sorted({p.time_ms for _, p in read_points(tmp_path / "spool", ["agent"])})
    assert stamps == [1_800_000_000_000, 1_800_000_000_001, 1_800_000_000_002]
