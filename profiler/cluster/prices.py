"""What a node costs per hour: the packaged price table and ``--price``.

The table is the ``prices:`` and ``electricity:`` sections of the profile files
(``profiles.yaml`` in the package, then the user's files: ``profiles.profile_files``), so
a user extends or overrides a price the way a profile is: a later file's entry of the
same name replaces the earlier one.

Two kinds of price (``Price``):
- a **board** (``board_usd``, ``life_h``): its list price spread evenly over its life,
  plus its electricity at the table's rate. The electricity is the cell's own energy on
  that node where the cell has one, else the board's power model (``power_profile``'s
  ``power``) at full load: an upper bound, said in ``price_source``.
- an **hourly** rate (``usd_per_h``): a cloud VM's on-demand price (power included), or a
  number the user gives.

``--price`` takes one of them for every node (``pi3b``, ``c6g.large``, ``0.034``) or one
per node profile (``pi4=0.02,pi3b=pi3b``; the local cluster's slots are profile
``host``). Parsing is pure and raises ``ConfigError`` (one line, exit 2) on a malformed,
negative or unknown price.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import ConfigError

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Price:
    """One node's price: ``usd_per_h`` (a VM, a given rate) or a board's list price over
    its life plus electricity (``board_usd``, ``life_h``, ``full_w`` of its model)."""

    name: str
    source: str = ""
    usd_per_h: float | None = None
    board_usd: float | None = None
    life_h: float | None = None
    power_profile: str | None = None
    # The board's full-load watts (its profile's power model), filled in when a spec is
    # parsed: the electricity of a cell without its own energy (None: no model known).
    full_w: float | None = None

    @property
    def is_board(self) -> bool:
        return self.board_usd is not None

    @property
    def hardware_usd_per_h(self) -> float:
        """The hourly part without electricity (a VM's is its whole price)."""
        if self.is_board:
            return self.board_usd / self.life_h
        return float(self.usd_per_h)

    def said(self) -> str:
        """``pi3b (35 USD over 26,280 h + electricity)``, ``0.034 USD/h``."""
        if self.is_board:
            return f"{self.name} ({self.board_usd:g} USD over {self.life_h:,.0f} h + electricity)"
        if self.name == _given_name(self.usd_per_h):
            return self.name
        return f"{self.name} ({self.usd_per_h:g} USD/h)"


@dataclass(frozen=True)
class PriceTable:
    """The packaged prices with the user's, and the electricity rate."""

    prices: dict[str, Price]
    electricity_usd_per_kwh: float
    electricity_source: str = ""

    def get(self, name: str) -> Price:
        try:
            return self.prices[name]
        except KeyError:
            raise ConfigError(f"unknown price {name!r}: give USD per hour (e.g. 0.034) or one "
                              f"of {', '.join(sorted(self.prices))} (or add it under "
                              "'prices:' in your profiles file, docs/energy.md)") from None


@dataclass(frozen=True)
class PriceSpec:
    """What ``--price`` said: one price for every node, or one per node profile."""

    text: str
    every_node: Price | None = None
    by_profile: dict[str, Price] = field(default_factory=dict)
    electricity_usd_per_kwh: float = 0.0

    def price_of(self, profile: str) -> Price | None:
        """The price of a node of ``profile`` (None: ``--price`` names none for it)."""
        return self.every_node or self.by_profile.get(profile)


def load_prices(files: list[Path] | None = None) -> PriceTable:
    """Read the ``prices:`` and ``electricity:`` sections of the profile files."""
    from .profiles import _mapping, _read_yaml, profile_files

    prices: dict[str, Price] = {}
    rate, rate_source = None, ""
    for path in files if files is not None else profile_files():
        doc = _read_yaml(path)
        for name, spec in _mapping(doc, "prices", path).items():
            prices[str(name)] = _parse_entry(path, str(name), spec)
        electricity = _mapping(doc, "electricity", path)
        if electricity:
            rate = _number(electricity.get("usd_per_kwh"), f"{path}: electricity.usd_per_kwh",
                           "e.g. usd_per_kwh: 0.16")
            rate_source = str(electricity.get("source", ""))
    if rate is None:
        raise ConfigError("no 'electricity: {usd_per_kwh: ..}' in the profile files: add it "
                          "(the packaged profiles.yaml has one)")
    return PriceTable(prices, rate, rate_source)


def _parse_entry(path: Path, name: str, spec) -> Price:
    where = f"{path}: price {name}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a mapping: {{usd_per_h: N}} or {{board_usd: N, "
                          "life_h: H, power_profile: P}}")
    source = str(spec.get("source", ""))
    if "usd_per_h" in spec:
        return Price(name, source, usd_per_h=_number(spec["usd_per_h"], where + " usd_per_h",
                                                     "e.g. usd_per_h: 0.034"))
    missing = [k for k in ("board_usd", "life_h") if k not in spec]
    if missing:
        raise ConfigError(f"{where} lacks {' and '.join(missing)}: give usd_per_h, or "
                          "board_usd and life_h (and power_profile)")
    life_h = _number(spec["life_h"], where + " life_h", "e.g. life_h: 26280 (three years)")
    if life_h == 0:
        raise ConfigError(f"{where}: life_h must be above 0, e.g. 26280 (three years)")
    return Price(name, source, board_usd=_number(spec["board_usd"], where + " board_usd",
                                                 "e.g. board_usd: 35"),
                 life_h=life_h,
                 power_profile=str(spec["power_profile"]) if spec.get("power_profile") else None)


