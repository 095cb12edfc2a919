"""The metrics agent's cost and the shipper's speed, measured in one run. Prints ratios.

1. Agent CPU seconds per wall second at ``--interval`` 1 s over ``--seconds`` (target
   ≤ 0.005), and its RSS (target ≤ 60 MB): a real ``python -m profiler.agent`` following
   one process, measured from outside with psutil after a 5 s warm-up.
2. Batched shipping throughput (target ≥ 50,000 points/s): ``ship_sweep`` of a spool of
   ``--points`` agent-like points (12 tags) to VictoriaMetrics (v2 API) and InfluxDB
   1.6.7 (v1 ``/write``) on loopback, fresh servers, wall time of the whole ship.
3. Training samples/s with the agent on against off (target ratio ≥ 0.99): one
   ``workloads.train`` ResNet-20 worker, one OpenMP thread, runs alternating off/on,
   medians of the workers' ``end`` events.

    .venv/bin/python benchmarks/bench_agent.py [--seconds 60] [--points 200000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout

from profiler.agent import lineproto  # noqa: E402
from tests.support.servers import LocalServer  # noqa: E402
from profiler.agent.shipping.ship import ship_sweep  # noqa: E402
from profiler.agent.spool import SpoolWriter  # noqa: E402
from profiler.agent.shipping.targets import InfluxTarget  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def start_agent(spool: Path, pids_file: Path, interval_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "profiler.agent", "--node", "bench", "--spool", str(spool),
         "--pids-file", str(pids_file), "--interval", str(interval_s), "--interfaces", "lo",
         "--tag", "sweep=bench", "--tag", "cell=c1", "--tag", "model=resnet"],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)


def agent_cost(work: Path, seconds: float) -> tuple[float, float]:
    """(CPU s per wall s, RSS MB) of an agent sampling every second."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    pids = work / "pids.json"
    pids.write_text(json.dumps({"worker": [sleeper.pid]}))
    agent = start_agent(work / "cost-spool", pids, 1.0)
    try:
        time.sleep(5.0)  # imports and priming are start-up, not steady state
        proc = psutil.Process(agent.pid)
        cpu0, wall0 = sum(proc.cpu_times()[:2]), time.monotonic()
        time.sleep(seconds)
        cpu1, wall1 = sum(proc.cpu_times()[:2]), time.monotonic()
        rss_mb = proc.memory_info().rss / 2**20
    finally:
        stop(agent)
        sleeper.kill()
        sleeper.wait()
    return (cpu1 - cpu0) / (wall1 - wall0), rss_mb


def make_spool(sweep: Path, points: int) -> None:
    base = {"host": "bench-host", "node": "n1", "sweep": "bench", "cell": "0123456789ab",
            "engine": "mxnet", "model": "resnet", "layers": "20", "batch": "32",
            "devices": "4", "sync": "sync", "epochs": "1"}
    writer = SpoolWriter(sweep / "cells" / "c1" / "metrics" / "n1", base)
    t0_ms = (int(time.time()) - 7200) * 1000
    for tick in range(points // 10):
        t_ms = t0_ms + tick * 10
        writer.append([lineproto.encode("cpu_core", {"core": str(core), "role": "worker"},
                                        {"cpu_percent": 12.5 + core, "user_percent": 10.0,
                                         "system_percent": 2.5, "iowait_percent": 0.0}, t_ms)
                       for core in range(10)])
    writer.close()


def ship_rate(work: Path, kind: str, points: int) -> float:
    sweep = work / f"ship-{kind}"
    make_spool(sweep, points)
    with LocalServer(kind, work / f"server-{kind}") as server:
        target = (InfluxTarget(url=server.url, db="bench") if kind == "influxdb1"
                  else InfluxTarget(url=server.url, org="lab", bucket="bench"))
        started = time.perf_counter()
        sent = ship_sweep(sweep, target)
        elapsed_s = time.perf_counter() - started
    assert sent == points, (sent, points)
    return sent / elapsed_s


def train_once(work: Path, run: int, with_agent: bool, samples: int) -> float:
    events = work / f"train-{run}-{int(with_agent)}"
    trainer = subprocess.Popen(
        [sys.executable, "-m", "workloads.train", "--model", "resnet", "--layers", "20",
         "--batch", "32", "--epochs", "1", "--comm", "local", "--threads", "1",
         "--max-samples", str(samples), "--val-samples", "32", "--events-dir", str(events)],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agent = None
    if with_agent:
        pids = work / f"pids-{run}.json"
        pids.write_text(json.dumps({"worker": [trainer.pid]}))
        agent = start_agent(work / f"train-spool-{run}", pids, 1.0)
    try:
        assert trainer.wait(timeout=900) == 0
    finally:
        if agent is not None:
            stop(agent)
    end = [json.loads(line) for line in open(events / "worker-0.jsonl")
           if '"end"' in line][-1]
    return end["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=960)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        work = Path(tmp)
        cpu_ratio, rss_mb = agent_cost(work, args.seconds)
        print(f"agent CPU s per wall s at 1 Hz over {args.seconds:.0f} s: {cpu_ratio:.5f} "
              f"(target <= 0.005) {'OK' if cpu_ratio <= 0.005 else 'MISSED'}")
        print(f"agent RSS: {rss_mb:.1f} MB (target <= 60) {'OK' if rss_mb <= 60 else 'MISSED'}")
        for kind in ("victoria-metrics", "influxdb1"):
            rate = ship_rate(work, kind, args.points)
            print(f"shipping {args.points} points to {kind}: {rate:,.0f} points/s "
                  f"(target >= 50,000) {'OK' if rate >= 50_000 else 'MISSED'}")
        off, on = [], []
        for run in range(args.repeats):
            off.append(train_once(work, run, False, args.samples))
            on.append(train_once(work, run, True, args.samples))
        ratio = statistics.median(on) / statistics.median(off)
        print(f"training samples/s agent on/off: {statistics.median(on):.1f} / "
              f"{statistics.median(off):.1f} = {ratio:.3f} (target >= 0.99) "
              f"{'OK' if ratio >= 0.99 else 'MISSED'}  runs off={off} on={on}")


if __name__ == "__main__":
    main()
