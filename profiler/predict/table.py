"""The predictions as a text table (``edgeprof predict``) or JSON (``--json``)."""

from __future__ import annotations

import json

from .model import Prediction, StepModel

HEADER = ("configuration", "N", "board", "link", "step ms", "90% interval", "epoch s",
          "samples/s", "MB/step", "J/epoch", "USD/epoch")


def _link(mbit: float) -> str:
    return f"{mbit / 1000:g}G" if mbit >= 1000 else f"{mbit:g}M"


def interval(p: Prediction) -> str:
    if p.low_ms is None:
        return "n/a"
    return f"{p.low_ms:,.0f}-{p.high_ms:,.0f}"


def _or_dash(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def rows(predictions: list[Prediction]) -> list[tuple[str, ...]]:
    return [(p.label, str(p.devices), p.profile, _link(p.link_mbit), f"{p.step_ms:,.1f}",
             interval(p), f"{p.epoch_s:,.1f}", f"{p.samples_per_s:,.1f}",
             f"{p.mb_per_step:.2f}", _or_dash(p.energy_j, ",.0f"),
             _or_dash(p.cost_usd, ".2g")) for p in predictions]


def aligned(body: list[tuple[str, ...]], left: tuple[int, ...]) -> list[str]:
    """Rows of strings as columns: the ``left`` ones left-aligned, numbers right."""
    widths = [max(len(r[i]) for r in body) for i in range(len(body[0]))]
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths))) for r in body]


def text(predictions: list[Prediction], models: list[StepModel], skipped: list[str]) -> str:
    """The table, then one line per fit (its terms and residuals) and the notes."""
    lines = [*aligned([HEADER, *rows(predictions)], left=(0, 2)), ""]
    for m in models:
        lines.append(f"{m.group.label}: fitted on {len(m.group.cells) + len(m.group.base)} "
                     f"cells at {','.join(map(str, m.devices_fitted))} devices "
                     f"({m.board.name if m.board else 'local'}): " + fit_said(m)
                     + f"; an epoch of {m.train_samples:,} samples ({m.epoch_from})")
    scaled = sorted({(p.label, p.profile, p.compute_scale, p.scale_from)
                     for p in predictions if p.scale_from != "the fitted board"})
    lines += [f"{label} on {board}: compute x {scale:.3g} the fitted board's, from {said}"
              for label, board, scale, said in scaled]
    energy_from = sorted({p.energy_from for p in predictions})
    if energy_from:
        lines.append("energy: " + "; ".join(energy_from))
    lines += [f"not fitted: {why}" for why in skipped]
    return "\n".join(lines)


def fitted_on(m: StepModel) -> str:
    """``lenet-mlp b64 mxnet sync: fitted on 30 cells at 1,2,...,10 devices: <fit_said>``."""
    return (f"{m.group.label}: fitted on {len(m.group.cells) + len(m.group.base)} cells at "
            f"{','.join(map(str, m.devices_fitted))} devices: {fit_said(m)}")


def fit_said(m: StepModel) -> str:
    """``base 113.7 ms, sigma 0.0 ms, peer_ms 31.9, wire 2.46; residual sd 7.1 ms (1 dof)``
    (a term at zero is not named)."""
    terms = ", ".join(f"{n} {v:.3g}" for n, v in zip(m.fit.names, m.fit.theta) if v)
    residual = (f"residual sd {m.fit.s:.1f} ms ({m.fit.dof} dof)" if m.fit.s is not None
                else "no residual left (no interval): add a device count")
    return f"base {m.base_ms:.1f} ms, sigma {m.sigma_ms:.1f} ms, {terms or 'no term'}; {residual}"


def as_json(predictions: list[Prediction], models: list[StepModel], skipped: list[str]) -> str:
    return json.dumps({
        "predictions": [p.as_dict() for p in predictions],
        "fits": [{"configuration": m.group.label, "devices_fitted": list(m.devices_fitted),
                  "board": m.board.name if m.board else None, "base_ms": m.base_ms,
                  "epoch_samples": m.train_samples, "epoch_from": m.epoch_from,
                  "sigma_ms": m.sigma_ms, "link_mbit": m.link_mbit,
                  "terms": dict(zip(m.fit.names, m.fit.theta)),
                  "residual_sd_ms": m.fit.s, "dof": m.fit.dof} for m in models],
        "not_fitted": skipped}, indent=1)
