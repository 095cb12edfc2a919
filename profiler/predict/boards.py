"""The boards and links a prediction is asked for: profiles, their rates, ``--link``.

A board's compute is scaled from the fitted board's by their rates for the model: first
as measured here, the configuration's one-device step on each (the fit's own one-device
cells, and the target's from another sweep's: ``--rates-from``, or the measured sweep of
``bench_predict``'s held-out board); else the ``board_rates`` both profiles were
calibrated to (samples/s), else their boards' cores
(``Profile.cpu_cores_for``: the benchmark-based cores of ``pi3b``, ``pi4``, ``pi5``; a
calibrated profile such as ``pi3b-park2019`` stands for the board it is named after).
A mix's nodes follow its order (node 0 the master of a parameter server); asked for more
nodes than it lists, it repeats its list (2 Pi 4 and 8 Pi 3B: two Pi 4 in every ten).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..cluster.prices import Price, PriceSpec, PriceTable
from ..cluster.profiles import Catalog, Profile
from ..errors import ConfigError

_LINK = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mg])(?:bit)?(?:/s)?\s*$", re.IGNORECASE)


def parse_links(text: str | None) -> list[float | None]:
    """``--link 100mbit,1gbit`` in Mbit/s ([None]: each profile's own link)."""
    if not text:
        return [None]
    links = []
    for item in text.split(","):
        match = _LINK.match(item)
        if not match or float(match.group(1)) <= 0:
            raise ConfigError(f"--link {item.strip() or text!r} is not a link rate: give "
                              "Mbit/s or Gbit/s above 0, e.g. 100mbit,1gbit,2.5gbit")
        links.append(float(match.group(1)) * (1000 if match.group(2).lower() == "g" else 1))
    return links


def parse_devices(text: str) -> list[int]:
    """``--devices 16,32,64,100``: each a whole number of workers, 1 or more."""
    counts = []
    for item in (text or "").split(","):
        try:
            n = int(item)
        except ValueError:
            raise ConfigError(f"--devices {item.strip()!r} is not a worker count: give "
                              "whole numbers of 1 or more, e.g. 16,32,64,100") from None
        if n < 1:
            raise ConfigError(f"--devices {n}: a cluster needs at least 1 worker, e.g. "
                              "--devices 16,32,64,100")
        counts.append(n)
    return counts


def node_profiles(catalog: Catalog, name: str, count: int) -> list[Profile]:
    """The profile of each of ``count`` nodes of profile or mix ``name``."""
    if name in catalog.profiles:
        return [catalog.profiles[name]] * count
    if name in catalog.mixes:
        members = catalog.mixes[name]
        return [catalog.profiles[members[i % len(members)]] for i in range(count)]
    raise ConfigError(f"unknown profile {name!r}: use one of {', '.join(catalog.names())} "
                      "(or add it to your profiles file, docs/emulated.md)")


def board_of(catalog: Catalog, profile: Profile) -> Profile:
    """The board a profile stands for: a calibrated profile is named after its board
    (``pi3b-park2019`` is a ``pi3b``, ``pi4-park2019`` a ``pi4``), whose cores are on the
    benchmark scale every packaged board shares; any other profile is its own board."""
    return catalog.profiles.get(profile.name.split("-")[0], profile)


def compute_scale(catalog: Catalog, fitted: Profile | None, target: Profile,
                  model: str, measured: OneDevice | None = None) -> tuple[float, str]:
    """How much longer the target board computes a step than the fitted one (1: the
    same), and from what: the one-device steps measured on both (``measured``), else the
    training rates both profiles were calibrated to (``board_rates``), else their
    boards' cores for the model. A calibrated quota and a benchmark's cores are not on
    one scale: they are never compared directly. Measured beats calibrated: on this host
    ``pi4-park2019``'s one-device LeNet-MLP step was 3.3 x faster than
    ``pi3b-park2019``'s where the boards' cores say 2.33."""
    if fitted is None or fitted.name == target.name:
        return 1.0, "the fitted board"
    if measured is not None and fitted.name in measured.ms and target.name in measured.ms:
        return (measured.ms[target.name] / measured.ms[fitted.name],
                f"one-device steps measured ({measured.source_of(target.name)})")
    mine, theirs = fitted.board_rates.get(model), target.board_rates.get(model)
    if mine and theirs:
        return mine.samples_per_s / theirs.samples_per_s, "board_rates"
    a, b = board_of(catalog, fitted), board_of(catalog, target)
    return ((a.cpu_cores_for(model) or a.cpu_cores) / (b.cpu_cores_for(model) or b.cpu_cores),
            f"cpu_cores of {a.name} and {b.name}")


@dataclass(frozen=True)
class OneDevice:
    """One configuration's one-device step measured on each profile (ms on the board),
    and where each was measured (a sweep folder)."""

    ms: dict[str, float]
    sources: dict[str, str]

    def source_of(self, name: str) -> str:
        return self.sources.get(name, "?")

    def with_fitted(self, name: str, base_ms: float, source: str) -> "OneDevice":
        """These, and the fitted board's own: its fit's base, the step the prediction
        starts from (the target's measured one is then its predicted one-device step)."""
        return OneDevice({**self.ms, name: base_ms}, {**self.sources, name: source})


@dataclass(frozen=True)
class PriceOf:
    """Each node profile's price: ``--price`` when given, else the packaged price of the
    profile's own name or its board's (``pi3b-park2019`` is a ``pi3b``), or a cloud
    profile's VM's (``cloud-c6g-xlarge`` is ``c6g.xlarge``)."""

    table: PriceTable
    spec: PriceSpec | None = None

    @property
    def electricity_usd_per_kwh(self) -> float:
        return self.table.electricity_usd_per_kwh

    def of(self, profile: Profile) -> Price | None:
        if self.spec is not None:
            return self.spec.price_of(profile.name)
        # A cloud VM's profile is priced as its VM: cloud-c6g-xlarge is c6g.xlarge.
        vm = profile.name.removeprefix("cloud-").replace("-", ".", 1)
        for name in (profile.name, profile.name.split("-")[0], vm):
            if name in self.table.prices:
                return self.table.prices[name]
        return None
