"""A pipeline's terms in the step model (``Engine.comm`` ``pipeline``: ``torch-pipe``):
its stages' compute, the activations crossing its boundaries, and its bubble, at a stage
count, board or link the sweep did not run.

The engine prices each measured cell with its own model (``engines/pipeline/columns``,
``workloads.pipeline_split``): a stage's time per micro-batch is its layers' compute plus
sending its output forward and receiving that output's gradient back, and a step is
(M + S - 1) times the slowest stage's (``pipeline_split.predicted_step_s``: GPipe's and
1F1B's fill and drain; the bubble, (S - 1) / (M + S - 1) of it, is the S - 1 slots the
slowest stage waits). This module asks that model about other stage counts, with its
critical path priced stage by stage: (M - 1) x the slowest stage's time plus every
stage's once, which on equal stages is (M + S - 1) x t and on a cut with one slow stage
(a convolution ahead of cheap layers) is what the step measured (with a fixed cost per
slot, the engine's bound predicted LeNet-CNN's 4-5 stage steps +28-41% on the emulated
check; this, with a cost per step, +2-11%; docs/predict.md):

- **per layer**, its forward + backward ms on one micro-batch: the layer profile the
  engine split by (``pipe_layer_ms``, each layer timed before training) x one factor,
  fitted by least squares through 0 so that the profile's stage sums match every
  measured stage's compute (``stage_compute_ms``) of every cell: the profile gives the
  layers' shape, training measured their scale (the profile times one micro-batch alone;
  a step runs M of them beside the other stages);
- **the cut**: ``pipeline_split.choose`` on those layers, each stage priced on its own
  node (a mix's Pi 4 takes more layers), as the engine cuts (``balanced``, ``params``,
  ``layers``);
- **the boundaries**: each cut's output bytes per micro-batch (``pipe_layer_out_bytes``),
  forward and its gradient back.

What ``model.py`` fits on top (the step's measured rest): a cost per step
(``round_ms``: the optimizer, the data, the schedule's own handling and its messages'
latency) and the wire's coefficient on the boundaries' time along the critical path.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from workloads import pipeline_split

from ..errors import ConfigError


@dataclass(frozen=True)
class PipeShape:
    """A pipeline configuration's layers on the fitted board, and its micro-batches."""

    layer_ms: tuple[float, ...]  # per layer, forward + backward on one micro-batch
    out_bytes: tuple[int, ...]  # per layer, its output per micro-batch
    params: tuple[int, ...]
    microbatches: int
    split: str  # balanced, params or layers (a hand split names one stage count)
    profile_scale: float  # the measured stages' compute over the profile's


@dataclass(frozen=True)
class Stages:
    """One cut of the model into stages, priced: per stage and micro-batch, compute and
    the ideal wire time of its output and that output's gradient."""

    counts: tuple[int, ...]
    compute_ms: tuple[float, ...]
    wire_ms: tuple[float, ...]
    boundary_bytes: tuple[int, ...]
    microbatches: int

    @property
    def bottleneck(self) -> int:
        """The slowest stage (compute and its boundary's wire)."""
        times = [c + w for c, w in zip(self.compute_ms, self.wire_ms)]
        return times.index(max(times))

    def _critical(self, per_stage: tuple[float, ...]) -> float:
        """The schedule's critical path over one quantity per stage: the slowest stage's
        M micro-batches, and the other stages' one each as the first fills the pipeline
        and the last drains it, (M - 1) x t_b + sum of t_s. On S equal stages that is the
        engine's (M + S - 1) x t (``pipeline_split.predicted_step_s``)."""
        return (self.microbatches - 1) * per_stage[self.bottleneck] + sum(per_stage)

    @property
    def bubble(self) -> float:
        """The slowest stage's idle share of the step (compute and ideal wire): the other
        stages' fill and drain; GPipe's (S - 1) / (M + S - 1) on equal stages."""
        times = tuple(c + w for c, w in zip(self.compute_ms, self.wire_ms))
        step = self._critical(times)
        return 1 - self.microbatches * times[self.bottleneck] / step if step else 0.0

    def compute_step_ms(self) -> float:
        """The stages' compute along the critical path: the slowest's work and the wait
        for the others (the bubble)."""
        return self._critical(self.compute_ms)

    def features(self) -> list[float]:
        """The values of ``scheme.TERMS`` (round_ms, peer_ms, wire): a cost per step; no
        per-peer term; the boundaries' ideal wire time along the critical path."""
        return [1.0, 0.0, self._critical(self.wire_ms)]

    def worker_bytes(self) -> float:
        """The busiest stage's bytes per step, sent and received: each boundary it
        touches, both ways, M micro-batches (the engine's ``_wire_s``)."""
        b = self.boundary_bytes
        return max(2 * self.microbatches * sum(b[j] for j in (s - 1, s) if 0 <= j < len(b))
                   for s in range(len(self.counts)))


