"""``build_report``: a sweep folder → ``report.html`` (self-contained) and
``report-figures/*.png``.

The figures' folder is the report's own: a link there pointing out of the page's folder
is refused, and each PNG replaces whatever has its name (a link too) rather than being
written through it; a sweep folder may come from another machine.

A study's section is the caller's to give (``study_section``): the report knows no
study, and the CLI asks the study registry for the one that made the sweep. The
prediction's section is the one ``profiler.predict`` offers (``prediction_section``),
when it was loaded.

The per-cell figures (one a cell: most of the time of a large sweep's report) are read
and drawn in a pool of processes when the sweep has enough cells to repay starting it.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Callable

from .. import __version__
from ..engines import ENGINES, distributions
from ..cell import DEFAULT_ENGINE
from ..cluster import PROVIDERS
from ..errors import ConfigError
from ..fsutil import atomic_write_bytes, atomic_write_text
from .prediction_section import prediction_section
from .study_section import StudySection
from .sweep_data import Sweep, config_label, load_sweep, read_cell_series

# A worker process starts in ~0.5 s (matplotlib's import): below this many cells per
# worker a pool costs more than it saves.
CELLS_PER_WORKER_MIN = 8


def build_report(sweep_dir: Path, out: Path | None = None, *,
                 workers: int | None = None, cloud=None,
                 study_section: Callable[[list[dict]], StudySection | None] | None = None
                 ) -> Path:
    """Write the report of ``sweep_dir``; return the HTML file's path.

    ``workers``: processes drawing the per-cell figures (1: this one alone); None: one
    per CPU this process may use, as far as the cells keep each busy. ``cloud``: a
    ``energy.CloudVM`` to price the cells' training beside (None: none).
    ``study_section``: the study's section of the page from the sweep's records
    (``Study.section``; None: no study section).
    """
    sweep = load_sweep(Path(sweep_dir))
    out = Path(out) if out is not None else sweep.path / "report.html"
    figures_dir = _figures_dir(out)
    try:
        from . import figures as figs
        from .html import render
    except ImportError as exc:
        raise ConfigError(f"the report needs matplotlib and Jinja2 ({exc.name} missing): "
                          "pip install 'edgeprof[controller]'") from None
    network = figs.network_drawn(sweep.records)
    jobs = [(sweep.cell_dir(r) / "metrics", r, network) for r in sweep.records]
    # The prediction's section (offered by profiler.predict, a layer above: its
    # report_section; None: nothing fitted) is drawn here too, beside the pool's work.
    if workers is None:
        workers = min(_cpus(), len(jobs) // CELLS_PER_WORKER_MIN)
    if workers > 1:
        # forkserver, not fork: the caller may have threads (a study's sweep), and a
        # forked child would inherit whatever locks they held.
        with ProcessPoolExecutor(workers,
                                 mp_context=multiprocessing.get_context("forkserver")) as pool:
            pending = pool.map(_cell_figure, jobs,
                               chunksize=max(1, len(jobs) // (4 * workers)))
            drawn = [build(sweep.records) for build in figs.SWEEP_FIGURES]  # meanwhile
            predicted = prediction_section(sweep.records, sweep.settings)
            cell_figures = [f for f in pending if f is not None]
    else:
        drawn = [build(sweep.records) for build in figs.SWEEP_FIGURES]
        predicted = prediction_section(sweep.records, sweep.settings)
        cell_figures = [f for f in map(_cell_figure, jobs) if f is not None]
    from ..engines import report_sections
    sections = report_sections(sweep.records)  # each engine's own (a pipeline's stages)
    from . import energy
    from .html import number
    energy_fig = energy.figure(sweep.records)  # None: no cell with energy
    study = study_section(sweep.records) if study_section else None
    if study is not None:
        from .ratio_figure import ratio_figure
        drawn_ratios = ratio_figure(study.ratios)  # None: no ratio with a number
        if drawn_ratios is not None:
            study.figures.insert(0, drawn_ratios)
    page = render(title=f"edgeprof sweep {sweep.sweep_id}", environment=environment(sweep),
                  records=sweep.records, config_of=config_label, figures=drawn,
                  cell_figures=cell_figures, study=study, traces=_trace_links(sweep, out),
                  network_drawn=network, engine_sections=sections,
                  energy_section=energy.section(sweep.records, cloud, number, config_label),
                  energy_figure=energy_fig, prediction=predicted)
    try:
        figures_dir.mkdir(parents=True, exist_ok=True)
        for figure in ([f for f in drawn if isinstance(f, figs.Figure)] + cell_figures
                       + [s.figure for s in sections if s.figure]
                       + ([energy_fig] if energy_fig else [])
                       + (study.figures if study else [])
                       + (predicted.figures if predicted else [])):
            # Replaced, not written through: a link planted under a figure's name (to
            # a file elsewhere) becomes the figure, the file it named is left alone.
            atomic_write_bytes(figures_dir / f"{figure.name}.png", figure.png, fsync=False)
        atomic_write_text(out, page)
    except OSError as exc:
        raise ConfigError(f"cannot write the report to {out} ({exc.strerror}): give "
                          "--out FILE in a writable folder") from None
    return out


def _figures_dir(out: Path) -> Path:
    """``<page>-figures``, the PNGs' folder beside the page.

    Raises ``ConfigError`` when it is a link out of the page's folder: a sweep folder
    from elsewhere could point it at any folder the report's user may write to."""
    figures_dir = out.parent / f"{out.stem}-figures"
    if figures_dir.is_symlink():
        home, target = out.parent.resolve(), figures_dir.resolve()
        if target != home and home not in target.parents:
            raise ConfigError(f"{figures_dir} is a link to {target}, outside {home}: remove "
                              "the link (the report makes the folder) or give --out FILE "
                              "in another folder")
    return figures_dir


