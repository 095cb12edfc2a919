"""A cell: one configuration of a sweep, and its stable identity.

A leaf module (of edgeprof it imports only ``workloads.optim``, for the per-model
learning rates) so that ``sweep/`` (which expands and runs
cells) and ``engines/`` (which plan a cell's processes) can both use it without importing
each other.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields

from workloads import models, optim

DEFAULT_RESNET_LAYERS = 20
# The engine of a cell, a sweep, a study or a calibration that names none (and what a
# record written before cells named their engine ran on).
DEFAULT_ENGINE = "mxnet"
# Bumped when the fields of a cell change (its cell_id with them): a sweep of another
# format cannot be resumed, its cells would all look new.
CELL_FORMAT = 4  # 3: data_partition; 4: straggler


# Fields a cell of format 4 did not have, with their defaults: a cell that leaves them
# at the default keeps the cell_id it had, so that sweeps run before them still resume.
OPTIONAL_FIELDS = {"model_digest": "", "data_digest": "", "script_args": "", "params": (),
                   "engine_params": (), "repeat": 0, "max_speedup": None}


@dataclass(frozen=True)
class CellConfig:
    """One configuration of the sweep; every field is a results column."""

    engine: str = DEFAULT_ENGINE
    model: str = "resnet"
    layers: int | None = DEFAULT_RESNET_LAYERS  # None for LeNet (fixed depth)
    batch: int = 32
    devices: int = 1
    sync: str = "sync"
    epochs: int = 1
    lr: float | None = None  # None: the model's default (workloads.optim)
    momentum: float = optim.DEFAULT_MOMENTUM
    wd: float = optim.DEFAULT_WD
    lr_scaling: str = "none"  # or linear (workloads.optim)
    max_samples: int | None = None
    dataset: str = "synthetic"
    placement: str = "master"
    # shard: each of N workers trains its own 1/N of the training set per epoch;
    # replicate: every worker trains the whole set (MXNet's MNIST example, the study's).
    data_partition: str = "shard"
    # One node of the cell slowed (its CPU) by a factor: "none", "0.5" (from the start),
    # "0.5@30" (from 30 s after the cell's launch); profiler.sweep.stragglers.
    straggler: str = "none"
    # The user's own training (docs/your-own-training.md); fields added after format 4
    # stay out of the cell_id while they hold their defaults (OPTIONAL_FIELDS).
    # model_digest: sha256 of a user's model file (--model PATH.py:FACTORY) or script
    # (--script); data_digest: of a user's dataset (--dataset PATH), as staged.
    model_digest: str = ""
    data_digest: str = ""
    script_args: str = ""  # --script-args, its {placeholders} unfilled
    params: tuple[tuple[str, str], ...] = ()  # --param NAME=VALUE pairs of this cell
    # The engine's own settings (``profiler.engines.base.EngineOption``: a pipeline's
    # micro-batches, schedule, ...), name -> value pairs in the engine's order; empty on
    # the cells of an engine without settings. In the cell_id, the results record and
    # the metric tags each pair is a field of its own, as these settings were when they
    # were fields of the cell (format 4): old sweeps' cell_ids and records still hold.
    engine_params: tuple[tuple[str, object], ...] = ()
    # The run of the same configuration, 0-based (a study's --repeats): repeat k > 0
    # is a cell of its own, repeat 0 keeps the cell_id cells had before repeats.
    repeat: int = 0
    # The most time dilation this cell may get (emulated cluster, --speedup), below the
    # sweep's: a study dilates the cells one ratio compares alike (study/dilate.py), so
    # that the error of one speedup's calibrated quota cancels in the ratio. None: the
    # sweep's alone.
    max_speedup: float | None = None

    def __post_init__(self):
        # Read back from JSON (sweep.json, results) the pairs are lists.
        object.__setattr__(self, "params", tuple(tuple(map(str, pair)) for pair in self.params))
        pairs = (self.engine_params.items() if isinstance(self.engine_params, dict)
                 else self.engine_params)
        object.__setattr__(self, "engine_params", tuple((str(k), v) for k, v in pairs))
        if self.lr is None and self.model in models.REGISTRY:
            object.__setattr__(self, "lr", optim.default_lr(self.model))

    def speedup_within(self, speedup: float) -> float:
        """The most dilation this cell may get under a sweep's ``speedup``: its own cap
        (``max_speedup``) when lower."""
        return min(speedup, self.max_speedup or speedup)

    def param(self, name: str, default=None):
        """The engine's own setting ``name`` (``default`` when the cell has none)."""
        return dict(self.engine_params).get(name, default)

    def fields_record(self) -> dict:
        """The configuration as a results record holds it: every field, the engine's
        own settings each a field of its own (``from_fields`` reads it back)."""
        record = asdict(self)
        del record["engine_params"]
        return {**record, **dict(self.engine_params)}

    @classmethod
    def from_fields(cls, data: dict, settings=None) -> "CellConfig":
        """A cell from ``fields_record``'s dict or ``asdict``'s (sweep.json, cell.json):
        a key that is no field of the cell, and not None, is an engine's own setting
        (as a pipeline's were, fields of the cell up to format 4). ``settings``: the
        names of the engine's settings, where ``data`` holds more than the cell (a
        results record: ``profiler.engines.cell_of_record``)."""
        own = {f.name for f in fields(cls)}
        params = dict(data.get("engine_params") or ())
        params.update({k: v for k, v in data.items() if k not in own and v is not None
                       and (settings is None or k in settings)})
        return cls(**{k: v for k, v in data.items() if k in own and k != "engine_params"},
                   engine_params=tuple(params.items()))

    @property
    def cell_id(self) -> str:
        """12 hex digits of SHA-256 over the configuration's canonical JSON."""
        config = {k: v for k, v in self.fields_record().items()
                  if k not in OPTIONAL_FIELDS or v != OPTIONAL_FIELDS[k]}
        canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        """Short human name, e.g. ``resnet20 b32 d2 sync mxnet``, the engine's own
        settings as ``name=value`` (``profiler.engines.cell_label`` lets the engine name
        them its way: ``torch-pipe S2 M4 1f1b``)."""
        return self.label_as(None)

    def label_as(self, engine: str | None) -> str:
        """``label`` with ``engine`` for the engine and its settings."""
        depth = f"{self.layers}" if self.layers else ""
        # A script's --param values tell its cells apart: ``train.py b32 d2 ... hidden=64``.
        params = "".join(f" {name}={value}" for name, value in self.params)
        if engine is None:
            engine = " ".join([self.engine, *(f"{k}={v}" for k, v in self.engine_params)])
        # Repeats of one configuration (--repeats): ``... r2`` is its second run.
        repeat = f" r{self.repeat + 1}" if self.repeat else ""
        return (f"{self.model}{depth} b{self.batch} d{self.devices} {self.sync} {engine}"
                f"{params}{repeat}")

    def tags(self) -> dict[str, str]:
        """The configuration as metric tags (strings, no empty values); each --param and
        each of the engine's own settings is a tag of its own (``param_columns``)."""
        return {**{name: str(value) for name, value in self.fields_record().items()
                   if name != "params" and value not in (None, "")
                   # a first run's points carry no repeat tag, as before repeats
                   and not (name == "repeat" and not self.repeat)},
                **param_columns(self.params)}


PARAM_COLUMN_PREFIX = "param_"


def param_columns(params) -> dict[str, str]:
    """A cell's ``--param`` pairs as results columns and tags: ``{"param_hidden": "64"}``
    (``params`` as a cell holds them, or as a results record's JSON lists)."""
    return {f"{PARAM_COLUMN_PREFIX}{name}": str(value) for name, value in params or ()}
