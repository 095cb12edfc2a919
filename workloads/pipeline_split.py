"""Where to cut a model into pipeline stages: contiguous runs of its layers, one per node.

A model's *layers* here are the children of its top-level ``nn.Sequential`` (a residual
block is one layer: its skip connection stays inside its stage, so every schedule,
1F1B included, can run it). A split is the number of layers of each stage, in order
(``27,27,36,53,14``).

Ways to split (``--split``):

- ``balanced`` (the default): by measurement, as PipeDream's profiler and the Pi
  pipeline work do. Each node timed every layer's forward and backward on one
  micro-batch and sized its output (``profile_layers``); the split minimises the
  slowest stage, a stage costing its layers' time *on its own node* plus sending its
  output forward and receiving that output's gradient back over the link. Exact for
  this cost (dynamic programming over contiguous splits, ``min_max_split``).
- ``params``: equal trainable parameters per stage (the same search, each layer
  weighing its parameter count, nothing for the link).
- ``layers``: equal layer counts (the first stages take one more where it does not
  divide).
- by hand: ``27,27,36,53,14``, the layer counts, which must add up to the model's.

Pure Python on lists of numbers: the controller checks a split with it, a worker
chooses one with it, and a test or benchmark compares it with exhaustive search.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from profiler.errors import ConfigError

SPLITS = ("balanced", "params", "layers")


@dataclass(frozen=True)
class LayerCosts:
    """One node's profile of a model: per layer, forward+backward seconds on one
    micro-batch, the bytes of its output per micro-batch, and its trainable parameters."""

    seconds: tuple[float, ...]
    out_bytes: tuple[int, ...]
    params: tuple[int, ...]


def parse(text: str) -> str | tuple[int, ...]:
    """``balanced`` / ``params`` / ``layers``, or a hand split ``27,27,36`` as counts."""
    text = str(text).strip()
    if text in SPLITS:
        return text
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--split {text!r} is neither one of {', '.join(SPLITS)} nor layer "
                          "counts per stage: give e.g. --split balanced or --split 3,5") from None
    if any(count < 1 for count in counts):
        raise ConfigError(f"--split {text}: every stage needs at least one layer")
    return counts


def check(split: str | tuple[int, ...], stages: int, layers: int, model: str) -> None:
    """Refuse (one line) a split that cannot cut ``layers`` layers into ``stages``."""
    if stages > layers:
        raise ConfigError(f"--stages {stages} is more than {model}'s {layers} layers: give "
                          f"--stages {layers} or fewer")
    if isinstance(split, tuple):
        if len(split) != stages:
            raise ConfigError(f"--split {','.join(map(str, split))} gives {len(split)} stages "
                              f"and --stages is {stages}: give one count per stage")
        if sum(split) != layers:
            raise ConfigError(f"--split {','.join(map(str, split))} adds up to {sum(split)} "
                              f"layers, {model} has {layers}: make the counts add up to "
                              f"{layers}")


def even(layers: int, stages: int) -> tuple[int, ...]:
    """Equal layer counts, the remainder to the first stages."""
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if s < extra else 0) for s in range(stages))


def min_max_split(stage_cost, layers: int, stages: int) -> tuple[int, ...]:
    """The contiguous split of ``layers`` into ``stages`` that minimises the largest
    ``stage_cost(stage, first, end)`` (layers ``first..end-1`` on stage ``stage``).

    Dynamic programming, O(stages x layers^2) calls: exact for any cost, which is what
    lets each stage be priced on its own node.
    """
    inf = float("inf")
    # best[s][j]: the least bottleneck of stages 0..s-1 covering layers 0..j-1.
    best = [[inf] * (layers + 1) for _ in range(stages + 1)]
    cut = [[0] * (layers + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for j in range(s, layers - (stages - s) + 1):
            for i in range(s - 1, j):
                value = max(best[s - 1][i], stage_cost(s - 1, i, j))
                if value < best[s][j]:
                    best[s][j], cut[s][j] = value, i
    counts, j = [], layers
    for s in range(stages, 0, -1):
        i = cut[s][j]
        counts.append(j - i)
        j = i
    return tuple(reversed(counts))


def bottleneck(counts: Sequence[int], stage_cost) -> float:
    """The slowest stage of a split under ``stage_cost``."""
    bounds = list(itertools.accumulate(counts, initial=0))
    return max(stage_cost(s, bounds[s], bounds[s + 1]) for s in range(len(counts)))


def exhaustive_split(stage_cost, layers: int, stages: int) -> tuple[int, ...]:
    """The best split by trying every one (for tests and the benchmark)."""
    best, best_value = None, float("inf")
    for cuts in itertools.combinations(range(1, layers), stages - 1):
        bounds = (0, *cuts, layers)
        counts = tuple(b - a for a, b in zip(bounds, bounds[1:]))
        value = bottleneck(counts, stage_cost)
        if value < best_value:
            best, best_value = counts, value
    return best


def timed_cost(profiles: Sequence[LayerCosts], link_bytes_per_s: float | None):
    """``stage_cost`` of a measured split: stage ``s``'s layers timed on node ``s``
    (``profiles[s]``), plus its output sent forward and that output's gradient received
    back (one micro-batch each way), unless it is the last stage."""
    sums = [list(itertools.accumulate(p.seconds, initial=0.0)) for p in profiles]
    last_stage = len(profiles) - 1

    def cost(stage: int, first: int, end: int) -> float:
        compute = sums[stage][end] - sums[stage][first]
        if stage == last_stage or not link_bytes_per_s:
            return compute
        return compute + 2 * profiles[stage].out_bytes[end - 1] / link_bytes_per_s
    return cost


def weight_cost(weights: Sequence[float]):
    """``stage_cost`` that sums a weight per layer (parameters, or 1 per layer)."""
    sums = list(itertools.accumulate(weights, initial=0.0))
    return lambda stage, first, end: sums[end] - sums[first]


def choose(split: str | tuple[int, ...], stages: int, profiles: Sequence[LayerCosts],
           link_bytes_per_s: float | None) -> tuple[int, ...]:
    """The split's layer counts per stage, from the nodes' profiles (one per stage)."""
    layers = len(profiles[0].seconds)
    if isinstance(split, tuple):
        return split
    if split == "layers":
        return even(layers, stages)
    if split == "params":
        return min_max_split(weight_cost(profiles[0].params), layers, stages)
    return min_max_split(timed_cost(profiles, link_bytes_per_s), layers, stages)


def imbalance(stage_seconds: Sequence[float]) -> float | None:
    """The slowest stage over the mean (1: perfectly balanced)."""
    if not stage_seconds or not sum(stage_seconds):
        return None
    return max(stage_seconds) / (sum(stage_seconds) / len(stage_seconds))


def gpipe_bubble(stages: int, microbatches: int) -> float:
    """GPipe's idle fraction of a step, (S - 1) / (M + S - 1) (Huang et al. 2019)."""
    return (stages - 1) / (microbatches + stages - 1)


def predicted_step_s(stage_seconds: Sequence[float], microbatches: int) -> float:
    """A pipeline step from its stages' per-micro-batch times: (M + S - 1) times the
    slowest stage, the other stages' fill and drain hidden behind it."""
    return (microbatches + len(stage_seconds) - 1) * max(stage_seconds)