def _number(value, what: str, example: str) -> float:
    """A finite number >= 0 (``not x >= 0`` refuses NaN too), or a one-line error."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} {value!r} is not a number: {example}") from None
    if not 0 <= number < math.inf:
        raise ConfigError(f"{what} {value!r} must be a number of 0 or more: {example}")
    return number


def _given_name(usd_per_h: float) -> str:
    return f"{usd_per_h:g} USD/h"


PRICE_HELP = ("What each node costs per hour, for the cells' cost_usd and cost_per_epoch_usd "
              "columns: USD per hour (0.034), a packaged board or cloud VM (pi3b, pi4, pi5: "
              "list price over its life plus electricity; c6g.medium .. c6g.2xlarge, "
              "p4d.24xlarge), or per node profile (pi4=0.02,pi3b=pi3b; local slots are "
              "'host'). Prices: profiles.yaml's 'prices:', docs/energy.md.")


def price_spec(text: str) -> PriceSpec:
    """``--price`` read against the profile files' prices and profiles."""
    from .profiles import load_catalog
    return parse_price(text, load_prices(), load_catalog())


def parse_price(text: str, table: PriceTable, catalog=None) -> PriceSpec:
    """``--price``: ``NAME`` or ``USD_PER_H`` for every node, or ``PROFILE=NAME|USD_PER_H``
    pairs, comma-separated. ``catalog`` (``profiles.Catalog``): the node profiles a pair
    may name (``host`` too, the local cluster's), and each board's power model."""
    text = (text or "").strip()
    if not text:
        raise ConfigError("--price is empty: give USD per hour per node (e.g. 0.034), a "
                          "board or VM (e.g. pi3b, c6g.large) or PROFILE=PRICE pairs")
    items = [item.strip() for item in text.split(",")]
    pairs = ["=" in item for item in items]
    if any(pairs) and not all(pairs) or any(not item for item in items):
        raise ConfigError(f"--price {text}: give one price for every node (0.034 or pi3b) or "
                          "PROFILE=PRICE pairs, e.g. pi4=0.02,pi3b=pi3b")
    if not any(pairs):
        if len(items) > 1:
            raise ConfigError(f"--price {text}: one price for every node, or PROFILE=PRICE "
                              "pairs (e.g. pi4=0.02,pi3b=0.01)")
        return PriceSpec(text, every_node=_one(items[0], table, catalog),
                         electricity_usd_per_kwh=table.electricity_usd_per_kwh)
    known = set(catalog.profiles) | {"host"} if catalog is not None else None
    by_profile: dict[str, Price] = {}
    for item in items:
        profile, _, value = (part.strip() for part in item.partition("="))
        if not profile or not value:
            raise ConfigError(f"--price {item}: give PROFILE=PRICE, e.g. pi4=0.02")
        if known is not None and profile not in known:
            raise ConfigError(f"--price {item}: {profile} is not a node profile; use one of "
                              f"{', '.join(sorted(known))}")
        if profile in by_profile:
            raise ConfigError(f"--price names {profile} twice: give each profile one price")
        by_profile[profile] = _one(value, table, catalog)
    return PriceSpec(text, by_profile=by_profile,
                     electricity_usd_per_kwh=table.electricity_usd_per_kwh)


def _one(value: str, table: PriceTable, catalog) -> Price:
    """A number (USD per hour) or a packaged name, with a board's full-load watts."""
    try:
        usd_per_h = float(value)
    except ValueError:
        price = table.get(value)
        return replace(price, full_w=_full_w(price, catalog))
    if not 0 <= usd_per_h < math.inf:
        raise ConfigError(f"--price {value}: USD per hour must be 0 or more, e.g. 0.034")
    return Price(_given_name(usd_per_h), "given (--price)", usd_per_h=usd_per_h)


def _full_w(price: Price, catalog) -> float | None:
    """The full-load watts of the board's power model (None: none known)."""
    if not price.is_board or catalog is None or price.power_profile is None:
        return None
    profile = catalog.profiles.get(price.power_profile)
    power = getattr(profile, "power", None)
    return getattr(power, "full_w", None)
