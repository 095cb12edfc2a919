"""How close a calibrated profile trains to its reference rates, one run (root).

For each (workload, reference samples/s) pair, trains a one-device cell on a one-node
emulated cluster of the profile (default ``pi3b-park2019``, references from the study:
LeNet-MLP 571 and LeNet-CNN 55.6 samples/s at batch 64, Tables 1-2) and prints the
measured rate and its ratio to the reference. The rate is the workers' training rate
(``train_s``); start-up is outside the quota (workloads/node_limits.py).

    sudo .venv/bin/python benchmarks/bench_calibration.py [--profile NAME]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.calibrate import Workload, _Measurer, _refuse_a_running_cluster  # noqa: E402
from profiler.cluster.profiles import load_catalog  # noqa: E402

STUDY = [("lenet-mlp", 64, 60000 / 105), ("lenet-cnn", 64, 60000 / 1079)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="pi3b-park2019")
    args = parser.parse_args()
    profile = load_catalog().profiles[args.profile]
    _refuse_a_running_cluster()
    with tempfile.TemporaryDirectory(prefix="bench-calibration-") as tmp:
        measure = _Measurer(Path(tmp), profile)
        print(f"profile {profile.name}: {profile.cpu_cores} cores")
        print(f"{'workload':<22} {'reference':>10} {'measured':>10} {'ratio':>7}")
        for name, batch, reference in STUDY:
            workload = Workload.parse(name, batch)
            step = measure(workload, profile.cpu_cores, reference)
            print(f"{workload.label:<22} {reference:>10.1f} {step.samples_per_s:>10.1f} "
                  f"{step.samples_per_s / reference:>7.3f}")


if __name__ == "__main__":
    main()