def _cpus() -> int:
    """CPUs this process may run on (its affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _cell_figure(job: tuple[Path, dict, bool]):
    """One cell's per-node figure from its spools (None: no samples); a pool's task."""
    from .figures import node_series
    metrics_dir, record, network = job
    return node_series(record, read_cell_series(metrics_dir, record), network)


def _trace_links(sweep: Sweep, out: Path) -> dict[str, str]:
    """``cell_id -> link`` to each cell's trace, relative to the report's page."""
    links = {}
    for r in sweep.records:
        if r.get("trace_file") and (sweep.path / r["trace_file"]).exists():
            links[r["cell_id"]] = os.path.relpath((sweep.path / r["trace_file"]).resolve(),
                                                  out.parent.resolve())
    return links


def environment(sweep: Sweep) -> dict:
    identity = sweep.identity
    records = sweep.records
    created = sweep.settings.get("created")
    extra = sweep.settings.get("extra") or {}
    scale = extra.get("scale", 1)  # --budget: one per part
    scale = (", ".join(f"{part} {s:g}" for part, s in scale.items())
             if isinstance(scale, dict) else f"{scale:g}")
    budget = (f", chosen for --budget {extra['budget_s']:g} s" if extra.get("budget_s")
              else "")
    study = ({"study": f"{extra['study']} at scale {scale} of its data{budget}"
                       + (f", method {extra['method']}" if extra.get("method") else "")}
             if extra.get("study") else {})
    if extra.get("profile_check") is not None:
        study["profile check"] = profile_check_said(extra["profile_check"])
    speedup = identity.get("speedup") or 1
    return {
        **study,
        "sweep": sweep.sweep_id,
        "folder": str(sweep.path.resolve()),
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(created)) if created else "",
        **_versions(sweep),
        "cluster": f"{identity.get('cluster', '')}"
                   + (f" ({identity['profile']})" if identity.get("profile") else "")
                   + (f", speedup {speedup:g} (quotas and links x {speedup:g})"
                      if speedup != 1 else ""),
        "nodes with metrics (max)": max((r.get("metrics_nodes") or 0 for r in records),
                                        default=0),
        "devices": ", ".join(str(d) for d in sorted({r["devices"] for r in records})),
        "datasets": ", ".join(sorted({str(r.get("dataset")) for r in records})),
        "cells": len(records),
        "report host": platform.node(),
    }


def profile_check_said(checks: list[dict]) -> str:
    """The host check of the calibrated profile (``profiler.calibrate.check``), one
    clause per model family: its rate against the board's, and what was done."""
    if not checks:
        return "nothing to check (no board rate for these models)"
    said = []
    for c in checks:
        if c.get("check") == "exchange":
            said.append(_exchange_said(c))
            continue
        action = c.get("action", "none")
        if action == "recalibrated":
            what = (f", re-calibrated {c['quota_cores']:.4f} -> "
                    f"{c['new_quota_cores']:.4f} cores")
        else:
            what = "" if action == "none" else f", {action}"
        at = f" at speedup {c['speedup']:g}" if c.get("speedup", 1) != 1 else ""
        # How long it trained: a check of a few steps is noise (issue 47); older
        # records have no train_s.
        over = f" over {c['train_s']:.1f} s" if c.get("train_s") is not None else ""
        said.append(f"{c['workload']}{at} {c['ratio']:.2f} x the board's rate{over}"
                    f" ({'within' if c['within'] else 'outside'} x/÷"
                    f"{1 + c['tolerance']:g}){what}")
    return f"{checks[0]['profile']} on this host: " + "; ".join(said)


def _exchange_said(c: dict) -> str:
    """An exchange check's clause (``profiler.calibrate.exchange``): the measured step
    exchange against the one its link predicts."""
    at = f" at speedup {c['speedup']:g}" if c.get("speedup", 1) != 1 else ""
    warned = ", warned (a link is not re-calibrated)" if c.get("action") == "warned" else ""
    return (f"{c['workload']}'s exchange{at} {c['ratio']:.2f} x the "
            f"{c['expected_ms']:.0f} ms a step its {c['link_mbit']:g} Mbit link predicts "
            f"({'within' if c['within'] else 'outside'} x/÷{1 + c['tolerance']:g}){warned}")


def _versions(sweep: Sweep) -> dict:
    """edgeprof, engine and Python versions as the sweep recorded them when it started.

    A sweep from before versions were recorded gets this machine's, labelled as such:
    the report may be written on another machine, or after an upgrade.
    """
    recorded = sweep.settings.get("versions")
    where = ""
    if not isinstance(recorded, dict):
        recorded = {"edgeprof": __version__, "python": platform.python_version(),
                    **{name: _installed(name) for name in distributions(ENGINES)}}
        where = " (this machine; the sweep recorded none)"
    elif sweep.identity.get("cluster") in {n for n, p in PROVIDERS.items() if p.own_install}:
        where = " (the controller; the nodes run their own install)"
    # The packages the sweep's engines run on (Horovod trains through MXNet here).
    engines = distributions({r.get("engine", DEFAULT_ENGINE) for r in sweep.records
                             if r.get("engine", DEFAULT_ENGINE) in ENGINES})
    return {f"edgeprof{where}": recorded.get("edgeprof", "unknown"),
            f"engines{where}": ", ".join(f"{name} {recorded.get(name) or 'not installed'}"
                                         for name in engines),
            f"python{where}": recorded.get("python", "unknown")}


def _installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
