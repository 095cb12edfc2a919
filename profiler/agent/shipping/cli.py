"""``edgeprof ship``: deliver a sweep's spools to InfluxDB (a thin Click command)."""

from __future__ import annotations

from pathlib import Path

import click

from ...cli_errors import reports_errors
from ...errors import ConfigError
from ..logs import configure_logging
from .options import influx_options
from .targets import target_from_options


@click.command()
@click.argument("sweep_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@influx_options
@reports_errors
def ship(sweep_dir, **influx):
    """Deliver a sweep's metrics to InfluxDB: every point exactly once, resuming where an
    earlier ship or the live shipper stopped.

    Example:

    \b
        INFLUX_TOKEN=... edgeprof ship runs/2024-05-01-a \\
            --influx-url http://127.0.0.1:8086 --influx-org lab --influx-bucket edgeprof
    """
    configure_logging()
    target = target_from_options(**influx)
    if target is None:
        raise ConfigError("edgeprof ship needs --influx-url and --influx-org/"
                          "--influx-bucket (or --influx-db for InfluxDB 1.7 and older)")
    from .ship import ship_sweep  # influxdb-client and requests: only when shipping

    sent = ship_sweep(sweep_dir, target)
    click.echo(f"shipped {sent} points to {target.label}")
