"""Shipping spools to an InfluxDB-compatible server: the agent's, and ``edgeprof ship``'s.

- ``targets``: where points go (``InfluxTarget``) and the two writers (influxdb-client's
  v2 write API; the v1 ``/write`` endpoint through requests).
- ``ship``: exactly-once, in-order, resumable delivery of spools (``ship_sweep``, and
  ``LiveShipper``, the thread an agent started with ``--influx-url`` and a sweep run).
- ``backoff``: the shippers' retry waits.
- ``options``: the ``--influx-*`` options of ``agent``, ``ship``, ``sweep`` and ``run``.
- ``cli``: ``edgeprof ship``.

It sits in the agent's layer, so that the agent on a node ships with it and the
controller's commands use it from above. The agent that only spools never loads more of
it than this module and ``options`` (plain Click): ``targets`` and ``ship`` bring
influxdb-client and requests, and the agent's command imports them only when given
``--influx-url`` (tests/unit/test_agent_imports.py).
"""

# In a sweep's folder: the live shipper's own bytes on the wire (``ship`` writes it,
# ``profiler.metrics.summary`` takes them out of the loopback counters). Here, so that
# the sweep names the file without importing the shipper.
TRAFFIC_FILE = "shipper-traffic.jsonl"
