"""A Click group whose subcommands are imported only when one of them runs.

Click's documented lazy-loading pattern: subcommands are named ``"module:attr"`` and
imported in ``get_command``. ``edgeprof agent`` on a 1 GB Pi then costs what the agent
imports (Click and psutil), not what every other command does (the report's
matplotlib and Jinja2, the engines' frameworks, YAML). ``edgeprof --help`` imports them
all, to show each command's first line.
"""

from __future__ import annotations

import importlib

import click


def load(spec: str) -> click.Command:
    """The command a ``"package.module:attr"`` spec names."""
    module_name, _, attr = spec.partition(":")
    command = getattr(importlib.import_module(module_name), attr)
    if not isinstance(command, click.Command):
        raise TypeError(f"{spec} is not a Click command")
    return command


class LazyGroup(click.Group):
    """``lazy_subcommands``: name → ``"module:attr"``; ``lazy_nested``: a group's name →
    {name → spec} added to that group when it loads (commands a subgroup's own module
    must not import, e.g. ``cluster calibrate``, which runs sweeps); ``lazy_plugins``: a
    command's name → modules imported before it loads, each adding to it, through a
    registry of its package, what that package must not import (it sits a layer above)."""

    def __init__(self, *args, lazy_subcommands: dict[str, str] | None = None,
                 lazy_nested: dict[str, dict[str, str]] | None = None,
                 lazy_plugins: dict[str, tuple[str, ...]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})
        self.lazy_nested = dict(lazy_nested or {})
        self.lazy_plugins = dict(lazy_plugins or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands and cmd_name not in self.commands:
            for module_name in self.lazy_plugins.get(cmd_name, ()):
                importlib.import_module(module_name)
            command = load(self.lazy_subcommands[cmd_name])
            for name, spec in self.lazy_nested.get(cmd_name, {}).items():
                command.add_command(load(spec), name)
            self.add_command(command, cmd_name)  # loaded once
        return super().get_command(ctx, cmd_name)
