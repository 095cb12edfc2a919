"""What the script launcher's hooks cost: the example script's samples/s under
``python -m workloads.script_launcher`` against ``python examples/ddp_train.py`` plain.

At 1 rank and at 2 (DDP over Gloo on loopback, started here with torchrun's
environment), the same script runs both ways, alternating (plain first in even rounds,
hooked first in odd ones), ``--repeats`` times each. A run's rate is what the script
prints itself (``samples_per_s=``: its training loops' time, validation left out),
summed over its ranks; the same figure on both sides, so the ratio is the hooks' cost
alone (every step: module forward pre/post hooks on each module call, the optimizer's
pre/post hooks, DDP's timed communication hook, one buffered line a step; the
launcher's start-up is outside the figure). Each side's median is printed with its
spread, the ratio of the medians and the spread of the paired (same round) ratios.
Goal: ratio >= 0.95. Also printed: the hooks' forward+backward per step
(``compute_s + exchange_s - optimizer_s``, means over the steady steps) against the
script's own ``perf_counter`` (``fwd_bwd_ms_mean``), whose gap the issue asks within 10%.

Separate processes on a busy 2-core machine differ by far more than the hooks cost, so
the last line measures the hooks alone where load cancels out: in one process, the
example's network and SGD on one batch, blocks of steps with the hooks installed and
removed in turn, the median of the paired (hooked / plain) step times.

On a shared machine run it under the benchmarks' lock, so that two benchmarks do not
share the cores::

    flock /tmp/edgeprof-bench.lock python benchmarks/bench_script_hooks.py  # 1, 2 ranks
    python benchmarks/bench_script_hooks.py --ranks 2 --repeats 7 --batch 32
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiler.ports import free_port  # noqa: E402
from workloads.steps import read_steps  # noqa: E402

EXAMPLE = ROOT / "examples" / "ddp_train.py"
GOAL = 0.95
TIMEOUT_S = 900


def run(ranks: int, hooked: bool, args, events_dir: Path) -> tuple[float, list[tuple]]:
    """One run: (samples/s summed over ranks, per rank (hooks' fwd+bwd ms, script's))."""
    script_args = ["--epochs", str(args.epochs), "--batch", str(args.batch),
                   "--max-samples", str(args.samples), "--val-samples", "500"]
    port = str(free_port())
    procs = []
    for rank in range(ranks):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(rank),
               "WORLD_SIZE": str(ranks), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        if ranks > 1:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo")
        argv = ([sys.executable, "-m", "workloads.script_launcher", "--script", str(EXAMPLE),
                 "--events-dir", str(events_dir), "--", *script_args] if hooked
                else [sys.executable, str(EXAMPLE), *script_args])
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=ROOT))
    rate, timings = 0.0, []
    for rank, proc in enumerate(procs):
        out, err = proc.communicate(timeout=TIMEOUT_S)
        if proc.returncode != 0:
            raise SystemExit(f"{'hooked' if hooked else 'plain'} rank {rank} exited "
                             f"{proc.returncode}: {err.strip().splitlines()[-1:]}")
        rate += float(re.search(r"samples_per_s=([0-9.]+)", out).group(1))
        script_ms = float(re.search(r"fwd_bwd_ms_mean=([0-9.]+)", out).group(1))
        if hooked:
            lines = read_steps(events_dir / f"steps-worker-{rank}.jsonl")[1:]
            hooks_ms = 1000 * statistics.mean(
                s["compute_s"] + s["exchange_s"] - s["optimizer_s"] for s in lines)
            timings.append((hooks_ms, script_ms))
    return rate, timings


def in_process_ratio(batch: int, blocks: int = 20, steps: int = 30) -> tuple[float, float]:
    """(median plain step ms, median paired hooked/plain step time) in this process."""
    import importlib.util

    import torch

    from workloads.events import EventWriter
    from workloads.script_hooks import Hooks, StepRecorder
    from workloads.steps import StepLog

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("ddp_train", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model, criterion = example.Net(), torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))

    def block_s() -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        return (time.perf_counter() - t0) / steps

    with tempfile.TemporaryDirectory(prefix="edgeprof-bench-") as tmp:
        events = EventWriter(tmp, 0)
        recorder = StepRecorder(events, StepLog(tmp, "worker", 0))
        block_s()  # warm-up
        plain, paired = [], []
        for _ in range(blocks):
            plain.append(block_s())
            hooks = Hooks(recorder)
            paired.append(block_s() / plain[-1])
            hooks.remove()
        events.close()
    return 1000 * statistics.median(plain), statistics.median(paired)


def spread(values: list[float]) -> str:
    """A median with its min-max range."""
    return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="1,2", help="rank counts to measure")
    parser.add_argument("--batch", type=int, default=64, help="samples per rank step")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8000,
                        help="training images (the script's --max-samples)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"examples/ddp_train.py b{args.batch}, {args.samples} samples, {args.epochs} "
          f"epochs, {args.repeats} runs each way, alternating")
    print(f"{'ranks':<6} {'plain samples/s [min-max]':>26} "
          f"{'hooked samples/s [min-max]':>27} {'ratio':>6} {'paired':>13}  goal      "
          f"fwd+bwd ms hooks/script")
    with tempfile.TemporaryDirectory(prefix="edgeprof-bench-") as tmp:
        for ranks in (int(r) for r in args.ranks.split(",")):
            runs: dict[bool, list[float]] = {True: [], False: []}
            gaps = []
            for i in range(args.repeats):
                for hooked in (False, True) if i % 2 == 0 else (True, False):
                    rate, timings = run(ranks, hooked, args,
                                        Path(tmp) / f"{ranks}-{hooked}-{i}")
                    runs[hooked].append(rate)
                    gaps += [hooks / script for hooks, script in timings]
            plain, hooked_ = statistics.median(runs[False]), statistics.median(runs[True])
            paired = [a / b for a, b in zip(runs[True], runs[False])]
            ratio = hooked_ / plain
            print(f"{ranks:<6} {spread(runs[False]):>26} {spread(runs[True]):>27} "
                  f"{ratio:>6.3f} {min(paired):>6.3f}-{max(paired):.3f}  "
                  f"{'met' if ratio >= GOAL else 'NOT met'} (>= {GOAL})  "
                  f"{min(gaps):.3f}-{max(gaps):.3f}", flush=True)
    step_ms, ratio = in_process_ratio(args.batch)
    print(f"in one process, 1 rank: step {step_ms:.2f} ms plain, hooked/plain step time "
          f"{ratio:.3f} (median of paired blocks): samples/s ratio {1 / ratio:.3f}")


if __name__ == "__main__":
    main()
