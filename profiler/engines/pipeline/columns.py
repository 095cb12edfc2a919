"""A pipeline cell's own columns: the split, each stage's time, the bubble, and the
measured step beside what the pipeline model predicts from the stages.

Every stage process (``workloads.torch_pipeline``) says in its ``start`` event where it
sits (``stage``, ``replica``), the split, its link's bytes/s and the bytes of each
boundary's activation per micro-batch; each of its step lines holds the forward and
backward compute of its micro-batches (``fwd_s``, ``bwd_s``) and the schedule's whole
time (``pipe_s``). Per stage, over the measured steps (the run's first left out):

- **compute**: ``fwd_s + bwd_s``; **wire**: the stage's activations and gradients at
  the link's rate (each boundary it touches, both ways, M micro-batches);
- **bubble**: what is left of the schedule's time, idle waiting for a neighbour, as a
  fraction of it: ``(pipe_s - compute - wire) / pipe_s``. GPipe's prediction for a
  balanced pipeline is ``(S - 1) / (M + S - 1)`` (Huang et al. 2019);
- **predicted step**: ``(M + S - 1)`` times the slowest stage's time per micro-batch
  (its compute over M plus sending its output and receiving that output's gradient),
  beside the measured schedule time: when measured over predicted is well above 1, the
  network or the schedule's overheads, not the split, limit the pipeline.
- **latency** and **period** (``--task infer``): a batch's way from entering the
  first stage to leaving the last, and the time between two batches leaving the last
  stage (in a stream, the last stage waits for the next batch as soon as it is done);
- **stash**: the most bytes of activations a stage held for its backward passes at once
  (autograd's saved tensors, weights left out), the largest over the steps;
- **layer profile**: the per-layer times, output bytes and parameters the split was
  chosen from, kept so ``edgeprof predict`` can cut the model as the engine would at
  another stage count (docs/predict.md).
"""

from __future__ import annotations

import statistics

from workloads import pipeline_split

from ...column import Column


def _column(name: str, kind: str, unit: str, description: str) -> Column:
    return Column(name, kind, unit, description, __name__, "pipeline")


COLUMNS = tuple(_column(*row) for row in [
    ("pipe_stages", "int", "", "the pipeline's stages, S"),
    ("pipe_split", "str", "", "the layers of each stage in order, e.g. 5,10"),
    ("stage_compute_ms", "list", "ms", "each stage's forward + backward compute per step"),
    ("stage_imbalance", "float", "", "the slowest stage's compute over the mean (1: balanced)"),
    ("stage_imbalance_predicted", "float", "", "the same, from the profile the split used"),
    ("bubble_measured", "float", "", "each stage's idle share of the schedule, mean over stages"),
    ("bubble_gpipe", "float", "", "GPipe's predicted bubble, (S-1)/(M+S-1)"),
    ("pipe_step_ms", "float", "ms", "the schedule's time per step (the slowest stage's)"),
    ("pipe_step_ms_predicted", "float", "ms", "the pipeline model's step"),
    ("pipe_step_vs_predicted", "float", "", "measured step over predicted"),
    ("pipe_bytes_floor_per_step", "int", "bytes", "the least bytes a step must move"),
    ("link_mbit_s", "float", "Mbit/s", "the link rate measured before training"),
    ("stage_stash_mb", "list", "MB", "per stage, the most activations held for backward"),
    ("pipe_layer_ms", "list", "ms", "per layer, forward + backward on one micro-batch as "
     "profiled before the split (mean over the stages' nodes)"),
    ("pipe_layer_out_bytes", "list", "bytes", "per layer, its output's bytes per micro-batch"),
    ("pipe_layer_params", "list", "", "per layer, its trainable parameters"),
    ("infer_latency_ms", "float", "ms", "--task infer: a batch's time through the pipeline"),
    ("infer_period_ms", "float", "ms", "--task infer: time between two batches leaving it"),
])


def columns(workers: dict[int, list[dict]], starts: dict[int, dict]) -> dict:
    """The pipeline columns of a cell (empty for a cell that is not a pipeline)."""
    first = starts.get(0) or {}
    stages = first.get("stages")
    if not stages:
        return {}
    micro, link, boundary = _shape(first)
    compute, pipe, wire, stash = [], [], [], []
    for stage in range(stages):
        lines = _stage_lines(workers, starts, stage)
        if not lines:
            return {"pipe_stages": stages, "pipe_split": _split_text(first)}
        compute.append(statistics.fmean(s["fwd_s"] + s["bwd_s"] for s in lines))
        pipe.append(statistics.fmean(s["pipe_s"] for s in lines))
        stash.append(max(s.get("stash_mb", 0.0) for s in lines))
        wire.append(_wire_s(stage, micro, boundary, link))
    return _stage_columns(workers, starts, first, compute, pipe, wire, stash)


