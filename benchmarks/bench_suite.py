"""Where the test suite's time goes, from one run: per module, per phase, and whether the
machine or the workers were ever idle.

Runs pytest as the README's test command does (its xdist workers from setup.cfg) with
``--durations=0``, sampling this machine's CPU (``/proc/stat``) meanwhile, or reads the
output of such a run (``--log``, e.g. ``.ci/run --durations=0 > ci.log``). Prints:

- the wall time, the sum of every test's setup, call and teardown, and the workers'
  busy ratio = sum / (wall x workers): near 1.0 the dealing leaves no worker waiting;
- the CPU's busy ratio over the run (not from ``--log``): near 1.0 the suite is bound
  by CPU, and only less work (or a faster machine) makes it shorter;
- the modules that take the most, with their tests, seconds and share of the sum, and
  the slowest fixtures' setups (a module fixture is built once, by one worker).

    .venv/bin/python benchmarks/bench_suite.py [--top 25] [-- PYTEST_ARGS...]
    .venv/bin/python benchmarks/bench_suite.py --log ci.log

Measured on this project's two-core host (README, Tests), ``CI=true .ci/run
--durations=0`` on fresh clones: 1,103 passed in 32:50, 31:06 and 29:00, workers busy
0.98-0.99, CPU busy 0.95 (the playbook module 16% of the sum, the SSH cluster, the
accuracy sweep, the study and the soak 6-7% each): the suite is bound by the CPU its
real processes need.
"""

from __future__ import annotations

import argparse
import configparser
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import psutil

ROOT = Path(__file__).resolve().parents[1]
# pytest's --durations lines: "12.34s call     tests/x/test_y.py::test_z[param]".
DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+?)::(.+?)\s*$")
# Its last line: "1099 passed, 12 warnings in 1809.91s (0:30:09)".
WALL = re.compile(r" in (\d+(?:\.\d+)?)s")


@dataclass
class ModuleTime:
    """One module's summed durations and the tests they came from."""

    seconds: float = 0.0
    tests: set[str] = field(default_factory=set)


@dataclass
class SuiteTime:
    """One run: its wall time and outcome, its durations per module and per phase."""

    wall_s: float
    outcome: str  # the final line's counts: "1099 passed, 12 warnings"
    by_module: dict[str, ModuleTime]
    by_phase: dict[str, float]
    setups: list[tuple[float, str]]  # (seconds, module::test) of every setup

    @property
    def sum_s(self) -> float:
        return sum(self.by_phase.values())


def read_log(text: str) -> SuiteTime:
    """The durations and the wall time of one pytest run's output; ValueError when it
    has neither (a run without ``--durations=0``, or one that did not finish)."""
    by_module: dict[str, ModuleTime] = defaultdict(ModuleTime)
    by_phase: dict[str, float] = defaultdict(float)
    setups = []
    wall_s, outcome = None, ""
    for line in text.splitlines():
        m = DURATION.match(line)
        if m:
            seconds, phase, module, test = float(m[1]), m[2], m[3], m[4]
            by_module[module].seconds += seconds
            by_module[module].tests.add(test)
            by_phase[phase] += seconds
            if phase == "setup":
                setups.append((seconds, f"{module}::{test}"))
        elif (w := WALL.search(line)) and (" passed" in line or " failed" in line):
            wall_s = float(w[1])
            outcome = line[:w.start()].strip(" =")
    if not by_module:
        raise ValueError("no --durations lines: run pytest with --durations=0")
    if wall_s is None:
        raise ValueError("no final 'N passed ... in S s' line: the run did not finish")
    return SuiteTime(wall_s, outcome, dict(by_module), dict(by_phase), sorted(setups, reverse=True))


