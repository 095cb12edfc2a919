"""Cell start-up and tear-down on the local cluster, at 1 and 4 devices.

Prints, from one run each: seconds from cell launch to the first completed training step
(target < 3 s) and from the last worker's end to every process reaped (target < 1 s),
with their ratio to the target (< 1 meets it). Also prints the floor no launcher can beat
here: the CPU cost of one ``import mxnet`` times the processes per core.

    python benchmarks/bench_cell_lifecycle.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cluster.local import LocalCluster  # noqa: E402
from profiler.engines.base import TrainOptions  # noqa: E402
from profiler.engines.mxnet import MXNetEngine  # noqa: E402
from profiler.sweep.events import read_cell_events  # noqa: E402
from profiler.sweep.grid import CellConfig, validate  # noqa: E402
from profiler.sweep.runner import run_cell  # noqa: E402

START_TARGET_S, REAP_TARGET_S = 3.0, 1.0


def import_cost_s() -> float:
    """CPU seconds (user+sys) of one ``python -c 'import mxnet'``."""
    before = os.times()
    subprocess.run([sys.executable, "-c", "import mxnet"], check=True)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system
                                                           - before.children_system)


def main() -> None:
    engine = MXNetEngine()
    out = Path(tempfile.mkdtemp(prefix="edgeprof-bench-"))
    cores = os.cpu_count() or 1
    cost = import_cost_s()
    print(f"one `import mxnet`: {cost:.2f} CPU s; host cores: {cores}")
    print(f"{'devices':>7} {'procs':>5} {'start_s':>8} {'ratio':>6} {'floor_s':>8} "
          f"{'reap_s':>7} {'ratio':>6}")
    for devices in (1, 4):
        cell = validate(CellConfig(model="lenet-mlp", layers=None, devices=devices,
                                   batch=32, max_samples=32 * devices * 4))
        procs = len(engine.plan(cell, LocalCluster(engine.nodes_needed(cell)).nodes(),
                                out, TrainOptions()))
        rec = run_cell(cell, LocalCluster(engine.nodes_needed(cell)), engine,
                       out / cell.cell_id, TrainOptions(val_samples=100), sweep_id="bench",
                       timeout_s=300, monitor_interval_s=None)
        assert rec["status"] == "ok", rec["reason"]
        last_end = max(e["t"] for e in read_cell_events(out / cell.cell_id / "events").of("end"))
        start_s, reap_s = rec["first_step_s"], rec["reaped_at"] - last_end
        floor_s = cost * procs / min(cores, procs)
        print(f"{devices:>7} {procs:>5} {start_s:>8.2f} {start_s / START_TARGET_S:>6.2f} "
              f"{floor_s:>8.2f} {reap_s:>7.2f} {reap_s / REAP_TARGET_S:>6.2f}")


if __name__ == "__main__":
    main()
