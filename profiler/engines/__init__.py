"""The engines, registered in one place: ``ENGINES`` maps each name to its engine.

What lists or checks engine names (the CLI's choices, the grid's rules on sync modes
and models, preflight, the inventory host check, recorded versions, the report, the
study) reads them from here. One name is written elsewhere: the default engine,
``profiler.cell.DEFAULT_ENGINE`` (a cell's, and the ``--engine`` options'). A new engine
is one file with an ``Engine`` subclass and one line below, or an installed
distribution's entry point of the group ``edgeprof.engines`` naming one
(``profiler.plugins``: loaded on the registry's first lookup). Engine modules import no
framework at import time (a controller plans cells without loading MXNet or torch).
"""

from __future__ import annotations

from typing import Iterable

from ..errors import ConfigError
from ..cell import CellConfig
from ..column import Column
from ..plugins import Registry
from .base import Engine, ReportSection
from .hier import HierEngine
from .horovod import HorovodEngine
from .mxnet import MXNetEngine
from .pipeline import TorchPipelineEngine
from .pytorch import TorchDDPEngine, TorchPSEngine
from .script import ScriptEngine

ENGINES: Registry[Engine] = Registry("edgeprof.engines", Engine, {
    engine.name: engine for engine in (
        MXNetEngine(), HorovodEngine(), TorchPSEngine(), TorchDDPEngine(), ScriptEngine(),
        TorchPipelineEngine(), HierEngine())}, kind="engine", instances=True)


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        ENGINES.refuse_broken([name])  # an installed plugin that failed: its own line
        raise ConfigError(f"unknown engine {name!r}: use one of "
                          f"{', '.join(ENGINES)}") from None


def all_models() -> tuple[str, ...]:
    """Every model some engine trains, in registration order."""
    return tuple(dict.fromkeys(m for engine in ENGINES.values() for m in engine.models))


def distributions(names: Iterable[str]) -> list[str]:
    """The Python distributions the engines ``names`` run on, sorted, each once: their
    packages and, for a plugin, the distribution it came from (its version recorded)."""
    names = list(names)
    plugins = {ENGINES.distribution(name) for name in names} - {None}
    return sorted({p.distribution for name in names for p in get_engine(name).packages}
                  | plugins)


def host_check(names: Iterable[str]) -> dict[str, dict]:
    """Run on a node: each engine's ``probe_host`` answer (the inventory check).

    Engines that share a check (``torch`` and ``torch-ddp``: importing torch takes
    seconds on a Pi) run it once.
    """
    answers: dict[str, dict] = {}
    by_check: dict = {}
    for name in names:
        probe = type(get_engine(name)).probe_host
        if probe not in by_check:
            by_check[probe] = get_engine(name).probe_host()
        answers[name] = by_check[probe]
    return answers


def engine_label(rec: dict, *, stages: bool = True) -> str:
    """How a record's (or a cell's fields') engine reads: its name and, as the engine
    says them, its own settings (``torch-pipe S2 M4 1f1b``); ``stages`` False leaves
    out what follows the device count. An engine not registered here reads as its name."""
    name = str(rec.get("engine", "?"))
    engine = ENGINES.get(name)
    return engine.label(rec, stages=stages) if engine else name


def cell_of_record(record: dict) -> CellConfig:
    """The cell a results record is of (its fields and its engine's own settings)."""
    engine = ENGINES.get(str(record.get("engine")))
    settings = {o.name for o in engine.options} if engine else set()
    return CellConfig.from_fields(record, settings)


def cell_label(cell: CellConfig) -> str:
    """A cell's label (``CellConfig.label``) with its engine named as the engine says."""
    return cell.label_as(engine_label(cell.fields_record()))


def setting_columns() -> list[Column]:
    """Every engine's own settings as results columns (group ``config``: after the
    configuration's), each once, in registration order."""
    return _once(engine.setting_column(o) for engine in ENGINES.values() for o in engine.options)


def result_columns() -> list[Column]:
    """Every engine's own results columns, each once, in registration order."""
    return _once(column for engine in ENGINES.values() for column in engine.columns)


def columns() -> list[Column]:
    """What the engines add to the record: their settings' columns and their own."""
    return setting_columns() + result_columns()


def _once(columns) -> list[Column]:
    seen: dict[str, Column] = {}
    for column in columns:
        seen.setdefault(column.name, column)
    return list(seen.values())


def compare_measures() -> list[tuple[str, str]]:
    """The engines' own measures ``edgeprof compare`` sets side by side, with their short
    headings: ``(name, heading)``, each once."""
    return list(dict.fromkeys(m for engine in ENGINES.values() for m in engine.compare_measures))


def report_sections(records: list[dict]) -> list[ReportSection]:
    """Each engine's sections of a report on ``records`` (engines without cells of their
    own add none)."""
    return [section for engine in ENGINES.values()
            for section in engine.report_sections(records)]
