"""Grafana: ``edgeprof dashboards push`` (``push.py``) sends edgeprof's dashboards
(``*.json`` beside this file: package data, written by the repository's
``dashboards/generate.py``) and the InfluxDB datasource they read to Grafana."""
