"""A ``links:`` setting read and checked: the links between tiers a mix of profiles
(``profiles.yaml``) or an inventory (``edgeprof_links``) asks for, as ``TierLink``s.

One parser for both, so that a link means the same on the emulated cluster and on real
nodes; each caller names where the setting came from (``where``) and how to write it
(``fix``), so that a refusal is one line naming the file and the fix.
"""

from __future__ import annotations

import math

from ..errors import ConfigError
from .base import TIERS, TierLink, link_key

# A minute one way: more is a link that is down, not a slow one.
MAX_LINK_DELAY_MS = 60_000.0


def parse_links(value, where: str, fix: str) -> dict[str, TierLink]:
    """``value`` (a mapping ``{end-edge: {delay_ms: D, mbit: R}}``; None: no links) as
    link_key -> ``TierLink``; refused in one line, prefixed by ``where``, ending in ``fix``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: links must be a mapping: {fix}")
    links: dict[str, TierLink] = {}
    for key, entry in value.items():
        tiers = str(key).split("-")
        if len(tiers) != 2 or not set(tiers) <= set(TIERS) or tiers[0] == tiers[1]:
            raise ConfigError(f"{where}: link {key!r} is not two tiers of "
                              f"{', '.join(TIERS)} joined by '-' (end-edge): {fix}")
        if not isinstance(entry, dict) or "delay_ms" not in entry or not set(entry) <= {
                "delay_ms", "mbit"}:
            raise ConfigError(f"{where}: link {key} needs delay_ms (and may give mbit), "
                              f"nothing else: {fix}")
        try:
            link = TierLink(float(entry["delay_ms"]),
                            None if entry.get("mbit") is None else float(entry["mbit"]))
        except (TypeError, ValueError, OverflowError):  # Overflow: float(10**400)
            raise ConfigError(f"{where}: link {key}: delay_ms and mbit must be numbers: "
                              f"{fix}") from None
        # Written as ``not (...)`` so that .nan is refused.
        if not (0 <= link.delay_ms <= MAX_LINK_DELAY_MS) or (
                link.mbit is not None and not 0 < link.mbit < math.inf):
            raise ConfigError(f"{where}: link {key}: need 0 <= delay_ms <= "
                              f"{MAX_LINK_DELAY_MS:g} and mbit > 0, got delay_ms "
                              f"{entry['delay_ms']}, mbit {entry.get('mbit')}")
        canonical = link_key(*tiers)
        if canonical in links:
            raise ConfigError(f"{where}: links {canonical} given twice: keep one")
        links[canonical] = link
    return links


def missing_tier(links: dict[str, TierLink], tiers: set) -> tuple[str, str] | None:
    """(link, tier) of the first link joining a tier none of ``tiers`` is (a typo, most
    likely), or None."""
    for key in links:
        for tier in key.split("-"):
            if tier not in tiers:
                return key, tier
    return None


def link_line(key: str, spec: dict, where: str) -> str:
    """A status line of one link (``TierLink.as_spec``'s form): its delay, rate, and
    ``where`` its relay runs."""
    return (f"link {key}: {spec['delay_ms']:g} ms one way"
            + (f", {spec['mbit']:g} Mbit" if spec.get("mbit") else "") + f" ({where})")
