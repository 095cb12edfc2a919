"""``edgeprof predict SWEEP --compare pi3b,pi4,pi5 --devices 4,8,16,32``: which cluster.

Each fitted configuration asked on every board compared, at every device count: the
cluster's samples/s, joules per sample (every node's power over the epoch / the samples
it trains; a parameter server's master is counted) and USD per epoch (``model.predict``
does the sums; ``boards.PriceOf`` the prices). Beside them, where adding a board stops
paying: the N from which every further board adds less than ``CROSSOVER_SHARE`` of one
board's samples/s alone (the curve scanned one board at a time, up to
``SCAN_MAX_DEVICES``). A cloud VM with a profile (``cloud-c6g-xlarge``) is compared like
a board: its compute scaled by its cores, an estimate (docs/predict.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cluster.profiles import Catalog, load_catalog
from ..errors import ConfigError
from .boards import PriceOf, node_profiles, parse_links
from .model import Prediction, StepModel, Target, predict
from .run import PredictSettings, prices_of, run_predict

CROSSOVER_SHARE = 0.10  # the N-th board pays while it adds >= 10% of one board's rate
SCAN_MAX_DEVICES = 256


@dataclass(frozen=True)
class Crossover:
    """Where adding a board of ``board`` stops paying for one configuration (``devices``
    None: not up to ``SCAN_MAX_DEVICES``)."""

    label: str
    board: str
    one_board_samples_per_s: float
    devices: int | None
    samples_per_s_there: float | None


def run_which(s: PredictSettings) -> tuple[list[Prediction], list[StepModel], list[str],
                                             list[Crossover]]:
    """``run_predict`` on the boards compared (``s.profiles``), and each configuration x
    board's crossover on the boards' own link (or the first ``--link``)."""
    if not s.profiles:
        raise ConfigError("--compare needs boards, e.g. --compare pi3b,pi4,pi5")
    predictions, models, skipped = run_predict(s)
    catalog, prices = load_catalog(), prices_of(s)
    link = parse_links(s.links)[0]
    crossovers = [crossover(m, Target(name.strip(), link), catalog, prices)
                  for m in models for name in s.profiles.split(",")]
    return predictions, models, skipped, crossovers


def crossover(model: StepModel, target: Target, catalog: Catalog,
              prices: PriceOf | None) -> Crossover:
    """The N from which every further board adds under ``CROSSOVER_SHARE`` of one
    board's rate. Not the first such board: the exchange starts at 2 boards, so the 2nd
    may add little and the 3rd more (a parameter server's round is paid once)."""
    node_profiles(catalog, target.profile, 1)  # an unknown board: one line
    scan_max = min(SCAN_MAX_DEVICES, model.max_devices or SCAN_MAX_DEVICES)
    rates = [predict(model, n, target, catalog, prices).samples_per_s
             for n in range(1, scan_max + 1)]
    one = rates[0]
    paying = [n for n in range(2, scan_max + 1)
              if rates[n - 1] - rates[n - 2] >= CROSSOVER_SHARE * one]
    last = max(paying, default=1)
    if last == scan_max:
        return Crossover(model.group.label, target.profile, one, None, None)
    return Crossover(model.group.label, target.profile, one, last + 1, rates[last])


HEADER = ("configuration", "board", "N", "samples/s", "J/sample", "USD/epoch", "step ms",
          "90% interval")


def j_per_sample(p: Prediction) -> float | None:
    """Every node's joules over the epoch per sample the cluster trains in it."""
    if p.energy_j is None or p.samples_per_s <= 0:
        return None
    return p.energy_j / (p.epoch_s * p.samples_per_s)


def text(predictions: list[Prediction], models: list[StepModel], skipped: list[str],
         crossovers: list[Crossover]) -> str:
    """The boards side by side per configuration, then the crossovers and the fits."""
    from . import table

    body = [HEADER]
    for p in sorted(predictions, key=lambda p: (p.label, p.devices)):
        jps = j_per_sample(p)
        body.append((p.label, p.profile, str(p.devices), f"{p.samples_per_s:,.1f}",
                     "-" if jps is None else f"{jps:.3g}",
                     "-" if p.cost_usd is None else f"{p.cost_usd:.2g}",
                     f"{p.step_ms:,.1f}", table.interval(p)))
    lines = [*table.aligned(body, left=(0, 1)), ""]
    for c in crossovers:
        if c.devices is None:
            said = (f"every board up to {SCAN_MAX_DEVICES} still adds >= "
                    f"{CROSSOVER_SHARE:.0%} of one board's {c.one_board_samples_per_s:,.1f} "
                    "samples/s")
        else:
            said = (f"adding a board stops paying at {c.devices} boards (from there each "
                    f"adds < {CROSSOVER_SHARE:.0%} of one board's "
                    f"{c.one_board_samples_per_s:,.1f} samples/s; "
                    f"{c.samples_per_s_there:,.1f} samples/s at {c.devices})")
        lines.append(f"{c.label} on {c.board}: {said}")
    for m in models:
        lines.append(f"{m.group.label}: fitted on {m.board.name if m.board else 'local'}: "
                     + table.fit_said(m))
    energy_from = sorted({p.energy_from for p in predictions})
    if energy_from:
        lines.append("energy: " + "; ".join(energy_from))
    lines += [f"not fitted: {why}" for why in skipped]
    return "\n".join(lines)


def as_json(predictions: list[Prediction], models: list[StepModel], skipped: list[str],
            crossovers: list[Crossover]) -> dict:
    return {"predictions": [{**p.as_dict(), "j_per_sample": j_per_sample(p)}
                            for p in predictions],
            "crossovers": [dict(c.__dict__) for c in crossovers],
            "crossover_share": CROSSOVER_SHARE, "not_fitted": skipped}
