"""One self-contained HTML page: inline CSS, figures as base64 PNG, no script, no link
to anything outside the file, so that it opens offline and can be mailed.

The markup is the Jinja2 template ``page.html.j2`` beside this module, rendered with
autoescape on: a value from a sweep (a reason, a dataset name, a node's name) cannot
become markup, whatever it holds. This module turns records into rows of display
strings (numbers formatted, verdicts worded) and leaves every tag to the template. A
table's heading shows its column's meaning and unit on hover (``title``), from
``profiler.results_schema``.
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from .. import engines
from ..engines import ReportSection, engine_label
from ..results_schema import get as column_of
from ..results_schema import help_of
from ..sweep import board_time
from ..sweep.table import THIN_NOTE, status_counts
from . import energy
from .engines import MEASURES, side_by_side
from .figures import Figure, Skipped
from .prediction_section import PredictionSection
from .ratios import MIN_WINDOW_S, Ratio, summary
from .study_section import Match, StudySection

STATUS_COLUMNS = [("config", "configuration"), ("status", "status"), ("reason", "reason"),
                  ("dataset", "dataset"), ("train_s", "train s"), ("samples_per_s", "samples/s"),
                  ("val_accuracy", "val acc"), ("cpu_percent_mean", "CPU %"),
                  # The cell's processes, then the node's (the host, on the local cluster).
                  ("rss_mb_peak", "mem peak MB"), ("mem_used_mb_peak", "node mem peak MB"),
                  ("net_sent_kb_per_s", "sent KB/s"),
                  ("net_recv_kb_per_s", "recv KB/s"), ("metrics_nodes", "nodes"),
                  ("samples_in_window", "samples")]
# Figures resting on the agent's samples: a thin window's (sampled_figures_thin) end in ~.
SAMPLED_COLUMNS = ("cpu_percent_mean", "mem_used_mb_peak")
TEXT_COLUMNS = ("config", "status", "reason", "dataset")  # left-aligned
BREAKDOWN_COLUMNS = [("compute_ms_mean", "compute"), ("comm_ms_mean", "comm"),
                     ("wait_ms_mean", "wait"), ("wait_ms_p95", "wait p95"),
                     ("step_ms_mean", "timed step"), ("steady_step_ms", "step"),
                     ("breakdown_vs_step", "sum / step")]
NO_NETWORK = ("No network panels: no cell ran on two or more devices, so nothing crossed "
              "a link between nodes.")

_TEMPLATES = Environment(loader=PackageLoader("profiler.report", "."),
                         autoescape=True, undefined=StrictUndefined,
                         trim_blocks=True, lstrip_blocks=True)
_TEMPLATES.filters["base64"] = lambda png: base64.b64encode(png).decode()


def number(value) -> str:
    """A value as the page prints it: floats to three decimals or significant digits."""
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        if 0 < abs(value) < 0.01:
            # Three significant digits: a ratio of a short test cell to the study's
            # Pi time (0.05 s / 105 s) would otherwise read 0.000.
            return f"{value:.3g}"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def render(*, title: str, environment: dict, records: list[dict], config_of,
           figures: list[Figure | Skipped], cell_figures: list[Figure],
           study: StudySection | None = None, traces: dict[str, str] | None = None,
           network_drawn: bool = True,
           engine_sections: list[ReportSection] = (), energy_section: dict | None = None,
           energy_figure: Figure | None = None,
           prediction: PredictionSection | None = None) -> str:
    """The page. ``network_drawn`` False: the per-node figures have no network panels
    (no cell had two devices), which the page says in one line. ``engine_sections``:
    the engines' own (``Engine.report_sections``: a pipeline's stages). ``study``: the
    section of the study that made the sweep (none without one). ``prediction``: the
    step model's curve beyond the measured cells (none when nothing was fitted)."""
    config_of = _with_engine(config_of)
    columns = STATUS_COLUMNS + ([("speedup", "speedup")]
                                if any((r.get("speedup") or 1) != 1 for r in records) else [])
    columns += energy.status_columns(records)  # energy and cost, where a record has them
    return _TEMPLATES.get_template("page.html.j2").render(
        title=title, environment=environment, status_counts=status_counts(records),
        columns=[{"heading": h, "text": k in TEXT_COLUMNS, "help": help_of(k)}
                 for k, h in columns],
        cells=[_cell_row(r, columns, config_of) for r in records],
        figures=[f for f in figures if isinstance(f, Figure)],
        skipped=[f for f in figures if isinstance(f, Skipped)],
        breakdown_columns=[{"heading": h, "help": help_of(k)} for k, h in BREAKDOWN_COLUMNS],
        breakdown=_breakdown(records, config_of, traces or {}),
        engines=_engines(records, config_of),
        engine_sections=[_section(s, config_of) for s in engine_sections],
        energy=({**energy_section, "figure": energy_figure} if energy_section else None),
        study=_study(study) if study else None, prediction=prediction,
        cluster=environment.get("cluster", ""),
        no_network="" if network_drawn else NO_NETWORK, cell_figures=cell_figures,
        thin_note=THIN_NOTE if any(r.get("sampled_figures_thin") for r in records) else "",
        stamp=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def _cell_row(r: dict, columns: list[tuple[str, str]], config_of) -> dict:
    status = str(r.get("status", ""))
    cells = []
    for key, _ in columns:
        if key == "config":
            cells.append({"klass": "l", "value": config_of(r)})
        elif key == "status":
            cells.append({"klass": "l s",
                          "value": status + (", diverged" if r.get("diverged") else "")})
        elif key in ("reason", "dataset"):
            cells.append({"klass": "l", "value": r.get(key) or ""})
        else:
            value = number(r.get(key))
            if value and key in SAMPLED_COLUMNS and r.get("sampled_figures_thin"):
                value += "~"
            cells.append({"klass": "", "value": value})
    return {"classes": status + (" diverged" if r.get("diverged") else ""), "cells": cells}


def _match_row(m: Match) -> dict:
    ratio = (m.ours / m.study) if (m.ours is not None and m.study) else None
    return {"source": m.source, "config": m.config, "measure": m.measure,
            "ours": number(m.ours), "study": number(m.study), "ratio": number(ratio),
            "note": m.note if m.comparable else f"not comparable: {m.note}"}


def _breakdown(records: list[dict], config_of, traces: dict[str, str]) -> list[dict]:
    """Where each cell's steps spent their time, its slowest worker and its trace."""
    rows = []
    for raw in records:
        if raw.get("compute_ms_mean") is None:
            continue
        r = board_time.record(raw)
        straggler = r.get("straggler") or "none"
        rows.append({
            "config": config_of(r), "timed": r.get("breakdown") or "",
            "numbers": [number(r.get(k)) for k, _ in BREAKDOWN_COLUMNS],
            "slowest": r.get("slowest_worker") or "",
            "straggler": "" if straggler == "none"
            else f"{r.get('straggler_node') or ''} x{straggler}",
            "trace": traces.get(r.get("cell_id", ""))})
    return rows


def _engines(records: list[dict], config_of) -> dict | None:
    """The same cells on each engine, when the sweep ran more than one engine."""
    engines, rows = side_by_side(records)
    if not rows:
        return None
    first = engines[0]
    shown = []
    for row in rows:
        any_record = next(iter(row.by_engine.values()))
        values = []
        for engine in engines:
            record = row.by_engine.get(engine, {})
            values += [number(record.get(key))
                       + ("!" if key == "val_accuracy" and record.get("diverged") else "")
                       for key, _ in MEASURES]
        base = row.by_engine.get(first, {}).get("epoch_s_mean")
        for engine in engines[1:]:
            mine = row.by_engine.get(engine, {}).get("epoch_s_mean")
            values.append(number(mine / base if mine and base else None))
        plain = {**any_record, "engine": ""}
        shown.append({"config": config_of(plain).strip(),
                      "numbers": values})
    return {"names": engines, "units": [unit for _, unit in MEASURES], "rows": shown}


def _with_engine(config_of):
    """``config_of`` with the engine's own settings after its name, as the engine says
    them (``... torch-pipe S2 M4 1f1b``): cells that differ in those alone are told
    apart. An engine's name (the configuration's part of the label) is not repeated."""
    def named(r: dict) -> str:
        name = str(r.get("engine", "?"))
        return config_of(r) + engine_label(r).removeprefix(name)
    return named


def _section(section: ReportSection, config_of) -> dict:
    """An engine's section as the page shows it: a row per cell, a list value (one per
    stage or worker) joined with " / " in its order."""
    rows = [{"config": config_of(r),
             "numbers": [" / ".join(number(v) for v in value) if isinstance(value, list)
                         else number(value) for value in values]}
            for r, values in section.rows]
    own = engines.columns()
    helps = [column.help if (column := column_of(name, own)) else ""
             for name in section.columns] or [""] * len(section.headings)
    # The note is the engine's own text (code, not a sweep's data): its <i> stays HTML.
    return {"key": section.key, "title": section.title, "note": Markup(section.note),
            "columns": [{"heading": h, "help": text}
                        for h, text in zip(section.headings, helps)],
            "rows": rows, "figure": section.figure}


def _verdict(ratio: Ratio) -> tuple[str, str]:
    """The row's verdict and its cell's class (within and outside are coloured)."""
    return {"within": "in", "outside": "out"}.get(ratio.verdict, ""), ratio.verdict


def _study(section: StudySection) -> dict:
    """A study's section as the page shows it: its ratios with their verdicts, its
    numbers beside matching cells, its figures."""
    return {"title": section.title, "intro": section.intro, "bands": section.bands,
            "ratios": _ratio_rows(section.ratios), "counts": summary(section.ratios),
            # With --repeats: ours is a median over the repeats, shown with its range.
            "repeats": max((len(r.values) for r in section.ratios), default=1),
            "min_steps": section.min_steps,
            # Timed rows (a time, a CPU share) also need their cells' training window.
            "min_window_s": MIN_WINDOW_S if any(r.timed for r in section.ratios) else None,
            "hardware": section.hardware, "no_match": section.no_match,
            "matches": [_match_row(m) for m in section.matches],
            "figures": section.figures, "subsections": section.subsections}


def _range(r: Ratio, ours: str) -> str:
    """The repeats' lowest to highest; "all <value>" when they agree to the digits shown
    (accuracy with one seed is the same every repeat)."""
    low_high = r.spread
    if not low_high or len(r.values) < 2:
        return ours
    low, high = (number(v) for v in low_high)
    return f"all {low}" if low == high else f"{low}–{high}"


def _ratio_rows(rows: list[Ratio]) -> list[dict]:
    """The study's findings as ratios, ours beside theirs (``ratios.py`` says how)."""
    shown = []
    for r in rows:
        klass, verdict = _verdict(r)
        if isinstance(r.study, bool):
            study, ours, quotient = str(r.study), "" if r.ours is None else str(r.ours), ""
        else:
            study, ours = number(r.study), number(r.ours)
            quotient = number(r.ours / r.study if r.ours is not None and r.study else None)
        shown.append({"source": r.source, "measure": r.measure, "config": r.config,
                      "study": study, "ours": ours, "quotient": quotient,
                      "range": _range(r, ours),
                      "band": f"{r.band:g}", "klass": klass, "verdict": verdict,
                      "note": r.note})
    return shown
