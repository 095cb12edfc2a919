"""What ``edgeprof predict`` does, as one function the CLI calls with its settings."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..cluster.prices import load_prices, price_spec
from ..cluster.profiles import Catalog, load_catalog
from ..errors import ConfigError
from ..sweep.folder import read_sweep_meta
from .boards import PriceOf, node_profiles, parse_devices, parse_links
from .cells import Group, base_key, one_device_steps, read_groups
from .model import Prediction, StepModel, Target, fit_group, predict


@dataclass(frozen=True)
class PredictSettings:
    sweep_dir: Path
    devices: str
    profiles: str | None = None  # comma-separated; None: each fit's own board
    links: str | None = None  # comma-separated rates; None: the boards' own
    engines: str | None = None
    syncs: str | None = None
    price: str | None = None
    samples: int | None = None  # the training set an epoch passes over (None: the sweep's)
    rates_from: tuple[Path, ...] = ()  # sweeps whose one-device cells scale the boards


def run_predict(s: PredictSettings) -> tuple[list[Prediction], list[StepModel], list[str]]:
    """The predictions for every fitted configuration x profile x link x device count,
    the fits, and why a configuration was not fitted. ``ConfigError`` (one line) on bad
    input or when nothing can be fitted."""
    devices = parse_devices(s.devices)
    if s.samples is not None and s.samples < 1:
        raise ConfigError(f"--samples {s.samples}: an epoch needs at least 1 sample, e.g. "
                          "--samples 60000")
    links = parse_links(s.links)
    catalog = load_catalog()
    names = [p.strip() for p in s.profiles.split(",")] if s.profiles else [None]
    for name in names:
        if name is not None:
            node_profiles(catalog, name, 1)  # an unknown profile: one line, before the fit
    groups, _cluster = read_groups(Path(s.sweep_dir))
    groups = [g for g in groups if _wanted(g.fields["engine"], s.engines)
              and _wanted(g.fields["sync"], s.syncs)]
    if not groups:
        raise ConfigError(f"{s.sweep_dir} has no ok cell of --engine {s.engines or 'any'} "
                          f"--sync {s.syncs or 'any'}: name what the sweep ran")
    models, skipped = fit_groups(groups, catalog)
    if not models:
        more = f" (and {len(skipped) - 1} more configurations)" if len(skipped) > 1 else ""
        raise ConfigError(f"{s.sweep_dir}: cannot fit: {skipped[0]}{more}")
    prices = prices_of(s)
    models = with_epochs(models, s.samples, read_sweep_meta(Path(s.sweep_dir)))
    measured = one_device_steps(list(s.rates_from))
    _check_rates_match(s.rates_from, measured, models)
    predictions = [predict(m, n, Target(name, link), catalog, prices,
                           measured.get(base_key(m.group)))
                   for m in models for name in names for link in links for n in devices
                   if m.can_run(n)]
    skipped += [f"{m.group.label} at {n} devices: a pipeline of {m.max_devices} layers has "
                f"at most {m.max_devices} stages" for m in models for n in devices
                if not m.can_run(n)]
    return predictions, models, skipped


def _check_rates_match(rates_from: tuple[Path, ...], measured: dict, models: list[StepModel]
                       ) -> None:
    """``--rates-from`` that measured none of the fitted configurations would scale no
    board, and the prediction would fall back on calibrated rates unsaid: one line."""
    if not rates_from or any(base_key(m.group) in measured for m in models):
        return
    fitted = "; ".join(sorted({" ".join(str(v) for v in base_key(m.group)) for m in models}))
    raise ConfigError(
        f"--rates-from {', '.join(str(d) for d in rates_from)}: no one-device cell of a "
        f"configuration fitted here (model layers batch engine partition dataset: {fitted}): "
        "give a sweep that ran one of them on one device of the target board")


def with_epochs(models: list[StepModel], samples: int | None, meta: dict) -> list[StepModel]:
    """Each model's epoch: ``--samples``, else the epoch of the study that made the sweep
    (``extra.epoch_samples``, per model: a study run at a fraction of its data still asks
    about the study's epoch, Park's 60,000 MNIST images), else the sweep's own set."""
    if samples is not None:
        return [replace(m, train_samples=samples, epoch_from="--samples") for m in models]
    extra = meta.get("extra") if isinstance(meta.get("extra"), dict) else {}
    epochs, study = extra.get("epoch_samples"), extra.get("study")
    if not isinstance(epochs, dict):
        if study:  # a study run by an edgeprof that did not record its epoch
            said = (f"the sweep's training set: the {study} study's cut to its scale, "
                    "--samples gives the study's")
            return [replace(m, epoch_from=said) for m in models]
        return models
    return [replace(m, train_samples=epochs[m.group.fields["model"]],
                    epoch_from=f"the {study} study's epoch, from sweep.json")
            if _samples(epochs.get(m.group.fields["model"])) else m for m in models]


def _samples(value) -> bool:
    """Whether sweep.json's value is an epoch's size (a folder may come from elsewhere)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def prices_of(s: PredictSettings) -> PriceOf:
    """Each node's price: ``--price``, else the packaged price of its board."""
    return PriceOf(load_prices(), price_spec(s.price) if s.price else None)


def fit_groups(groups: list[Group], catalog: Catalog | None
               ) -> tuple[list[StepModel], list[str]]:
    """Each configuration's model, and why each one not fitted could not be."""
    models, skipped = [], []
    for group in groups:
        try:
            models.append(fit_group(group, catalog))
        except ConfigError as exc:
            skipped.append(str(exc))
    return models, skipped


def _wanted(value, allowed: str | None) -> bool:
    return allowed is None or str(value) in {a.strip() for a in allowed.split(",")}
