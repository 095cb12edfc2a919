"""Checks ``edgeprof sweep`` runs before its first cell, added by packages it must not import.

Calibration runs sweeps, so this package cannot import it; yet ``edgeprof sweep`` first
checks the node profile against this host (``--profile-check``). A package above adds
such a check here with one ``register(SweepCheck(...))`` line: its options join the
command's (after ``--resume``, in the order given), and its ``run`` gets the sweep's
settings once they are checked and built, before anything runs. The ``edgeprof`` group
imports that package before it loads the command (``profiler.cli``'s plugins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import click


@dataclass(frozen=True)
class SweepCheck:
    """``run(settings, values, say)``: ``values`` holds its options' values by parameter
    name, ``say(line)`` writes a line to stderr; bad input raises ``EdgeprofError``."""

    name: str
    options: tuple[click.Option, ...]
    run: Callable[[object, dict, Callable[[str], None]], None]


CHECKS: dict[str, SweepCheck] = {}


def register(check: SweepCheck) -> None:
    CHECKS[check.name] = check
