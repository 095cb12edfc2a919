"""``torch-pipe``: pipeline parallelism, the model split into stages across nodes.

A cell of D devices runs R pipelines (``--replicas``, default 1) of S = D / R stages,
one stage per node: rank ``r`` is stage ``r % S`` of pipeline ``r // S``, so a
pipeline's stages sit on consecutive nodes. Each step feeds ``--batch`` samples as M
micro-batches (``--microbatches``) through the stages with GPipe or 1F1B
(``--schedule``), on ``torch.distributed.pipelining`` over Gloo; with R > 1 each
stage's replicas average their gradients (``workloads.torch_pipeline``). Where the
model is cut is ``--split`` (``workloads.pipeline_split``): balanced by measurement by
default. Synchronous SGD only. ``--task infer`` streams the test set through the same
stages forward only (each pipeline 1/R of it): samples/s and each batch's latency; with
one stage a "pipeline" is the whole model on one node, so ``--devices 1`` is one device
and ``--replicas`` equal to ``--devices`` is R whole-model replicas, beside the split.
Which weights it streams through is ``--weights``: ``init`` (freshly initialised, the
default: accuracy at chance, a measurement of speed only), ``train`` (the cell first
trains its ``--epochs`` as ``--task train`` would, unmeasured, then streams) or a
checkpoint file (a ``torch.save``d ``state_dict`` of the whole model), which the sweep
stages to the nodes as the user's other files (``profiler.inputs``): the cell's value is
the file's name and digest, so its cell_id changes with the file's content, and the
file is loaded here on the controller and compared with the model before anything runs.

The engine is this folder: its settings (``options``) become grid dimensions for its
cells only (``engine_params``) and results columns; its own columns are measured in
``.columns``; its report section is drawn in ``.report``; its workers are
``workloads.torch_pipeline``'s. The other engines' cells leave its columns empty.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Sequence

from workloads import pipeline_split
from workloads.torch_pipeline import (CHECKPOINT, MICROBATCHES_ENV, SCHEDULE_ENV, SCHEDULES,
                                      SPLIT_ENV, STAGES_ENV, TASK_ENV, TASKS, WEIGHTS,
                                      WEIGHTS_ENV)

from ...cell import CellConfig
from ...cluster.base import Node
from ...errors import ConfigError
from ...inputs import UserFile, staged_path, user_file
from ...option_lists import parse_choice_list, parse_int_list
from ..base import EngineOption, ProcessSpec, ReportSection, TrainOptions
from ..pytorch import _process_env, _rendezvous, _TorchEngine
from . import columns as pipeline_columns
from . import report


def _positive_ints(option: str):
    def parse(text: str) -> list[int]:
        values = parse_int_list(text, option)
        for value in values:
            if value < 1:
                raise ConfigError(f"{option} {value} must be at least 1: give e.g. {option} 4")
        return values
    return parse


def _schedules(text: str) -> list[str]:
    return parse_choice_list(text, "--schedule", SCHEDULES)


def _tasks(text: str) -> list[str]:
    return parse_choice_list(text, "--task", TASKS)


# The checkpoints ``--weights`` named, by the value their cells hold (``name@digest``):
# where the controller finds each file to check and stage.
_CHECKPOINTS: dict[str, UserFile] = {}
_DIGEST_CHARS = 12


def _weights(text: str) -> list[str]:
    """``init``, ``train`` or a checkpoint's path, several separated by ','. A file is
    checked, digested and held as ``<its name>@<12 hex digits of its sha256>``."""
    values = []
    for item in (part.strip() for part in str(text).split(",")):
        if item in WEIGHTS:
            values.append(item)
            continue
        if not item or not Path(item).expanduser().exists():
            raise ConfigError(f"--weights {item!r} is neither {' nor '.join(WEIGHTS)} nor a "
                              "file: give init, train, or the path of a checkpoint saved "
                              "with torch.save(model.state_dict(), PATH)")
        file = user_file("weights", item, "--weights")
        value = f"{file.source.name}@{file.digest[:_DIGEST_CHARS]}"
        _CHECKPOINTS[value] = file
        values.append(value)
    return values


def _splits(text: str) -> list[str]:
    # A hand split has commas of its own: splits are separated by ';'.
    values = [part.strip() for part in str(text).split(";") if part.strip()]
    if not values:
        raise ConfigError(f"--split {text!r} is empty: give balanced, params, layers or "
                          "layer counts such as 3,5")
    for value in values:
        pipeline_split.parse(value)
    return values


class TorchPipelineEngine(_TorchEngine):
    name = "torch-pipe"
    description = ("PyTorch pipeline parallelism: the model split into stages across nodes, "
                   "GPipe or 1F1B over Gloo, R pipelines side by side (sync only)")
    sync_modes = ("sync",)
    min_devices = 2
    options = (
        EngineOption("microbatches", "1", _positive_ints("--microbatches"),
                     "Micro-batches a step's batch is cut into (torch-pipe), e.g. 1,4,8; "
                     "each must divide --batch.", "int", "a pipeline's micro-batches per step"),
        EngineOption("schedule", "gpipe", _schedules,
                     f"Pipeline schedule(s) (torch-pipe): {', '.join(SCHEDULES)}.", "str",
                     "a pipeline's schedule: gpipe or 1f1b"),
        EngineOption("replicas", "1", _positive_ints("--replicas"),
                     "Pipelines side by side (torch-pipe), each stage's replicas averaging "
                     "their gradients: stages = devices / replicas.", "int",
                     "pipelines side by side"),
        EngineOption("task", "train", _tasks,
                     "train, or infer: stream the test set through the stages forward "
                     "only (samples/s and latency; one stage, or --replicas equal to "
                     "--devices, is one device or whole-model replicas) (torch-pipe)."),
        EngineOption("split", "balanced", _splits,
                     "Where the model is cut (torch-pipe): balanced (by measured layer "
                     "times and the link), params, layers, or layer counts per stage such "
                     "as 3,5; several separated by ';'.", "str",
                     "where a pipeline's model is cut: balanced, or layer counts per stage"),
        # Added after pipeline cells had ids: at init it stays out of the cell_id.
        EngineOption("weights", "init", _weights,
                     "The weights the stages start from (torch-pipe): init (freshly "
                     "initialised: --task infer then measures speed only, its accuracy is "
                     "chance), train (--task infer: first train the cell's --epochs, then "
                     "infer), or a checkpoint file, torch.save(model.state_dict(), PATH) of "
                     "the whole model.", "str",
                     "a pipeline's starting weights: empty (init), train, or a checkpoint "
                     "as name@sha256-prefix", omit_default=True),
    )

    columns = pipeline_columns.COLUMNS
    compare_measures = (("pipe_step_ms", "pipe step"), ("pipe_step_vs_predicted", "step/pred"),
                        ("bubble_measured", "bubble"), ("stage_imbalance", "imbalance"),
                        ("stage_stash_mb_max", "stash MB"))
    worker = "workloads.torch_pipeline:PipelineWorker"

    def comm(self, cell: CellConfig) -> str:
        return "pipeline"

    def label(self, rec: dict, *, stages: bool = True) -> str:
        """``torch-pipe S2 M4 1f1b``, with ``infer`` for ``--task infer``, ``R2`` for two
        pipelines side by side and the split when it is not ``balanced``
        (``split=3,5``); ``stages`` False leaves S out (a series over the device count,
        along which S changes)."""
        if rec.get("microbatches") is None and rec.get("schedule") is None:
            return self.name  # the fields of a cell of another engine's grid
        replicas = rec.get("replicas") or 1
        parts = [self.name]
        if stages:
            parts.append(f"S{rec.get('pipe_stages') or (rec.get('devices') or 0) // replicas}")
        parts += [f"M{rec.get('microbatches') or 1}", str(rec.get("schedule") or "gpipe")]
        if (rec.get("task") or "train") != "train":
            parts.append(str(rec["task"]))  # infer: the test set streamed forward only
        if replicas > 1:
            parts.append(f"R{replicas}")
        if (rec.get("split") or "balanced") != "balanced":
            parts.append(f"split={rec['split']}")
        if (rec.get("weights") or "init") != "init":  # a checkpoint by its file's name
            parts.append(f"weights={str(rec['weights']).rsplit('@', 1)[0]}")
        return " ".join(parts)

    def task(self, rec: dict) -> str:
        return str(rec.get("task") or "train")

    def measure(self, rec: dict, name: str):
        """``stage_stash_mb_max``: the largest stage's stash (the memory a pipeline's
        stages must each have)."""
        if name == "stage_stash_mb_max":
            stash = rec.get("stage_stash_mb")
            return max(stash) if stash else None
        return rec.get(name)

    def summarize(self, workers: dict[int, list[dict]], starts: dict[int, dict]) -> dict:
        return pipeline_columns.columns(workers, starts)

    def report_sections(self, records: list[dict]) -> list[ReportSection]:
        return report.sections(records, self.name)

    def host_problem(self, answer: dict, cells: Sequence[CellConfig]) -> str | None:
        problem = super().host_problem(answer, cells)
        return problem or few_microbatches_problem(answer.get("torch", ""), cells)

    def keep(self, cell: CellConfig, values: dict) -> bool:
        """A combination a schedule cannot run (1F1B with fewer micro-batches than
        stages, 1F1B inference) is left out where the grid has GPipe too, as the grid
        leaves out a sync mode an engine lacks."""
        if (cell.param("weights") == "train" and cell.param("task") != "infer"
                and len(set(values.get("task") or ())) > 1):
            return False  # --weights train is training before inference
        return (len(set(values.get("schedule") or ())) < 2
                or cell.param("schedule") != "1f1b" or _one_f_one_b_runs(cell))

    def user_files(self, cell: CellConfig) -> tuple[UserFile, ...]:
        """The checkpoint ``--weights PATH`` names (staged as ``weights-<digest>.pt``)."""
        file = _CHECKPOINTS.get(cell.param("weights") or "init")
        return (file,) if file is not None else ()

    def check_cell(self, cell: CellConfig) -> None:
        replicas, micro = cell.param("replicas") or 1, cell.param("microbatches") or 1
        task, schedule = cell.param("task"), cell.param("schedule")
        if cell.devices % replicas:
            raise ConfigError(f"--devices {cell.devices} is not a multiple of --replicas "
                              f"{replicas}: each of the {replicas} pipelines needs the same "
                              "number of stages")
        stages = _stages(cell)
        if task == "infer" and schedule == "1f1b":
            raise ConfigError("--task infer streams forward only, which 1F1B has nothing "
                              "to interleave with: use --schedule gpipe")
        if stages < 2 and task != "infer":
            raise ConfigError(f"--engine torch-pipe with --devices {cell.devices} and "
                              f"--replicas {replicas} makes pipelines of {stages} stage: give "
                              f"--devices {2 * replicas} or more")
        if micro > cell.batch:
            raise ConfigError(f"--microbatches {micro} is more than the batch of "
                              f"{cell.batch}: give --microbatches {cell.batch} or fewer")
        if cell.batch % micro:
            raise ConfigError(f"--batch {cell.batch} does not divide into {micro} "
                              "micro-batches: give a --batch that is a multiple of "
                              "--microbatches")
        if schedule == "1f1b" and micro < stages and task != "infer":
            raise ConfigError(f"--schedule 1f1b needs at least one micro-batch per stage: "
                              f"give --microbatches {stages} or more with {stages} stages, "
                              "or --schedule gpipe")
        pipeline_split.check(pipeline_split.parse(cell.param("split") or "balanced"), stages,
                             stage_layers(cell.model, cell.layers), cell.model)
        weights = cell.param("weights") or "init"
        if weights == "train" and task != "infer":
            raise ConfigError("--weights train trains the cell before it infers: give it "
                              "with --task infer (--task train starts from init already)")
        if weights in _CHECKPOINTS:
            problem = checkpoint_problem(str(_CHECKPOINTS[weights].source), cell.model,
                                         cell.layers, _classes(cell))
            if problem:
                raise ConfigError(f"--weights {_CHECKPOINTS[weights].source}: {problem}")

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        argv = self.train_argv(cell, cell_dir, options)
        weights = cell.param("weights") or "init"
        if weights not in WEIGHTS:  # a staged input goes in the argv (shipped, rewritten)
            argv += ["--checkpoint", str(_staged_checkpoint(weights, options))]
        worker_nodes = nodes[:self.nodes_needed(cell)]
        replicas, stages = cell.param("replicas") or 1, _stages(cell)
        common = {**_rendezvous(worker_nodes[0], cell.devices, options),
                  STAGES_ENV: str(stages),
                  MICROBATCHES_ENV: str(cell.param("microbatches") or 1),
                  SCHEDULE_ENV: cell.param("schedule") or "gpipe",
                  SPLIT_ENV: cell.param("split") or "balanced",
                  TASK_ENV: cell.param("task") or "train",
                  WEIGHTS_ENV: weights if weights in WEIGHTS else CHECKPOINT}
        return [ProcessSpec("worker", i, node, argv, _process_env(common, i, node),
                            part=_part(i, stages, replicas))
                for i, node in enumerate(worker_nodes)]


def _staged_checkpoint(weights: str, options: TrainOptions) -> Path:
    """Where the sweep staged the checkpoint a cell's ``name@digest`` names."""
    name, digest = weights.rsplit("@", 1)
    return staged_path(options.inputs_dir, "weights", digest, Path(name).suffix)


