"""A secured metrics path: HTTPS with a private CA, and a write-only account.

The real InfluxDB 1.6.7 (Debian) runs on loopback with ``https-enabled`` and
``auth-enabled``, its certificate signed by a CA the test makes (trustme); an admin,
the database and an agents' account granted WRITE on it (nothing else) are made as
the Ansible monitor role makes them. VictoriaMetrics with ``-tls`` stands for the v2
write API over HTTPS (InfluxDB 2.x is not packaged here; it has no authentication
here, so only TLS is checked on that path).

Shown: a sweep's spool shipped through it, verified against ``--influx-ca``, with the
credentials from a 0600 file; an unknown CA and a wrong password each refused with one
line at the start (the sweep writes nothing); ``--influx-insecure`` ships, warns once
and is recorded in sweep.json; the agents' account cannot read what it wrote; an agent
shipping live (as on a Pi) is refused in one line with another CA and ships with its own.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from profiler.agent import lineproto
from profiler.agent.spool import SpoolWriter
from profiler.agent.shipping.cli import ship
from tests.conftest import ROOT, need, need_binary
from tests.support.servers import LocalServer

pytestmark = pytest.mark.integration

ADMIN = ("admin", "admin-pw-4d1")
AGENT = ("agent", "agent-pw-9e2")
T0_MS = (int(time.time()) - 3600) * 1000  # VictoriaMetrics drops samples older than a month


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    # The test extras install it: under CI=true its absence fails the test (need).
    need("trustme (pip install -e .[test])", importlib.util.find_spec("trustme") is not None)
    import trustme
    folder = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        folder / "server.pem")
    ca.cert_pem.write_to_path(folder / "ca.pem")
    other.cert_pem.write_to_path(folder / "other-ca.pem")
    return folder


def _query(server, query: str, auth, db: str = "edgeprof") -> requests.Response:
    return requests.post(f"{server.url}/query", params={"db": db, "q": query, "epoch": "ms"},
                         auth=auth, verify=str(server.ca_file), timeout=30)


@pytest.fixture(scope="module")
def influxdb(tmp_path_factory, pki):
    need_binary("influxd")
    server = LocalServer("influxdb1", tmp_path_factory.mktemp("influxdb"), auth=True,
                         tls_pem=pki / "server.pem", ca_file=pki / "ca.pem").start()
    try:
        for query, auth in (((f"CREATE USER {ADMIN[0]} WITH PASSWORD '{ADMIN[1]}' "
                              "WITH ALL PRIVILEGES"), None),
                            ("CREATE DATABASE edgeprof", ADMIN),
                            (f"CREATE USER {AGENT[0]} WITH PASSWORD '{AGENT[1]}'", ADMIN),
                            (f'GRANT WRITE ON "edgeprof" TO "{AGENT[0]}"', ADMIN)):
            resp = _query(server, query, auth)
            assert resp.ok and "error" not in resp.json()["results"][0], resp.text
        yield server
    finally:
        server.stop()


def _secret_file(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def _spool(sweep_dir: Path, sweep_id: str, ticks: int = 50) -> None:
    writer = SpoolWriter(sweep_dir / "cells" / "c1" / "metrics" / "n1",
                         {"sweep": sweep_id, "node": "n1", "host": "h"})
    for i in range(ticks):
        writer.append([lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": i / 2},
                                        T0_MS + i * 100)])
    writer.close()


def _count(server, sweep_id: str) -> int:
    resp = _query(server, f"SELECT count(cpu_percent) FROM cpu WHERE sweep = '{sweep_id}'",
                  ADMIN)
    series = resp.json()["results"][0].get("series", [])
    return series[0]["values"][0][1] if series else 0


def _ship(sweep_dir: Path, url: str, *options: str):
    return CliRunner().invoke(ship, [str(sweep_dir), "--influx-url", url, *options])


def test_ship_verified_with_the_ca_and_a_write_only_account(tmp_path, influxdb, pki):
    _spool(tmp_path / "sweep", "tls-ok")
    token = _secret_file(tmp_path / "credentials", ":".join(AGENT))
    result = _ship(tmp_path / "sweep", influxdb.url, "--influx-db", "edgeprof",
                   "--influx-token-file", str(token), "--influx-ca", str(pki / "ca.pem"))
    assert result.exit_code == 0, result.output
    assert "shipped 50 points" in result.output
    assert _count(influxdb, "tls-ok") == 50
    # The agents' account writes, and only writes: reading is refused, and so is making
    # a database it was not given (one line, at the start).
    resp = _query(influxdb, "SELECT * FROM cpu", AGENT)
    assert resp.status_code == 403 and "requires READ" in resp.text, resp.text
    result = _ship(tmp_path / "sweep", influxdb.url, "--influx-db", "other",
                   "--influx-token-file", str(token), "--influx-ca", str(pki / "ca.pem"))
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert "may not create it" in result.output, result.output


@pytest.mark.parametrize("case", ["unknown-ca", "other-ca", "wrong-password", "no-password"])
def test_sweep_refused_with_one_line_at_its_start(tmp_path, influxdb, pki, case):
    """Checked before anything runs: no sweep folder, exit 2, one line naming the fix."""
    token = _secret_file(tmp_path / "credentials",
                         f"{AGENT[0]}:wrong" if case == "wrong-password" else ":".join(AGENT))
    options = {"unknown-ca": [], "other-ca": ["--influx-ca", str(pki / "other-ca.pem")],
               "wrong-password": ["--influx-ca", str(pki / "ca.pem")],
               "no-password": ["--influx-ca", str(pki / "ca.pem")]}[case]
    if case != "no-password":
        options += ["--influx-token-file", str(token)]
    out = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, "-m", "profiler.cli", "sweep", "--model", "lenet-mlp",
         "--devices", "1", "--max-samples", "64", "--out", str(out),
         "--influx-url", influxdb.url, "--influx-db", "edgeprof", *options],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    if case.endswith("-ca"):
        assert "certificate" in lines[0] and "--influx-ca" in lines[0], lines
        assert "--influx-insecure" in lines[0], lines
    else:
        assert "HTTP 401" in lines[0] and "--influx-token-file" in lines[0], lines
    assert "Traceback" not in done.stderr and not out.exists()


def test_insecure_ships_warns_once_and_is_recorded(tmp_path, influxdb):
    """A real one-cell sweep shipping live with --influx-insecure."""
    token = _secret_file(tmp_path / "credentials", ":".join(AGENT))
    out = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, "-m", "profiler.cli", "sweep", "--model", "lenet-mlp",
         "--engine", "torch", "--devices", "1", "--batch", "32", "--max-samples", "128",
         "--val-samples", "32", "--interval", "0.5", "--out", str(out),
         "--influx-url", influxdb.url, "--influx-db", "edgeprof",
         "--influx-token-file", str(token), "--influx-insecure"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "ok", record
    assert done.stderr.count("--influx-insecure") == 1, done.stderr
    assert "InsecureRequestWarning" not in done.stderr
    shipping = json.loads((out / "sweep.json").read_text())["shipping"]
    assert shipping["insecure"] is True and "not verified" in shipping["tls"], shipping
    assert AGENT[1] not in (out / "sweep.json").read_text()
    sweep_id = json.loads((out / "sweep.json").read_text())["sweep_id"]
    resp = _query(influxdb, f"SELECT count(*) FROM /.*/ WHERE sweep = '{sweep_id}'", ADMIN)
    assert resp.json()["results"][0].get("series"), resp.text


def test_v2_api_over_https(tmp_path, pki):
    """influxdb-client's path: verified against --influx-ca, refused without it."""
    need_binary("victoria-metrics")
    _spool(tmp_path / "sweep", "tls-v2")
    with LocalServer("victoria-metrics", tmp_path / "vm", tls_pem=pki / "server.pem",
                     ca_file=pki / "ca.pem") as server:
        v2 = ["--influx-org", "lab", "--influx-bucket", "edgeprof"]
        refused = _ship(tmp_path / "sweep", server.url, *v2)
        assert refused.exit_code == 2, refused.output
        assert "--influx-ca" in refused.output and len(refused.output.splitlines()) == 1
        result = _ship(tmp_path / "sweep", server.url, *v2, "--influx-ca", str(pki / "ca.pem"))
        assert result.exit_code == 0 and "shipped 50 points" in result.output, result.output
        deadline = time.monotonic() + 30  # searchable within ~1 s of the write
        while len(values := _vm_values(server, pki / "ca.pem")) < 50:
            assert time.monotonic() < deadline, values
            time.sleep(0.3)
        assert values == [i / 2 for i in range(50)]


