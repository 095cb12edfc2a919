"""The report's figures, drawn with matplotlib (Agg, no display) into PNG bytes.

Each builder takes the sweep's records and returns a ``Figure``, or a ``Skipped`` saying
why the sweep's cells cannot show it (e.g. no cell varies the device count): the report
lists those instead of leaving a hole. Cells that did not finish ``ok`` have no
training time or accuracy and are left out of the plots (the status table shows them);
``diverged`` cells are drawn hollow. Times and rates of time-dilated cells
(``--speedup``) are drawn in the board's time.
"""

from __future__ import annotations

import io
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..engines import engine_label  # noqa: E402
from ..figure import DPI, Figure, png_bytes  # noqa: E402
from ..status import Status
from ..sweep import board_time  # noqa: E402


@dataclass
class Skipped:
    title: str
    reason: str


def _ok(records: list[dict]) -> list[dict]:
    return [board_time.record(r) for r in records if r.get("status") == Status.OK]


def _series_label(r: dict, *, without: tuple[str, ...] = ()) -> str:
    # A pipeline cell's engine names its shape (S, M, schedule), S only where the
    # series keeps the device count (S follows it).
    engine = engine_label(r, stages="devices" not in without)
    parts = {"model": r["model"] + (f"-{r['layers']}" if r.get("layers") else ""),
             "batch": f"b{r['batch']}", "sync": r["sync"], "engine": engine,
             "devices": f"x{r['devices']}"}
    return " ".join(v for k, v in parts.items() if k not in without)


def _by_devices(records: list[dict]) -> dict[str, list[dict]]:
    """Series (all but the device count alike) with at least two device counts."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in _ok(records):
        groups[_series_label(r, without=("devices",))].append(r)
    return {k: sorted(v, key=lambda r: r["devices"]) for k, v in groups.items()
            if len({r["devices"] for r in v}) >= 2}


def _plot_against_devices(records, name, title, caption, panels) -> Figure | Skipped:
    series = _by_devices(records)
    if not series:
        return Skipped(title, "no configuration was run with two or more device counts")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.6), squeeze=False)
    # Devices are whole: the counts run, not 1.0, 1.2, ... between them.
    counts = sorted({r["devices"] for rows in series.values() for r in rows})
    for ax, (column, ylabel) in zip(axes[0], panels):
        for label, rows in series.items():
            points = [(r["devices"], r.get(column)) for r in rows if r.get(column) is not None]
            if not points:
                continue
            xs, ys = zip(*points)
            line, = ax.plot(xs, ys, marker="o", label=label)
            hollow = [(r["devices"], r.get(column)) for r in rows
                      if r.get("diverged") and r.get(column) is not None]
            if hollow:
                hx, hy = zip(*hollow)
                ax.scatter(hx, hy, s=90, facecolors="white", edgecolors=line.get_color(),
                           zorder=3, label=f"{label} (diverged)")
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.set_xlabel("devices")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    _legend(fig, axes[0][0])
    return Figure(name, title, caption, png_bytes(fig))


def _legend(fig, ax, inside_at_most: int = 6) -> None:
    """The legend in the first panel, or below the figure when it has more entries than
    fit beside the lines (a study has 15 or more series)."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return  # nothing labelled: matplotlib would warn "No artists with labels"
    if len(labels) <= inside_at_most:
        ax.legend(fontsize=7)
        return
    # Below the panels: savefig's tight bounding box takes it in.
    fig.legend(handles, labels, fontsize=7, ncol=3, loc="upper center",
               bbox_to_anchor=(0.5, 0.0), frameon=False)


def time_and_accuracy_vs_devices(records):
    return _plot_against_devices(
        records, "fig-devices-time-accuracy", "Time and accuracy against devices",
        "Training time (all epochs) and final validation accuracy per configuration, as the "
        "study's Tables 1-2.",
        [("train_s", "training time (s)"), ("val_accuracy", "validation accuracy")])


