"""The node providers, registered in one place: ``PROVIDERS`` maps each name to its settings.

Everything that knows provider names (the CLI's ``--cluster`` choices and help, the
refusal of an option a provider does not take, preflight, the study, the docs) reads
them from here. A new provider is one module with a ``Cluster`` subclass and a
``ClusterSettings`` subclass (``base.py`` says what each must do) and one line below.

The provider modules import what is heavy (YAML profiles, the engines) where they use
it: ``remote_exec``, which runs on every node for every process, imports this package.
"""

from __future__ import annotations

from ..errors import ConfigError
from .base import Cluster, ClusterSettings, Node, NodeScope
from .emulated import EmulatedSettings
from .inventory import InventorySettings
from .local import LocalSettings

PROVIDERS: dict[str, type[ClusterSettings]] = {settings.name: settings for settings in (
    LocalSettings, EmulatedSettings, InventorySettings)}

# The provider options of the CLI and the value that means "not given".
OPTION_DEFAULTS = {"profile": None, "speedup": 1.0, "inventory": None}


def get_provider(name: str) -> type[ClusterSettings]:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ConfigError(f"unknown cluster {name!r}: use one of "
                          f"{', '.join(PROVIDERS)}") from None


def cluster_settings(name: str, **options) -> ClusterSettings:
    """The settings of provider ``name`` from the CLI's provider options
    (``OPTION_DEFAULTS``): an option the provider does not take is refused with the line
    of the provider that does."""
    provider = get_provider(name)
    for option, value in options.items():
        if option not in OPTION_DEFAULTS:
            raise TypeError(f"unknown provider option {option!r}")
        if option not in provider.options and value != OPTION_DEFAULTS[option]:
            owner = next((p for p in PROVIDERS.values() if option in p.refusals), None)
            raise ConfigError(owner.refusals[option].format(value=value) if owner else
                              f"--{option} does not apply to the {name} cluster: drop it")
    return provider(**{k: v for k, v in options.items() if k in provider.options})


def providers_help() -> str:
    """``local (processes here), emulated (...) or inventory (...)``: ``--cluster``'s help."""
    parts = [f"{p.name} ({p.help})" if p.help else p.name for p in PROVIDERS.values()]
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]


__all__ = ["Cluster", "ClusterSettings", "Node", "NodeScope", "PROVIDERS", "get_provider",
           "cluster_settings", "providers_help"]
