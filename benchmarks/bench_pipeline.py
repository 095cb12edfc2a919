"""Pipeline parallelism on the emulated Pi 4 cluster, and beside data parallelism. Root.

One run, three parts (docs/pipeline.md shows a run's tables):

1. **The pipeline grid** (``torch-pipe``, profile ``pi4``): LeNet-CNN, ResNet-20 and
   MobileNetV2 at S = 2 and 4 stages, M = 1, 4, 8 micro-batches, GPipe and 1F1B (1F1B
   needs M >= S: those cells are listed as skipped). Per cell: the step, the measured
   bubble beside GPipe's (S-1)/(M+S-1), the schedule's time beside the pipeline model's
   prediction from the stages' measured times, the bytes on the links per step beside
   the floor (each boundary's activation and its gradient per micro-batch; goal
   <= 1.1x), the balanced split's slowest stage beside the best contiguous split's by
   exhaustive search on the same profile (the workers' start events hold it: goal
   <= 1.05x), and each stage's peak stash.
2. **Strategies on the same devices**: one node, data parallelism (``torch-ddp``; the
   ``torch`` parameter server, sync, a server beside each worker), the pipeline (the
   faster of GPipe M=4 and M=8) and the hybrid (``torch-pipe --replicas 2``: two
   pipelines of two stages) at 2 and 4 devices, every cell on the same global batch of
   32 (so the same SGD), on uniform Pi 4s and on a mix of unequal nodes (Pi 4, Pi 3B,
   Pi 4, Pi 3B): samples/s, where each step went (compute, communication, waiting) and
   which strategy wins; a figure (``--figure``).
3. **MobileNetV2 in five stages on five Pi 4 nodes**: the split balanced by measurement
   against the Pi pipeline work's 27/27/36/53/14 of its 157 Keras layers (mapped onto
   our 26 top-level modules: 6,3,4,6,7, see ``KERAS_LAYERS``), both trained; and
   ``--task infer``: the test stream through the five stages, on one node and over five
   whole-model replicas.

Bytes per step are measured from the agents' ``eth0`` counters of the worker nodes
(``net`` in each node's spool, sampled every ``INTERVAL_S``), summed over the nodes,
between two steps well inside the epoch, so neither the start-up (the link probe, the
profiles' all-gather, the rendezvous) nor validation (the test set streamed forward)
is counted; what remains beside the floor is TCP/IP headers and Gloo's own framing.

Each part's sweep takes the emulated cluster's lock (``/tmp/edgeprof-emulated.lock``)
for itself, so other users of the cluster get it between parts; run the script under
the benchmarks' lock:

    sudo flock /tmp/edgeprof-bench.lock .venv/bin/python benchmarks/bench_pipeline.py \\
        [--quick] [--figure docs/img/pipeline-vs-data-parallel.png] [--keep DIR]

``--quick`` (a few minutes): LeNet-CNN and ResNet-20 at M = 4 in part 1, LeNet-CNN in
part 2 on 2 devices, part 3 balanced only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cell import CellConfig  # noqa: E402
from profiler.cluster import cluster_settings, emulated  # noqa: E402
from profiler.agent.spool_reader import read_points  # noqa: E402
from profiler.sweep.grid import validate  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402
from workloads import pipeline_split  # noqa: E402
from workloads.events import read_events  # noqa: E402
from workloads.steps import read_steps  # noqa: E402

EMULATED_LOCK = "/tmp/edgeprof-emulated.lock"
PROFILE = "pi4"
NODES = 4  # parts 1 and 2: every sweep on a cluster of 4 nodes (the same quotas)
FIVE = 5  # part 3
# The mix: unequal neighbours, its Pi 4 nodes at the quota four packaged pi4 nodes get
# on a 2-core host (0.7 x 2 / 2.8 = 0.5 cores), its Pi 3Bs in the packaged 3:7 ratio
# (0.214) with their 100 Mbit links, so its Pi 4s are part 1's. Defined for the run
# ($EDGEPROF_PROFILES).
MIX = "mix-bench-pipeline"
MIX_YAML = f"""profiles:
  pi4-bench-pipeline: {{link_mbit: 1000, memory_mb: 4096, cpu_cores: 0.5, board_cores: 4,
    description: "pi4 at the quota of 4 pi4 nodes on 2 host cores"}}
  pi3b-bench-pipeline: {{link_mbit: 100, memory_mb: 1024, cpu_cores: 0.2143, board_cores: 4,
    description: "pi3b at the same scale"}}
