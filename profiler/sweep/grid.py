"""Cells and the sweep grid: the cartesian product of the settings, validated up front.

A cell is one configuration (engine, model, layers, batch, devices, sync, epochs, ...).
Its ``cell_id`` is a stable hash of that configuration, so a resumed sweep knows which
cells are done no matter in which order the grid is expanded.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

from workloads import models as model_registry
from workloads.datasets import resolver as data_resolver
from workloads.optim import LR_SCALINGS

from ..cell import CellConfig
from ..engines import ENGINES, get_engine
from ..errors import ConfigError
from . import stragglers as straggler_settings

SYNC_MODES = ("sync", "async")
PLACEMENTS = ("master", "colocated")
DATA_PARTITIONS = data_resolver.PARTITIONS


def validate(cell: CellConfig) -> CellConfig:
    """Raise ``ConfigError`` naming the problem and the fix; return the cell unchanged."""
    engine = get_engine(cell.engine)  # an unknown engine: one line naming the choices
    # An unknown model: one line naming the models. A script's cells name the script.
    spec = None if engine.takes_script else model_registry.get(cell.model)
    _check_engine_fits(cell, engine, spec)
    _check_placement(cell)
    straggler_settings.parse(cell.straggler)  # none, F or F@T: else one line
    _check_layers(cell, spec)
    _check_counts(cell)
    _check_optimizer(cell, engine)
    _check_max_samples(cell)
    engine.check_cell(cell)  # the engine's own settings (a pipeline's stages)
    return cell


def _check_engine_fits(cell: CellConfig, engine, spec) -> None:
    """The engine trains the cell: its script, its sync mode and its model."""
    if engine.takes_script and not cell.model_digest:
        raise ConfigError(f"--engine {engine.name} runs your own training script: give "
                          "--script train.py (or another --engine for a model)")
    if cell.sync not in SYNC_MODES:
        raise ConfigError(f"unknown sync mode {cell.sync!r}: use sync or async")
    if cell.sync not in engine.sync_modes:
        others = [e.name for e in ENGINES.values() if cell.sync in e.sync_modes]
        raise ConfigError(f"--engine {engine.name} trains {' or '.join(engine.sync_modes)} "
                          f"only ({engine.description}): use --sync "
                          f"{','.join(engine.sync_modes)} with it, or --engine "
                          f"{' or '.join(others)} for {cell.sync}")
    if spec is not None and cell.model not in engine.models:
        others = [e.name for e in ENGINES.values() if cell.model in e.models]
        raise ConfigError(f"{cell.model} runs on the {_and(others)} engines only, "
                          f"not on {engine.name}: use --engine {','.join(others)}")


def _check_placement(cell: CellConfig) -> None:
    """Where the servers run and how the training set is split are known ones."""
    if cell.placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement {cell.placement!r}: use master or colocated")
    if cell.data_partition not in DATA_PARTITIONS:
        raise ConfigError(f"unknown data partition {cell.data_partition!r}: use shard or "
                          "replicate")


def _check_layers(cell: CellConfig, spec) -> None:
    """``--layers`` is a depth the model can have, and only for a model with a depth rule."""
    if spec is not None and spec.depth is not None:
        spec.depth.blocks(cell.layers)  # a depth it cannot have: one line, the rule
    elif cell.layers is not None:
        raise ConfigError(f"--layers does not apply to {cell.model} (its depth is fixed): "
                          f"drop --layers or use --model {','.join(model_registry.with_depth())}")


def _check_counts(cell: CellConfig) -> None:
    """Batch, devices and epochs are at least 1."""
    for name, example in (("batch", 32), ("devices", 2), ("epochs", 1)):
        if getattr(cell, name) < 1:
            raise ConfigError(f"--{name} {getattr(cell, name)} must be at least 1: "
                              f"give e.g. --{name} {example}")


def _check_optimizer(cell: CellConfig, engine) -> None:
    """The learning rate, momentum, weight decay and learning-rate scaling."""
    # ``not lr > 0`` is also true for nan, which every comparison fails. A script's
    # cells without --lr leave the rate to the script.
    if not (cell.lr is None and engine.takes_script) and not (
            cell.lr > 0 and math.isfinite(cell.lr)):
        raise ConfigError(f"--lr {cell.lr} is not a positive number: give e.g. --lr 0.02, "
                          "or leave it out for the model's default")
    if not (0 <= cell.momentum < 1):
        raise ConfigError(f"--momentum {cell.momentum} is outside [0, 1): give e.g. "
                          "--momentum 0.9, or 0 for plain SGD")
    if not (0 <= cell.wd < 1):
        raise ConfigError(f"--wd {cell.wd} is outside [0, 1): give e.g. --wd 0.0001, "
                          "or 0 for none")
    if cell.lr_scaling not in LR_SCALINGS:
        raise ConfigError(f"--lr-scaling {cell.lr_scaling!r} is unknown: use "
                          f"{' or '.join(LR_SCALINGS)}")


def _check_max_samples(cell: CellConfig) -> None:
    """``--max-samples``, when given, is at least 1 and gives every worker a batch."""
    if cell.max_samples is not None:
        if cell.max_samples < 1:
            raise ConfigError(f"--max-samples {cell.max_samples} must be at least 1: give "
                              "e.g. --max-samples 2000, or leave it out for the whole set")
        check_shards(cell, cell.max_samples, "--max-samples")


def _and(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else ""


def check_shards(cell: CellConfig, train_samples: int, source: str = "--max-samples"
                 ) -> None:
    """Raise ``ConfigError`` unless every worker gets at least one full batch.

    ``train_samples`` is the training set before it is split among ``cell.devices``
    workers (each gets the same share, the remainder is dropped; with ``replicate``
    every worker gets all of it); ``source`` names where
    the number comes from: ``--max-samples``, or a dataset (e.g. ``the synthetic set``),
    whose size cannot be raised.
    """
    parts = data_resolver.parts(cell.data_partition, cell.devices)
    share = train_samples // parts
    if share >= cell.batch:
        return
    need = cell.batch * parts
    fix = (f"give --max-samples {need} or more (batch x devices), or a smaller --batch "
           "or --devices" if source == "--max-samples" else
           f"use a --batch and --devices whose product is at most {train_samples}")
    what = (f"--max-samples {train_samples}" if source == "--max-samples"
            else f"{source} ({train_samples} samples)")
    raise ConfigError(f"{what} gives each of {cell.devices} worker(s) {share} samples, "
                      f"less than one batch of {cell.batch}: {fix}")


def expand(*, engines: Sequence[str], models: Sequence[str],
           layers: Sequence[int | None], batches: Sequence[int], devices: Sequence[int],
           syncs: Sequence[str], epochs: int = 1,
           lr: float | None | Sequence[float | None] = None,
           momentum: float = CellConfig.momentum, wd: float = CellConfig.wd,
           lr_scaling: str = "none", max_samples: int | None = None,
           datasets: dict[str, str] | None = None,
           placement: str = "master", data_partition: str = "shard",
           stragglers: Sequence[str] = (straggler_settings.NONE,),
           engine_values: dict[str, list] | None = None) -> list[CellConfig]:
    """The validated cartesian product, in a stable order, without duplicates.

    ``layers`` applies to the models with a depth rule only (ResNet; each model's
    record says), others get ``layers=None`` (so a sweep over ``--model
    lenet-mlp,resnet --layers 20,32`` makes one LeNet cell per other setting).
    With one device, sync and async train identically (no server): one cell.
    A sync mode or model an engine does not have is left out for that engine when
    another engine or sync mode of the grid has it (``--engine mxnet,horovod --sync
    sync,async`` runs Horovod's sync cells), and is an error otherwise.
    ``datasets`` maps a model to the dataset it reads (default: ``synthetic``).
    ``lr`` (one value or a list) None gives each model its default learning rate
    (``workloads.optim``). ``stragglers``: ``none``, ``F`` or ``F@T`` settings
    (``sweep.stragglers``); a one-device cell with a straggler has its only node slowed.
    ``engine_values``: the engines' own settings (``Engine.options``: name -> values),
    each a dimension of that engine's cells only (``Engine.variants``).
    """
    datasets = datasets or {}
    rates = list(lr) if isinstance(lr, (list, tuple)) else [lr]
    cells: list[CellConfig] = []
    seen: set[str] = set()
    slowed = [straggler_settings.canonical(s) for s in stragglers]
    for engine, model, depth, batch, ndev, sync, rate, straggler in itertools.product(
            engines, models, layers or [None], batches, devices, syncs, rates, slowed):
        spec = model_registry.get(model)
        if spec.depth is None:
            depth = None
        elif depth is None:
            depth = spec.depth.default
        plugin = get_engine(engine)
        if ndev == 1 and "sync" in plugin.sync_modes:
            sync = "sync"
        if sync not in plugin.sync_modes and set(syncs) & set(plugin.sync_modes):
            continue  # e.g. allreduce is sync only: with --sync sync,async it runs sync
        if model not in plugin.models and any(
                model in get_engine(other).models for other in engines):
            continue  # e.g. mobilenetv2 with --engine mxnet,torch: torch's cells only
        if ndev < plugin.min_devices and len(engines) > 1:
            continue  # e.g. a pipeline of one stage, beside DDP's one-device cell
        base = CellConfig(engine=engine, model=model, layers=depth, batch=batch,
                          devices=ndev, sync=sync, epochs=epochs, lr=rate,
                          momentum=momentum, wd=wd, lr_scaling=lr_scaling,
                          max_samples=max_samples,
                          dataset=datasets.get(model, "synthetic"),
                          placement=placement, data_partition=data_partition,
                          straggler=straggler)
        for cell in plugin.variants(base, engine_values or {}):
            validate(cell)
            if cell.cell_id not in seen:
                seen.add(cell.cell_id)
                cells.append(cell)
    return cells
