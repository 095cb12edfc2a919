"""The pipeline's section of the report: each ``torch-pipe`` cell's split, stage times,
bubble and step beside what the pipeline model predicts, and one figure of both over M.

The values are the cell's own results columns (``.columns`` says how each is measured);
this module only picks them, reads dilated cells (``--speedup``) in the board's time (ms
times k, the link's Mbit/s over k; ratios are what they are) and draws. A sweep without
a finished pipeline cell gets neither the table nor the figure: ``cells`` is empty and
the page leaves the section out.
"""

from __future__ import annotations

from collections import defaultdict

from ...figure import Figure, png_bytes, pyplot
from ...status import Status
from ..base import ReportSection

# (heading, results column): a per-stage column is a list in stage order.
TABLE = [("split (layers)", "pipe_split"),
         ("compute ms", "stage_compute_ms"),
         ("imbalance", "stage_imbalance"),
         ("imbalance predicted", "stage_imbalance_predicted"),
         ("bubble", "bubble_measured"),
         ("bubble GPipe", "bubble_gpipe"),
         ("step ms", "pipe_step_ms"),
         ("step ms predicted", "pipe_step_ms_predicted"),
         ("step / predicted", "pipe_step_vs_predicted"),
         ("stash MB", "stage_stash_mb"),
         ("floor MB/step", "pipe_bytes_floor_mb"),
         ("link Mbit/s", "link_mbit_s")]
TIME_MS = ("stage_compute_ms", "pipe_step_ms", "pipe_step_ms_predicted")
FIGURE_NAME = "fig-pipeline-bubble-step"
NOTE = ("Each finished pipeline cell (torch-pipe), in the board's time: the layers of "
        "each stage, each stage's forward and backward compute per step (ms), the slowest "
        "stage over the mean (<i>imbalance</i>) measured and as the split predicted it from "
        "the per-layer profile, the bubble (each stage's idle share of the schedule: "
        "neither computing nor sending at the link's rate; mean over stages) beside "
        "GPipe's (S-1)/(M+S-1), the measured step beside the pipeline model's (M+S-1) x "
        "the slowest stage per micro-batch (above 1: the network or the schedule's "
        "overheads limit, not the split), the most activations each stage stashed for "
        "backward (MB), the floor of bytes between stages per step (each boundary's "
        "activation and gradient, per micro-batch) and the link's rate. Values per stage "
        "are in stage order, separated by /.")


def sections(records: list[dict], engine: str) -> list[ReportSection]:
    """The pipeline section of a report on ``records`` (``engine``'s cells), or none."""
    shown = cells(records, engine)
    if not shown:
        return []
    rows = [(r, [r.get(column) for _heading, column in TABLE]) for r in shown]
    return [ReportSection("pipeline", "Pipeline stages", NOTE,
                          [heading for heading, _ in TABLE], rows, figure(shown),
                          [column for _, column in TABLE])]


def cells(records: list[dict], engine: str) -> list[dict]:
    """The finished pipeline cells that measured their stages, in the board's time, each
    with ``pipe_bytes_floor_mb`` and its split as a list of layer counts."""
    return [_board(r) for r in records
            if r.get("status") == Status.OK and r.get("engine") == engine
            and r.get("stage_compute_ms")]


def _board(r: dict) -> dict:
    k = float(r.get("speedup") or 1.0)  # the cell's time dilation (--speedup)
    out = dict(r)
    for column in TIME_MS:
        value = r.get(column)
        if isinstance(value, list):
            out[column] = [v * k for v in value]
        elif isinstance(value, (int, float)):
            out[column] = value * k
    if isinstance(r.get("link_mbit_s"), (int, float)):
        out["link_mbit_s"] = r["link_mbit_s"] / k  # the emulated link ran k times faster
    floor = r.get("pipe_bytes_floor_per_step")
    out["pipe_bytes_floor_mb"] = floor / 1e6 if isinstance(floor, (int, float)) else None
    split = r.get("pipe_split")
    out["pipe_split"] = [int(n) for n in str(split).split(",")] if split else None
    return out


