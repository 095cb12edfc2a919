"""The thrash watch: a node at its memory limit that keeps faulting pages in is out of memory.

A clock and readings given by the test (the real readings come from a node's cgroup,
exercised by tests/integration/test_emulated_cluster.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.cluster.base import MemoryPressure
from profiler.sweep.thrashing import ThrashWatch


@dataclass
class FakeNode:
    name: str


class Script:
    """Per node, a reading per second: (used MB, major faults per second since last)."""

    def __init__(self, per_node: dict[str, list[tuple[float, float]]], limit_mb: float = 1024):
        self.per_node, self.limit_mb = per_node, limit_mb
        self.t = 0.0
        self.faults = {name: 0.0 for name in per_node}

    def clock(self) -> float:
        return self.t

    def read(self, node) -> MemoryPressure | None:
        steps = self.per_node.get(node.name)
        if steps is None:
            return None
        used, _ = steps[min(int(self.t), len(steps) - 1)]
        return MemoryPressure(used, self.limit_mb, int(self.faults[node.name]))

    def advance(self) -> None:
        for name, steps in self.per_node.items():
            _, rate = steps[min(int(self.t), len(steps) - 1)]
            self.faults[name] += rate
        self.t += 1.0


def run(script: Script, nodes: list[str], seconds: int, **kw) -> tuple[str | None, float]:
    watch = ThrashWatch([FakeNode(n) for n in nodes], script.read, clock=script.clock, **kw)
    for _ in range(seconds):
        reason = watch.check()
        if reason:
            return reason, script.t
        script.advance()
    return None, script.t


def test_a_node_thrashing_for_the_whole_window_is_named_with_its_limit_and_rate():
    script = Script({"n0": [(500, 0)] * 5 + [(1020, 900)] * 60, "n1": [(300, 0)]})
    reason, at = run(script, ["n0", "n1"], 60, thrash_s=20)
    assert reason is not None and reason.startswith("n0 thrashed at its 1024 MB memory limit")
    assert "900 major page faults/s" in reason
    assert 24 <= at <= 27  # thrashing from second 5, judged after 20 s of it


def test_grazing_the_limit_without_faulting_is_not_thrashing():
    # ResNet-80 x 128 on a 1 GB node: 97% of the limit, a few faults (above the threshold).
    script = Script({"n0": [(1000, 20)] * 120})
    assert run(script, ["n0"], 120)[0] is None


def test_faulting_far_from_the_limit_is_not_thrashing():
    # Start-up reads MXNet's library in: many faults, little memory.
    script = Script({"n0": [(200, 5000)] * 60})
    assert run(script, ["n0"], 60)[0] is None


def test_a_pause_in_the_faults_starts_the_window_again():
    burst = [(1020, 900)] * 15 + [(1020, 0)] * 2
    script = Script({"n0": burst * 4})
    assert run(script, ["n0"], len(burst) * 4, thrash_s=20)[0] is None


def test_nodes_without_a_reading_are_not_watched():
    script = Script({})
    assert run(script, ["n0", "n1"], 30, thrash_s=5)[0] is None


def test_readings_are_taken_once_per_interval_however_often_it_is_called():
    calls = []

    def read(node):
        calls.append(node.name)
        return MemoryPressure(100, 1024, 0)

    now = [0.0]
    watch = ThrashWatch([FakeNode("n0")], read, every_s=1.0, clock=lambda: now[0])
    for step in range(100):  # 5 s of 50 ms polls
        now[0] = step * 0.05
        watch.check()
    assert len(calls) == 5
