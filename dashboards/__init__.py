"""Grafana dashboards as code: ``generate.py`` writes the JSON files beside it."""