def resources_vs_devices(records):
    return _plot_against_devices(
        records, "fig-devices-resources", "CPU, memory and network against devices",
        "Means over the worker nodes during training, as the study's Figures 4, 6 and 7; "
        "network in KB/s (sent).",
        [("cpu_percent_mean", "CPU % of the node"), ("mem_used_mb_mean", "memory used (MB)"),
         ("net_sent_kb_per_s", "sent (KB/s)")])


def sync_vs_async(records):
    title = "Synchronous against asynchronous"
    pairs: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in _ok(records):
        if r["devices"] > 1:
            pairs[_series_label(r, without=("sync",))][r["sync"]] = r
    pairs = {k: v for k, v in pairs.items() if {"sync", "async"} <= set(v)}
    if not pairs:
        return Skipped(title, "no configuration was run both sync and async on 2+ devices")
    labels = sorted(pairs)
    fig, axes = plt.subplots(1, 2, figsize=(10.4, 3.6))
    width = 0.38
    for ax, (column, ylabel) in zip(axes, [("train_s", "training time (s)"),
                                           ("val_accuracy", "validation accuracy")]):
        for offset, mode in ((-width / 2, "sync"), (width / 2, "async")):
            ax.bar([i + offset for i in range(len(labels))],
                   [pairs[k][mode].get(column) or 0 for k in labels], width, label=mode)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    return Figure("fig-sync-async", title, "As the study's Figure 3.", png_bytes(fig))


def _grid_layers_batch(records):
    cells = [r for r in _ok(records) if r["model"] == "resnet"]
    layers = sorted({r["layers"] for r in cells})
    batches = sorted({r["batch"] for r in cells})
    return cells, layers, batches


def _bars_by_layers(records, name, title, caption, panels) -> Figure | Skipped:
    cells, layers, batches = _grid_layers_batch(records)
    if len(layers) * len(batches) < 2:
        return Skipped(title, "no ResNet cells with two or more depth x batch combinations")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.6), squeeze=False)
    width = 0.8 / len(batches)
    for ax, (column, ylabel) in zip(axes[0], panels):
        for j, batch in enumerate(batches):
            values = []
            for layer in layers:
                found = [r.get(column) for r in cells
                         if r["layers"] == layer and r["batch"] == batch and r.get(column)]
                values.append(sum(found) / len(found) if found else 0)
            ax.bar([i + (j - (len(batches) - 1) / 2) * width for i in range(len(layers))],
                   values, width, label=f"batch {batch}")
        ax.set_xticks(range(len(layers)), [f"ResNet-{n}" for n in layers])
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return Figure(name, title, caption, png_bytes(fig))


def time_and_accuracy_by_layers_batch(records):
    return _bars_by_layers(
        records, "fig-layers-batch", "Time and accuracy by depth and batch",
        "ResNet cells, mean over their device counts, as the study's Figure 5 (out-of-memory "
        "cells have no bar: see the status table).",
        [("train_s", "training time (s)"), ("val_accuracy", "validation accuracy")])


def resources_by_layers_batch(records):
    return _bars_by_layers(
        records, "fig-layers-batch-resources", "Resources by depth and batch",
        "Means over worker nodes, as the study's Table 3.",
        [("cpu_percent_mean", "CPU %"), ("mem_used_mb_peak", "memory peak (MB)"),
         ("net_sent_kb_per_s", "sent (KB/s)")])


def accuracy_over_epochs(records):
    title = "Accuracy over epochs"
    cells = [r for r in _ok(records) if len(r.get("val_accuracy_per_epoch") or []) >= 2]
    if not cells:
        return Skipped(title, "no finished cell trained two or more epochs")
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for r in cells:
        accuracies = r["val_accuracy_per_epoch"]
        ax.plot(range(1, len(accuracies) + 1), accuracies, marker="o", label=_series_label(r))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy")
    ax.grid(alpha=0.3)
    # Beside the axes, not over the lines a dozen cells draw (the tight box takes it in).
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return Figure("fig-epochs", title, "Validation accuracy after each epoch, as the "
                  "study's Table 4.", png_bytes(fig))


PHASE_COLOURS = (("data", "#bbbbbb"), ("compute", "#4c72b0"), ("comm", "#dd8452"),
                 ("wait", "#c44e52"))
