"""The step model of one configuration: fitted on its measured cells, then asked about
other device counts, boards and links (docs/predict.md writes it down).

For N workers, in ms on the board:

    step(N) = base x c + sigma x c x E[max of N normals]   (sync only: the wait)
              + round_ms x [PS via a master] + peer_ms x (N - 1) [colocated PS, ring]
              + wire x (bytes on the busiest link per step) / link rate

- ``base``: the one-device step (compute, the optimizer, the data), mean of the
  one-device cells; ``c`` scales it to another board (``boards.compute_scale``; the
  slowest worker's in a synchronous mix).
- ``sigma``: a worker's compute spread from step to step (the cells' compute p50 and
  p95); a synchronous round lasts as long as its slowest worker, E[max] x sigma more.
- the exchange's terms (``scheme``): fitted by non-negative least squares on every
  multi-device cell, ``y = step - base - wait``. Its per-round and per-peer costs are
  CPU work on the boards: on another board they scale like compute (the slowest node's
  factor); the wire's term scales with the link only.

Asynchronous workers each go at their own pace: step_i = base x c_i + the exchange, and
the cluster's samples/s is the sum of the workers'. A pipeline has no one-device base: its
stages' compute along the schedule's critical path takes base's place (``pipeline.py``),
then a cost per step and its boundaries' wire are fitted as above.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..cluster.prices import J_PER_KWH
from ..cluster.profiles import Catalog, Profile
from ..errors import ConfigError
from .boards import OneDevice, PriceOf, compute_scale, node_profiles
from .cells import Group
from . import pipeline
from .fit import LinearFit, expected_max_normal, fit_nonnegative
from .pipeline import PipeShape
from .scheme import FLOORS, TERMS

# A local cluster's workers talk over loopback: a nominal rate, for the wire term only
# (a local sweep cannot be asked about another link or board).
LOOPBACK_MBIT = 10_000.0
BYTES_PER_PARAMETER = 4  # float32 gradients and weights


@dataclass(frozen=True)
class StepModel:
    """One configuration's fitted model."""

    group: Group
    base_ms: float
    sigma_ms: float
    fit: LinearFit
    model_bytes: float
    train_samples: int
    board: Profile | None
    link_mbit: float
    cpu_fraction: float | None  # the worker nodes' mean CPU share, measured
    devices_fitted: tuple[int, ...]
    pipe: PipeShape | None = None  # a pipeline's layers (its scheme is ``pipeline``)
    # Where ``train_samples`` (an epoch) came from: the cells, --samples, or a study's
    # own epoch (sweep.json's extra.epoch_samples).
    epoch_from: str = "the sweep's training set"

    @property
    def max_devices(self) -> int | None:
        """The most devices it can be asked about: a pipeline's stages, one a layer."""
        return len(self.pipe.layer_ms) if self.pipe is not None else None

    def can_run(self, n: int) -> bool:
        return self.max_devices is None or n <= self.max_devices

    def exchange_ms(self, n: int, link_mbit: float,
                    cpu_scale: float = 1.0) -> tuple[float, float | None]:
        """The exchange's ms at ``n`` workers on ``link_mbit``, and its interval's half."""
        x = self.group.scheme.features(n, self.model_bytes, link_mbit)
        return self.terms_ms(x, cpu_scale), self.fit.half_width(x) if n > 1 else 0.0

    def terms_ms(self, x: list[float], cpu_scale: float) -> float:
        """The fitted terms at ``x``. Per-round (a pipeline's per-step) and per-peer costs are the
        boards' CPU work (the framework's handling of each message): they scale with
        ``cpu_scale``; the wire's does not."""
        return self.fit.predict([v * (cpu_scale if name != "wire" else 1.0)
                                 for name, v in zip(self.fit.names, x)])

    def wait_ms(self, n: int, scale: float) -> float:
        return self.sigma_ms * scale * expected_max_normal(n) if self.group.scheme.sync else 0


