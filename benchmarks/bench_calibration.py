"""How close a calibrated profile trains to its reference rates, one run (root).

For each (workload, reference samples/s) pair, trains a one-device cell on a one-node
emulated cluster of the profile (default ``pi3b-park2019``) at the quota the profile
gives that workload's model (``cpu_cores_by_model``, else ``cpu_cores``), and prints the
measured rate and its ratio to the reference. References from the study: LeNet-MLP 571
and LeNet-CNN 55.6 samples/s at batch 64 (Tables 1-2), ResNet-32 2.5 and ResNet-110 0.625
samples/s at batch 32 (Figure 5's one-device times, 20,000 s and 80,000 s for 50,000
images). ResNet-110 is not calibrated: it checks the ResNet quota found on ResNet-32. The
rate is the workers' steady training rate (``steady_s_per_sample``: without the first
step's one-off set-up, as the calibration measures it); start-up is outside the quota
(workloads/node_limits.py).

    sudo .venv/bin/python benchmarks/bench_calibration.py [--profile NAME]
        [--workloads lenet-mlp,lenet-cnn,resnet-32]
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

STUDY = [("lenet-mlp", 64, 60000 / 105), ("lenet-cnn", 64, 60000 / 1079),
         ("resnet-32", 32, 50000 / 20000), ("resnet-110", 32, 50000 / 80000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="pi3b-park2019")
    parser.add_argument("--workloads", default=",".join(name for name, _, _ in STUDY),
                        help="some of them (ResNet-110 alone takes about 7 minutes)")
    args = parser.parse_args()
    wanted = args.workloads.split(",")
    unknown = set(wanted) - {name for name, _, _ in STUDY}
    if unknown:
        parser.error(f"--workloads: unknown {', '.join(sorted(unknown))}")
    profile = load_catalog().profiles[args.profile]
    _refuse_a_running_cluster()
    with tempfile.TemporaryDirectory(prefix="bench-calibration-") as tmp:
        measure = _Measurer(Path(tmp), profile)
        print(f"profile {profile.name}: {profile.cpu_cores} cores, per model "
              f"{profile.cpu_cores_by_model or 'none'}")
        print(f"{'workload':<22} {'quota':>7} {'reference':>10} {'measured':>10} {'ratio':>7}")
        for name, batch, reference in (w for w in STUDY if w[0] in wanted):
            workload = Workload.parse(name, batch)
            quota = profile.cpu_cores_for(workload.model)
            step = measure(workload, quota, reference)
            print(f"{workload.label:<22} {quota:>7.4f} {reference:>10.3f} "
                  f"{step.samples_per_s:>10.3f} {step.samples_per_s / reference:>7.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