PANELS_PER_ROW = 3


def _broken_down(records) -> list[dict]:
    return [r for r in _ok(records) if r.get("compute_ms_mean") is not None]


def step_breakdown_vs_devices(records):
    """Stacked ms per step (data, compute, comm, wait) against devices, one panel per
    model and configuration, sync cells: the figure that explains the study's Table 1."""
    title = "Where a step's time goes"
    series: dict[str, list[dict]] = defaultdict(list)
    for r in _broken_down(records):
        if r["sync"] == "sync" and (r.get("straggler") or "none") == "none":
            series[_series_label(r, without=("devices", "sync"))].append(r)
    if not series:
        return Skipped(title, "no sync cell timed its steps (--no-breakdown, or none ok)")
    labels = sorted(series)
    rows = (len(labels) + PANELS_PER_ROW - 1) // PANELS_PER_ROW
    cols = min(len(labels), PANELS_PER_ROW)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(labels):]:
        ax.set_visible(False)
    for ax, label in zip(axes.flat, labels):
        cells = sorted(series[label], key=lambda r: r["devices"])
        xs = list(range(len(cells)))
        bottom = [0.0] * len(cells)
        for phase, colour in PHASE_COLOURS:
            ys = [r.get(f"{phase}_ms_mean") or 0.0 for r in cells]
            ax.bar(xs, ys, 0.6, bottom=bottom, color=colour, label=phase)
            bottom = [b + y for b, y in zip(bottom, ys)]
        ax.set_xticks(xs, [str(r["devices"]) for r in cells])
        ax.set_xlabel("devices")
        ax.set_ylabel("ms per step")
        ax.set_title(label, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return Figure("fig-step-breakdown", title,
                  "Each worker's mean step split into preparing the batch, computing "
                  "(forward, backward), communicating and waiting (for the slowest worker "
                  "or the server), sync cells in the board's time (docs/timeline.md says "
                  "how each engine is measured).", png_bytes(fig))


def wait_by_worker(records):
    """Each worker's mean wait per step in every multi-device cell, the slowest marked."""
    title = "Waiting, worker by worker"
    cells = [r for r in _broken_down(records)
             if r["devices"] > 1 and r.get("wait_ms_by_worker")]
    if not cells:
        return Skipped(title, "no cell of two or more devices timed its steps")
    cells = sorted(cells, key=lambda r: (_series_label(r), r.get("straggler") or ""))
    fig, ax = plt.subplots(figsize=(max(6.4, 0.5 * sum(r["devices"] for r in cells)), 3.6))
    x, ticks, names = 0.0, [], []
    marked = False
    for r in cells:
        nodes = r.get("worker_nodes") or {}
        ranks = sorted(r["wait_ms_by_worker"], key=int)
        for rank in ranks:
            slowest = nodes.get(rank) == r.get("slowest_worker")
            ax.bar(x, r["wait_ms_by_worker"][rank], 0.8, color="#c44e52",
                   hatch="//" if slowest else None, edgecolor="black" if slowest else None,
                   label="waited for by the others" if slowest and not marked else None)
            marked = marked or slowest
            x += 1
        straggler = r.get("straggler") or "none"
        ticks.append(x - (len(ranks) + 1) / 2)
        names.append(_series_label(r) + ("" if straggler == "none"
                                         else f" straggler {straggler}"))
        x += 1
    ax.set_xticks(ticks, names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("wait, ms per step")
    ax.grid(axis="y", alpha=0.3)
    if marked:
        ax.legend(fontsize=7)
    return Figure("fig-wait-by-worker", title,
                  "Mean wait per step of each worker (one bar a worker rank, grouped by "
                  "cell), in the board's time; hatched: the slowest worker (sync: the one "
                  "the others waited for most often).", png_bytes(fig))


SWEEP_FIGURES: list[Callable] = [time_and_accuracy_vs_devices, sync_vs_async,
                                 resources_vs_devices, time_and_accuracy_by_layers_batch,
                                 resources_by_layers_batch, accuracy_over_epochs,
                                 step_breakdown_vs_devices, wait_by_worker]

NODE_PANELS = [("cpu_percent", "CPU %"), ("mem_used_mb", "memory (MB)")]
NETWORK_PANELS = [("net_sent_kb_per_s", "sent KB/s"), ("net_recv_kb_per_s", "received KB/s")]


def network_drawn(records: list[dict]) -> bool:
    """Whether the per-node figures have network panels: only when some cell ran on two
    devices or more. One device sends no gradients, so its panels would be flat lines at
    zero that read as a broken measurement."""
    return any((r.get("devices") or 1) >= 2 for r in records)


# The per-node figure is drawn once per cell (50 cells: 50 figures), so it is one figure
# per panel count, made once and drawn again with each cell's lines, at a fixed layout:
# making the axes and their ticks anew and savefig's tight bounding box (a second draw)
# for every cell were most of a 50-cell report's time (docs/report.md).
NODE_PANEL_IN = 2.7  # width of one panel with its share of the margins
NODE_HEIGHT_IN = 2.55
NODE_XLABEL_IN = 0.27  # the x label's top below the axes: under 7-point tick labels
NODE_MARGINS_IN = {"left": 0.55, "right": 0.12, "bottom": 0.48, "top": 0.28, "gap": 0.6}
_node_canvases: dict[int, tuple] = {}


def _node_canvas(panels: list[tuple[str, str]]):
    """The figure and axes the per-node plots of ``len(panels)`` panels are drawn on."""
    key = len(panels)
    if key not in _node_canvases:
        # A Figure outside pyplot: nothing keeps it in pyplot's list of open figures.
        from matplotlib.figure import Figure as MplFigure
        width_in = NODE_PANEL_IN * key
        m = NODE_MARGINS_IN
        fig = MplFigure(figsize=(width_in, NODE_HEIGHT_IN))
        panel_in = (width_in - m["left"] - m["right"] - m["gap"] * (key - 1)) / key
        fig.subplots_adjust(left=m["left"] / width_in, right=1 - m["right"] / width_in,
                            bottom=m["bottom"] / NODE_HEIGHT_IN,
                            top=1 - m["top"] / NODE_HEIGHT_IN, wspace=m["gap"] / panel_in)
        axes = fig.subplots(1, key, squeeze=False)[0]
        for ax, (_column, ylabel) in zip(axes, panels):
            # Title and label at fixed places: left to matplotlib, each draw measures
            # every tick label to place them (a quarter of the draw), for a result that
            # the fixed font sizes make the same in every cell.
            ax.set_title(ylabel, fontsize=9, y=1.0, pad=4)
            ax.set_xlabel("s since launch", fontsize=8)
            ax.xaxis.set_label_coords(0.5, -NODE_XLABEL_IN / (NODE_HEIGHT_IN - m["bottom"]
                                                               - m["top"]))
            ax.yaxis.set_label_coords(-0.1, 0.5)  # no label; spares measuring for it
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        _node_canvases[key] = (fig, axes)
    return _node_canvases[key]


def node_series(record: dict, nodes: dict, network: bool = True) -> Figure | None:
    """One cell's per-node CPU, memory and (``network``) network over its life (None: no
    samples)."""
    if not nodes:
        return None
    panels = NODE_PANELS + (NETWORK_PANELS if network else [])
    fig, axes = _node_canvas(panels)
    for ax, (column, _ylabel) in zip(axes, panels):
        for line in list(ax.lines):
            line.remove()
        ax.set_prop_cycle(None)  # node i gets the same colour in every cell
        ax.set_autoscale_on(True)
        drawn = False
        for node, series in nodes.items():
            points = series.get(column)
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, linewidth=1, label=node)
                drawn = True
        ax.relim()
        if drawn:
            ax.autoscale_view()
        else:  # what a fresh, empty axes shows
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
    if axes[0].get_legend() is not None:
        axes[0].get_legend().remove()
    if axes[0].lines:
        axes[0].legend(fontsize=6, ncol=2)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return Figure(f"fig-cell-{record['cell_id']}", _series_label(record),
                  f"status {record.get('status')}", buffer.getvalue())
