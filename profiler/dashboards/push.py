"""Create or update the datasource and the dashboards in Grafana, through grafana-client.

Idempotent: each dashboard goes by its fixed ``uid`` with ``overwrite``, into one folder
(uid ``edgeprof``), and only when what Grafana holds differs (the dashboard's JSON
without Grafana's own ``id``/``version``, or its folder); the datasource (uid
``edgeprof-influxdb``, what the provisioning files create too) only when its settings
differ. So a second push sends no write. Secrets (the datasource's InfluxDB password or
token) are sent with a create or a change of settings; Grafana never returns them, so
a changed secret alone is not noticed: ``--resend-secrets`` sends them again.

A Grafana provisioned from files (the Ansible ``monitor`` role: the same folder and
uids) refuses API saves of what those files define: a dashboard of a file provider
without ``allowUiUpdates`` (Grafana answers 400 "Cannot save provisioned dashboard"),
a datasource with ``editable: false`` (403 "read-only"). Push leaves those as they are
and says so (``PushResult.provisioned``), rather than failing on them: there the files
are the source, and the playbook updates them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from ..errors import ClusterError, ConfigError

FOLDER_UID = "edgeprof"
DATASOURCE_UID = "edgeprof-influxdb"
# Package data (setup.cfg), so that an installed edgeprof finds them as a checkout does;
# written by the repository's dashboards/generate.py.
DEFAULT_DASHBOARDS = Path(__file__).resolve().parent
TIMEOUT_S = 10.0


@dataclass
class Datasource:
    url: str
    database: str
    version: int = 1  # 2: InfluxDB 2.x through its v1 API (DBRP), token in a header
    secret: str | None = None  # 1.x "user:password", 2.x the token

    def body(self) -> dict:
        body = {"uid": DATASOURCE_UID, "name": "edgeprof-influxdb", "type": "influxdb",
                "access": "proxy", "url": self.url, "isDefault": False,
                "jsonData": {"dbName": self.database, "httpMode": "GET"}}
        if self.version == 2:
            body["jsonData"]["httpHeaderName1"] = "Authorization"
        elif self.secret:
            body["user"] = self.secret.split(":", 1)[0]
        return body

    def secure(self) -> dict:
        if not self.secret:
            return {}
        if self.version == 2:
            return {"httpHeaderValue1": f"Token {self.secret}"}
        return {"password": self.secret.split(":", 1)[-1]}


@dataclass
class PushResult:
    written: list[str] = field(default_factory=list)    # what was created or updated
    unchanged: list[str] = field(default_factory=list)
    provisioned: list[str] = field(default_factory=list)  # differs, but Grafana's files own it


def load_dashboards(folder: Path = DEFAULT_DASHBOARDS) -> list[dict]:
    boards = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            board = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path} is not a dashboard JSON file ({exc}): regenerate it "
                              "with python -m dashboards.generate") from None
        if not board.get("uid"):
            raise ConfigError(f"{path} has no uid: dashboards are pushed by uid")
        boards.append(board)
    if not boards:
        raise ConfigError(f"no dashboards (*.json) in {folder}: give --dashboards-dir")
    return boards


def check_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(f"--grafana-url {url!r} is not an http(s) URL: use e.g. "
                          "http://monitor:3000")
    if parsed.username or parsed.password:
        raise ConfigError("--grafana-url must not hold credentials (they would show in "
                          "ps): use GRAFANA_TOKEN, GRAFANA_PASSWORD or --grafana-token-file")
    return url.rstrip("/")


def push(url: str, credential, boards: list[dict], *, folder_title: str = "edgeprof",
         datasource: Datasource | None = None, resend_secrets: bool = False) -> PushResult:
    """Push ``boards`` (and ``datasource``) to Grafana at ``url``; see the module docstring."""
    from grafana_client import GrafanaApi
    from grafana_client.client import GrafanaClientError

    api = GrafanaApi.from_url(check_url(url), credential=credential, timeout=TIMEOUT_S)
    result = PushResult()
    with _errors(url):
        api.health.check()
        try:
            api.folder.get_folder(FOLDER_UID)
            result.unchanged.append(f"folder {FOLDER_UID}")
        except GrafanaClientError as exc:
            if exc.status_code != 404:
                raise
            api.folder.create_folder(folder_title, uid=FOLDER_UID)
            result.written.append(f"folder {FOLDER_UID}")
        if datasource is not None:
            _push_datasource(api, datasource, resend_secrets, result)
        for board in boards:
            _push_board(api, board, result)
    return result


def _push_datasource(api, datasource: Datasource, resend_secrets: bool,
                     result: PushResult) -> None:
    from grafana_client.client import GrafanaClientError

    wanted = datasource.body()
    try:
        current = api.datasource.get_datasource_by_uid(DATASOURCE_UID)
    except GrafanaClientError as exc:
        if exc.status_code != 404:
            raise
        api.datasource.create_datasource({**wanted, "secureJsonData": datasource.secure()})
        result.written.append(f"datasource {DATASOURCE_UID}")
        return
    if _subset(wanted, current) and not resend_secrets:
        result.unchanged.append(f"datasource {DATASOURCE_UID}")
        return
    if current.get("readOnly"):
        result.provisioned.append(f"datasource {DATASOURCE_UID}")
        return
    api.datasource.update_datasource_by_uid(
        DATASOURCE_UID, {**current, **wanted, "secureJsonData": datasource.secure()})
    result.written.append(f"datasource {DATASOURCE_UID}")


def _push_board(api, board: dict, result: PushResult) -> None:
    from grafana_client.client import GrafanaClientError

    uid = board["uid"]
    try:
        current = api.dashboard.get_dashboard(uid)
        same = (_comparable(current.get("dashboard", {})) == _comparable(board)
                and current.get("meta", {}).get("folderUid") == FOLDER_UID)
    except GrafanaClientError as exc:
        if exc.status_code != 404:
            raise
        current, same = {}, False
    if same:
        result.unchanged.append(f"dashboard {uid}")
        return
    # Grafana sets meta.provisioned only when the file provider refuses UI (and API) saves.
    if current.get("meta", {}).get("provisioned"):
        result.provisioned.append(f"dashboard {uid}")
        return
    api.dashboard.update_dashboard({"dashboard": {**board, "id": None},
                                    "folderUid": FOLDER_UID, "overwrite": True,
                                    "message": "edgeprof dashboards push"})
    result.written.append(f"dashboard {uid}")


def _comparable(board: dict) -> dict:
    return {k: v for k, v in board.items() if k not in ("id", "version")}


def _subset(wanted, current) -> bool:
    """Whether every setting in ``wanted`` is what ``current`` holds."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(
            _subset(v, current.get(k)) for k, v in wanted.items())
    return wanted == current


