"""A prediction beside a measured cell it did not see (``benchmarks/bench_predict.py``).

Each configuration of a sweep is fitted on its cells at the device counts given only,
then asked for every other device count the sweep measured: predicted against measured
step, the error, and whether the measurement fell in the interval.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..cluster.profiles import load_catalog
from ..errors import ConfigError
from .cells import read_groups
from .model import Target, fit_group, predict


def held_out(sweep_dir: Path, fit_devices: list[int]) -> list[dict]:
    """One row per ok cell not fitted on: label, devices, predicted, interval, measured."""
    catalog = load_catalog()
    groups, _cluster = read_groups(sweep_dir)
    rows = []
    for group in groups:
        fitted = replace(group, cells=[c for c in group.cells if c.devices in fit_devices],
                         base=group.base if 1 in fit_devices else [])
        try:
            model = fit_group(fitted, catalog)
        except ConfigError as exc:
            print(f"{group.label}: not fitted: {exc}")
            continue
        for cell in sorted(group.cells, key=lambda c: c.devices):
            if cell.devices in fit_devices:
                continue
            p = predict(model, cell.devices, Target(None, None), catalog, None)
            inside = (p.low_ms is not None and p.low_ms <= cell.step_ms <= p.high_ms)
            rows.append({"label": group.label, "devices": cell.devices,
                         "predicted_ms": p.step_ms, "low_ms": p.low_ms or float("nan"),
                         "high_ms": p.high_ms or float("nan"), "measured_ms": cell.step_ms,
                         "error": p.step_ms / cell.step_ms - 1, "inside": inside,
                         "terms": dict(zip(model.fit.names, model.fit.theta)),
                         "sigma_ms": model.sigma_ms, "base_ms": model.base_ms})
    return rows
