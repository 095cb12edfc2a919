"""The controller's side of metrics: agents started beside a cell, and what a cell's
spools sum up to.

- ``launch``: the argv and environment of the agent the sweep starts on every node of a
  cell (``python -m profiler.agent``).
- ``summary``: a cell's metrics columns from its spools (one reducer per measurement in
  ``reducers``), ``energy``: its energy columns, measured or modelled.

The agent (``profiler.agent``) runs on the device and imports none of this package. It
owns what its spools are and where they go: the writer (``agent.spool``), the reader
every summary here uses (``agent.spool_reader``), and the shipper to InfluxDB with
``edgeprof ship`` (``agent.shipping``), which a node's agent runs with ``--influx-url``
and a sweep runs beside its cells.
"""
