"""How every ``edgeprof`` command shows bad input: one line on stderr, exit status 2.

Its own module (not ``profiler.cli``) so that the command groups of the sub-packages
(``agent``, ``cluster``, ``data``), which ``profiler.cli`` imports, can use it too.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, Iterable

import click

from .errors import EdgeprofError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


class UsageFailure(click.ClickException):
    """One line on stderr, exit 2 (what ``click.BadParameter`` does, for library errors)."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"edgeprof: error: {self.format_message()}", err=True)


class RegistryChoice(click.Choice):
    """``click.Choice`` among a registry's names (``profiler.plugins.Registry``: its
    built-ins and installed plugins); a plugin that failed to load, named, is refused
    with its own line (exit 2), not Click's list of the others."""

    def __init__(self, choices: Iterable[str], problem: Callable[[str], str | None]):
        super().__init__(choices)
        self.problem = problem  # a registry's ``problem``

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value not in self.choices:
            problem = self.problem(value)
            if problem is not None:
                raise UsageFailure(problem)
        return super().convert(value, param, ctx)


def reports_errors(func):
    """Library errors become one clear line and exit 2; results already kept stay kept.

    A stop signal that reaches a command (Ctrl-C while it checks its input, or a sweep's
    ``SweepInterrupted``) ends it with 128 + the signal's number and one line, not
    Click's "Aborted!" and exit 1.
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except EdgeprofError as exc:
            raise UsageFailure(str(exc)) from None
        except KeyboardInterrupt as exc:
            # A bare Ctrl-C's KeyboardInterrupt has no message (an exception is always truthy).
            click.echo(f"edgeprof: {str(exc) or 'interrupted'}", err=True)
            sys.exit(getattr(exc, "exit_status", EXIT_INTERRUPTED))
    return wrapper
