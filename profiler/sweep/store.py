"""The results store of a sweep: an append-only JSON-lines log and a CSV table.

``results.jsonl`` is the record: one line per finished cell attempt, appended and
fsynced, never rewritten (except that a line torn by a crash is cut before the next
append), so a crash loses at most the cell that was running. ``results.csv`` is derived
from it (last record per cell wins) and replaced atomically after every cell, so a reader
never sees half a table.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Sequence

from .. import engines
from ..cell import param_columns
from ..column import Column
from ..fsutil import atomic_write_text
from ..results_schema import columns_of, csv_columns
from ..status import FINAL


def config_columns() -> list[str]:
    """A cell's configuration as results columns: its fields, then every engine's own
    settings (asked of the registry when called: plugins in)."""
    return [*columns_of("config"), *(c.name for c in engines.setting_columns())]


class ResultsStore:
    """A sweep's results; ``monitored``: the sweep runs agents, so its table has their
    columns; ``extra``: columns the engines add to the record's, by default every
    registered engine's (``profiler.results_schema`` orders them all)."""

    def __init__(self, sweep_dir: Path, *, monitored: bool = False,
                 extra: Sequence[Column] | None = None):
        self.sweep_dir = Path(sweep_dir)
        self.jsonl_path = self.sweep_dir / "results.jsonl"
        self.csv_path = self.sweep_dir / "results.csv"
        # By default every engine's own settings and columns (the registry's, plugins in).
        self.columns = csv_columns(monitored=monitored,
                                   extra=engines.columns() if extra is None else extra)

    def records(self) -> list[dict]:
        """Every record, oldest first; a torn last line (crash mid-write) is ignored, and
        so is a line that is not a cell's record (a copied or edited file: not an object,
        no plain ``cell_id``, nested past the parser's depth, not UTF-8)."""
        if not self.jsonl_path.exists():
            return []
        records = []
        with open(self.jsonl_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if isinstance(record, dict) and _plain_name(record.get("cell_id")):
                    records.append(record)
        return records

    def latest(self) -> dict[str, dict]:
        """The last record of each cell, by cell_id."""
        return {r["cell_id"]: r for r in self.records()}

    def finished_ids(self) -> set[str]:
        return {cid for cid, r in self.latest().items() if r.get("status") in FINAL}

    def append(self, record: dict) -> None:
        line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
        with open(self.jsonl_path, "ab") as fh:
            _repair_tail(fh)
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.write_csv()

    def write_csv(self) -> None:
        # A script's --param values (a cell's ``params``) get a column each, after the
        # configuration's: param_<name>.
        rows = [{**row, **param_columns(row.get("params"))} for row in self.latest().values()]
        columns = self.columns + list(dict.fromkeys(
            c for row in rows for c in param_columns(row.get("params"))))
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell_text(row.get(k)) for k in columns})
        atomic_write_text(self.csv_path, buffer.getvalue())


def _plain_name(value) -> bool:
    """A cell id the sweep could have written: a name, not a path (it names a folder)."""
    return (isinstance(value, str) and value not in ("", ".", "..")
            and not any(c in value for c in "/\\\0"))


def _repair_tail(fh) -> None:
    """Cut a torn last line (a crash mid-append) so the next record starts on its own line.

    Without this, the next record would be glued to the torn bytes and lost on reading.
    ``fh`` is open for appending in binary mode; the file is small (one line per cell).
    """
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return
    with open(fh.name, "rb") as reader:
        reader.seek(size - 1)
        if reader.read(1) == b"\n":
            return
        reader.seek(0)
        keep = reader.read().rfind(b"\n") + 1  # 0 when no line is whole
    fh.truncate(keep)


def _cell_text(value) -> str:
    """Lists become ``a;b;c`` (one CSV cell), mappings JSON, None empty, booleans
    ``true``/``false``."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ";".join(_cell_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)  # e.g. node_profiles: {"n1": "pi4"}
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