def _classes(cell: CellConfig) -> int:
    """The classes the cell's model is built with: its data's."""
    from workloads import models
    from workloads.datasets import catalog

    spec = catalog.SPECS.get(cell.dataset)
    return spec.classes if spec is not None else models.get(cell.model).classes


@functools.lru_cache(maxsize=None)
def checkpoint_problem(path: str, model: str, layers: int | None, classes: int) -> str | None:
    """What keeps the checkpoint at ``path`` from loading into ``model`` as a pipeline
    builds it (None: nothing): read with ``torch.load(weights_only=True)``, its keys and
    shapes compared with the model's ``state_dict``. Imports torch: only for a file."""
    import torch

    from workloads import models

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever torch says of a file it cannot read
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"torch.load cannot read it as weights ({text[:160]}): give a file saved "
                "with torch.save(model.state_dict(), PATH)")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor)
                                              for v in state.values()):
        return (f"it holds a {type(state).__name__}, not a state_dict of tensors: save "
                "model.state_dict(), not the model or a training checkpoint's dict")
    want = models.get(model).build("torch", layers, classes).state_dict()
    name = f"{model}{layers or ''}"
    missing = [k for k in want if k not in state]
    extra = [k for k in state if k not in want]
    wrong = [k for k in want if k in state and tuple(state[k].shape) != tuple(want[k].shape)]
    if not (missing or extra or wrong):
        return None
    said = []
    if missing:
        said.append(f"lacks {_some(missing)}")
    if extra:
        said.append(f"has {_some(extra)}, which {name} has not")
    if wrong:
        key = wrong[0]
        said.append(f"gives {key} the shape {_shape(state[key])} where {name} has "
                    f"{_shape(want[key])}" + (f" (and {len(wrong) - 1} more)"
                                                if len(wrong) > 1 else ""))
    return (f"it does not fit {name} with {classes} classes: it {'; '.join(said)}: save the "
            f"state_dict of the model the cell trains (--model {model})")


