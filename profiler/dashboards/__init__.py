"""Grafana: ``edgeprof dashboards push`` (``push.py``) sends the dashboards of the
repository's ``dashboards/`` folder, and the InfluxDB datasource they read, to Grafana."""
