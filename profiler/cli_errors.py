"""How every ``edgeprof`` command shows bad input: one line on stderr, exit status 2.

Its own module (not ``profiler.cli``) so that the command groups of the sub-packages
(``agent``, ``cluster``, ``data``), which ``profiler.cli`` imports, can use it too.
"""

from __future__ import annotations

import functools
import sys

import click

from .errors import EdgeprofError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


class UsageFailure(click.ClickException):
    """One line on stderr, exit 2 (what ``click.BadParameter`` does, for library errors)."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"edgeprof: error: {self.format_message()}", err=True)


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
            click.echo(f"edgeprof: {exc or 'interrupted'}", err=True)
            sys.exit(getattr(exc, "exit_status", EXIT_INTERRUPTED))
    return wrapper
