"""Where the time goes, on the emulated cluster: the step breakdown, a straggler, a mix.

Three experiments, each a real sweep (``edgeprof sweep --cluster emulated``, as root):

1. ``breakdown``: LeNet-MLP and ResNet-20 on 1, 2 and 4 devices, sync, on the
   pi3b-park2019 profile (the study's boards), per engine. Prints each cell's phases (ms
   per step), their sum against the step time measured from the epochs (goal: within
   5%), and the share of communication plus wait (the study's finding: it grows with
   devices for LeNet and stays small for ResNet).
2. ``straggler``: 4 workers, one node at half its CPU (``--straggler 0.5``) against none,
   sync and async. Prints each worker's compute and wait; sync: the step follows the
   straggler and the others' wait grows by about the straggler's extra compute; async:
   the other workers' throughput against the run without a straggler (goal: within 10%);
   and the node the results name.
3. ``mix``: 4 workers on ``mix-2pi4-2pi3b`` against 4 pi3b (``--placement colocated``,
   so that every node runs a worker): each node's compute per step in the proportion of
   its profile's CPU, and sync paced by the slow nodes.

    sudo .venv/bin/python benchmarks/bench_timeline.py                     # all three
    sudo .venv/bin/python benchmarks/bench_timeline.py --parts straggler --engine mxnet

Every sweep folder is kept under ``--out`` (default: a temporary folder, printed), with
each cell's ``trace.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiler.sweep import board_time  # noqa: E402
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
PHASES = ("data", "compute", "comm", "wait")


def sweep(out: Path, *options: str) -> list[dict]:
    """Run one sweep and return its records (the last attempt of each cell)."""
    argv = [*EDGEPROF, "sweep", "--cluster", "emulated", "--no-agent", "--out", str(out),
            *options]
    print("+ edgeprof " + " ".join(argv[len(EDGEPROF):]), flush=True)
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    records: dict[str, dict] = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[record["cell_id"]] = board_time.record(record)  # ms on the board
    return list(records.values())


def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def breakdown(args, out: Path) -> None:
    records = sweep(out / f"breakdown-{args.engine}", "--engine", args.engine,
                    "--profile", "pi3b-park2019", "--model", "lenet-mlp,resnet",
                    "--layers", "20", "--devices", "1,2,4", "--sync", "sync",
                    "--batch", "32", "--max-samples", str(args.samples),
                    "--speedup", str(args.speedup), "--val-samples", "64")
    print(f"\n{'model':<10} {'dev':>3} {'step ms':>8} " +
          " ".join(f"{p + ' ms':>10}" for p in PHASES) + f" {'sum/step':>8} {'comm+wait':>9}")
    for r in sorted(records, key=lambda r: (r["model"], r["devices"])):
        if r["status"] != "ok":
            print(f"{r['model']:<10} {r['devices']:>3} {r['status']}: {r['reason']}")
            continue
        step = r.get("steady_step_ms")
        share = ((r["comm_ms_mean"] + r["wait_ms_mean"]) / step) if step else None
        print(f"{r['model']:<10} {r['devices']:>3} {fmt(step):>8} " +
              " ".join(f"{fmt(r.get(p + '_ms_mean')):>10}" for p in PHASES) +
              f" {fmt(r.get('breakdown_vs_step'), 3):>8} {fmt(share, 2):>9}")
    print("ms per step on the board (the host's times x each cell's speedup); "
          "sum/step goal: 0.95-1.05")


def _by_worker(record: dict, column: str) -> dict[str, float]:
    nodes = record.get("worker_nodes") or {}
    return {nodes.get(rank, rank): ms for rank, ms in (record.get(column) or {}).items()}


def straggler(args, out: Path) -> None:
    records = sweep(out / f"straggler-{args.engine}", "--engine", args.engine,
                    "--profile", args.profile, "--model", args.straggler_model,
                    "--devices", "4", "--sync", "sync,async", "--straggler", "none,0.5",
                    "--batch", "32", "--max-samples", str(args.samples),
                    "--speedup", str(args.speedup), "--val-samples", "64")
    cells = {(r["sync"], r["straggler"]): r for r in records}
    for sync in ("sync", "async"):
        base, slow = cells.get((sync, "none")), cells.get((sync, "0.5"))
        if not base or not slow or "ok" not in (base["status"], slow["status"]):
            print(f"{sync}: cells missing or failed")
            continue
        node = slow.get("straggler_node")
        print(f"\n{sync}: straggler {node} at 0.5; results name slowest_worker "
              f"{slow.get('slowest_worker')}")
        print(f"{'node':<6} {'compute ms':>11} {'(none)':>8} {'wait ms':>8} {'(none)':>8} "
              f"{'step ms':>8} {'(none)':>8}")
        for n in sorted(_by_worker(slow, "step_ms_by_worker")):
            row = [_by_worker(r, c).get(n) for c in ("compute_ms_by_worker",
                                                     "wait_ms_by_worker",
                                                     "step_ms_by_worker")
                   for r in (slow, base)]
            print(f"{n:<6} " + " ".join(f"{fmt(v):>{w}}" for v, w in
                                        zip(row, (11, 8, 8, 8, 8, 8))))
        compute_s, compute_b = (_by_worker(slow, "compute_ms_by_worker"),
                                _by_worker(base, "compute_ms_by_worker"))
        others = [n for n in compute_s if n != node]
        extra = compute_s.get(node, 0) - compute_b.get(node, 0)
        if sync == "sync":
            wait_s, wait_b = (_by_worker(slow, "wait_ms_by_worker"),
                              _by_worker(base, "wait_ms_by_worker"))
            grown = sum(wait_s[n] - wait_b.get(n, 0) for n in others) / len(others)
            print(f"straggler's extra compute {extra:.1f} ms; the others' wait grew "
                  f"{grown:.1f} ms ({grown / extra:.2f} of it); step "
                  f"{base['steady_step_ms']:.1f} -> {slow['steady_step_ms']:.1f} ms")
        else:
            step_s, step_b = (_by_worker(slow, "step_ms_by_worker"),
                              _by_worker(base, "step_ms_by_worker"))
            ratio = (sum(1 / step_s[n] for n in others) / sum(1 / step_b[n] for n in others))
            print(f"the other workers' throughput: {ratio:.3f} of the run without a "
                  f"straggler (goal: 0.90-1.10)")


def mix(args, out: Path) -> None:
    rows = {}
    for profile in ("pi3b", args.mix):
        records = sweep(out / f"mix-{args.engine}-{profile}", "--engine", args.engine,
                        "--profile", profile, "--model", args.straggler_model,
                        "--devices", "4", "--sync", "sync,async", "--placement", "colocated",
                        "--batch", "32", "--max-samples", str(args.samples),
                        "--val-samples", "64")
        for r in records:
            rows[(profile, r["sync"])] = r
    for sync in ("sync", "async"):
        print(f"\n{sync}:")
        for profile in ("pi3b", args.mix):
            r = rows.get((profile, sync))
            if not r or r["status"] != "ok":
                print(f"  {profile}: {r and r['status']} {r and r['reason']}")
                continue
            profiles = r.get("node_profiles") or {}
            compute = _by_worker(r, "compute_ms_by_worker")
            said = ", ".join(f"{n} ({profiles.get(n, '?')}) {compute[n]:.1f}"
                             for n in sorted(compute))
            print(f"  {profile:<16} step {fmt(r.get('steady_step_ms'))} ms, "
                  f"slowest {r.get('slowest_worker')}; compute ms per node: {said}")


PARTS = {"breakdown": breakdown, "straggler": straggler, "mix": mix}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--engine", default="torch")
    parser.add_argument("--samples", type=int, default=2560,
                        help="training samples of each cell (--max-samples)")
    parser.add_argument("--speedup", type=float, default=16,
                        help="most time dilation a pi3b-park2019 cell may get")
    parser.add_argument("--profile", default="pi3b", help="profile of the straggler runs")
    parser.add_argument("--straggler-model", default="lenet-cnn")
    parser.add_argument("--mix", default="mix-2pi4-2pi3b")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="edgeprof-timeline-"))
    print(f"sweeps under {out}")
    for part in args.parts.split(","):
        PARTS[part](args, out)


if __name__ == "__main__":
    main()
