"""The grid of ``edgeprof sweep --script train.py``: the user's script, its arguments and
its own settings (``--param``), checked before anything runs and expanded into cells.

A script cell is a ``CellConfig`` of the ``script`` engine (``profiler.engines.script``):
``model`` is the script's file name, ``model_digest`` its SHA-256 (a changed script is a
new cell, so ``--resume`` runs it again), ``script_args`` the ``--script-args`` template
and ``params`` the cell's ``--param`` values. Every dimension of the grid (batch,
devices, lr, epochs, each param) is a ``{placeholder}`` of the template and an
``EDGEPROF_*`` variable; the script's file travels as a ``UserFile`` of kind ``script``.
Every problem is one line (``ConfigError``), raised before a cluster comes up.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Iterable, Sequence

from ..cell import CellConfig
from ..engines.script import (GRID_PLACEHOLDERS, ScriptEngine, format_script_args, placeholders,
                              template_tokens)
from ..errors import ConfigError
from . import stragglers as straggler_settings
from .grid import validate
from ..inputs import UserFile, user_file

ENGINE = ScriptEngine.name
DATASET = "own data"  # the cell's dataset column: the script reads its own
PARAM_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
# Variables edgeprof itself sets on a node: a param named so would overwrite one.
RESERVED_NAMES = frozenset({"node", "join_cpu_cgroup", "ps_servers"})
# Grid options that do not apply to a script (it trains its own model on its own data,
# its own way): given with --script, each is one line. Keyed by click's parameter name.
NOT_FOR_SCRIPTS = {"model": "--model", "layers": "--layers", "dataset": "--dataset",
                   "data_dir": "--data-dir", "max_samples": "--max-samples",
                   "val_samples": "--val-samples", "placement": "--placement",
                   "data_partition": "--data-partition", "lr_scaling": "--lr-scaling",
                   "momentum": "--momentum", "wd": "--wd"}


def check_options(given: Iterable[str], engines: str | None) -> None:
    """Refuse options given with ``--script`` that do not apply to it. ``given``: the
    names of the options on the command line; ``engines``: ``--engine`` if given."""
    if engines is not None and [e.strip() for e in engines.split(",") if e.strip()] != [ENGINE]:
        raise ConfigError(f"--script runs on the {ENGINE} engine, not --engine {engines}: "
                          "drop --engine (a model of yours on a built-in engine is "
                          "--model PATH.py:FACTORY)")
    for name in given:
        if name in NOT_FOR_SCRIPTS:
            option = NOT_FOR_SCRIPTS[name]
            raise ConfigError(f"{option} does not apply to --script (the script trains its "
                              f"own model on its own data): drop {option}, and pass the "
                              "script its settings with --script-args or --param")


def script_file(path: str | Path) -> UserFile:
    """The script checked (a readable ``.py`` file that compiles) and digested."""
    script = user_file("script", path, "--script")
    if script.source.suffix != ".py":
        raise ConfigError(f"--script {path} is not a Python file (.py): give the training "
                          "script itself (a shell wrapper cannot be observed)")
    try:
        compile(script.source.read_bytes(), str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ConfigError(f"--script {path} does not compile: line {exc.lineno}: "
                          f"{exc.msg}: fix the script (python -m py_compile {path})") from None
    except ValueError as exc:  # null bytes: not a text file at all
        raise ConfigError(f"--script {path} is not Python ({exc}): give the training "
                          "script itself") from None
    return script


def parse_params(items: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``("hidden=64,128", "opt=sgd")`` -> ``[("hidden", ["64", "128"]), ("opt", ["sgd"])]``,
    each name once, in the order given."""
    params: dict[str, list[str]] = {}
    for item in items:
        name, equals, text = item.partition("=")
        name = name.strip()
        if not equals or not name:
            raise ConfigError(f"--param {item!r} has no NAME=: give e.g. --param "
                              "hidden=64,128 (the name, =, comma-separated values)")
        if not PARAM_NAME.match(name):
            raise ConfigError(f"--param {name!r}: a name is lower-case letters, digits and _, "
                              "starting with a letter: give e.g. --param hidden=64,128")
        if name in GRID_PLACEHOLDERS or name in RESERVED_NAMES:
            what = (f"--{name}'s" if name in GRID_PLACEHOLDERS
                    else f"edgeprof's own EDGEPROF_{name.upper()}")
            raise ConfigError(f"--param {name} would take {what} place: "
                              f"{'use --' + name if name in GRID_PLACEHOLDERS else 'rename it'}"
                              " (--param names the script's own settings)")
        if name in params:
            raise ConfigError(f"--param {name} is given twice: give all its values once, "
                              f"e.g. --param {name}=1,2")
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values:
            raise ConfigError(f"--param {name} has no values: give at least one, e.g. "
                              f"--param {name}=1,2")
        if len(set(values)) < len(values):
            raise ConfigError(f"--param {name} repeats a value ({text}): give each value once")
        params[name] = values
    return list(params.items())


def check_template(template: str, names: Iterable[str]) -> None:
    """Refuse a ``--script-args`` placeholder the grid has no value for."""
    names = list(names)
    for token in template_tokens(template):
        for wanted in placeholders(token):
            if wanted not in names:
                shown = "{" + wanted + "}" if wanted else "{}"
                raise ConfigError(f"--script-args names {shown}, which this grid has not: use "
                                  f"{', '.join('{' + n + '}' for n in names)}"
                                  + (" (--lr gives {lr})" if wanted == "lr" else
                                     f", or add --param {wanted}=..."
                                     if PARAM_NAME.match(wanted) else ""))


def expand(script: UserFile, *, script_args: str, params: Sequence[tuple[str, list[str]]],
           batches: Sequence[int], devices: Sequence[int], syncs: Sequence[str],
           epochs: int, lr: Sequence[float] | None = None,
           stragglers: Sequence[str] = ("none",)) -> list[CellConfig]:
    """The script's cells: every combination of the grid and the params, validated,
    in a stable order. ``lr`` None: the script's own rate (no ``{lr}``)."""
    if any(sync != "sync" for sync in syncs):
        raise ConfigError(f"--sync {','.join(syncs)}: a script decides itself how its "
                          "gradients travel, its cells run as --sync sync: drop --sync")
    names = [n for n in GRID_PLACEHOLDERS if n != "lr" or lr is not None]
    check_template(script_args, names + [name for name, _ in params])
    cells: list[CellConfig] = []
    seen: set[str] = set()
    value_lists = [values for _, values in params]
    stragglers = [straggler_settings.canonical(s) for s in stragglers]
    for batch, ndev, rate, straggler, chosen in itertools.product(
            batches, devices, lr or [None], stragglers, itertools.product(*value_lists)):
        cell = validate(CellConfig(
            engine=ENGINE, model=script.label, layers=None, batch=batch, devices=ndev,
            sync="sync", epochs=epochs, lr=rate, dataset=DATASET, straggler=straggler,
            model_digest=script.digest, script_args=script_args,
            params=tuple(zip((name for name, _ in params), chosen))))
        if cell.cell_id not in seen:
            seen.add(cell.cell_id)
            cells.append(cell)
    for cell in cells[:1]:  # a format spec that does not fit its value: {batch:.2f}
        try:
            format_script_args(script_args, cell)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"--script-args {script_args!r} cannot be filled in ({exc}): "
                              "fix the {placeholder}'s format, e.g. {batch} or {lr:g}") from None
    return cells

