"""``edgeprof dashboards push`` against a stand-in for Grafana's HTTP API.

No Grafana server can run here (not in Debian, PyPI or npm): ``tests.support.
fake_grafana`` answers the calls as Grafana 11 does and records them. The push itself
is real (grafana-client over HTTP on loopback, the committed dashboards).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from tests.support.fake_grafana import FakeGrafana
from tests.conftest import ROOT, assert_one_line

pytestmark = pytest.mark.integration
BOARDS_DIR = ROOT / "profiler" / "dashboards"  # the committed dashboards
TOKEN = "glsa_test-token-0123456789"
PASSWORD = "grafana-admin-password-77"
INFLUX_SECRET = "grafana-reader:influx-secret-42"
BOARD_UIDS = sorted(json.loads(p.read_text())["uid"] for p in BOARDS_DIR.glob("*.json"))


def _push(url: str, *args: str, token: str = TOKEN, extra_env=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "GRAFANA_TOKEN": token, "INFLUX_TOKEN": INFLUX_SECRET,
           **(extra_env or {})}
    argv = [sys.executable, "-m", "profiler.cli", "dashboards", "push", "--grafana-url", url,
            *args]
    for secret in (TOKEN, PASSWORD, INFLUX_SECRET):
        assert secret not in " ".join(argv)
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)


def test_push_creates_then_changes_nothing(tmp_path):
    with FakeGrafana(token=TOKEN) as grafana:
        first = _push(grafana.url, "--influx-url", "http://influx:8086")
        assert first.returncode == 0, first.stderr
        writes = grafana.writes()
        assert [(r.method, r.path) for r in writes] == [
            ("POST", "/api/folders"), ("POST", "/api/datasources")] + [
            ("POST", "/api/dashboards/db")] * len(BOARD_UIDS)
        assert all(r.authorization == f"Bearer {TOKEN}" for r in grafana.requests)
        assert writes[0].body == {"title": "edgeprof", "uid": "edgeprof"}
        datasource = writes[1].body
        assert datasource["uid"] == "edgeprof-influxdb" and datasource["type"] == "influxdb"
        assert datasource["jsonData"]["dbName"] == "edgeprof"
        assert datasource["user"] == "grafana-reader"
        assert datasource["secureJsonData"] == {"password": "influx-secret-42"}
        pushed = sorted(r.body["dashboard"]["uid"] for r in writes[2:])
        assert pushed == BOARD_UIDS
        for r in writes[2:]:
            assert r.body["overwrite"] is True and r.body["folderUid"] == "edgeprof"
        # Nothing secret in what the command printed.
        assert TOKEN not in first.stdout + first.stderr
        assert "influx-secret-42" not in first.stdout + first.stderr

        before = len(grafana.requests)
        second = _push(grafana.url, "--influx-url", "http://influx:8086")
        assert second.returncode == 0, second.stderr
        assert [r for r in grafana.requests[before:] if r.method != "GET"] == []
        assert "0 written" in second.stdout

        # A changed dashboard in Grafana (edited in the UI) is put back, alone.
        uid = BOARD_UIDS[0]
        grafana.dashboards[uid]["dashboard"]["title"] = "edited by hand"
        before = len(grafana.requests)
        third = _push(grafana.url)
        assert third.returncode == 0, third.stderr
        writes = [r for r in grafana.requests[before:] if r.method != "GET"]
        assert [(r.path, r.body["dashboard"]["uid"]) for r in writes] == [
            ("/api/dashboards/db", uid)]


def test_bad_push_input_is_one_line(tmp_path):
    assert_one_line(_push("ftp://monitor:3000"), "not an http(s) URL")
    assert_one_line(_push("http://127.0.0.1:1"), "cannot reach Grafana")
    assert_one_line(_push("http://admin:pw@127.0.0.1:1"), "must not hold credentials")
    with FakeGrafana(token=TOKEN) as grafana:
        assert_one_line(_push(grafana.url, token="wrong"), "refused the credentials (401)")
        assert_one_line(_push(grafana.url, token=""), "no Grafana credentials")
        loose = tmp_path / "token"
        loose.write_text(TOKEN)
        loose.chmod(0o644)
        assert_one_line(_push(grafana.url, "--grafana-token-file", str(loose)), "chmod 600")
        loose.chmod(0o600)
        done = _push(grafana.url, "--grafana-token-file", str(loose), token="")
        assert done.returncode == 0, done.stderr


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_push_as_a_user_sends_basic_auth_from_the_environment(tmp_path):
    with FakeGrafana(token=TOKEN, user="admin", password=PASSWORD) as grafana:
        done = _push(grafana.url, "--grafana-user", "admin", token="",
                     extra_env={"GRAFANA_PASSWORD": PASSWORD})
        assert done.returncode == 0, done.stderr
        assert grafana.requests and {r.authorization for r in grafana.requests} == {
            _basic("admin", PASSWORD)}
        assert sorted(grafana.dashboards) == BOARD_UIDS
        assert PASSWORD not in done.stdout + done.stderr

        # The password from a 0600 file instead of the environment.
        secret = tmp_path / "grafana-password"
        secret.write_text(PASSWORD + "\n")
        secret.chmod(0o600)
        before = len(grafana.requests)
        done = _push(grafana.url, "--grafana-user", "admin", "--grafana-token-file",
                     str(secret), token="")
        assert done.returncode == 0, done.stderr
        assert {r.authorization for r in grafana.requests[before:]} == {
            _basic("admin", PASSWORD)}

        assert_one_line(_push(grafana.url, "--grafana-user", "admin", token="",
                              extra_env={"GRAFANA_PASSWORD": "wrong"}),
                        "refused the credentials (401)")
        # No password anywhere: refused before any request, and a token is not taken
        # for the user's password.
        before = len(grafana.requests)
        assert_one_line(_push(grafana.url, "--grafana-user", "admin",
                              extra_env={"GRAFANA_PASSWORD": ""}), "needs a password")
        assert len(grafana.requests) == before


def test_push_leaves_what_grafana_provisions_from_files():
    """A Grafana set up by the Ansible monitor role: folder, datasource and dashboards
    from files (same uids), one dashboard an older version. Grafana refuses API saves of
    those; push must not try, and must say what it left."""
    boards = {json.loads(p.read_text())["uid"]: json.loads(p.read_text())
              for p in BOARDS_DIR.glob("*.json")}
    current, older = BOARD_UIDS
    with FakeGrafana(token=TOKEN) as grafana:
        grafana.folders["edgeprof"] = {"uid": "edgeprof", "title": "edgeprof", "id": 1}
        grafana.datasources["edgeprof-influxdb"] = {
            "uid": "edgeprof-influxdb", "name": "edgeprof-influxdb", "type": "influxdb",
            "url": "http://127.0.0.1:8086", "isDefault": True, "readOnly": True, "id": 1,
            "jsonData": {"dbName": "edgeprof", "httpMode": "GET"}}
        grafana.dashboards[current] = {"dashboard": {**boards[current], "id": 1, "version": 1},
                                       "folderUid": "edgeprof"}
        grafana.dashboards[older] = {"dashboard": {**boards[older], "title": "older", "id": 2,
                                                   "version": 1}, "folderUid": "edgeprof"}
        grafana.provisioned.update(BOARD_UIDS)
        done = _push(grafana.url, "--influx-url", "http://influx:8086")
        assert done.returncode == 0, done.stderr
        assert grafana.writes() == []  # a write would have been refused (400, 403)
        assert f"not written: dashboard {older} differs, but Grafana provisions it" in \
            done.stdout
        assert "not written: datasource edgeprof-influxdb differs" in done.stdout
        assert f"dashboard {current}" not in done.stdout  # same as the files: unchanged
        assert "0 written, 2 unchanged, 2 provisioned from files (not written)" in done.stdout
