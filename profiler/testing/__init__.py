"""Test support shipped with the package but never imported at run time.

``servers``: throwaway InfluxDB 1.x / VictoriaMetrics servers on loopback, for the
integration tests and ``benchmarks/``. Nothing under ``profiler/`` outside this package
imports it.
"""
