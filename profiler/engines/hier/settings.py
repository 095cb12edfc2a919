"""The hierarchical engine's own settings, parsed: tiers, per-tier models and delays,
the scheme, the exit threshold and the privacy module.

``--tiers end=4,edge=2,cloud=1``, ``--tier-models edge=lenet-cnn,cloud=lenet-example``
and ``--tier-delay edge=0.5,cloud=1.0`` are ``tier=value`` lists; several of them (a
grid dimension) are separated by ';', since each holds commas.
"""

from __future__ import annotations

import math

from workloads.hier import labels, schemes

from ...errors import ConfigError
from ...option_lists import parse_choice_list, parse_float_list

UPPER = ("edge", "cloud")
DEFAULT_MODELS = "edge=lenet-cnn,cloud=lenet-example"
AUTO = "auto"
PRIVACY = ("off", "on", "edge")  # edge: the module on an edge node (Plan.privacy_edge)
PRIVACY_EDGE_SCHEME = "end-cloud"  # the only scheme --privacy edge goes with


def pairs(text: str, option: str, tiers: tuple[str, ...], example: str) -> dict[str, str]:
    """``"edge=0.5,cloud=1"`` -> ``{"edge": "0.5", "cloud": "1"}``, tiers checked."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in str(text).split(",") if part.strip()):
        tier, sep, value = item.partition("=")
        tier = tier.strip()
        if not sep or tier not in tiers or not value.strip():
            raise ConfigError(f"{option} {item!r} is not TIER=VALUE with TIER one of "
                              f"{', '.join(tiers)}: give e.g. {option} {example}")
        if tier in out:
            raise ConfigError(f"{option} names {tier} twice: give each tier once, e.g. "
                              f"{option} {example}")
        out[tier] = value.strip()
    return out


def _alternatives(text: str) -> list[str]:
    values = [part.strip() for part in str(text).split(";") if part.strip()]
    return values or [str(text)]


def parse_tiers(text: str) -> list[str]:
    values = []
    for value in _alternatives(text):
        if value != AUTO:
            counts(value, 0)
        values.append(value)
    return values


def counts(value: str, devices: int) -> dict[str, int]:
    """Nodes per tier of ``--tiers``, in the order given (``auto``: with ``devices``
    nodes, end devices, a third of the rest but one edge nodes, one cloud node; fewer
    than 3: end, cloud)."""
    if value == AUTO:
        if devices <= 1:
            return {"end": devices, "edge": 0, "cloud": 0}
        if devices == 2:
            return {"end": 1, "edge": 0, "cloud": 1}
        edge = max(1, (devices - 1) // 3)
        return {"end": devices - 1 - edge, "edge": edge, "cloud": 1}
    given = pairs(value, "--tiers", schemes.TIERS, "end=4,edge=2,cloud=1")
    out = {}
    # In the order given (the order they are laid over the nodes), then the others at 0.
    for tier in [*given, *(t for t in schemes.TIERS if t not in given)]:
        try:
            out[tier] = int(given.get(tier, "0"))
        except ValueError:
            raise ConfigError(f"--tiers {tier}={given[tier]} is not a whole number: give "
                              "e.g. --tiers end=4,edge=2,cloud=1") from None
        if out[tier] < 0:
            raise ConfigError(f"--tiers {tier}={out[tier]} is negative: give a count of 0 "
                              "or more")
    if out["end"] < 1:
        raise ConfigError(f"--tiers {value} has no end device: give end=1 or more")
    return out


def parse_models(text: str) -> list[str]:
    from workloads import models

    values = []
    for value in _alternatives(text):
        for tier, model in pairs(value, "--tier-models", UPPER, DEFAULT_MODELS).items():
            models.get(model)  # an unknown model: one line naming the known ones
        values.append(value)
    return values


def tier_models(value: str, end_model: str) -> dict[str, str]:
    given = pairs(value, "--tier-models", UPPER, DEFAULT_MODELS)
    defaults = pairs(DEFAULT_MODELS, "--tier-models", UPPER, DEFAULT_MODELS)
    return {"end": end_model, **{tier: given.get(tier, defaults[tier]) for tier in UPPER}}


def parse_delays(text: str) -> list[str]:
    values = []
    for value in _alternatives(text):
        delays(value)
        values.append(value)
    return values


def delays(value: str) -> dict[str, float]:
    """Seconds each upper tier's round trip is held back (``0``: none)."""
    if value.strip() in ("0", "none", ""):
        return {}
    out = {}
    for tier, text in pairs(value, "--tier-delay", UPPER, "edge=0.5,cloud=1.0").items():
        seconds = parse_float_list(text, "--tier-delay")[0]
        if not 0 <= seconds <= 60:
            raise ConfigError(f"--tier-delay {tier}={seconds} is outside 0-60 s: give e.g. "
                              "--tier-delay edge=0.5,cloud=1.0")
        out[tier] = seconds
    return out


def parse_schemes(text: str) -> list[str]:
    return parse_choice_list(text, "--scheme", schemes.SCHEMES)


def max_threshold_nats() -> float:
    """ln of the end network's classes (its coarse labels): the entropy of a uniform
    softmax, past which every sample would exit."""
    return math.log(labels.CLASSES[labels.TIER_LABELS["end"]])


def parse_thresholds(text: str, option: str = "--exit-threshold") -> list[float]:
    """Exit thresholds from ``option``'s text (the sweep's, or a study's ``--thresholds``:
    the error names the option the user gave)."""
    values = parse_float_list(text, option)
    most, classes = max_threshold_nats(), labels.CLASSES[labels.TIER_LABELS["end"]]
    for value in values:
        if not 0 <= value <= most:
            raise ConfigError(f"{option} {value:g} is outside 0-ln({classes}) = "
                              f"{most:.3f}: it is the softmax entropy in nats under which an "
                              f"end device answers (its {classes} coarse classes); give e.g. "
                              f"{option} 0.3,0.7,1.1")
    return values


def threshold(value) -> float:
    """A cell's exit threshold: 0 is one (nothing exits), not "unset" (an ``or`` here
    once ran threshold 0 at 0.5)."""
    return 0.5 if value is None else float(value)


def parse_privacy(text: str) -> list[str]:
    return parse_choice_list(text, "--privacy", PRIVACY)


RECOVERY_OFF = "off"
MAP_EQ4 = 0  # --map-devices 0: each device computes N_map from eq. (4)


def _counts(text: str, option: str, fix: str) -> list[int]:
    """Whole numbers of 0 or more; a negative one: one line ending with ``fix``."""
    from ...option_lists import parse_int_list

    values = parse_int_list(text, option)
    for value in values:
        if value < 0:
            raise ConfigError(f"{option} {value} is negative: {fix}")
    return values


def parse_map_devices(text: str) -> list[int]:
    return _counts(text, "--map-devices", "give the end devices an edge node takes under "
                   "Mapping (Zhang set 1), or 0 for eq. (4)")


def parse_fail(text: str) -> list[int]:
    return _counts(text, "--fail-devices", "give how many end devices fail, e.g. "
                   "--fail-devices 0,2,4")


def parse_recovery(text: str) -> list[str]:
    from workloads.hier.assign import RECOVERIES

    return parse_choice_list(text, "--recovery", (RECOVERY_OFF, *RECOVERIES))
