"""Grafana dashboards as code: ``generate.py`` writes their JSON into the package
(``profiler/dashboards/*.json``), ``layout.py`` draws it for the docs; ``provisioning/``
holds the files the Ansible ``monitor`` role gives Grafana."""
