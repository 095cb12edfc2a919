"""The agent's ``--interval``, shared by ``edgeprof agent``, ``sweep`` and ``run`` (the
sweep hands it to the agents it starts). The ``--influx-*`` options are the shipper's:
``profiler.agent.shipping.options``."""

from __future__ import annotations

import click

from .sampler import MAX_INTERVAL_S, MIN_INTERVAL_S


def interval_option(func):
    """Add --interval (seconds between samples; the parameter is named ``interval``)."""
    return click.option(
        "--interval", "interval", type=click.FloatRange(MIN_INTERVAL_S, MAX_INTERVAL_S),
        default=1.0, show_default=True,
        help="Seconds between metric samples (0.1 to 3600; the study sampled every 30).",
    )(func)
