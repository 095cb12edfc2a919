"""How every ``edgeprof`` command shows bad input: one line on stderr, exit status 2.

Its own module (not ``profiler.cli``) so that the command groups of the sub-packages
(``agent``, ``cluster``, ``data``), which ``profiler.cli`` imports, can use it too.
"""

from __future__ import annotations

import functools

import click

from .errors import EdgeprofError

EXIT_USAGE = 2


class UsageFailure(click.ClickException):
    """One line on stderr, exit 2 (what ``click.BadParameter`` does, for library errors)."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"edgeprof: error: {self.format_message()}", err=True)


def reports_errors(func):
    """Library errors become one clear line and exit 2; results already kept stay kept."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except EdgeprofError as exc:
            raise UsageFailure(str(exc)) from None
    return wrapper