def _vm_values(server, ca: Path) -> list:
    requests.get(f"{server.url}/internal/force_flush", verify=str(ca), timeout=30)
    resp = requests.post(f"{server.url}/api/v1/export",
                         data={"match[]": '{__name__="cpu_cpu_percent", sweep="tls-v2"}'},
                         verify=str(ca), timeout=30)
    lines = resp.text.splitlines()
    return json.loads(lines[0])["values"] if lines else []


def _agent(spool: Path, *influx: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "profiler.agent", "--node", "n1", "--interval", "0.2",
         "--spool", str(spool), "--interfaces", "lo", "--tag", "sweep=tls-agent", *influx],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_agent_ships_live_over_verified_tls(tmp_path, influxdb, pki):
    """The agent shipping directly (a Pi's systemd service): refused in one line with
    another CA before it samples; with the right CA its points arrive while it runs."""
    token = _secret_file(tmp_path / "credentials", ":".join(AGENT))
    influx = ["--influx-url", influxdb.url, "--influx-db", "edgeprof",
              "--influx-token-file", str(token)]
    refused = _agent(tmp_path / "refused", *influx, "--influx-ca", str(pki / "other-ca.pem"))
    _, stderr = refused.communicate(timeout=60)
    assert refused.returncode == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "--influx-ca" in stderr and not (tmp_path / "refused").exists()
    agent = _agent(tmp_path / "spool", *influx, "--influx-ca", str(pki / "ca.pem"))
    try:
        deadline = time.monotonic() + 60
        while not _query(influxdb, "SELECT count(cpu_percent) FROM cpu WHERE sweep = "
                         "'tls-agent'", ADMIN).json()["results"][0].get("series"):
            assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read()
            time.sleep(0.3)
    finally:
        agent.terminate()
        _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 0 and "WARNING" not in stderr, stderr