def _some(keys: list[str]) -> str:
    return ", ".join(keys[:2]) + (f" and {len(keys) - 2} more" if len(keys) > 2 else "")


def _shape(tensor) -> str:
    return "x".join(map(str, tensor.shape)) or "a scalar"


def _stages(cell: CellConfig) -> int:
    """S: the stages of each of the cell's pipelines (devices / replicas)."""
    return cell.devices // (cell.param("replicas") or 1)


def _one_f_one_b_runs(cell: CellConfig) -> bool:
    return cell.param("task") != "infer" and (cell.param("microbatches") or 1) >= _stages(cell)


def few_microbatches_problem(torch_version: str, cells: Sequence[CellConfig]) -> str | None:
    """torch before 2.10 (the Pi's 2.9.1, the last that runs on its cores) builds no
    schedule, GPipe's either, with fewer micro-batches than stages (later torch asks it
    of 1F1B only): a cell that would fail on such a node is refused up front."""
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    if not match or (int(match[1]), int(match[2])) >= (2, 10):
        return None
    for cell in cells:
        stages = _stages(cell)
        if (cell.param("microbatches") or 1) < stages:
            return (f"its torch {torch_version} runs a pipeline of {stages} stages only with "
                    f"--microbatches {stages} or more, under every schedule: give "
                    f"--microbatches {stages} or more")
    return None


def _part(rank: int, stages: int, replicas: int) -> str:
    """``stage 1``, or ``stage 1 of pipeline 0`` with pipelines side by side."""
    if stages == 1:
        return f"replica {rank}" if replicas > 1 else ""
    return f"stage {rank % stages}" + (f" of pipeline {rank // stages}" if replicas > 1 else "")


def stage_layers(model: str, layers: int | None) -> int:
    """How many layers (top-level modules) a pipeline can cut ``model`` between."""
    from workloads import models

    return models.get(model).stage_layers(layers)