class _errors:
    """grafana-client's and niquests' exceptions as one-line edgeprof errors."""

    def __init__(self, url: str):
        self.url = url

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None:
            return False
        from grafana_client.client import (GrafanaClientError, GrafanaException,
                                           GrafanaTimeoutError)
        if isinstance(exc, GrafanaTimeoutError):
            raise ClusterError(f"Grafana at {self.url} did not answer within {TIMEOUT_S:g} s: "
                               "check --grafana-url and that Grafana runs") from None
        if isinstance(exc, GrafanaClientError) and exc.status_code in (401, 403):
            raise ConfigError(f"Grafana at {self.url} refused the credentials "
                              f"({exc.status_code}): check GRAFANA_TOKEN, or GRAFANA_PASSWORD "
                              "with --grafana-user, or --grafana-token-file") from None
        if isinstance(exc, GrafanaException):
            raise ClusterError(f"Grafana at {self.url} answered {exc.status_code} "
                               f"({str(exc.message)[:120]}): check the URL and Grafana's "
                               "log") from None
        if isinstance(exc, OSError) or type(exc).__module__.startswith(("niquests", "urllib3")):
            raise ClusterError(f"cannot reach Grafana at {self.url} ({type(exc).__name__}): "
                               "check --grafana-url and that Grafana runs") from None
        return False
