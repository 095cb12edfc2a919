"""Test support, never installed: helpers the tests and ``benchmarks/`` share.

``servers``: throwaway InfluxDB 1.x / VictoriaMetrics servers on loopback. ``sshd``:
Debian's sshd inside emulated nodes, so tests reach "real hosts" over real SSH.
``fake_grafana``: a stand-in for Grafana's HTTP API (no user-facing command uses it).
Nothing under ``profiler/`` or ``workloads/`` imports this package.
"""
