"""The metrics agent: what runs on a node (a Pi), sampling it into an on-disk spool.

- ``collectors``: one small class per file, registered in ``collectors/__init__.py``.
- ``sampler``: the loop that writes one spool write per tick every ``interval_s``.
- ``spool``: the writer of append-only, size-bounded segments of line protocol;
  ``spool_reader`` reads them back (for the shipper, and the controller's summaries).
- ``lineproto``: the line protocol the spool holds.
- ``schema``: the collectors' fields as docs/metrics.md's table.
- ``options`` / ``logs`` / ``cli``: the ``agent`` command (``python -m profiler.agent``).
- ``shipping``: the spool's way to InfluxDB (``edgeprof ship``, and live with
  ``--influx-url``); it alone imports influxdb-client and requests, and the command
  loads more of it than its options only to ship.

Nothing here imports the controller (``.importlinter``): what the controller does with
spools (a cell's summary columns) lives in ``profiler.metrics``, above this package.
"""
