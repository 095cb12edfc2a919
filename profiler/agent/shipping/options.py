"""The ``--influx-*`` options of ``edgeprof agent``, ``ship``, ``sweep`` and ``run`` (one
decorator), beside what they describe: ``targets.target_from_options`` builds the
shipping target from them.

Plain Click, in a module of its own: the agent's command takes them without loading the
shipper (``targets`` and ``ship`` bring influxdb-client and requests), and the
controller's commands from the layers above.

The token is deliberately not an option: argv is visible to every user in ``ps``. It
comes from ``--influx-token-file`` (mode 0600) or the ``INFLUX_TOKEN`` environment.
An ``https://`` server's certificate is verified (``--influx-ca`` for a private CA);
``--influx-insecure`` exists for a test bench, warns, and is recorded in ``sweep.json``.
"""

from __future__ import annotations

from pathlib import Path

import click

_INFLUX_OPTIONS = [
    click.option("--influx-url", metavar="URL",
                 help="InfluxDB-compatible server to ship metrics to, e.g. "
                      "http://127.0.0.1:8086 (none: metrics stay on disk)."),
    click.option("--influx-org", metavar="ORG", help="Organization (v2 write API)."),
    click.option("--influx-bucket", metavar="BUCKET",
                 help="Bucket (v2 write API: InfluxDB 1.8+, 2.x, 3.x, VictoriaMetrics)."),
    click.option("--influx-db", metavar="DB",
                 help="Database, for InfluxDB 1.7 and older (v1 /write API)."),
    click.option("--influx-token-file", type=click.Path(path_type=Path, dir_okay=False),
                 help="File holding the token (mode 0600); default: $INFLUX_TOKEN. "
                      "For v1, user:password."),
    click.option("--influx-ca", type=click.Path(path_type=Path, dir_okay=False),
                 help="PEM file of the private CA that signed the https:// server's "
                      "certificate (default: the system's CAs)."),
    click.option("--influx-insecure", is_flag=True, default=False,
                 help="Do not verify the https:// server's certificate (warned, and "
                      "recorded in sweep.json): for a test bench only."),
]


def influx_options(func):
    """Add --influx-url/-org/-bucket/-db/-token-file/-ca/-insecure."""
    for option in reversed(_INFLUX_OPTIONS):
        func = option(func)
    return func
