"""Credentials never leak from a live-shipping sweep.

A real sweep ships live to a real server on loopback (InfluxDB 1.6.7 with
authentication on, the agents' write-only ``user:password`` in a 0600
``--influx-token-file``, as the Ansible roles provision it; VictoriaMetrics, standing in
for InfluxDB 2.x, with ``INFLUX_TOKEN`` in the sweep's environment). While the cell runs,
every process the sweep started (workers, scheduler, server, agents: none of them ships) is read
through ``/proc/<pid>/cmdline`` and ``/proc/<pid>/environ``; afterwards every file of
the sweep folder (logs, spool state files, results, sweep.json) is searched. The
password and the token appear nowhere, and the points did reach the server.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.support.servers import LocalServer, vm_export
from tests.conftest import need_binary

pytestmark = pytest.mark.integration

PASSWORD = "s3cretPW-7f2d"
TOKEN = "tok-XYZ-9c41e8b2d7"
SWEEP_TIMEOUT_S = 240


# How long a forked copy of the sweep may take to exec its program before it counts:
# a process starting takes milliseconds, a loaded host's scheduler now and then longer;
# a copy that lives on (a pool worker) lives for the whole cell.
FORK_GRACE_S = 5.0


def _watch_descendants(proc: subprocess.Popen, secrets: list[str]) -> tuple[set, list]:
    """Until ``proc`` ends: (names of the descendants seen, leaks found in them).

    Between ``fork`` and ``exec`` a child still shows its parent's cmdline and environ;
    a child that shows the sweep's own cmdline counts only if it is still like that
    ``FORK_GRACE_S`` after it was first seen (a forked copy of the sweep that lives on,
    not a process starting: on a loaded CI host a child once sat between fork and exec
    for over three polls, 0.2 s).
    """
    seen: set[str] = set()
    leaks: list[str] = []
    parent = psutil.Process(proc.pid)
    own_cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    forked: dict[int, float] = {}  # pid → when first seen with the sweep's own cmdline
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            children = parent.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for child in children:
            texts = {}
            try:
                for what in ("cmdline", "environ"):
                    texts[what] = Path(f"/proc/{child.pid}/{what}").read_bytes()
            except OSError:
                continue  # it ended meanwhile
            if texts["cmdline"] == own_cmdline:
                first_seen = forked.setdefault(child.pid, time.monotonic())
                if time.monotonic() - first_seen < FORK_GRACE_S:
                    continue
            name = " ".join(texts["cmdline"].decode(errors="replace").split("\0")[1:4])
            seen.add(name)
            for what, raw in texts.items():
                for secret in secrets:
                    leak = f"{what} of {name!r} holds {secret!r}"
                    if secret.encode() in raw and leak not in leaks:
                        leaks.append(leak)
        time.sleep(0.1)
    return seen, leaks


def _files_holding(folder: Path, secrets: list[str]) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path} holds {s!r}" for s in secrets if s.encode() in data]
    return found


ADMIN = ("admin", "admin-5b0e")


def _post(url: str, query: str, auth) -> requests.Response:
    return requests.post(f"{url}/query", params={"db": "edgeprof", "q": query}, auth=auth,
                         timeout=30)


def _users(url: str) -> None:
    """An admin, the database, and the agents' account that may only write it."""
    for query, auth in (((f"CREATE USER admin WITH PASSWORD '{ADMIN[1]}' WITH ALL "
                          "PRIVILEGES"), None), ("CREATE DATABASE edgeprof", ADMIN),
                        (f"CREATE USER edge WITH PASSWORD '{PASSWORD}'", ADMIN),
                        ('GRANT WRITE ON "edgeprof" TO "edge"', ADMIN)):
        resp = _post(url, query, auth)
        assert resp.ok and "error" not in resp.json()["results"][0], resp.text


@pytest.mark.parametrize("kind", ["influxdb1", "victoria-metrics"])
def test_live_shipping_sweep_leaks_no_credentials(tmp_path, kind):
    need_binary("influxd" if kind == "influxdb1" else "victoria-metrics")
    server = LocalServer(kind, tmp_path / kind, auth=kind == "influxdb1").start()
    env = {**os.environ}
    env.pop("INFLUX_TOKEN", None)
    if kind == "influxdb1":
        _users(server.url)
        token_file = tmp_path / "influx-credentials"
        token_file.write_text(f"edge:{PASSWORD}\n")
        token_file.chmod(0o600)
        influx = ["--influx-url", server.url, "--influx-db", "edgeprof",
                  "--influx-token-file", str(token_file)]
    else:
        influx = ["--influx-url", server.url, "--influx-org", "lab",
                  "--influx-bucket", "edgeprof"]
        env["INFLUX_TOKEN"] = TOKEN
    out = tmp_path / "sweep"
    secrets = [PASSWORD, TOKEN]
    try:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "profiler.cli", "sweep", "--model", "lenet-mlp",
             "--devices", "2", "--sync", "sync", "--max-samples", "512",
             "--val-samples", "128", "--batch", "32", "--interval", "0.5",
             "--out", str(out), *influx],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        seen, leaks = _watch_descendants(sweep, secrets)
        stdout, stderr = sweep.communicate(timeout=60)
        assert sweep.returncode == 0, stderr[-3000:]
        # The cell's processes were really watched: workers and agents at least.
        assert any("workloads" in name or "train" in name for name in seen), seen
        assert any("profiler.agent" in name for name in seen), seen
        assert leaks == []
        assert [s for s in secrets if s in stdout + stderr] == []
        assert _files_holding(out, secrets) == []
        # The credentials were used: the points did arrive.
        if kind == "influxdb1":
            answer = _post(server.url, "SELECT count(*) FROM cpu", ADMIN).json()
            assert answer["results"][0].get("series"), answer
        else:
            deadline = time.monotonic() + 30
            while not vm_export(server.url, '{__name__="cpu_cpu_percent"}'):
                assert time.monotonic() < deadline, "no point reached VictoriaMetrics"
                time.sleep(0.5)
    finally:
        if "sweep" in locals() and sweep.poll() is None:
            os.killpg(sweep.pid, 9)
            sweep.wait()
        server.stop()
