"""One self-contained HTML page: inline CSS, figures as base64 PNG, no script, no link
to anything outside the file, so that it opens offline and can be mailed."""

from __future__ import annotations

import base64
import html
from datetime import datetime, timezone

from ..sweep.table import status_counts
from . import board_time
from .engines import MEASURES, side_by_side
from .figures import Figure, Skipped
from .ratios import Ratio, summary
from .study import HARDWARE, Match

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}th{background:#f3f3f3}
td.l,th.l{text-align:left}
tr.ok td.s{color:#176117}tr.oom td.s,tr.timeout td.s,tr.failed td.s{color:#b00020;font-weight:bold}
tr.oom,tr.timeout,tr.failed{background:#fff3f3}tr.diverged{background:#fffbe6}
figure{margin:12px 0}figcaption{font-size:12px;color:#555}img{max-width:100%}
.note{font-size:12px;color:#555}
td.in{color:#176117;font-weight:bold}td.out{color:#b00020;font-weight:bold}
"""

STATUS_COLUMNS = [("config", "configuration"), ("status", "status"), ("reason", "reason"),
                  ("dataset", "dataset"), ("train_s", "train s"), ("samples_per_s", "samples/s"),
                  ("val_accuracy", "val acc"), ("cpu_percent_mean", "CPU %"),
                  ("mem_used_mb_peak", "mem peak MB"), ("net_sent_kb_per_s", "sent KB/s"),
                  ("net_recv_kb_per_s", "recv KB/s"), ("metrics_nodes", "nodes")]


def _e(value) -> str:
    return html.escape(str(value))


def _number(value) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        if 0 < abs(value) < 0.01:
            # Three significant digits: a ratio of a short test cell to the study's
            # Pi time (0.05 s / 105 s) would otherwise read 0.000.
            return f"{value:.3g}"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return _e(value)


def _img(figure: Figure) -> str:
    data = base64.b64encode(figure.png).decode()
    return (f'<figure id="{_e(figure.name)}"><img alt="{_e(figure.title)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{_e(figure.title)}: '
            f"{_e(figure.caption)}</figcaption></figure>")


def render(*, title: str, environment: dict, records: list[dict], config_of,
           figures: list[Figure | Skipped], cell_figures: list[Figure],
           matches: list[Match], ratios: list[Ratio] = (),
           traces: dict[str, str] | None = None) -> str:
    out = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
           f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{_e(title)}</h1>", "<h2>Environment</h2><table>"]
    out += [f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(v)}</td></tr>"
            for k, v in environment.items()]
    out.append("</table>")

    out.append("<h2>Cells</h2><p class='note'>" + "; ".join(
        f"{n} {_e(s)}" for s, n in status_counts(records).items()) +
        ". Every cell is listed with its last attempt; cells that did not finish "
        "<b>ok</b> are kept here with their reason and left out of the plots.</p>")
    columns = STATUS_COLUMNS + ([("speedup", "speedup")]
                                if any((r.get("speedup") or 1) != 1 for r in records) else [])
    out.append("<table><tr>" + "".join(
        f"<th class='{'l' if k in ('config', 'status', 'reason', 'dataset') else ''}'>"
        f"{_e(h)}</th>" for k, h in columns) + "</tr>")
    for r in records:
        status = str(r.get("status", ""))
        classes = status + (" diverged" if r.get("diverged") else "")
        cells = []
        for key, _ in columns:
            if key == "config":
                cells.append(f"<td class='l'>{_e(config_of(r))}</td>")
            elif key == "status":
                label = status + (", diverged" if r.get("diverged") else "")
                cells.append(f"<td class='l s'>{_e(label)}</td>")
            elif key in ("reason", "dataset"):
                cells.append(f"<td class='l'>{_e(r.get(key) or '')}</td>")
            else:
                cells.append(f"<td>{_number(r.get(key))}</td>")
        out.append(f"<tr class='{_e(classes)}'>" + "".join(cells) + "</tr>")
    out.append("</table>")

    out.append("<h2>Figures</h2>")
    skipped = [f for f in figures if isinstance(f, Skipped)]
    out += [_img(f) for f in figures if isinstance(f, Figure)]
    if skipped:
        out.append("<p class='note'>Not drawn, since this sweep's cells cannot show them:</p>"
                   "<ul class='note'>" + "".join(
                       f"<li>{_e(s.title)}: {_e(s.reason)}</li>" for s in skipped) + "</ul>")

    out += _breakdown(records, config_of, traces or {})

    out += _engines(records, config_of)

    if ratios:
        out += _reproduction(list(ratios))

    out.append("<h2>Beside the study</h2>")
    if matches:
        out.append(f"<p class='note'>Park, Lee &amp; Kim (2019): {_e(HARDWARE)}, MNIST and "
                   "CIFAR-10. Other hardware and software: compare shapes and ratios, not "
                   "absolute times. Ours: cluster "
                   f"{_e(environment.get('cluster', ''))}, dataset shown per row.</p>")
        out.append("<table><tr><th class='l'>study</th><th class='l'>our cell</th>"
                   "<th class='l'>measure</th><th>ours</th><th>study</th><th>ours / study"
                   "</th><th class='l'>note</th></tr>")
        for m in matches:
            ratio = (m.ours / m.study) if (m.ours is not None and m.study) else None
            note = m.note if m.comparable else f"not comparable: {m.note}"
            out.append(f"<tr><td class='l'>{_e(m.source)}</td><td class='l'>{_e(m.config)}"
                       f"</td><td class='l'>{_e(m.measure)}</td><td>{_number(m.ours)}</td>"
                       f"<td>{_number(m.study)}</td><td>{_number(ratio)}</td>"
                       f"<td class='l'>{_e(note)}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class='note'>No cell matches a configuration the study reports "
                   "(e.g. LeNet batch 64 sync on 1-10 devices, ResNet 32/80/110 x batch "
                   "32/64/128).</p>")

    out.append("<h2>Per-node time series</h2><p class='note'>Each cell's worker and master "
               "nodes over the cell's life (from its spools), last attempt.</p>")
    out += [_img(f) for f in cell_figures]
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out.append(f"<p class='note'>Written by edgeprof report, {stamp}.</p></body></html>")
    return "\n".join(out)


BREAKDOWN_COLUMNS = [("compute_ms_mean", "compute"), ("comm_ms_mean", "comm"),
                     ("wait_ms_mean", "wait"), ("wait_ms_p95", "wait p95"),
                     ("step_ms_mean", "timed step"), ("steady_step_ms", "step"),
                     ("breakdown_vs_step", "sum / step")]


def _breakdown(records: list[dict], config_of, traces: dict[str, str]) -> list[str]:
    """Where each cell's steps spent their time, its slowest worker and its trace."""
    cells = [r for r in records if r.get("compute_ms_mean") is not None]
    if not cells:
        return []
    out = ["<h2>Where the time goes</h2><p class='note'>ms per step in the board's time, "
           "mean over every timed step of every worker (the run's first step out); "
           "<i>step</i> is the mean step from the epoch times, <i>sum / step</i> the "
           "phases against it (above 1: overlap an asynchronous engine won, "
           "docs/timeline.md). The trace opens in chrome://tracing or "
           "ui.perfetto.dev.</p>",
           "<table><tr><th class='l'>cell</th><th class='l'>timed</th>" + "".join(
               f"<th>{_e(h)}</th>" for _, h in BREAKDOWN_COLUMNS) +
           "<th class='l'>slowest worker</th><th class='l'>straggler</th>"
           "<th class='l'>trace</th></tr>"]
    for raw in cells:
        r = board_time.record(raw)
        straggler = r.get("straggler") or "none"
        said = "" if straggler == "none" else f"{r.get('straggler_node') or ''} x{straggler}"
        href = traces.get(r.get("cell_id", ""))
        link = f"<a href='{_e(href)}'>trace.json</a>" if href else ""
        out.append(f"<tr><td class='l'>{_e(config_of(r))}</td>"
                   f"<td class='l'>{_e(r.get('breakdown') or '')}</td>" + "".join(
                       f"<td>{_number(r.get(k))}</td>" for k, _ in BREAKDOWN_COLUMNS) +
                   f"<td class='l'>{_e(r.get('slowest_worker') or '')}</td>"
                   f"<td class='l'>{_e(said)}</td><td class='l'>{link}</td></tr>")
    out.append("</table>")
    return out


def _engines(records: list[dict], config_of) -> list[str]:
    """The same cells on each engine, when the sweep ran more than one engine."""
    engines, rows = side_by_side(records)
    if not rows:
        return []
    first = engines[0]
    out = ["<h2 id='engines'>Engines side by side</h2>",
           f"<p class='note'>Each row: one configuration run <b>ok</b> on two engines or "
           f"more; time per epoch (mean over epochs), training rate (samples/s over all "
           f"workers), final validation accuracy, and each engine's time per epoch over "
           f"{_e(first)}'s ('!': diverged).</p>",
           "<table><tr><th class='l'>configuration</th>" + "".join(
               f"<th>{_e(engine)} {_e(unit)}</th>" for engine in engines
               for _, unit in MEASURES) + "".join(
               f"<th>{_e(engine)} / {_e(first)} time</th>" for engine in engines[1:]) +
           "</tr>"]
    for row in rows:
        any_record = next(iter(row.by_engine.values()))
        cells = [f"<td class='l'>{_e(config_of({**any_record, 'engine': ''}).strip())}</td>"]
        for engine in engines:
            record = row.by_engine.get(engine, {})
            cells += [f"<td>{_number(record.get(key))}"
                      f"{'!' if key == 'val_accuracy' and record.get('diverged') else ''}</td>"
                      for key, _ in MEASURES]
        base = row.by_engine.get(first, {}).get("epoch_s_mean")
        for engine in engines[1:]:
            mine = row.by_engine.get(engine, {}).get("epoch_s_mean")
            cells.append(f"<td>{_number(mine / base if mine and base else None)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return out


def _verdict(ratio: Ratio) -> tuple[str, str]:
    if ratio.within is None:
        return "", "not comparable" if not ratio.comparable else "no cell"
    return ("in", "within") if ratio.within else ("out", "outside")


def _reproduction(rows: list[Ratio]) -> list[str]:
    """The study's findings as ratios, ours beside theirs (``ratios.py`` says how)."""
    counts = summary(rows)
    out = ["<h2 id='reproduction'>Reproducing the study</h2>",
           f"<p class='note'>Park, Lee &amp; Kim (2019) as ratios between cells (most to the "
           f"one-device baseline), where hardware speed and the amount of data cancel: "
           f"<b>{counts['within']} of {counts['judged']}</b> judged ratios lie within their "
           f"band; {counts['not_comparable']} are not comparable (accuracy on other data "
           f"than the study's) and {counts['missing']} lack a finished cell. Bands: "
           f"x/÷1.25 for the study's tables (its own single runs wander that much), x/÷1.5 "
           f"for values its text gives approximately, x/÷1.1 for accuracy "
           f"(docs/study.md).</p>",
           "<table><tr><th class='l'>study</th><th class='l'>measure</th>"
           "<th class='l'>cells</th><th>study</th><th>ours</th><th>ours / study</th>"
           "<th>band</th><th class='l'>verdict</th><th class='l'>note</th></tr>"]
    for r in rows:
        klass, verdict = _verdict(r)
        if isinstance(r.study, bool):
            study, ours, quotient = _e(r.study), _e("" if r.ours is None else r.ours), ""
        else:
            study, ours = _number(r.study), _number(r.ours)
            quotient = _number(r.ours / r.study if r.ours is not None and r.study else None)
        out.append(f"<tr><td class='l'>{_e(r.source)}</td><td class='l'>{_e(r.measure)}</td>"
                   f"<td class='l'>{_e(r.config)}</td><td>{study}</td><td>{ours}</td>"
                   f"<td>{quotient}</td><td>{r.band:g}</td>"
                   f"<td class='l {klass}'>{_e(verdict)}</td><td class='l'>{_e(r.note)}</td></tr>")
    out.append("</table>")
    return out
