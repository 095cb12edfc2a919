"""``reports_errors``: how a command ends on a stop signal, through Click's own runner."""

from __future__ import annotations

import click
from click.testing import CliRunner

from profiler.cli_errors import EXIT_INTERRUPTED, reports_errors


def _command(exc: BaseException) -> click.Command:
    @click.command()
    @reports_errors
    def stopped() -> None:
        raise exc
    return stopped


def test_a_bare_ctrl_c_says_interrupted_and_exits_130():
    # KeyboardInterrupt() has no message; the line must still say what happened.
    result = CliRunner().invoke(_command(KeyboardInterrupt()))
    assert (result.exit_code, result.output) == (EXIT_INTERRUPTED, "edgeprof: interrupted\n")


def test_a_stop_with_a_message_keeps_it():
    result = CliRunner().invoke(_command(KeyboardInterrupt("stopped by SIGTERM")))
    assert result.output == "edgeprof: stopped by SIGTERM\n"
