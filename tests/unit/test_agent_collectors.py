"""Collectors as plugins: a new one is one class and one line, and the docs follow the data.

- A collector defined here, registered in one line, is built by a real ``Sampler`` and
  its points land in the spool.
- Every field a real sampler writes on this machine is described in the collectors'
  ``FIELDS`` (and nothing described is of a measurement nobody writes).
- docs/metrics.md's tables are the ones ``profiler.agent.schema`` makes from the data.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from profiler.agent import collectors, schema
from profiler.agent.sampler import AgentConfig, Sampler
from profiler.agent.spool_reader import read_points

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


class Entropy(collectors.Collector):
    """The kernel's entropy estimate: a collector as a user would add one."""

    FIELDS = (collectors.Field("entropy", "avail_bits", "bits", "entropy the pool holds"),)

    def __init__(self):
        self.path = Path("/proc/sys/kernel/random/entropy_avail")
        self.ticks = 0

    def collect(self):
        self.ticks += 1
        return [("entropy", {}, {"avail_bits": int(self.path.read_text()),
                                 "tick": self.ticks})]


class Missing(collectors.Collector):
    """Hardware this machine lacks: built never, said once."""

    def __init__(self):
        raise collectors.Unavailable("a flux capacitor")


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(collectors.base, "REGISTRY", list(collectors.REGISTRY))
    return collectors.base.REGISTRY


def _sample(tmp_path: Path, ticks: int = 3) -> tuple[Sampler, list]:
    sampler = Sampler(AgentConfig(node="n1", spool_dir=tmp_path / "spool", interval_s=0.1,
                                  interfaces=["lo"]))
    for _ in range(ticks):
        sampler.tick()
    sampler.spool.close()
    # The agent's own tags (node, host) are in each segment's header, put back here.
    return sampler, [point._replace(tags={**base, **point.tags})
                     for base, point in read_points(tmp_path / "spool")]


def test_a_collector_added_in_one_line_writes_its_points(tmp_path, registered, caplog):
    collectors.register(Entropy)
    collectors.register(Missing)
    with caplog.at_level(logging.INFO):
        sampler, points = _sample(tmp_path)
    entropy = [p for p in points if p.measurement == "entropy"]
    assert [p.fields["tick"] for p in entropy] == [1, 2, 3]
    assert all(p.fields["avail_bits"] >= 0 and p.tags["node"] == "n1" for p in entropy)
    # The collectors already there still write (they come first: registration order).
    assert {"cpu", "mem", "net", "agent"} <= {p.measurement for p in points}
    assert points.index(entropy[0]) > min(i for i, p in enumerate(points)
                                          if p.measurement == "cpu")
    said = [r.getMessage() for r in caplog.records if "flux capacitor" in r.getMessage()]
    assert len(said) == 1 and not any(isinstance(c, Missing) for c in sampler.collectors)


def test_every_field_written_is_described(tmp_path):
    _, points = _sample(tmp_path)
    described = {(f.measurement, f.name) for f in schema.fields()}
    written = {(p.measurement, name) for p in points for name in p.fields}
    assert written and written <= described, sorted(written - described)
    measurements = {measurement for measurement, _ in described}
    assert {p.measurement for p in points} <= measurements


def test_the_docs_table_is_generated_from_the_fields():
    doc = schema.documented(DOC.read_text())
    assert doc, f"{DOC} has lost its {schema.BEGIN} marker"
    assert doc == schema.markdown(), (
        "docs/metrics.md's fields differ from the collectors' FIELDS: paste the output of "
        "`python -m profiler.agent.schema` between its markers")
    for field in schema.fields():
        assert f"| `{field.measurement}` | `{field.name}` |" in doc


def test_cpu_freq_reads_each_policy_file_every_tick(tmp_path):
    """Where the kernel has cpufreq (a Pi), every tick reads each policy's current clock."""
    from profiler.agent.collectors.cpu_freq import CpuFreq

    files = [tmp_path / "policy0", tmp_path / "policy1"]
    for path, khz in zip(files, (600000, 1200000)):
        path.write_text(f"{khz}\n")
    freq = CpuFreq(policy_files=[str(p) for p in files])
    assert freq.collect() == [("cpu_freq", {}, {"freq_mhz": 900.0})]
    files[0].write_text("1200000\n")  # the first core's clock came back up
    assert freq.collect() == [("cpu_freq", {}, {"freq_mhz": 1200.0})]


def test_cpu_freq_without_cpufreq_reads_proc_cpuinfo_every_10_s(monkeypatch):
    """No cpufreq in sysfs (VMs): /proc/cpuinfo, the dearest read, at most every 10 s;
    the last reading is repeated in between."""
    import time
    import types

    from profiler.agent.collectors import cpu_freq

    readings = iter([2000.0, 1500.0])
    calls = []

    def fake_cpu_freq():
        calls.append(1)
        return types.SimpleNamespace(current=next(readings))

    clock = [100.0]
    monkeypatch.setattr(cpu_freq.psutil, "cpu_freq", fake_cpu_freq)
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    freq = cpu_freq.CpuFreq(policy_files=[])  # its check's reading serves the first ticks
    ticks = []
    for _ in range(9):  # nine 1 s ticks: no new reading
        clock[0] += 1.0
        ticks.append(freq.collect()[0][2]["freq_mhz"])
    assert len(calls) == 1 and ticks == [2000.0] * 9
    clock[0] += 1.0  # 10 s after the reading
    assert freq.collect() == [("cpu_freq", {}, {"freq_mhz": 1500.0})] and len(calls) == 2
