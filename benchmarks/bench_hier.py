"""The hierarchical engine (``--engine hier``) in one run: every scheme with and without
Zhang's delays, early exit against its threshold, the privacy module; ratios printed.

One sweep per part through the CLI, on the local cluster by default (``--cluster
emulated --profile mix-2pi4-2pi3b`` and ``--tiers cloud=1,edge=1,end=2`` for unequal
boards; root). Printed (docs/tiers.md shows a run's tables):

1. **Schemes**: completion, latency p50/p95, each tier's inference time per image, the
   share each tier answered, coarse and fine accuracy, bytes per sample per link, eq.
   (4)'s N_map and eq. (5)'s cloud share beside the measured one; with and without
   ``--tier-delay edge=0.5,cloud=1.0``.
2. **Ratios**: each link's round trip (the networks' time out) over its delay (goal
   1.0 to 1.05: the delay held back is the delay seen); early exit's bytes and
   completion over End-Cloud's (the saving: goal bytes < 0.2 at threshold 0.5); the
   privacy module's bytes over a raw image's.
3. **Thresholds**: early exit's share per tier and accuracy at 0.05, 0.2, 0.5, 0.8.

    .venv/bin/python benchmarks/bench_hier.py [--devices 7 --tiers end=4,edge=2,cloud=1]
        [--val-samples 1000] [--cluster emulated --profile mix-2pi4-2pi3b] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DELAYS = {"edge": 0.5, "cloud": 1.0}


def sweep(out: Path, args, *extra: str) -> list[dict]:
    argv = [sys.executable, "-m", "profiler.cli", "sweep", "--engine", "hier",
            "--model", args.model, "--devices", str(args.devices), "--batch", "50",
            "--val-samples", str(args.val_samples), "--tiers", args.tiers,
            "--cluster", args.cluster, "--out", str(out), *extra]
    if args.profile:
        argv += ["--profile", args.profile]
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _get(rec: dict, name: str, default="-"):
    value = rec.get("hier_" + name)
    return default if value is None else value


def _tiers(value, keys=("end", "edge", "cloud")) -> str:
    return " / ".join(str(value.get(k, "-")) for k in keys) if isinstance(value, dict) else "-"


def scheme_table(rows: list[dict]) -> None:
    print("| scheme | delay | completion s | p50 / p95 ms | infer ms/image end / edge / cloud "
          "| share end / edge / cloud | coarse | fine | bytes/sample | N_map | cloud eq.5 / "
          "measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        scheme = r["scheme"] + (f" {r['exit_threshold']}" if r["scheme"] == "early-exit" else "")
        links = ", ".join(f"{k} {v:.0f}" for k, v in _get(r, "bytes_per_sample", {}).items())
        print(f"| {scheme} | {r['tier_delay']} | {_get(r, 'completion_s')} | "
              f"{_get(r, 'latency_p50_ms')} / {_get(r, 'latency_p95_ms')} | "
              f"{_tiers(_get(r, 'infer_ms_per_image'))} | {_tiers(_get(r, 'share'))} | "
              f"{_get(r, 'coarse_accuracy')} | {_get(r, 'fine_accuracy')} | {links or '-'} | "
              f"{_get(r, 'n_map')} | {_get(r, 'cloud_share_predicted')} / "
              f"{_get(r, 'cloud_share')} |")


def ratios(rows: list[dict], private: list[dict]) -> None:
    by = {(r["scheme"], str(r["tier_delay"])): r for r in rows}
    delayed = "edge=0.5,cloud=1.0"
    print("\nround trip over its delay (goal 1.0-1.05):")
    for scheme, link, tier in (("end-edge", "end-edge", "edge"), ("end-cloud", "end-cloud",
                                                                   "cloud")):
        trip = _get(by[(scheme, delayed)], "round_trip_ms_by_link", {}).get(link)
        if trip is not None:
            print(f"  {link}: {trip / (DELAYS[tier] * 1e3):.3f}")
    early, cloud = by[("early-exit", "0")], by[("end-cloud", "0")]
    bytes_ratio = (sum(_get(early, "bytes_per_sample", {}).values())
                   / sum(_get(cloud, "bytes_per_sample").values()))
    done = _get(early, "completion_s") / _get(cloud, "completion_s")
    done_delayed = (_get(by[("early-exit", delayed)], "completion_s")
                    / _get(by[("end-cloud", delayed)], "completion_s"))
    print(f"early exit over End-Cloud: bytes {bytes_ratio:.3f} (goal < 0.2), completion "
          f"{done:.2f} without delays, {done_delayed:.2f} with them")
    for r in private:
        if r["privacy"] == "on":
            link = next(iter(_get(r, "bytes_per_sample")))
            print(f"privacy on, {r['scheme']}: bytes over a raw image's "
                  f"{_get(r, 'bytes_per_sample')[link] / 784:.1f}, module "
                  f"{_get(r, 'privacy_ms_per_image')} ms/image")


def thresholds(rows: list[dict]) -> None:
    print("\n| threshold | share end / edge / cloud | coarse at end / edge / cloud | "
          "fine at edge / cloud | coarse overall | bytes/sample | completion s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['exit_threshold']} | {_tiers(_get(r, 'share'))} | "
              f"{_tiers(_get(r, 'exit_coarse_accuracy'))} | "
              f"{_tiers(_get(r, 'exit_fine_accuracy'), ('edge', 'cloud'))} | "
              f"{_get(r, 'coarse_accuracy')} | "
              f"{sum(_get(r, 'bytes_per_sample', {}).values()):.0f} | {_get(r, 'completion_s')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=7)
    parser.add_argument("--tiers", default="end=4,edge=2,cloud=1")
    parser.add_argument("--model", default="lenet-mlp")
    parser.add_argument("--val-samples", type=int, default=1000)
    parser.add_argument("--cluster", default="local")
    parser.add_argument("--profile", default="")
    parser.add_argument("--keep", type=Path, default=None, help="keep the sweeps here")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-hier-"))
    rows = sweep(base / "schemes", args, "--scheme", "end,end-edge,end-cloud,mapping,early-exit",
                 "--tier-delay", "0;edge=0.5,cloud=1.0")
    scheme_table(rows)
    private = sweep(base / "privacy", args, "--scheme", "end-edge,end-cloud",
                    "--privacy", "off,on")
    ratios(rows, private)
    # In nats (0-ln 4): the normalized 0.05, 0.2, 0.5, 0.8 of docs/tiers.md's table.
    thresholds(sweep(base / "thresholds", args, "--scheme", "early-exit",
                     "--exit-threshold", "0.07,0.28,0.69,1.11"))
    subprocess.run(["uptime"], check=False)


if __name__ == "__main__":
    main()
