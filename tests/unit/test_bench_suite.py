"""benchmarks/bench_suite.py: where the suite's time goes, read from pytest's output."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_suite.py"
LOG = """\
........................................................................ [ 50%]
============================= slowest durations ==============================
384.17s setup    tests/integration/test_ansible_playbook.py::test_playbook_provisions_every_node
54.62s call     tests/integration/test_ansible_playbook.py::test_code_change_is_deployed
20.00s call     tests/integration/test_ansible_playbook.py::test_playbook_provisions_every_node
10.50s call     tests/faults/test_soak.py::test_three_minutes[a b]
0.50s teardown tests/faults/test_soak.py::test_three_minutes[a b]

(2475 durations < 0.005s hidden.  Use -vv to show these durations.)
1099 passed, 12 warnings in 300.00s (0:05:00)
"""


def _bench():
    spec = importlib.util.spec_from_file_location("bench_suite", PATH)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up there
    spec.loader.exec_module(bench)
    return bench


def test_a_runs_durations_are_summed_per_module_and_phase():
    suite = _bench().read_log(LOG)
    assert suite.wall_s == 300.0 and suite.outcome == "1099 passed, 12 warnings"
    playbook = suite.by_module["tests/integration/test_ansible_playbook.py"]
    assert playbook.seconds == pytest.approx(458.79) and len(playbook.tests) == 2
    # A parameter with a space is one test.
    assert suite.by_module["tests/faults/test_soak.py"].tests == {"test_three_minutes[a b]"}
    assert suite.by_phase == pytest.approx({"setup": 384.17, "call": 85.12,
                                            "teardown": 0.5})
    assert suite.setups == [(384.17, "tests/integration/test_ansible_playbook.py::"
                                     "test_playbook_provisions_every_node")]


def test_a_run_without_durations_or_its_end_is_refused():
    bench = _bench()
    with pytest.raises(ValueError, match="--durations=0"):
        bench.read_log("1099 passed in 3.00s\n")
    unfinished = LOG.rsplit("\n", 2)[0]  # killed before its last line
    with pytest.raises(ValueError, match="did not finish"):
        bench.read_log(unfinished)


def test_the_worker_count_is_the_command_lines_else_setup_cfgs(tmp_path):
    bench = _bench()
    cfg = tmp_path / "setup.cfg"
    cfg.write_text("[tool:pytest]\naddopts = -n 2 --dist loadgroup\n")
    assert bench.configured_workers([], cfg) == 2
    assert bench.configured_workers(["-n", "3", "tests/unit"], cfg) == 3
    assert bench.configured_workers(["-n", "0"], cfg) == 1
    cfg.write_text("[tool:pytest]\ntestpaths = tests\n")
    assert bench.configured_workers([], cfg) == 1
    # The suite's own configuration: the README's two workers.
    assert bench.configured_workers() == 2


def test_the_cpu_busy_ratio_is_a_share():
    cpu = _bench().CpuBusy()
    # Busy for 0.2 s of this process's CPU time: /proc/stat counts in 10 ms ticks, and a
    # few milliseconds of work (as before) could fall between two and count as idle.
    began_s = time.process_time()
    while time.process_time() - began_s < 0.2:
        sum(i * i for i in range(10_000))
    assert 0.0 < cpu.stop() <= 1.0
