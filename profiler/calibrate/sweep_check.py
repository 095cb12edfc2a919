"""``edgeprof sweep --profile-check``: the node profile checked on this host before a sweep.

Calibration's part of ``edgeprof sweep``, registered on the sweep's checks
(``profiler.sweep.checks``): the sweep package cannot import calibration, which runs
sweeps. The ``edgeprof`` group imports this module before it loads ``sweep``
(``profiler.cli``); its options follow ``--resume``.
"""

from __future__ import annotations

from typing import Callable

import click

from ..cluster import profiled_provider
from ..errors import EdgeprofError
from ..sweep.checks import SweepCheck, register
from .check import CHECK_TOLERANCE, MODES, check_sweep

OPTIONS = (
    click.Option(["--profile-check"], default="off", show_default=True,
                 type=click.Choice(MODES),
                 help="Emulated cluster, a profile with board rates (pi3b-park2019): first "
                      "measure its quotas on this host; when off by more than "
                      "--profile-tolerance, refuse or re-calibrate them. Then a step's "
                      "exchange over its link: refuse, or warn (x/÷1.25)."),
    click.Option(["--profile-tolerance"], default=CHECK_TOLERANCE, show_default=True,
                 type=click.FloatRange(0, 1, min_open=True, max_open=True),
                 help="How far the host's rate may be from the board's: x/÷(1 + this). "
                      "A one-device cell off by this moves every N/1 ratio by as much."),
)


def check_before_sweep(settings, values: dict, say: Callable[[str], None]) -> None:
    """Refuse ``--profile-check`` off a profiled cluster; else check (``check_sweep``)."""
    mode, tolerance = values["profile_check"], values["profile_tolerance"]
    if mode != "off" and settings.cluster.speed != "profile":
        raise EdgeprofError(f"--profile-check {mode} checks a node profile: use it with "
                            f"--cluster {profiled_provider().name}, or leave it out")
    check_sweep(settings, mode, tolerance, report=lambda line: say(f"profile check: {line}"))


register(SweepCheck("profile", OPTIONS, check_before_sweep))