def fit_group(group: Group, catalog: Catalog | None) -> StepModel:
    """The configuration's model; ``ConfigError`` naming what is missing to fit it."""
    label = group.label
    if group.scheme is None:
        raise ConfigError(f"{label}: its exchange is not modelled (the engine names none "
                          "of ps-sync, ps-async, allreduce, pipeline); leave it out with "
                          "--engine")
    if group.scheme.pipeline:
        return _fit_pipeline(group, catalog)
    if not group.base:
        raise ConfigError(f"needs an ok cell at 1 device for {label} (its base step): add "
                          "--devices 1 to the sweep")
    counts = _device_counts(group, "--devices 1,2,3,4")
    cells = group.cells
    parameters = next((c.parameters for c in [*group.base, *cells] if c.parameters), None)
    if not parameters:
        raise ConfigError(f"{label}: the cells do not record the model's parameters: rerun "
                          "them with this edgeprof")
    board, link = _board_and_link(group, catalog)
    base_ms = statistics.fmean(c.step_ms for c in group.base)
    sigmas = [c.sigma_ms for c in [*group.base, *cells] if c.sigma_ms is not None]
    sigma = statistics.median(sigmas) if sigmas else 0.0
    model_bytes = parameters * BYTES_PER_PARAMETER
    scheme = group.scheme
    rows = [scheme.features(c.devices, model_bytes, link) for c in cells]
    y = [c.step_ms - base_ms - (sigma * expected_max_normal(c.devices) if scheme.sync else 0)
         for c in cells]
    cpu = [c.cpu_percent for c in cells if c.cpu_percent is not None]
    return StepModel(group=group, base_ms=base_ms, sigma_ms=sigma,
                     fit=fit_nonnegative(TERMS, rows, y, FLOORS), model_bytes=model_bytes,
                     train_samples=max(c.train_samples or 0 for c in [*group.base, *cells]),
                     board=board, link_mbit=link,
                     cpu_fraction=statistics.fmean(cpu) / 100 if cpu else None,
                     devices_fitted=tuple([1, *counts]))


def _fit_pipeline(group: Group, catalog: Catalog | None) -> StepModel:
    """A pipeline's model (``pipeline.py``): its layers from the cells' profiles and
    stage times; on each cell's own cut, ``y = step - the stages' compute along the
    critical path`` fitted on a cost per step and the boundaries' wire. No wait term:
    the stages' times are measured, their spread inside the step's cost."""
    label, f = group.label, group.fields
    if (f["task"] or "train") != "train":
        raise ConfigError(f"{label}: an inference stream is not modelled: predict from "
                          "--task train cells")
    if (f["replicas"] or 1) > 1:
        raise ConfigError(f"{label}: pipelines side by side (--replicas) are not modelled: "
                          "fit a sweep of one pipeline (--replicas 1)")
    counts = _device_counts(group, "--engine torch-pipe --devices 2,3,4")
    board, link = _board_and_link(group, catalog)
    shape = pipeline.shape_of([c.record for c in group.cells], label)
    cuts = [pipeline.stages_at(shape, [1.0] * c.devices, link,
                               pipeline.split_counts(c.record["pipe_split"]))
            for c in group.cells]
    y = [c.step_ms - cut.compute_step_ms() for c, cut in zip(group.cells, cuts)]
    parameters = next((c.parameters for c in group.cells if c.parameters), 0)
    cpu = [c.cpu_percent for c in group.cells if c.cpu_percent is not None]
    return StepModel(group=group, base_ms=shape.microbatches * sum(shape.layer_ms),
                     sigma_ms=0.0,
                     fit=fit_nonnegative(TERMS, [cut.features() for cut in cuts], y, FLOORS),
                     model_bytes=parameters * BYTES_PER_PARAMETER,
                     train_samples=max(c.train_samples or 0 for c in group.cells),
                     board=board, link_mbit=link,
                     cpu_fraction=statistics.fmean(cpu) / 100 if cpu else None,
                     devices_fitted=tuple(counts), pipe=shape)


