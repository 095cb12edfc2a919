"""Throwaway metrics servers on loopback, for tests and benchmarks (not for production).

Integration tests and ``benchmarks/bench_agent.py`` need a real server to ship to:
Debian's ``influxdb`` 1.6.7 (v1 ``/write`` API only) and ``victoria-metrics`` (which
accepts the InfluxDB v2 write API, standing in for InfluxDB 2.x, not packaged here).
Each server runs from its own data directory on free loopback ports and can be stopped
and restarted on the same port and data (to test an outage).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from profiler.cluster.base import kill_group, popen_in_group
from profiler.ports import free_port
from profiler.errors import ClusterError

START_TIMEOUT_S = 30.0

_INFLUXD_CONFIG = """\
reporting-disabled = true
bind-address = "127.0.0.1:{rpc_port}"
[meta]
  dir = "{data}/meta"
[data]
  dir = "{data}/data"
  wal-dir = "{data}/wal"
  query-log-enabled = false
[monitor]
  store-enabled = false
[http]
  bind-address = "127.0.0.1:{http_port}"
  auth-enabled = {auth}
  log-enabled = false
{https}[continuous_queries]
  enabled = false
"""


def influxd_config(data: Path, http_port: int, rpc_port: int, auth: bool = False,
                   tls_pem: Path | None = None) -> str:
    """An ``influxd`` (1.x) configuration on loopback, its files under ``data``;
    ``tls_pem`` (the key and certificate chain in one PEM file) turns HTTPS on."""
    https = (f'  https-enabled = true\n  https-certificate = "{tls_pem}"\n'
             f'  https-private-key = "{tls_pem}"\n') if tls_pem else ""
    return _INFLUXD_CONFIG.format(data=data, http_port=http_port, rpc_port=rpc_port,
                                  auth=str(auth).lower(), https=https)


@dataclass
class LocalServer:
    """One server process; ``url`` stays the same across ``stop()``/``start()``."""

    kind: str  # "influxdb1" | "victoria-metrics"
    data_dir: Path
    port: int = 0
    proc: subprocess.Popen | None = field(default=None, repr=False)
    # HTTPS with this key+certificate PEM file, whose CA is ``ca_file`` (the start's
    # ping verifies it); InfluxDB only: authentication on.
    auth: bool = False
    tls_pem: Path | None = None
    ca_file: Path | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_pem else 'http'}://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        if self.kind == "influxdb1":
            config = self.data_dir / "influxdb.conf"
            if not config.exists():
                config.write_text(influxd_config(self.data_dir, self.port, free_port(),
                                                 auth=self.auth, tls_pem=self.tls_pem))
            return ["/usr/bin/influxd", "-config", str(config)]
        return ["/usr/bin/victoria-metrics", f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={self.data_dir / 'vm'}", "-loggerLevel=WARN",
                # Identical samples re-sent after a lost acknowledgement collapse into one.
                "-dedup.minScrapeInterval=1ms", "-search.latencyOffset=0s",
                *(["-tls", f"-tlsCertFile={self.tls_pem}", f"-tlsKeyFile={self.tls_pem}"]
                  if self.tls_pem else [])]

    def start(self) -> "LocalServer":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        self.proc = popen_in_group(self.argv(), {}, self.data_dir / f"{self.kind}.log")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if requests.get(f"{self.url}/ping", timeout=1,
                                verify=str(self.ca_file) if self.ca_file else True
                                ).status_code < 300:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise ClusterError(f"{self.kind} did not start on {self.url}: "
                           f"see {self.data_dir / (self.kind + '.log')}")

    def stop(self) -> None:
        if self.proc is not None:
            kill_group(self.proc, grace_s=5.0)
            self.proc = None

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def influx_query(url: str, db: str, query: str) -> list[dict]:
    """Run an InfluxQL query against InfluxDB 1.x; the first result's series."""
    resp = requests.post(f"{url}/query", params={"db": db, "q": query, "epoch": "ms"},
                         timeout=30)
    resp.raise_for_status()
    result = resp.json()["results"][0]
    if "error" in result:
        raise RuntimeError(result["error"])
    return result.get("series", [])


def vm_export(url: str, match: str) -> list[dict]:
    """VictoriaMetrics' raw samples for a series selector (one JSON object per series)."""
    requests.get(f"{url}/internal/force_flush", timeout=30)
    resp = requests.post(f"{url}/api/v1/export", data={"match[]": match}, timeout=30)
    resp.raise_for_status()
    import json
    return [json.loads(line) for line in resp.text.splitlines() if line.strip()]
