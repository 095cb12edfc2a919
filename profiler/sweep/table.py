"""The plain-text table printed at the end of a sweep, in the spirit of the study's Table 1.

Memory is two columns, because on the local cluster a node is the whole host: ``mem_MB``
is the cell's own, the summed RSS of a worker node's training processes (mean over the
cell's life, then over worker nodes: ``rss_mb_mean``), which is what a reader takes the
model's footprint to be; ``node_mem_MB`` is the node's used memory (``mem_used_mb_mean``:
the host's on the local cluster, the node's cgroup on the emulated one, the board's on
real nodes), which includes everything else running there. ``mem_peak_MB`` is those
processes' peak (``rss_mb_peak``: the kernel's high-water marks, which no sampling misses).

Sampled figures (``cpu_%``, ``mem_MB``, ``node_mem_MB``) of a cell whose window held
fewer than three of the agent's ticks (``sampled_figures_thin``) end in ``~``, and a
note under the table gives the remedy (a shorter ``--interval``).

A pipeline cell's engine reads ``torch-pipe S2 M4 1f1b`` (``engine_label``: stages,
micro-batches, schedule, and pipelines side by side or a split other than the default
when set), so that cells differing only in those settings are told apart; the report
and ``edgeprof compare`` name cells the same way.
"""

from __future__ import annotations

from ..cell import PARAM_COLUMN_PREFIX, param_columns
from ..engines import engine_label

COLUMNS = [  # (header, record key, format)
    ("model", "model", "{}"), ("layers", "layers", "{}"), ("batch", "batch", "{}"),
    ("devices", "devices", "{}"), ("sync", "sync", "{}"), ("engine", "engine", "{}"),
    ("status", "status", "{}"), ("elapsed_s", "elapsed_s", "{:.1f}"),
    ("val_acc", "val_accuracy", "{:.3f}"), ("samples/s", "samples_per_s", "{:.1f}"),
    ("syncs", "syncs_per_worker", "{:.0f}"), ("cpu_%", "cpu_percent_mean", "{:.1f}"),
    ("mem_MB", "rss_mb_mean", "{:.0f}"), ("mem_peak_MB", "rss_mb_peak", "{:.0f}"),
    ("node_mem_MB", "mem_used_mb_mean", "{:.0f}"),
    ("sent_KB", "net_sent_kb", "{:.0f}"),
    ("recv_KB", "net_recv_kb", "{:.0f}"),
]

STATUS = [key for _, key, _ in COLUMNS].index("status")
# The sampled figures a thin window (``sampled_figures_thin``) marks with "~".
SAMPLED = ("cpu_percent_mean", "rss_mb_mean", "mem_used_mb_mean")
THIN_NOTE = ("~ rests on fewer than 3 samples of the agent (samples_in_window): rerun "
             "with --interval 0.2 for more")


def status_label(rec: dict) -> str:
    """A cell's status as the table reads it: a diverged cell's is ``ok,diverged``."""
    return str(rec.get("status", "?")) + (",diverged" if rec.get("diverged") else "")


def status_counts(records: list[dict]) -> dict[str, int]:
    """Cells per status as the table reads it (``ok,diverged`` apart from ``ok``)."""
    counts: dict[str, int] = {}
    for rec in records:
        counts[status_label(rec)] = counts.get(status_label(rec), 0) + 1
    return dict(sorted(counts.items()))


def format_table(records: list[dict]) -> str:
    """Aligned columns, one row per cell, ``-`` for a missing value; a diverged cell's
    status reads ``ok,diverged`` and its accuracy ends in ``!``; a thin window's sampled
    figures end in ``~``, with ``THIN_NOTE`` under the table."""
    columns, records = _columns(records)
    keys = [key for _, key, _ in columns]
    rows = [[h for h, _, _ in columns]] + [_row(rec, columns, keys) for rec in records]
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if any(rec.get("sampled_figures_thin") for rec in records):
        lines.append(THIN_NOTE)
    return "\n".join(lines)


def _columns(records: list[dict]) -> tuple[list[tuple[str, str, str]], list[dict]]:
    """The table's columns for ``records`` (``COLUMNS`` and what only some sweeps
    have), and the records with what those columns show."""
    columns = list(COLUMNS)
    if any(rec.get("straggler", "none") != "none" for rec in records):
        # Which node was slowed, and how: "n4 0.5@30" (only in sweeps that slow one).
        columns.insert(STATUS, ("straggler", "straggler", "{}"))
    if any(rec.get("repeat") for rec in records):
        # Which run of its configuration (a study's --repeats), 1-based.
        columns.insert(STATUS, ("repeat", "repeat_shown", "{}"))
        records = [{**rec, "repeat_shown": (rec.get("repeat") or 0) + 1} for rec in records]
    # A script's --param values, one column each (the cells differ by nothing else).
    names = dict.fromkeys(column for rec in records for column in param_columns(rec.get("params")))
    columns[STATUS:STATUS] = [(name.removeprefix(PARAM_COLUMN_PREFIX), name, "{}")
                              for name in names]
    return columns, [{**rec, **param_columns(rec.get("params"))} for rec in records]


def _row(rec: dict, columns: list[tuple[str, str, str]], keys: list[str]) -> list[str]:
    """One cell's row: its values formatted, then marked (module doc)."""
    row = [_fmt(rec.get(key), fmt) for _, key, fmt in columns]
    row[keys.index("status")] = status_label(rec)
    row[keys.index("engine")] = engine_label(rec)
    if rec.get("diverged"):
        # The run was measured (status ok), but its accuracy means nothing.
        row[keys.index("val_accuracy")] += "!"
    if rec.get("sampled_figures_thin"):
        for key in SAMPLED:
            if key in keys and row[keys.index(key)] != "-":
                row[keys.index(key)] += "~"
    if "straggler" in keys and rec.get("straggler_node"):
        row[keys.index("straggler")] = f"{rec['straggler_node']} {rec['straggler']}"
    return row


def _fmt(value, fmt: str) -> str:
    if value is None or value == "":
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)