def _device_counts(group: Group, example: str) -> list[int]:
    """The multi-device counts measured; ``ConfigError`` with fewer than two."""
    counts = sorted({c.devices for c in group.cells})
    if len(counts) < 2:
        have = f" (its cells are at {counts[0]} only)" if counts else ""
        raise ConfigError(f"needs cells at >= 2 device counts above 1 for {group.label}"
                          f"{have}: sweep e.g. {example}")
    return counts


def _board_and_link(group: Group, catalog: Catalog | None) -> tuple[Profile | None, float]:
    """The one board the cells ran on (None: local) and its link's Mbit/s."""
    boards = {c.board for c in [*group.base, *group.cells]}
    if len(boards) > 1:
        raise ConfigError(f"{group.label}: its cells ran on different boards "
                          f"({', '.join(sorted(map(str, boards)))}): fit one board's sweep")
    board = _profile(catalog, boards.pop(), group.label)
    return board, board.link_mbit if board else LOOPBACK_MBIT


def _profile(catalog: Catalog | None, name: str | None, label: str) -> Profile | None:
    if name is None:
        return None
    if catalog is None or name not in catalog.profiles:
        raise ConfigError(f"{label}: its cells ran on profile {name!r}, which the profile "
                          "files do not hold: add it (docs/emulated.md) to predict from it")
    return catalog.profiles[name]


@dataclass(frozen=True)
class Prediction:
    """One configuration at ``devices`` workers on ``profile`` and ``link_mbit``."""

    label: str
    devices: int
    profile: str
    link_mbit: float
    step_ms: float
    low_ms: float | None
    high_ms: float | None
    epoch_s: float
    samples_per_s: float
    mb_per_step: float
    energy_j: float | None
    energy_from: str
    cost_usd: float | None
    compute_scale: float = 1.0  # the slowest node's compute against the fitted board's
    scale_from: str = "the fitted board"  # where that factor came from

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Target:
    """What is asked: a board (profile or mix name; None: the fitted one) and a link
    (None: the boards' own)."""

    profile: str | None
    link_mbit: float | None


def predict(model: StepModel, n: int, target: Target, catalog: Catalog | None,
            prices: PriceOf | None, measured: OneDevice | None = None) -> Prediction:
    """The model at ``n`` workers on ``target``; ``measured``: the configuration's
    one-device steps measured on other boards, which scale it before any calibration."""
    group, fields = model.group, model.group.fields
    if target.profile is not None and model.board is None:
        raise ConfigError(f"{group.label}: a local sweep has no board to scale from: "
                          "--profile needs a sweep run on the emulated cluster or on boards")
    if target.link_mbit is not None and model.board is None:
        raise ConfigError(f"{group.label}: a local sweep's workers talk over loopback: "
                          "--link needs a sweep run on the emulated cluster or on boards")
    nodes = _nodes(model, n, target, catalog)
    if measured is not None and model.board is not None:
        measured = measured.with_fitted(model.board.name, model.base_ms, "the fit's own")
    scaled = [compute_scale(catalog, model.board, p, fields["model"], measured) if p
              else (1.0, "the fitted board") for p in nodes]
    node_scales = [c for c, _ in scaled]
    scales = node_scales[-n:]  # the workers' (a master, when there is one, is first)
    link = target.link_mbit or min((p.link_mbit for p in nodes if p), default=model.link_mbit)
    if model.pipe is not None:  # stage s on node s: its own board's factor
        cut = pipeline.stages_at(model.pipe, scales, link)
        x = cut.features()
        step = cut.compute_step_ms() + model.terms_ms(x, max(scales))
        half = model.fit.half_width(x)
        samples_per_s = fields["batch"] / step * 1e3  # one pipeline: a batch a step
        return _prediction(model, n, target, nodes, link, step, half, samples_per_s,
                           cut.worker_bytes(), prices, scaled)
    exchange, half = model.exchange_ms(n, link, max(node_scales))
    if group.scheme.sync:
        step = model.base_ms * max(scales) + model.wait_ms(n, max(scales)) + exchange
        samples_per_s = n * fields["batch"] / step * 1e3
    else:
        steps = [model.base_ms * s + exchange for s in scales]
        samples_per_s = sum(fields["batch"] / s * 1e3 for s in steps)
        step = n * fields["batch"] / samples_per_s * 1e3
    return _prediction(model, n, target, nodes, link, step, half, samples_per_s,
                       group.scheme.worker_bytes(n, model.model_bytes), prices, scaled)