def _shape(first: dict) -> tuple[int, float | None, list[int]]:
    """A pipeline's micro-batches, link bytes/s and boundary bytes, from the first
    stage's start event."""
    return (first.get("microbatches") or 1, first.get("link_bytes_per_s"),
            first.get("boundary_bytes") or [])


def _stage_lines(workers: dict[int, list[dict]], starts: dict[int, dict],
                 stage: int) -> list[dict]:
    """The measured schedule lines of ``stage``'s processes (the run's first step out)."""
    return [line for rank, lines in workers.items()
            if (starts.get(rank) or {}).get("stage") == stage
            for line in lines if (line.get("epoch"), line.get("step")) != (1, 0)
            and "pipe_s" in line]


def _wire_s(stage: int, micro: int, boundary: list[int], link: float | None) -> float:
    """A step's time on the wire for ``stage``: the activations and gradients of each
    boundary it touches, M micro-batches, at the link's rate (0 with no rate known)."""
    touched = [boundary[b] for b in (stage - 1, stage) if 0 <= b < len(boundary)]
    return 2 * micro * sum(touched) / link if link else 0.0


def _stage_columns(workers: dict[int, list[dict]], starts: dict[int, dict], first: dict,
                   compute: list[float], pipe: list[float], wire: list[float],
                   stash: list[float]) -> dict:
    """The columns from each stage's mean compute, schedule and wire time and its most
    stashed MB, beside what the pipeline model predicts."""
    stages = first.get("stages")
    micro, link, boundary = _shape(first)
    replicas = first.get("replicas") or 1
    bubbles = [max(0.0, (p - c - w) / p) for p, c, w in zip(pipe, compute, wire) if p > 0]
    per_micro = [c / micro + (2 * boundary[s] / link if link and s < len(boundary) else 0.0)
                 for s, c in enumerate(compute)]
    predicted = pipeline_split.predicted_step_s(per_micro, micro)
    predicted_stage = first.get("predicted_stage_s") or []
    return {
        "pipe_stages": stages,
        "pipe_split": _split_text(first),
        "stage_compute_ms": [round(c * 1e3, 3) for c in compute],
        "stage_imbalance": _round(pipeline_split.imbalance(compute)),
        "stage_imbalance_predicted": _round(pipeline_split.imbalance(predicted_stage)),
        "bubble_measured": _round(statistics.fmean(bubbles)) if bubbles else None,
        "bubble_gpipe": _round(pipeline_split.gpipe_bubble(stages, micro)),
        "pipe_step_ms": round(max(pipe) * 1e3, 3),
        "pipe_step_ms_predicted": round(predicted * 1e3, 3),
        "pipe_step_vs_predicted": _round(max(pipe) / predicted) if predicted else None,
        "pipe_bytes_floor_per_step": 2 * micro * sum(boundary) * replicas,
        "link_mbit_s": round(link * 8 / 1e6, 1) if link else None,
        "stage_stash_mb": [round(m, 2) for m in stash],
        **_layer_profile(first),
        **(_inference(workers, starts, stages, pipe[-1]) if first.get("task") == "infer"
           else {}),
    }


def _inference(workers: dict[int, list[dict]], starts: dict[int, dict], stages: int,
               last_pipe_s: float) -> dict:
    """A stream's latency and period. Latency: a batch's way from entering its
    pipeline's first stage (its line's ``t + data_s``) to leaving the last (``t +
    step_s``), step by step on the controller's clock (the lines are aligned), the mean
    over pipelines and batches; period: the last stage's time per batch, the time
    between two batches leaving it."""
    ends: dict[tuple, float] = {}
    begins: dict[tuple, float] = {}
    for rank, lines in workers.items():
        start = starts.get(rank) or {}
        for line in lines:
            key = (start.get("replica"), line.get("epoch"), line.get("step"))
            if start.get("stage") == 0:
                begins[key] = line["t"] + line.get("data_s", 0.0)
            if start.get("stage") == stages - 1:
                ends[key] = line["t"] + line.get("step_s", 0.0)
    latencies = [ends[k] - begins[k] for k in ends if k in begins and k[1:] != (1, 0)]
    return {"infer_latency_ms": (round(statistics.fmean(latencies) * 1e3, 3)
                                 if latencies else None),
            "infer_period_ms": round(last_pipe_s * 1e3, 3)}


def _layer_profile(first: dict) -> dict:
    """The layer profile the split was chosen from (``edgeprof predict`` re-splits the
    model with it at other stage counts): each layer's ms, the mean over the stages'
    nodes; its output's bytes and its parameters."""
    layer_s = first.get("layer_s")
    if not layer_s:
        return {}
    return {"pipe_layer_ms": [round(statistics.fmean(t) * 1e3, 4) for t in zip(*layer_s)],
            "pipe_layer_out_bytes": first.get("layer_out_bytes"),
            "pipe_layer_params": first.get("layer_params")}


def _split_text(start: dict) -> str | None:
    split = start.get("split")
    return ",".join(str(n) for n in split) if split else None


def _round(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None
