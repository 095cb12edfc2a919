"""The report's "Predicted beyond the measured cells": each fitted configuration's measured
cells with the step model's curve and its interval through and beyond them.

Offered to the report when this module loads (``report.prediction_section``: the report
imports nothing of this package, a layer above it); ``edgeprof report`` loads it first.
Each configuration is fitted once (``model.fit_group``, as ``edgeprof predict`` does, on
the fitted board and its own link), then asked about every device count from 1 to the
figure's end (``CURVE_MIN_DEVICES``, or twice the largest measured) and, for the table,
at a few counts (``TABLE_DEVICES`` and the measured largest and its double). A sweep with
nothing to fit (too few device counts, a pipeline, no ok cell) gets no section.
"""

from __future__ import annotations

from ..cluster.prices import load_prices
from ..cluster.profiles import load_catalog
from ..errors import ConfigError
from ..figure import Figure, png_bytes, pyplot
from ..report.prediction_section import PredictionSection, offer_prediction
from . import table
from .boards import PriceOf
from .cells import groups_of, measured_ms
from .model import Prediction, StepModel, Target, predict
from .run import fit_groups, with_epochs

CURVE_MIN_DEVICES = 20  # the curve reaches this, or twice the largest measured count
TABLE_DEVICES = (20, 50, 100)
OWN = Target(None, None)  # the fitted board, on its own link


def section(records: list[dict], meta: dict | None = None) -> PredictionSection | None:
    """The section of a sweep's records; None when no configuration can be fitted.
    ``meta``: its sweep.json (a study run's epoch, as ``edgeprof predict`` takes it)."""
    try:
        groups, _cluster = groups_of(records)
    except ConfigError:  # a cell without a step time (an older edgeprof's): no fit
        return None
    if not groups:
        return None
    catalog = load_catalog()
    models, skipped = fit_groups(groups, catalog)
    if not models:
        return None
    models = with_epochs(models, None, meta or {})
    prices = PriceOf(load_prices())
    figures, rows = [], []
    for i, model in enumerate(models):
        largest = max(model.devices_fitted)
        end = max(CURVE_MIN_DEVICES, 2 * largest)
        end = min(end, model.max_devices or end)  # a pipeline: a stage a layer at most
        curve = [predict(model, n, OWN, catalog, prices) for n in range(1, end + 1)]
        figures.append(_figure(f"fig-predict-{i + 1}", model, curve, largest))
        counts = sorted(n for n in {largest, 2 * largest, *TABLE_DEVICES} if model.can_run(n))
        asked = [curve[n - 1] if n <= end else predict(model, n, OWN, catalog, prices)
                 for n in counts]
        measured = measured_ms(model.group)
        rows += [[*row, _ms(measured.get(p.devices))]
                 for row, p in zip(table.rows(asked), asked)]
    return PredictionSection(
        title="Predicted beyond the measured cells",
        intro=("Each configuration with an ok cell at 1 device and cells at two or more "
               "other device counts (a pipeline: two or more stage counts), fitted to "
               "edgeprof predict's step model (compute, the slowest worker's wait, the "
               "exchange as its scheme moves bytes, a pipeline's stages and bubble; "
               "docs/predict.md) on its own board and link, and asked about the device "
               "counts nobody measured. The interval is the fit's 90% prediction "
               "interval: it widens past the fitted counts, and leaves out any error of "
               "the model itself. edgeprof predict SWEEP --devices N asks it about "
               "other counts, boards and links; --compare sets boards side by side."),
        figures=figures, headings=[*table.HEADER, "measured ms"], rows=rows,
        fits=[table.fitted_on(m) for m in models],
        not_fitted=skipped)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}"


def _batches(model: StepModel, n: int) -> int:
    """Batches a step trains at ``n`` devices: one a worker, one a pipeline."""
    return 1 if model.pipe is not None else n


def _figure(name: str, model: StepModel, curve: list[Prediction], largest: int) -> Figure:
    """Step (ms) and samples/s against devices: the measured cells as dots, the model's
    curve, its interval shaded, a dotted line where the measured counts end."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator
    batch = model.group.fields["batch"]
    fig, (step_ax, rate_ax) = plt.subplots(1, 2, figsize=(10.4, 3.6))
    ns = [p.devices for p in curve]
    banded = [p for p in curve if p.low_ms is not None]
    step_ax.plot(ns, [p.step_ms for p in curve], color="tab:blue", label="predicted")
    rate_ax.plot(ns, [p.samples_per_s for p in curve], color="tab:blue", label="predicted")
    if banded:
        bn = [p.devices for p in banded]
        step_ax.fill_between(bn, [p.low_ms for p in banded], [p.high_ms for p in banded],
                             color="tab:blue", alpha=0.2, linewidth=0, label="90% interval")
        # samples/s x step is constant at N (N x batch; a pipeline's one batch; an async
        # step is defined so): the rate's band is the step's, inverted.
        rate_ax.fill_between(bn, [p.samples_per_s * p.step_ms / p.high_ms for p in banded],
                             [p.samples_per_s * p.step_ms / max(p.low_ms, 1e-9)
                              for p in banded],
                             color="tab:blue", alpha=0.2, linewidth=0, label="90% interval")
    cells = [*model.group.base, *model.group.cells]
    # A low step near 0 (a wide interval far out) would put the band's top off the scale.
    rate_top = max([p.samples_per_s for p in curve]
                   + [_batches(model, c.devices) * batch * 1e3 / c.step_ms for c in cells])
    step_ax.scatter([c.devices for c in cells], [c.step_ms for c in cells], color="black",
                    s=18, zorder=3, label="measured")
    rate_ax.scatter([c.devices for c in cells],
                    [_batches(model, c.devices) * batch * 1e3 / c.step_ms for c in cells],
                    color="black",
                    s=18, zorder=3, label="measured")
    for ax, ylabel in ((step_ax, "step (ms, board time)"), (rate_ax, "samples/s, all workers")):
        ax.axvline(largest + 0.5, color="0.5", linestyle=":", linewidth=1)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # devices are whole
        ax.set_xlabel("devices")
        ax.set_ylabel(ylabel)
        ax.set_xlim(0.5, ns[-1] + 0.5)
        ax.set_ylim(0, 1.5 * rate_top if ax is rate_ax else None)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(model.group.label, fontsize=10)
    interval = ("the 90% prediction interval shaded" if banded else
                "no interval (no degree of freedom left: add a device count)")
    caption = (f"the cells measured at {','.join(map(str, model.devices_fitted))} devices "
               f"(dots, every repeat, the board's time) and the model fitted on them, "
               f"predicted from 1 to {ns[-1]} devices (line), {interval}; the dotted line "
               "is where the measured counts end.")
    return Figure(name, f"Predicted: {model.group.label}", caption, png_bytes(fig))


offer_prediction(section)