def _prediction(model: StepModel, n: int, target: Target, nodes: list, link: float,
                step: float, half: float | None, samples_per_s: float, worker_bytes: float,
                prices: PriceOf | None, scaled: list[tuple[float, str]]) -> Prediction:
    """The step's row: its interval, epoch, energy and cost; ``scaled``: each node's
    compute factor and where it came from (the slowest node's is said)."""
    epoch = epoch_s(model, n, step)
    energy, said = _energy_j(model, nodes, epoch)
    return Prediction(
        label=model.group.label, devices=n,
        profile=target.profile or (model.board.name if model.board else "host"),
        link_mbit=link, step_ms=step,
        low_ms=None if half is None else max(0.0, step - half),
        high_ms=None if half is None else step + half, epoch_s=epoch,
        samples_per_s=samples_per_s, mb_per_step=worker_bytes / 1e6,
        energy_j=energy, energy_from=said,
        cost_usd=_cost_usd(nodes, epoch, energy, prices),
        compute_scale=max(scaled)[0], scale_from=max(scaled)[1])


def _nodes(model: StepModel, n: int, target: Target, catalog: Catalog | None) -> list:
    """Every node the cell would use (a master first), as profiles (None: local)."""
    count = n + 1 if model.group.scheme.through_master and n > 1 else n
    if model.board is None:
        return [None] * count
    name = target.profile or model.board.name
    return node_profiles(catalog, name, count)


def epoch_s(model: StepModel, n: int, step_ms: float) -> float:
    """A worker's steps in an epoch x the step."""
    return steps_per_epoch(model, n) * step_ms / 1e3


def steps_per_epoch(model: StepModel, n: int) -> int:
    """A worker's steps in the model's epoch at ``n`` workers."""
    f = model.group.fields
    if model.pipe is not None:
        n = 1  # one pipeline's stages pass every batch between them: no shards
    return steps_in_epoch(model.train_samples, n, f["batch"], f["data_partition"])


def steps_in_epoch(samples: int, n: int, batch: int, partition: str) -> int:
    """A worker's steps in an epoch of ``samples``: a shard of S/N, or all S."""
    shared = n if partition == "shard" else 1
    return math.ceil(samples / (shared * batch))


def _energy_j(model: StepModel, nodes: list, epoch_s: float) -> tuple[float | None, str]:
    """Every node's watts over the epoch: its power model at the CPU share measured in
    the fitted cells, or at full load (an upper bound) when none was measured."""
    if not nodes or any(p is None or p.power is None for p in nodes):
        return None, "no power model"
    if model.cpu_fraction is None:
        return sum(p.power.full_w for p in nodes) * epoch_s, "full load (upper bound)"
    watts = sum(p.power.watts(model.cpu_fraction) for p in nodes)
    return watts * epoch_s, f"at the measured {model.cpu_fraction:.0%} CPU"


def _cost_usd(nodes: list, epoch_s: float, energy_j: float | None,
              prices: PriceOf | None) -> float | None:
    """The nodes' hourly prices for the epoch, and its electricity."""
    if prices is None or not nodes or any(p is None for p in nodes):
        return None
    usd = 0.0
    for profile in nodes:
        price = prices.of(profile)
        if price is None:
            return None
        usd += price.hardware_usd_per_h * epoch_s / 3600
    if energy_j is not None and any(prices.of(p).is_board for p in nodes):
        usd += energy_j / J_PER_KWH * prices.electricity_usd_per_kwh
    return usd