def configured_workers(pytest_args: Sequence[str] = (),
                       setup_cfg: Path = ROOT / "setup.cfg") -> int:
    """The xdist worker count the suite runs with: ``-n N`` given to pytest, else
    setup.cfg's addopts; 1 without xdist."""
    config = configparser.ConfigParser()
    config.read(setup_cfg)
    addopts = shlex.split(config.get("tool:pytest", "addopts", fallback=""))
    workers = 1
    for args in (addopts, list(pytest_args)):  # the command line wins
        for flag, value in zip(args, args[1:]):
            if flag in ("-n", "--numprocesses") and value.isdigit():
                workers = max(int(value), 1)
    return workers


class CpuBusy:
    """The share of this machine's CPU time that was neither idle nor waiting on I/O
    from its creation to ``stop()`` (psutil's /proc/stat)."""

    def __init__(self) -> None:
        self._first = psutil.cpu_times()

    def stop(self) -> float:
        last = psutil.cpu_times()
        spent = {name: getattr(last, name) - getattr(self._first, name)
                 for name in last._fields if name not in ("guest", "guest_nice")}
        idle = spent["idle"] + spent.get("iowait", 0.0)
        return 1.0 - idle / max(sum(spent.values()), 1e-9)


def run_suite(pytest_args: list[str], log: Path) -> tuple[str, float]:
    """Run the suite with --durations=0, printing the minutes as they pass; its output and the CPU's
    busy ratio meanwhile."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
            "--durations=0", *pytest_args]
    print("+", shlex.join(argv), f"(output: {log})", flush=True)
    cpu = CpuBusy()
    done = threading.Event()

    def tick() -> None:
        started = time.monotonic()
        while not done.wait(60):
            print(f"  {(time.monotonic() - started) / 60:.0f} min", flush=True)

    threading.Thread(target=tick, daemon=True).start()
    with log.open("w") as out:
        code = subprocess.call(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    done.set()
    busy = cpu.stop()
    if code not in (0, 1):  # 1: some test failed, the times still tell where time goes
        sys.exit(f"bench_suite: pytest ended with status {code}: see {log}")
    return log.read_text(), busy


def report(suite: SuiteTime, workers: int, cpu_busy: float | None, top: int) -> None:
    minutes, seconds = divmod(round(suite.wall_s), 60)
    print(f"{suite.outcome}: wall {suite.wall_s:.0f} s ({minutes}:{seconds:02d}); sum of "
          f"durations {suite.sum_s:.0f} s ("
          + ", ".join(f"{p} {s:.0f} s" for p, s in sorted(suite.by_phase.items())) + ")")
    print(f"workers busy: {suite.sum_s / (suite.wall_s * workers):.2f} "
          f"(sum / (wall x {workers} worker{'s' if workers > 1 else ''}))")
    if cpu_busy is not None:
        print(f"CPU busy: {cpu_busy:.2f} (/proc/stat, not idle nor iowait)")
    # pytest hides durations under 5 ms: "timed" counts a module's tests above that.
    print(f"\n{'seconds':>8} {'share':>6} {'timed':>5}  module")
    ranked = sorted(suite.by_module.items(), key=lambda kv: -kv[1].seconds)
    for module, t in ranked[:top]:
        print(f"{t.seconds:8.1f} {t.seconds / suite.sum_s:6.1%} {len(t.tests):5d}  {module}")
    print(f"\n{'seconds':>8}  slowest setups (a module's shared fixture: built once)")
    for seconds, test in suite.setups[:min(top, 10)]:
        print(f"{seconds:8.1f}  {test}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="read this run's output instead of running")
    parser.add_argument("--top", type=int, default=25, help="modules to list (default 25)")
    parser.add_argument("pytest_args", nargs="*", help="after --: given to pytest")
    args = parser.parse_args()
    if args.log:
        text, cpu_busy = args.log.read_text(errors="replace"), None
    else:
        log = Path(tempfile.mkdtemp(prefix="bench-suite-")) / "pytest.log"
        text, cpu_busy = run_suite(args.pytest_args, log)
    try:
        suite = read_log(text)
    except ValueError as exc:
        sys.exit(f"bench_suite: {exc}")
    report(suite, configured_workers(args.pytest_args), cpu_busy, args.top)


if __name__ == "__main__":
    main()
