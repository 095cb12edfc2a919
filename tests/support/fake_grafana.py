"""A stand-in for Grafana's HTTP API, for tests only: no Grafana server can run here (it
is not in Debian, PyPI or npm). It answers the calls ``edgeprof dashboards push`` makes
the way Grafana 11 does (paths, status codes, the shape of the JSON), keeps what it is
sent in memory, and records every request (method, path, Authorization header, body).
It accepts the service-account token as a Bearer header and, when ``user`` and
``password`` are given, that login as HTTP basic auth. Dashboards whose uid is in
``provisioned`` and datasources stored with ``readOnly`` behave as Grafana's
file-provisioned ones do: reported as such, and their saves refused.

It is not Grafana: it does not validate dashboards or run queries (the dashboards'
queries are tested against a real InfluxDB instead).
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Request:
    method: str
    path: str
    authorization: str | None
    body: dict | None


@dataclass
class FakeGrafana:
    """``with FakeGrafana(token="t") as grafana: ... grafana.url, grafana.requests``."""

    token: str
    user: str | None = None  # with password: basic auth accepted too
    password: str | None = None
    folders: dict = field(default_factory=dict)
    datasources: dict = field(default_factory=dict)
    dashboards: dict = field(default_factory=dict)
    provisioned: set = field(default_factory=set)  # dashboard uids owned by files
    requests: list[Request] = field(default_factory=list)

    def accepts(self, authorization: str | None) -> bool:
        accepted = [f"Bearer {self.token}"]
        if self.user is not None and self.password is not None:
            login = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            accepted.append(f"Basic {login}")
        return authorization in accepted

    def __enter__(self) -> "FakeGrafana":
        handler = _handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method in ("POST", "PUT", "DELETE")]


def _handler(state: FakeGrafana):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _reply(self, status: int, body) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            auth = self.headers.get("Authorization")
            state.requests.append(Request(self.command, self.path, auth, body))
            if not state.accepts(auth):
                return self._reply(401, {"message": "Unauthorized"})
            method, parts = self.command, self.path.split("?")[0].strip("/").split("/")
            if parts[:2] == ["api", "frontend"]:
                return self._reply(200, {"buildInfo": {"version": "11.6.0 (stand-in)"}})
            if parts[:2] == ["api", "folders"]:
                if method == "GET" and len(parts) == 3:
                    folder = state.folders.get(parts[2])
                    return self._reply(200, folder) if folder else \
                        self._reply(404, {"message": "folder not found"})
                if method == "POST":
                    folder = {"uid": body["uid"], "title": body["title"],
                              "id": len(state.folders) + 1}
                    state.folders[body["uid"]] = folder
                    return self._reply(200, folder)
            if parts[:3] == ["api", "datasources", "uid"] and len(parts) == 4:
                uid = parts[3]
                if method == "GET":
                    ds = state.datasources.get(uid)
                    if not ds:
                        return self._reply(404, {"message": "Data source not found"})
                    return self._reply(200, {k: v for k, v in ds.items()
                                             if k != "secureJsonData"})
                if method == "PUT" and uid in state.datasources:
                    if state.datasources[uid].get("readOnly"):  # editable: false in a file
                        return self._reply(403, {"message": "Cannot update read-only data "
                                                            "source"})
                    state.datasources[uid] = {**body, "id": state.datasources[uid]["id"]}
                    return self._reply(200, {"message": "Datasource updated"})
            if parts[:2] == ["api", "datasources"] and len(parts) == 2 and method == "POST":
                state.datasources[body["uid"]] = {**body, "id": len(state.datasources) + 1}
                return self._reply(200, {"message": "Datasource added"})
            if parts[:3] == ["api", "dashboards", "uid"] and method == "GET":
                stored = state.dashboards.get(parts[3])
                if not stored:
                    return self._reply(404, {"message": "Dashboard not found"})
                meta = {"folderUid": stored["folderUid"]}
                if parts[3] in state.provisioned:
                    meta["provisioned"] = True
                return self._reply(200, {"dashboard": stored["dashboard"], "meta": meta})
            if parts[:3] == ["api", "dashboards", "db"] and method == "POST":
                board = dict(body["dashboard"])
                if board.get("uid") in state.provisioned:
                    return self._reply(400, {"message": "Cannot save provisioned dashboard"})
                old = state.dashboards.get(board["uid"])
                if old and not body.get("overwrite"):
                    return self._reply(412, {"message": "version-mismatch"})
                board["id"] = old["dashboard"]["id"] if old else len(state.dashboards) + 1
                board["version"] = (old["dashboard"]["version"] + 1) if old else 1
                state.dashboards[board["uid"]] = {"dashboard": board,
                                                  "folderUid": body.get("folderUid")}
                return self._reply(200, {"status": "success", "uid": board["uid"],
                                         "version": board["version"]})
            return self._reply(404, {"message": "Not found (stand-in)"})

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    return Handler
