"""The metrics agent: collectors → per-node spool on disk → shippers → InfluxDB.

- ``collectors``: one class per resource (psutil, cgroup files, Pi firmware flags).
- ``sampler``: the loop that writes one spool line per point every ``interval_s``.
- ``spool``: append-only, size-bounded segments of line protocol on disk.
- ``targets`` / ``ship``: exactly-once, resumable shipping (v2 API or v1 ``/write``).
- ``summary``: a cell's CPU, memory and network columns, from the spools alone.
- ``options`` / ``cli``: how the sweep and the ``edgeprof`` command use it.
"""
