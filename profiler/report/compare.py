"""Two sweeps side by side: for the cells they share, the ratio B / A of each measure.

Cells are matched by their configuration (``cell_id`` hashes it), so two clusters or two
dates of the same grid match as they are; ``ignore`` drops fields from the match, e.g.
``engine`` to set MXNet's cells beside Horovod's of the same model, batch and devices.
Only cells that finished ``ok`` in both are compared. An engine's cells add the
engine's own measures (``Engine.compare_measures``: a pipeline's step, step over its
prediction, bubble, imbalance, largest stage stash) when both sides of a pair have them.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass

from .. import engines
from ..engines import engine_label
from ..errors import ConfigError
from ..results_schema import columns_of
from ..status import Status
from ..sweep.store import config_columns
from .sweep_data import Sweep

# samples_per_s is the whole run's (first step and every slow moment in); the training
# rate to compare is robust_s_per_sample (profiler.timeline.rate), a time: B / A < 1 is
# faster.
MEASURES = ["elapsed_s", "train_s", "samples_per_s", "robust_s_per_sample", "val_accuracy",
            "cpu_percent_mean", "mem_used_mb_mean", "rss_mb_peak", "net_sent_kb_per_s",
            "net_recv_kb_per_s"]
# Energy and cost (issue 32: profiler.sweep.cost and the cell's energy), compared only
# when a pair of cells has them; ``energy_source`` says whether a side was measured.
ENERGY_MEASURES = list(columns_of("energy", "cost", kind="float"))


@dataclass
class Row:
    config: str
    a: dict
    b: dict

    def ratio(self, measure: str) -> float | None:
        x, y = value(self.a, measure), value(self.b, measure)
        if x in (None, 0) or y is None:
            return None
        return y / x


def compare(a: Sweep, b: Sweep, ignore: tuple[str, ...] = ()) -> list[Row]:
    matchable = config_columns()  # the cell's settings, each engine's own among them
    unknown = sorted(set(ignore) - set(matchable))
    if unknown:
        raise ConfigError(f"--ignore {','.join(unknown)}: not a cell setting; use some of "
                          f"{', '.join(matchable)}")

    def key(r: dict) -> tuple:
        # As JSON: a record's params are lists (read back from results.jsonl), which a
        # tuple cannot hash.
        return tuple((f, json.dumps(r.get(f))) for f in matchable if f not in ignore)

    b_by_key: dict[tuple, dict] = {}
    for r in b.records:
        if r.get("status") == Status.OK:
            b_by_key.setdefault(key(r), r)
    rows = [Row(_label(r, ignore), r, b_by_key[key(r)]) for r in a.records
            if r.get("status") == Status.OK and key(r) in b_by_key]
    if not rows:
        raise ConfigError(f"{a.path} and {b.path} have no finished cell in common: compare "
                          "sweeps of the same grid, or match across a setting with "
                          "--ignore engine (or another cell setting)")
    return rows


def value(record: dict, measure: str):
    """A measure of a record, as its engine reads it (``Engine.measure``: a pipeline's
    ``stage_stash_mb_max`` is its largest stage's stash)."""
    engine = engines.ENGINES.get(str(record.get("engine")))
    return engine.measure(record, measure) if engine else record.get(measure)


def measures(rows: list[Row]) -> list[str]:
    """What is compared: ``MEASURES``, and the engines' own and the energy and cost
    measures each when a pair has them (a sweep without them keeps its table as it
    was)."""
    def paired(m: str) -> bool:
        return any(value(row.a, m) is not None and value(row.b, m) is not None
                   for row in rows)
    own = [m for m, _short in engines.compare_measures() if paired(m)]
    return MEASURES + own + [m for m in ENERGY_MEASURES if paired(m)]


def table(rows: list[Row]) -> str:
    shown = measures(rows)
    width = max(len(r.config) for r in rows)
    head = f"{'cell':<{width}} " + " ".join(f"{_short(m):>10}" for m in shown)
    lines = [head]
    for row in rows:
        lines.append(f"{row.config:<{width}} " + " ".join(
            f"{_fmt(row.ratio(m)):>10}" for m in shown))
    return "\n".join(lines)


def to_csv(rows: list[Row]) -> str:
    shown = measures(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["cell", "cell_id_a", "cell_id_b"]
                    + [f"{m}_{side}" for m in shown for side in ("a", "b", "ratio")])
    for row in rows:
        values = []
        for m in shown:
            ratio = row.ratio(m)
            values += [value(row.a, m), value(row.b, m),
                       "" if ratio is None else round(ratio, 4)]
        writer.writerow([row.config, row.a["cell_id"], row.b["cell_id"], *values])
    return buffer.getvalue()


def _label(r: dict, ignore) -> str:
    depth = f"-{r['layers']}" if r.get("layers") else ""
    # A pipeline's shape (S2 M4 1f1b) names it, unless the match ignores the engine.
    parts = [f"{r['model']}{depth}", f"b{r['batch']}", f"x{r['devices']}", r["sync"],
             engine_label(r) if "engine" not in ignore else ""]
    return " ".join(p for p in parts if p)


def _short(measure: str) -> str:
    return {"cpu_percent_mean": "cpu%", "mem_used_mb_mean": "mem MB", "rss_mb_peak": "rss MB",
            "net_sent_kb_per_s": "sent KB/s", "net_recv_kb_per_s": "recv KB/s",
            "samples_per_s": "samples/s", "val_accuracy": "val acc",
            "robust_s_per_sample": "s/sample", **dict(engines.compare_measures()),
            "energy_j": "energy J", "avg_power_w": "avg W", "j_per_sample": "J/sample",
            "energy_to_accuracy_j": "J to acc", "cost_usd": "cost USD",
            "cost_per_epoch_usd": "USD/epoch"}.get(measure, measure)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
