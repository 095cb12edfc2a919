"""The node providers, registered in one place: ``PROVIDERS`` maps each name to its settings.

Everything that knows provider names or their options (the CLI's ``--cluster`` choices
and help, each provider's own options on ``sweep``, ``run``, ``study`` and ``cluster``,
the refusal of an option a provider does not take, what ``--resume`` compares, the
messages that name the providers able to do something) reads them from here; only
the defaults are named where they apply (a sweep's ``local``, a study's ``emulated``). A new
provider is one module with a ``Cluster`` subclass and a ``ClusterSettings`` subclass
(``base.py`` says what each must do) and one line below, or an installed distribution's
entry point of the group ``edgeprof.providers`` naming the ``ClusterSettings`` subclass
(``profiler.plugins``: loaded on the registry's first lookup).

The provider modules import what is heavy (YAML profiles) where they use it:
``remote_exec``, which runs on every node for every process, imports this package.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..plugins import Registry
from .base import Cluster, ClusterSettings, GridNeeds, Node, NodeScope, ProviderOption
from .emulated import EmulatedSettings
from .inventory import InventorySettings
from .local import LocalSettings
from .swarm import SwarmSettings

PROVIDERS: Registry[type[ClusterSettings]] = Registry(
    "edgeprof.providers", ClusterSettings, {settings.name: settings for settings in (
        LocalSettings, EmulatedSettings, InventorySettings, SwarmSettings)}, kind="node provider")


def get_provider(name: str) -> type[ClusterSettings]:
    try:
        return PROVIDERS[name]
    except KeyError:
        PROVIDERS.refuse_broken([name])  # an installed plugin that failed: its own line
        raise ConfigError(f"unknown cluster {name!r}: use one of "
                          f"{', '.join(PROVIDERS)}") from None


def declared_options() -> dict[str, tuple[ProviderOption, type[ClusterSettings]]]:
    """Every provider's own options by name, each with the first provider declaring it
    (two providers may share an option: the first one's declaration is the CLI's)."""
    found: dict[str, tuple[ProviderOption, type[ClusterSettings]]] = {}
    for provider in PROVIDERS.values():
        for option in provider.options:
            found.setdefault(option.name, (option, provider))
    return found


def cluster_settings(name: str, **values) -> ClusterSettings:
    """The settings of provider ``name`` from provider options by name (any provider's:
    the CLI passes them all): an option the provider does not take, given a value other
    than its default, is refused with its owner's line."""
    provider = get_provider(name)
    known = declared_options()
    own = {o.name for o in provider.options}
    for option, value in values.items():
        if option not in known:
            raise TypeError(f"unknown provider option {option!r}")
        declared, owner = known[option]
        if option not in own and value != declared.default:
            raise ConfigError(_refusal(declared, owner, name, value))
    return provider(**{k: v for k, v in values.items() if k in own})


def _refusal(option: ProviderOption, owner: type[ClusterSettings], name: str,
             value) -> str:
    if option.refusal:
        return option.refusal.format(value=value)
    return (f"{option.flag} {value} is a setting of --cluster {owner.name}, not of the "
            f"{name} cluster: drop it or use --cluster {owner.name}")


def providers_help() -> str:
    """``local (processes here), emulated (...) or inventory (...)``: ``--cluster``'s help."""
    parts = [f"{p.name} ({p.help})" if p.help else p.name for p in PROVIDERS.values()]
    return _either(parts)


def slowing_clusters() -> str:
    """``--cluster emulated or inventory``: the providers that can slow a node
    (``Cluster.can_slow_node``), for the lines refusing ``--straggler`` elsewhere."""
    names = [p.name for p in PROVIDERS.values() if p.cluster_type().can_slow_node]
    return "--cluster " + _either(names) if names else "a cluster that can slow a node"


def profiled_provider() -> type[ClusterSettings]:
    """The provider whose nodes are made from a node profile (``speed == "profile"``:
    the emulated cluster), on which calibration measures a profile's quotas."""
    for provider in PROVIDERS.values():
        if provider.speed == "profile":
            return provider
    raise ConfigError("no cluster provider builds nodes from a node profile: calibration "
                      "needs one (the emulated cluster)")


def _either(parts: list[str]) -> str:
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]


__all__ = ["Cluster", "ClusterSettings", "GridNeeds", "Node", "NodeScope", "PROVIDERS",
           "ProviderOption", "get_provider", "cluster_settings", "declared_options",
           "providers_help", "slowing_clusters", "profiled_provider"]
