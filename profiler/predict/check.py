"""A prediction beside a measured cell it did not see (``benchmarks/bench_predict.py``).

Each configuration of a sweep is fitted on its cells at the device counts given only,
then asked about cells it did not see: the same sweep's other device counts, or (with
``measured_dir``) every cell of the same configuration in another sweep, run on another
board or link (``target``). For each: predicted and measured step, the error, and
whether the measurement fell in the interval.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..cluster.profiles import load_catalog
from ..errors import ConfigError
from .cells import base_key, one_device_steps, read_groups
from .model import Target, fit_group, predict


def held_out(sweep_dir: Path, fit_devices: list[int], *, measured_dir: Path | None = None,
             target: Target = Target(None, None), scale_by_measured: bool = True
             ) -> tuple[list[dict], list[str]]:
    """One row per measured cell not fitted on (label, devices, predicted, interval,
    measured), and why a configuration could not be fitted."""
    catalog = load_catalog()
    groups, _cluster = read_groups(sweep_dir)
    measured = {g.key: g for g in read_groups(measured_dir)[0]} if measured_dir else None
    # The measured sweep's one-device cells are the target board's rate, measured here.
    rates = one_device_steps([measured_dir]) if measured_dir and scale_by_measured else {}
    rows, skipped = [], []
    for group in groups:
        fitted = replace(group, cells=[c for c in group.cells if c.devices in fit_devices],
                         base=group.base if 1 in fit_devices else [])
        try:
            model = fit_group(fitted, catalog)
        except ConfigError as exc:
            skipped.append(str(exc))
            continue
        if measured is None:
            cells = [c for c in group.cells if c.devices not in fit_devices]
        else:
            other = measured.get(group.key)
            cells = [*other.base, *other.cells] if other else []
        for cell in sorted(cells, key=lambda c: c.devices):
            p = predict(model, cell.devices, target, catalog, None,
                        rates.get(base_key(group)))
            inside = p.low_ms is not None and p.low_ms <= cell.step_ms <= p.high_ms
            rows.append({"label": group.label, "devices": cell.devices,
                         "board": p.profile, "link_mbit": p.link_mbit,
                         "predicted_ms": p.step_ms, "low_ms": p.low_ms,
                         "high_ms": p.high_ms, "measured_ms": cell.step_ms,
                         "error": p.step_ms / cell.step_ms - 1, "inside": inside,
                         "terms": dict(zip(model.fit.names, model.fit.theta)),
                         "sigma_ms": model.sigma_ms, "base_ms": model.base_ms,
                         "compute_scale": p.compute_scale, "scale_from": p.scale_from})
    return rows, skipped