mixes:
  {MIX}:
    description: Pi 4, Pi 3B, Pi 4, Pi 3B (bench_pipeline)
    nodes:
      - {{profile: pi4-bench-pipeline, count: 1}}
      - {{profile: pi3b-bench-pipeline, count: 1}}
      - {{profile: pi4-bench-pipeline, count: 1}}
      - {{profile: pi3b-bench-pipeline, count: 1}}
"""
INTERVAL_S = 0.2  # the agent's sampling: the byte window needs a few samples inside it
CLUSTER = {"name": "emulated"}  # --cluster
REUSE = {"dir": False, "resume": False}  # --tables-from, --resume
EDGE_SAMPLES = 2  # samples' worth of time left out at each end of the byte window
BATCH = 32  # global batch of every cell of parts 1 and 2 (divides by M = 8 and by R x D)
MODELS = {"lenet-cnn": None, "resnet": 20, "mobilenetv2": None}
# Training samples per cell: enough steps that the byte window holds several samples.
SAMPLES = {"lenet-cnn": 2560, "resnet": 640, "mobilenetv2": 384}
QUICK_SAMPLES = {"lenet-cnn": 1280, "resnet": 480, "mobilenetv2": 320}
VAL_SAMPLES = 64
INFER_SAMPLES = 800  # part 3's inference stream: 20 batches of 40, 4 per replica

# Keras's MobileNetV2 (ImageNet, with the Pi work's GlobalAveragePooling, Dropout and
# Dense on top: 157 layers, the input layer counted) per top-level module of ours:
# stem conv (Input + Conv1), BN, ReLU6; block 0 (depthwise, BN, ReLU, project, BN);
# blocks 1-16: expand, BN, ReLU, depthwise, BN, ReLU, project, BN, plus ZeroPadding2D
# where the stride is 2 (blocks 1, 3, 6, 13) or Add where the skip is kept (2, 4, 5,
# 7-9, 11, 12, 14, 15): 9 layers, 8 for blocks 10 and 16; head conv, BN, ReLU6; pool
# (GlobalAveragePooling2D), flatten (Dropout), linear (Dense).
KERAS_LAYERS = (2, 1, 1, 5, 9, 9, 9, 9, 9, 9, 9, 9, 9, 8, 9, 9, 9, 9, 9, 8, 1, 1, 1, 1, 1, 1)
PAPER_SPLIT_KERAS = (27, 27, 36, 53, 14)
assert sum(KERAS_LAYERS) == 157 and len(KERAS_LAYERS) == 26


def keras_counts(split: tuple[int, ...]) -> tuple[int, ...]:
    """Our split of MobileNetV2's 26 modules as counts of the Keras model's 157 layers."""
    bounds = [sum(split[:s]) for s in range(len(split) + 1)]
    return tuple(sum(KERAS_LAYERS[a:b]) for a, b in zip(bounds, bounds[1:]))


def modules_of(keras_split: tuple[int, ...]) -> tuple[int, ...]:
    """The Keras layer counts of a split as our module counts (the cuts must fall
    between modules, as the Pi work's do)."""
    counts, taken, module = [], 0, 0
    for want in keras_split:
        start, total = module, 0
        while total < want:
            total += KERAS_LAYERS[module]
            module += 1
        if total != want:
            raise ValueError(f"{keras_split} cuts inside a module")
        counts.append(module - start)
        taken += total
    return tuple(counts)


PAPER_SPLIT = modules_of(PAPER_SPLIT_KERAS)  # (6, 3, 4, 6, 7)


# ---------------------------------------------------------------- running sweeps

def pipe_cell(model: str, devices: int, micro: int, schedule: str, samples: int, *,
              replicas: int = 1, split: str = "balanced", batch: int = BATCH) -> CellConfig:
    return validate(CellConfig(engine="torch-pipe", model=model, layers=MODELS[model],
                               batch=batch // replicas, devices=devices, sync="sync",
                               max_samples=samples, dataset="synthetic",
                               microbatches=micro, schedule=schedule, replicas=replicas,
                               split=split))


def dp_cell(engine: str, model: str, devices: int, samples: int,
            batch: int = BATCH) -> CellConfig:
    """Data parallel (or one node) on the same global batch: batch / D per worker."""
    return validate(CellConfig(engine=engine, model=model, layers=MODELS[model],
                               batch=batch // devices, devices=devices, sync="sync",
                               placement="colocated", max_samples=samples,
                               dataset="synthetic"))


@contextlib.contextmanager
def emulated_lock():
    """The emulated cluster's lock for one sweep (closing the file releases it)."""
    with open(EMULATED_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def sweep(cells: list[CellConfig], profile: str, out: Path, nodes: int = NODES,
          val_samples: int = VAL_SAMPLES) -> list[dict]:
    """One sweep on an emulated cluster of ``nodes`` nodes brought up for it (the quotas
    depend on how many nodes share the host: the same count for every sweep compared);
    its cells' records. ``--cluster local`` runs it on local processes instead (a check
    of this script); ``--tables-from`` and ``--resume`` read a kept run's records."""
    if REUSE["dir"] or REUSE["resume"]:
        kept = kept_records(cells, out)
        if REUSE["dir"] or all(r and r["status"] == "ok" for r in kept):
            return [r for r in kept if r]
    settings = dict(cells=cells, out_dir=out, interval_s=INTERVAL_S,
                    val_samples=val_samples, resume=REUSE["resume"])
    if CLUSTER["name"] == "local":
        run_sweep(SweepSettings(**settings), progress=False)
    else:
        with emulated_lock():
            with contextlib.suppress(Exception):  # a cluster left up by a crashed run
                emulated.attach()
                emulated.down()
            emulated.up(nodes, profile)
            try:
                run_sweep(SweepSettings(**settings, cluster=cluster_settings(
                    "emulated", profile=profile)), progress=False)
            finally:
                emulated.down()
    return [r for r in kept_records(cells, out) if r]


def kept_records(cells: list[CellConfig], out: Path) -> list[dict | None]:
    """Each cell's latest record in a kept sweep folder (None where it has none), with
    its attempt's folder."""
    latest = {}
    path = out / "results.jsonl"
    for line in path.open() if path.exists() else ():
        record = json.loads(line)
        record["_dir"] = out / "cells" / record["cell_id"] / f"attempt-{record['attempt']}"
        latest[record["cell_id"]] = record
    return [latest.get(cell.cell_id) for cell in cells]


# ---------------------------------------------------------------- what a cell measured

def bytes_per_step(record: dict) -> float | None:
    """Bytes all worker nodes sent per step, from their agents' eth0 counters between
    two steps well inside the epoch (module doc)."""
    cell_dir = record["_dir"]
    lines = [line for line in read_steps(cell_dir / "events" / "steps-worker-0.jsonl")
             if line.get("epoch") == 1 and "t" in line]
    edge = EDGE_SAMPLES * INTERVAL_S
    begin = lines[0]["t"] + lines[0]["step_s"] + edge  # after step 0 (and the probe)
    end = lines[-1]["t"] + lines[-1]["step_s"] - edge  # before validation
    inside = [line for line in lines[1:] if line["t"] >= begin
              and line["t"] + line["step_s"] <= end]
    if len(inside) < 2:
        return None
    t0, t1 = inside[0]["t"], inside[-1]["t"] + inside[-1]["step_s"]
    sent = 0.0
    for node_dir in (cell_dir / "metrics").iterdir():
        points = [p for _, p in read_points(node_dir, ("net",))
                  if p.tags.get("interface") == "eth0"]  # emulated nodes' own link
        if len(points) < 2:
            return None
        sent += _counter_at(points, t1) - _counter_at(points, t0)
    return sent / len(inside)


def _counter_at(points, t_s: float) -> float:
    """eth0's sent_bytes at ``t_s``, linear between the samples around it."""
    t_ms = t_s * 1000
    before = [p for p in points if p.time_ms <= t_ms]
    after = [p for p in points if p.time_ms > t_ms]
    if not before or not after:
        raise ValueError("the byte window is outside the agent's samples")
    a, b = before[-1], after[0]
    va, vb = a.fields["sent_bytes"], b.fields["sent_bytes"]
    return va + (vb - va) * (t_ms - a.time_ms) / (b.time_ms - a.time_ms)


def starts(record: dict) -> dict[int, dict]:
    out = {}
    for path in (record["_dir"] / "events").glob("worker-*.jsonl"):
        start = next((e for e in read_events(path) if e.get("event") == "start"), None)
        if start:
            out[start["rank"]] = start
    return out


def split_check(record: dict) -> dict:
    """The chosen split against the best by exhaustive search, on the profile the
    stages measured (``layer_s`` of their start events), priced as the split was."""
    start = starts(record)[0]
    if "layer_s" not in start:
        return {}
    layers = len(start["layer_out_bytes"])
    profiles = [pipeline_split.LayerCosts(tuple(seconds), tuple(start["layer_out_bytes"]),
                                          (0,) * layers) for seconds in start["layer_s"]]
    cost = pipeline_split.timed_cost(profiles, start["link_bytes_per_s"])
    stages = len(profiles)
    chosen = tuple(start["split"])
    best = pipeline_split.exhaustive_split(cost, layers, stages)

    def per_stage(counts):
        bounds = [sum(counts[:s]) for s in range(stages + 1)]
        return [cost(s, bounds[s], bounds[s + 1]) for s in range(stages)]
    return {"split": chosen, "best": best, "cost": cost,
            "chosen_stage_s": per_stage(chosen), "best_stage_s": per_stage(best),
            "vs_best": max(per_stage(chosen)) / max(per_stage(best))}


def samples_per_s(record: dict) -> float | None:
    """Training samples/s: the global batch over the first epoch's steady step (every
    cell here trains the same global batch, so the rates are the steps' inverses)."""
    if record.get("status") != "ok" or not record.get("steady_step_ms"):
        return None
    pipelines = record.get("replicas") or 1
    global_batch = record["batch"] * (pipelines if record["engine"] == "torch-pipe"
                                      else record["devices"])
    return global_batch / record["steady_step_ms"] * 1000


def step_parts(record: dict) -> dict[str, float]:
    """Where a step went, as fractions: compute, communication, waiting. Data parallel:
    the step breakdown's means. A pipeline: its stages' mean compute over the schedule's
    time, its measured bubble (a stage idle waiting for a neighbour), the rest on the
    wire (and, with replicas, their allreduce)."""
    if record["engine"] == "torch-pipe" and record.get("pipe_step_ms"):
        compute = statistics.fmean(record["stage_compute_ms"]) / record["pipe_step_ms"]
        bubble = record.get("bubble_measured") or 0.0
        return {"compute": compute, "communication": max(0.0, 1 - compute - bubble),
                "bubble": bubble}
    parts = {"compute": record.get("compute_ms_mean") or 0.0,
             "communication": record.get("comm_ms_mean") or 0.0,
             "waiting": record.get("wait_ms_mean") or 0.0}
    total = sum(parts.values())
    return {name: value / total for name, value in parts.items()} if total else {}


def shares(record: dict) -> str:
    parts = step_parts(record)
    return "/".join(f"{100 * p:.0f}" for p in parts.values()) if parts else "-"


# ---------------------------------------------------------------- part 1: the grid

def pipeline_grid(quick: bool, out: Path) -> tuple[list[dict], list[str]]:
    models = ("lenet-cnn", "resnet") if quick else tuple(MODELS)
    micros = (4,) if quick else (1, 4, 8)
    samples = QUICK_SAMPLES if quick else SAMPLES
    cells, skipped = [], []
    for model in models:
        for stages in (2, 4):
            for micro in micros:
                for schedule in ("gpipe", "1f1b"):
                    if schedule == "1f1b" and micro < stages:
                        skipped.append(f"{_name(model)} S={stages} M={micro} 1F1B")
                        continue
                    cells.append(pipe_cell(model, stages, micro, schedule, samples[model]))
    return sweep(cells, PROFILE, out / "grid"), skipped


def grid_table(records: list[dict], skipped: list[str]) -> list[str]:
    rows = ["| model | S | M | schedule | step ms | bubble measured | GPipe (S-1)/(M+S-1) "
            "| schedule ms | predicted ms | measured/predicted | bytes/step | floor "
            "| bytes/floor | split | slowest stage vs best split | stage imbalance "
            "(predicted, measured) | peak stash MB per stage |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r["status"] != "ok":
            rows.append(f"| {_name(r['model'])} | {r['devices']} | {r['microbatches']} | "
                        f"{r['schedule']} | {r['status']}: {r.get('reason')} |")
            continue
        sent = bytes_per_step(r)
        floor = r.get("pipe_bytes_floor_per_step")
        check = split_check(r)
        rows.append("| " + " | ".join([
            _name(r["model"]), str(r["devices"]), str(r["microbatches"]), r["schedule"],
            _f(r.get("steady_step_ms"), 0), _f(r.get("bubble_measured"), 2),
            _f(r.get("bubble_gpipe"), 2), _f(r.get("pipe_step_ms"), 0),
            _f(r.get("pipe_step_ms_predicted"), 0), _f(r.get("pipe_step_vs_predicted"), 2),
            _kb(sent), _kb(floor), _f(sent / floor if sent and floor else None, 3),
            r.get("pipe_split") or "-",
            _f(check.get("vs_best"), 3) + (f" (best {_counts(check['best'])})"
                                            if check and check["vs_best"] > 1 + 1e-9
                                            else ""),
            f"{_f(r.get('stage_imbalance_predicted'), 2)}, {_f(r.get('stage_imbalance'), 2)}",
            ", ".join(f"{m:.1f}" for m in r.get("stage_stash_mb") or [])]) + " |")
    for name in skipped:
        rows.append(f"| {name}: skipped, 1F1B needs M >= S |")
    return rows


# ---------------------------------------------------------------- part 2: strategies

STRATEGIES = ("1 node", "torch-ddp", "torch PS sync", "torch-pipe", "hybrid 2x2")


def strategy_grid(quick: bool) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Part 2's models and device counts."""
    return (("lenet-cnn",), (2,)) if quick else (tuple(MODELS), (2, 4))


def strategies(quick: bool, grid: list[dict], out: Path) -> dict[str, list[dict]]:
    models, device_counts = strategy_grid(quick)
    samples = QUICK_SAMPLES if quick else SAMPLES
    results = {}
    for profile in (PROFILE, MIX):
        cells = []
        for model in models:
            cells.append(dp_cell("torch", model, 1, samples[model]))
            for devices in device_counts:
                cells += [dp_cell("torch-ddp", model, devices, samples[model]),
                          dp_cell("torch", model, devices, samples[model])]
                if devices == 4:
                    cells.append(pipe_cell(model, 4, 4, "gpipe", samples[model], replicas=2))
                have = {r["cell_id"] for r in grid} if profile == PROFILE else set()
                cells += [c for c in (pipe_cell(model, devices, m, "gpipe", samples[model])
                                      for m in (4, 8)) if c.cell_id not in have]
        records = sweep(cells, profile, out / f"strategies-{profile}")
        if profile == PROFILE:
            records += grid
        results[profile] = records
    return results


def strategy_of(record: dict) -> str:
    if record["engine"] == "torch-pipe":
        return "hybrid 2x2" if (record.get("replicas") or 1) > 1 else "torch-pipe"
    if record["devices"] == 1:
        return "1 node"
    return {"torch-ddp": "torch-ddp", "torch": "torch PS sync"}[record["engine"]]


def best_by_strategy(records: list[dict], model: str, devices: int) -> dict[str, dict]:
    """Each strategy's fastest ok cell of a model on ``devices`` (pipelines: of the
    GPipe M=4 and M=8 cells, ``replicas`` 1; the one-node cell at every device count)."""
    out: dict[str, dict] = {}
    for r in records:
        if r["model"] != model or samples_per_s(r) is None:
            continue
        if r["engine"] == "torch-pipe" and (r.get("replicas") or 1) == 1 and (
                r["schedule"] != "gpipe" or r["microbatches"] not in (4, 8)):
            continue
        if r["devices"] not in (1, devices):
            continue
        name = strategy_of(r)
        if name not in out or samples_per_s(r) > samples_per_s(out[name]):
            out[name] = r
    return out


def strategy_table(results: dict[str, list[dict]], quick: bool) -> tuple[list[str], list]:
    rows = ["| nodes | model | D | " + " | ".join(STRATEGIES) + " | wins | why |",
            "|---|---|---|" + "---|" * len(STRATEGIES) + "---|---|"]
    figure = []
    models, device_counts = strategy_grid(quick)
    for profile, records in results.items():
        for model in models:
            for devices in device_counts:
                best = best_by_strategy(records, model, devices)
                rates = {name: samples_per_s(best[name]) if name in best else None
                         for name in STRATEGIES}
                cells = [f"{rate:.0f} ({shares(best[name])})" if rate else "-"
                         for name, rate in rates.items()]
                multi = {n: v for n, v in rates.items() if v and n != "1 node"}
                winner = max(multi, key=multi.get) if multi else "-"
                rows.append(f"| {_nodes(profile)} | {_name(model)} | {devices} | "
                            + " | ".join(cells) + f" | {winner} | "
                            + why(best, winner) + " |")
                figure.append((profile, model, devices, rates))
    return rows, figure


def why(best: dict[str, dict], winner: str) -> str:
    """One line: the winner's step against the others', by compute, communication and
    waiting (the bubble, for a pipeline)."""
    if winner not in best:
        return "-"
    notes = []
    w = best[winner]
    for name in ("torch-ddp", "torch PS sync", "torch-pipe"):
        if name == winner or name not in best:
            continue
        parts = step_parts(best[name])
        if parts:
            biggest = max(parts, key=parts.get)
            notes.append(f"{name}: {biggest} {100 * parts[biggest]:.0f}%")
    speed = samples_per_s(w) / samples_per_s(best["1 node"]) if "1 node" in best else None
    lead = f"{_f(speed, 2)}x one node" if speed else ""
    return "; ".join(x for x in [lead, *notes] if x)


def plot(figure: list, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(dict.fromkeys(p for p, *_ in figure))
    fig, axes = plt.subplots(1, len(profiles), figsize=(6 * len(profiles), 4), sharey=True,
                             squeeze=False)
    width = 0.8 / len(STRATEGIES)
    for ax, profile in zip(axes[0], profiles):
        groups = [(m, d, rates) for p, m, d, rates in figure if p == profile]
        for k, name in enumerate(STRATEGIES):
            xs = [i + (k - (len(STRATEGIES) - 1) / 2) * width for i in range(len(groups))]
            # Each strategy's rate over one node's (node 0) for the same model: models
            # thousands of samples/s apart share one linear axis.
            ax.bar(xs, [(rates[name] or 0) / rates["1 node"] if rates["1 node"] else 0
                        for _, _, rates in groups], width, label=name)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{_name(m)}\nD={d}" for m, d, _ in groups], fontsize=8)
        ax.set_title(_nodes(profile))
        ax.set_ylabel("training samples/s over one node's (global batch 32)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


# ---------------------------------------------------------------- part 3: five stages

def five_stages(quick: bool, out: Path) -> tuple[list[str], list[dict]]:
    samples = QUICK_SAMPLES["mobilenetv2"] if quick else SAMPLES["mobilenetv2"]
    splits = ("balanced",) if quick else ("balanced", ",".join(map(str, PAPER_SPLIT)))
    # Batch 40: M = 8 micro-batches of 5 (and 5 replicas of 8, were they run).
    cells = [pipe_cell("mobilenetv2", 5, 8, "gpipe", samples, split=split, batch=40)
             for split in splits]
    records = sweep(cells, PROFILE, out / "five", nodes=FIVE)
    rows = ["| split | modules per stage | as Keras layers (of 157) | predicted stage ms "
            "per micro-batch (profile + link) | slowest vs best split | step ms "
            "| schedule ms / predicted "
            "| samples/s | peak stash MB per stage |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r["status"] != "ok":
            rows.append(f"| {r['split']} | {r['status']}: {r.get('reason')} |")
            continue
        check = split_check(r)
        counts = tuple(map(int, r["pipe_split"].split(",")))
        rows.append("| " + " | ".join([
            "balanced (measured)" if r["split"] == "balanced" else "the Pi work's, by hand",
            _counts(counts), _counts(keras_counts(counts)),
            ", ".join(f"{1e3 * s:.0f}" for s in check["chosen_stage_s"]),
            _f(check["vs_best"], 3), _f(r.get("steady_step_ms"), 0),
            f"{_f(r.get('pipe_step_ms'), 0)} / {_f(r.get('pipe_step_ms_predicted'), 0)}",
            _f(samples_per_s(r), 1),
            ", ".join(f"{m:.1f}" for m in r.get("stage_stash_mb") or [])]) + " |")
    if records and records[0]["status"] == "ok":
        check = split_check(records[0])
        paper = [check["cost"](s, a, b) for s, (a, b) in enumerate(_bounds(PAPER_SPLIT))]
        rows.append(f"\nOn the balanced cell's profile the Pi work's split "
                    f"{_counts(PAPER_SPLIT)} would price its stages at "
                    + ", ".join(f"{1e3 * s:.0f}" for s in paper)
                    + f" ms (slowest {max(paper) / max(check['chosen_stage_s']):.2f}x the "
                    "balanced split's).")
    return rows, records


def five_inference(out: Path) -> list[str]:
    """``--task infer``: the test stream (``INFER_SAMPLES``, batches of 40) through the
    five stages, on one node, and over five whole-model replicas (1/5 of it each)."""
    def cell(devices: int, replicas: int, micro: int) -> CellConfig:
        return validate(CellConfig(engine="torch-pipe", model="mobilenetv2", layers=None,
                                   batch=40, devices=devices, max_samples=200,
                                   dataset="synthetic", microbatches=micro,
                                   schedule="gpipe", replicas=replicas, split="balanced",
                                   task="infer"))
    shapes = {"one node": cell(1, 1, 1), "five stages (GPipe, M = 8)": cell(FIVE, 1, 8),
              "five replicas": cell(FIVE, FIVE, 1)}
    records = sweep(list(shapes.values()), PROFILE, out / "five-infer", nodes=FIVE,
                    val_samples=INFER_SAMPLES)
    rows = ["| inference | nodes | samples/s | x one node | ms between batches at the last "
            "stage (`infer_period_ms`) | latency ms (`infer_latency_ms`) |",
            "|---|---|---|---|---|---|"]
    alone = records[0].get("samples_per_s") if records[0]["status"] == "ok" else None
    for (name, c), r in zip(shapes.items(), records):
        if r["status"] != "ok":
            rows.append(f"| {name} | {c.devices} | {r['status']}: {r.get('reason')} |")
            continue
        rate = r.get("samples_per_s")
        rows.append(f"| {name} | {c.devices} | {_f(rate, 1)} | "
                    f"{_f(rate / alone if rate and alone else None, 2)} | "
                    f"{_f(r.get('infer_period_ms'), 0)} | {_f(r.get('infer_latency_ms'), 0)} |")
    return rows


# ---------------------------------------------------------------- formatting

def _bounds(counts):
    edges = [sum(counts[:s]) for s in range(len(counts) + 1)]
    return list(zip(edges, edges[1:]))


def _name(model: str) -> str:
    return {"lenet-cnn": "LeNet-CNN", "resnet": "ResNet-20", "mobilenetv2": "MobileNetV2"}[model]


def _nodes(profile: str) -> str:
    return "4 x Pi 4" if profile == PROFILE else "Pi 4, Pi 3B, Pi 4, Pi 3B"


def _counts(counts) -> str:
    return "/".join(map(str, counts))


def _f(value, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _kb(value) -> str:
    return "-" if value is None else f"{value / 1024:,.0f} KB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a subset: a few minutes")
    parser.add_argument("--figure", type=Path, default=None,
                        help="where to save part 2's figure (PNG)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the sweeps' folders here (default: a temporary one)")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run, e.g. 1,3")
    parser.add_argument("--cluster", choices=("emulated", "local"), default="emulated",
                        help="local: check this script on local processes (no links, "
                             "no bytes, one host's cores shared)")
    parser.add_argument("--resume", action="store_true",
                        help="with --keep DIR: run again only the cells of a kept run "
                             "that have no ok record (a sweep's cluster taken down under "
                             "it), and print every table")
    parser.add_argument("--tables-from", type=Path, default=None,
                        help="print the tables (and figure) of an earlier run kept with "
                             "--keep DIR, running nothing")
    args = parser.parse_args()
    CLUSTER["name"] = args.cluster
    REUSE["dir"] = args.tables_from is not None
    REUSE["resume"] = args.resume
    if args.tables_from:
        args.keep = args.tables_from
    parts = {int(p) for p in args.parts.split(",")}
    with contextlib.ExitStack() as stack:
        out = args.keep or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="bench-pipeline-")))
        profiles_file = out / "profiles.yaml"
        out.mkdir(parents=True, exist_ok=True)
        profiles_file.write_text(MIX_YAML)
        os.environ["EDGEPROF_PROFILES"] = str(profiles_file)  # the mix, for every process
        mode = "quick" if args.quick else "full"
        print(f"bench_pipeline ({mode}): emulated {PROFILE} nodes, synthetic data, global "
              f"batch {BATCH}, agent every {INTERVAL_S} s; training samples per cell "
              f"{QUICK_SAMPLES if args.quick else SAMPLES}\n")
        grid: list[dict] = []
        if 1 in parts or 2 in parts:
            grid, skipped = pipeline_grid(args.quick, out)
            print("## 1. The pipeline grid (4 x Pi 4 emulated)\n")
            print("\n".join(grid_table(grid, skipped)) + "\n", flush=True)
        if 3 in parts:
            rows, _ = five_stages(args.quick, out)
            print("## 3. MobileNetV2 in five stages on five Pi 4 nodes (GPipe, M = 8, "
                  "batch 40)\n")
            print("\n".join(rows) + "\n", flush=True)
            print("\n".join(five_inference(out)) + "\n", flush=True)
        if 2 in parts:
            results = strategies(args.quick, grid, out)
            rows, figure = strategy_table(results, args.quick)
            print("## 2. Strategies on the same devices: training samples/s "
                  "(compute/communication/waiting % of a step)\n")
            print("\n".join(rows) + "\n")
            if args.figure:
                plot(figure, args.figure)
                print(f"figure: {args.figure}\n")


if __name__ == "__main__":
    main()
