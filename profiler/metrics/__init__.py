"""The controller's side of metrics: what reads, ships and summarizes the agents' spools.

The agent that samples a node (``profiler.agent``) runs on the device and imports none
of this package; what runs on the controller (starting agents beside a cell, reading
spools, shipping them to InfluxDB, a cell's summary columns) lives here.
"""
