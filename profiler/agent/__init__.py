"""The metrics agent: what runs on a node (a Pi), sampling it into an on-disk spool.

- ``collectors``: one small class per file, registered in ``collectors/__init__.py``.
- ``sampler``: the loop that writes one spool write per tick every ``interval_s``.
- ``spool``: the writer of append-only, size-bounded segments of line protocol.
- ``lineproto``: the line protocol the spool holds.
- ``schema``: the collectors' fields as docs/metrics.md's table.
- ``options`` / ``cli``: the ``agent`` command (``python -m profiler.agent``).

Everything that reads, ships or summarizes spools runs on the controller and lives in
``profiler.metrics``; the agent imports it only when it ships live (``--influx-url``).
"""