def split_counts(text) -> tuple[int, ...]:
    """A cell's ``pipe_split`` (``5,10``) as layer counts per stage."""
    return tuple(int(part) for part in str(text).split(","))


def shape_of(records: list[dict], label: str) -> PipeShape:
    """The configuration's layers from its cells' profiles and measured stages;
    ``ConfigError`` naming what a cell lacks."""
    profiles = [r.get("pipe_layer_ms") for r in records]
    if not all(profiles) or not all(r.get("pipe_layer_out_bytes") for r in records):
        raise ConfigError(f"{label}: its cells do not record the layer profile the split "
                          "used (pipe_layer_ms): rerun them with this edgeprof")
    if any(not r.get("stage_compute_ms") or not r.get("pipe_split") for r in records):
        raise ConfigError(f"{label}: a cell has no stage times (stage_compute_ms): rerun "
                          "it with this edgeprof")
    if len({len(p) for p in profiles}) > 1:
        raise ConfigError(f"{label}: its cells profiled different layer counts: fit one "
                          "model's sweep")
    layer_ms = [statistics.fmean(t) for t in zip(*profiles)]
    micro = int(records[0].get("microbatches") or 1)
    # Least squares through 0: measured stage compute per step = k x M x the profile's.
    predicted, measured = [], []
    for r in records:
        bounds = list(itertools.accumulate(split_counts(r["pipe_split"]), initial=0))
        predicted += [micro * sum(layer_ms[a:b]) for a, b in zip(bounds, bounds[1:])]
        measured += list(r["stage_compute_ms"])
    denominator = sum(p * p for p in predicted)
    scale = sum(p * m for p, m in zip(predicted, measured)) / denominator if denominator else 1
    params = records[0].get("pipe_layer_params") or [0] * len(layer_ms)
    split = str(records[0].get("split") or "balanced")
    return PipeShape(tuple(v * scale for v in layer_ms),
                     tuple(int(b) for b in records[0]["pipe_layer_out_bytes"]),
                     tuple(int(p) for p in params), micro, split, scale)


def stages_at(shape: PipeShape, scales: list[float], link_mbit: float,
              counts: tuple[int, ...] | None = None) -> Stages:
    """The model cut into ``len(scales)`` stages, stage s on a node ``scales[s]`` times
    as slow as the fitted board, over ``link_mbit``: the cut ``counts`` (a measured
    cell's), else the one the engine would choose (``pipeline_split.choose``)."""
    stages = len(scales)
    link_bytes_per_s = link_mbit * 1e6 / 8
    if counts is None:
        setting = pipeline_split.parse(shape.split)
        if isinstance(setting, tuple) and len(setting) != stages:
            raise ConfigError(f"--split {shape.split} cuts {len(setting)} stages: a hand "
                              f"split cannot be asked about {stages}")
        profiles = [pipeline_split.LayerCosts(tuple(t * c / 1e3 for t in shape.layer_ms),
                                              shape.out_bytes, shape.params) for c in scales]
        pipeline_split.check(setting, stages, len(shape.layer_ms), "the model")
        counts = pipeline_split.choose(setting, stages, profiles, link_bytes_per_s)
    bounds = list(itertools.accumulate(counts, initial=0))
    boundary = tuple(shape.out_bytes[bounds[s + 1] - 1] for s in range(stages - 1))
    compute = tuple(c * sum(shape.layer_ms[a:b])
                    for c, a, b in zip(scales, bounds, bounds[1:]))
    wire = tuple(2 * boundary[s] / link_bytes_per_s * 1e3 if s < stages - 1 else 0.0
                 for s in range(stages))
    return Stages(tuple(counts), compute, wire, boundary, shape.microbatches)