def stages(r: dict) -> int:
    return r.get("pipe_stages") or r["devices"] // (r.get("replicas") or 1)


def _series(r: dict) -> str:
    """A line of the figure: everything but M alike."""
    depth = f"-{r['layers']}" if r.get("layers") else ""
    parts = [f"{r['model']}{depth}", f"b{r['batch']}", f"S{stages(r)}",
             str(r.get("schedule") or "gpipe")]
    if (r.get("task") or "train") != "train":
        parts.append(str(r["task"]))
    if (r.get("replicas") or 1) > 1:
        parts.append(f"R{r['replicas']}")
    if (r.get("split") or "balanced") != "balanced":
        parts.append(f"split={r['split']}")
    return " ".join(parts)


def figure(shown: list[dict]) -> Figure:
    """Measured bubble against GPipe's (S-1)/(M+S-1) over M, one line per S and schedule
    (and model, batch), and the measured step over the predicted one (``shown``: the
    cells of ``cells``)."""
    plt = pyplot()
    series: dict[str, list[dict]] = defaultdict(list)
    for r in shown:
        series[_series(r)].append(r)
    fig, (bubble_ax, step_ax) = plt.subplots(1, 2, figsize=(10.4, 3.8))
    for label, rows in sorted(series.items()):
        rows.sort(key=lambda r: r.get("microbatches") or 1)
        ms = [r.get("microbatches") or 1 for r in rows]
        bubble_ax.plot(ms, [r.get("bubble_measured") for r in rows], marker="o", label=label)
        step_ax.plot(ms, [r.get("pipe_step_vs_predicted") for r in rows], marker="o",
                     label=label)
    # GPipe's prediction depends on S and M alone: one dashed curve per S, over the M range.
    all_ms = sorted({r.get("microbatches") or 1 for r in shown})
    for i, s in enumerate(sorted({stages(r) for r in shown})):
        xs = [m / 4 for m in range(4 * all_ms[0], 4 * all_ms[-1] + 1)]
        bubble_ax.plot(xs, [(s - 1) / (m + s - 1) for m in xs], linestyle="--",
                       color="grey", linewidth=1)
        bubble_ax.plot(all_ms, [(s - 1) / (m + s - 1) for m in all_ms], linestyle="none",
                       marker="x", color="grey",
                       label="GPipe (S-1)/(M+S-1)" if i == 0 else None)
        bubble_ax.annotate(f"S={s}", (xs[-1], (s - 1) / (xs[-1] + s - 1)),
                           fontsize=7, color="grey", xytext=(7, 0),
                           textcoords="offset points", va="center")
    # Room on the right for the prediction curves' S labels, clear of the last markers.
    span = (all_ms[-1] - all_ms[0]) or 1
    bubble_ax.set_xlim(all_ms[0] - 0.08 * span, all_ms[-1] + 0.2 * span)
    bubble_ax.set_ylabel("bubble (idle share of the step)")
    bubble_ax.set_ylim(bottom=0)
    step_ax.axhline(1.0, linestyle="--", color="grey", linewidth=1)
    step_ax.set_ylabel("measured step / predicted")
    for ax in (bubble_ax, step_ax):
        ax.set_xlabel("micro-batches M")
        ax.set_xticks(all_ms)
        ax.grid(alpha=0.3)
    bubble_ax.legend(fontsize=7)
    return Figure(FIGURE_NAME, "Pipeline bubble and step against the prediction",
                  "Left: each stage's idle share of the schedule (neither computing "
                  "nor sending at the link's rate; mean over stages), measured, and "
                  "GPipe's (S-1)/(M+S-1) dashed. Right: the measured step "
                  "over the pipeline model's (M+S-1) x the slowest stage's time per "
                  "micro-batch (compute and its link); above 1, the network or the "
                  "schedule's overheads, not the split, limit the pipeline.", png_bytes(fig))
