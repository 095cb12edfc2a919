"""The node providers' options on the command line, made from the registry.

``sweep``, ``run`` and ``cluster status`` take ``--cluster`` and every provider's own
options (``ProviderOption``) as a ``ProviderCommand`` (``cls=`` of ``click.command``),
``study`` as ``provider_params``, and each builds the chosen provider's settings with
``cluster_from_options``: a provider that adds an option (a kubeconfig, an image)
touches no command. A bad value is one line and exit status 2, whether the option's
``parse`` refuses it while Click reads the command line or the provider refuses it
later.
"""

from __future__ import annotations

from typing import Mapping

import click

from ..cli_errors import UsageFailure
from ..errors import EdgeprofError
from . import ClusterSettings, ProviderOption, cluster_settings, declared_options, providers_help


class _Parsed(click.ParamType):
    """A provider option's value, parsed by its own ``parse``."""

    def __init__(self, option: ProviderOption):
        self.option = option
        self.name = option.metavar or "TEXT"

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value  # the default, already typed
        try:
            return self.option.parse(value)
        except EdgeprofError as exc:
            raise UsageFailure(str(exc)) from None


def cluster_option(default: str = "local"):
    """``--cluster NAME`` as a decorator, its help naming every provider."""
    return click.option("--cluster", "cluster_name", default=default, show_default=True,
                        help=providers_help() + ".")


def provider_params(helps: Mapping[str, str] | None = None) -> list[click.Option]:
    """Every provider's own options as Click parameters (each name once, in the
    registry's order); ``helps``: a command's own help for some of them (the study's
    default profile)."""
    helps = helps or {}
    return [click.Option([option.flag, option.name], default=option.default,
                         show_default=option.default is not None, type=_Parsed(option),
                         help=helps.get(option.name, option.help))
            for option, _ in declared_options().values()]


class ProviderCommand(click.Command):
    """A command taking every provider's own options, read from the registry each time
    it parses (a provider registered after this module loaded has its options too),
    placed after ``--cluster``."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        fresh = provider_params()
        names = {p.name for p in fresh}
        params = [p for p in params if p.name not in names]
        at = next((i + 1 for i, p in enumerate(params) if p.name == "cluster_name"),
                  len(params))
        return params[:at] + fresh + params[at:]


def cluster_from_options(name: str, kw: dict) -> ClusterSettings:
    """Provider ``name``'s settings from a command's keyword arguments (it reads every
    provider option in ``kw``; one another provider owns, given, is refused)."""
    return cluster_settings(name, **{k: kw[k] for k in declared_options() if k in kw})
