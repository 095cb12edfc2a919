"""Whether a results record is one the report can draw: a guard on ``results.jsonl``
from outside (a copied, edited or damaged sweep folder).

The sweep writes every record itself, so a record that breaks these rules was changed
after: the report refuses the folder with one line naming the cell and the field
rather than fail somewhere in its figures. Rules: a configuration field holds its
type (a missing one takes the cell's default, as records older than the field do); a
measure (a column named with a unit, or a count) is a finite number, a list of them,
or empty; no number anywhere is NaN, infinite or past a float's range.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, fields

from ..cell import CellConfig

# Columns that hold a measure: by their unit's suffix, or named here.
_UNIT_SUFFIXES = ("_s", "_ms", "_mb", "_kb", "_percent", "_usd", "_packets", "_at",
                  "_min", "_w", "_j", "_wh", "_mbit_s", "_per_step")
_COUNTS = {"val_accuracy", "val_accuracy_per_epoch", "speedup", "parameters",
           "train_samples", "syncs_per_worker", "attempt", "metrics_nodes", "node_cores",
           "devices", "batch", "epochs", "layers"}
_CONFIG = {f.name: f for f in fields(CellConfig)}


def record_problem(record: dict) -> str | None:
    """What is wrong with ``record`` (a clause naming the field), or None."""
    for name, value in record.items():
        if name in _CONFIG:
            problem = _config_problem(name, value)
        elif name in _COUNTS or name.endswith(_UNIT_SUFFIXES):
            problem = _measure_problem(value)
        else:
            problem = _number_problem(value)
        if problem:
            return f"{name} {problem}"
    return None


def with_defaults(record: dict) -> dict:
    """``record`` with the configuration fields it lacks at their defaults."""
    missing = {name: f.default for name, f in _CONFIG.items()
               if name not in record and f.default is not MISSING}
    return {**missing, **record} if missing else record


def _config_problem(name: str, value) -> str | None:
    default = _CONFIG[name].default
    if value is None or name == "params":
        return None if value is None or isinstance(value, (list, tuple)) else "is not a list"
    # A field that defaults to None (lr, max_samples, ...) holds its annotation's type.
    annotation = str(_CONFIG[name].type)
    kind = type(default) if default is not None else (
        float if annotation.startswith("float") else
        int if annotation.startswith("int") or name in _COUNTS else str)
    if kind is float:
        return _measure_problem(value) if not isinstance(value, str) else "is not a number"
    if not isinstance(value, kind) or isinstance(value, bool):
        return f"is {_shown(value)}, not {'an integer' if kind is int else 'text'}"
    return _number_problem(value)


def _measure_problem(value) -> str | None:
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    for item in values:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            return f"is {_shown(value)}, not a number"
    return _number_problem(value)


def _number_problem(value) -> str | None:
    """NaN, infinity or an integer past a float's range, anywhere inside ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {value}, not a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2 ** 63:
        return "is an integer past a 64-bit range"
    if isinstance(value, list):
        return next((p for p in map(_number_problem, value) if p), None)
    if isinstance(value, dict):
        return next((p for p in map(_number_problem, value.values()) if p), None)
    return None


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
