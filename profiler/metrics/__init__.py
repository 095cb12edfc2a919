"""The controller's side of metrics: what reads, ships and summarizes the agents' spools.

The agent that samples a node (``profiler.agent``) runs on the device and imports none
of this package; what runs on the controller (starting agents beside a cell, reading
spools, shipping them to InfluxDB, a cell's summary columns) lives here.
"""

# In a sweep's folder: the live shipper's own bytes on the wire (``ship`` writes it,
# ``summary`` takes them out of the loopback counters). Here, so that the sweep names the
# file without importing the shipper.
TRAFFIC_FILE = "shipper-traffic.jsonl"
