"""Where points go: an InfluxDB-compatible server, written to in batches.

Two writers, one interface (``write(lines) -> None``, ``healthy() -> bool``):

- ``V2Writer``: influxdb-client's synchronous write API (``/api/v2/write``): InfluxDB
  2.x/3.x, InfluxDB 1.8+ (its v2 compatibility endpoint) and VictoriaMetrics. Short
  retries inside one request (429/503, connection resets) are the library's
  ``WritesRetry``; long outages are the shipper's business (backoff, resume from disk).
- ``V1Writer``: the ``/write`` endpoint of InfluxDB 1.7 and older, which have no v2 API.

Errors are sorted for the shipper: ``TransientError`` (server away, overloaded: retry
later), ``RejectedBatch`` (the server refuses these points for good, e.g. a field type
conflict: retrying cannot help), and ``ConfigError`` (bad token or database name).

Secrets: the token is taken from ``INFLUX_TOKEN`` or a file readable by its owner only;
it never appears in argv, ``repr`` or logs. A ``user:password@`` in the URL is taken
out of it when the target is made and used as the token (both at once: ``ConfigError``),
so the URL that labels, keys, logs and state files show is clean. A v1 token
``user:password`` is sent as HTTP basic auth, any other as ``Authorization: Token ...``
(on the v2 API, ``Token user:password`` is InfluxDB 1.8's compatibility token).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from ..errors import ConfigError
from ..secrets import read_secret

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
# Request line, headers and the response, per HTTP request: used to account for the
# shipper's own traffic (see docs/metrics.md), not measured per request.
HTTP_OVERHEAD_BYTES = 400


class TransientError(Exception):
    """The server could not take the batch now; send the same batch again later."""


class RejectedBatch(Exception):
    """The server refused these points permanently (e.g. field type conflict)."""


@dataclass(frozen=True)
class InfluxTarget:
    """A server to ship to: v2 (org + bucket) or v1 (db)."""

    url: str
    org: str | None = None
    bucket: str | None = None
    db: str | None = None
    token: str | None = field(default=None, repr=False)

    def __post_init__(self):
        # Credentials in the URL (http://user:password@host) become the token, so that
        # ``url``, ``label`` and ``key`` (logs, warnings, ship-<key>.json, exception
        # texts of requests/urllib3) never carry them.
        url, userinfo = split_userinfo(self.url)
        if userinfo is None:
            return
        if self.token:
            raise ConfigError(f"--influx-url {url} carries user:password and a token is "
                              "also given (INFLUX_TOKEN or --influx-token-file): keep one")
        object.__setattr__(self, "url", url)
        object.__setattr__(self, "token", userinfo)

    @property
    def api(self) -> str:
        return "v1" if self.db else "v2"

    @property
    def key(self) -> str:
        """Stable short name of this destination (shipping state is kept per target)."""
        where = f"{self.api}|{self.url.rstrip('/')}|{self.org}|{self.bucket}|{self.db}"
        return hashlib.sha256(where.encode()).hexdigest()[:10]

    @property
    def label(self) -> str:
        where = f"db {self.db}" if self.db else f"bucket {self.bucket}"
        return f"{self.url} ({where})"

    def writer(self):
        return V1Writer(self) if self.api == "v1" else V2Writer(self)


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@`` part, and that part (unquoted) or None.

    Anything before the last ``@`` of the authority counts, with or without a scheme
    (``user:pw@host:8086`` too), so that an error message can show the URL safely.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    end = next((i for i, char in enumerate(rest) if char in "/?#"), len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" not in authority:
        return url, None
    userinfo, _, host = authority.rpartition("@")
    clean = f"{scheme}{sep}{host}{tail}"
    user, colon, password = userinfo.partition(":")
    if not colon:
        raise ConfigError(f"--influx-url {clean} has a user but no password: write "
                          "http://user:password@host:port, or give a token instead")
    return clean, f"{unquote(user)}:{unquote(password)}"


def read_token(token_file: Path | None) -> str | None:
    """The token from a file only its owner can read, else from ``INFLUX_TOKEN``."""
    return read_secret(token_file, "INFLUX_TOKEN", "--influx-token-file")


def check_target(target: InfluxTarget) -> InfluxTarget:
    """Raise ``ConfigError`` for an incomplete target; return it unchanged."""
    if not target.url.startswith(("http://", "https://")):
        raise ConfigError(f"--influx-url {target.url!r} is not an HTTP URL: "
                          "use e.g. http://127.0.0.1:8086")
    if target.db and (target.bucket or target.org):
        raise ConfigError("--influx-db (v1 API) and --influx-bucket/--influx-org (v2 API) "
                          "exclude each other: give one of them")
    if not target.db and not (target.bucket and target.org):
        raise ConfigError("--influx-url needs --influx-org and --influx-bucket (InfluxDB "
                          "1.8+/2.x), or --influx-db (InfluxDB 1.7 and older)")
    return target


class _Traffic:
    """Bytes this writer put on the wire, for the summaries (see docs/metrics.md)."""

    def __init__(self):
        self.sent_bytes = 0
        self.recv_bytes = 0
        self.requests = 0

    def count(self, body_bytes: int) -> None:
        self.sent_bytes += body_bytes + HTTP_OVERHEAD_BYTES // 2
        self.recv_bytes += HTTP_OVERHEAD_BYTES // 2
        self.requests += 1


class V2Writer:
    """influxdb-client's synchronous v2 write API, millisecond precision."""

    def __init__(self, target: InfluxTarget):
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write.retry import WritesRetry
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.target = target
        self.traffic = _Traffic()
        self._client = InfluxDBClient(
            url=target.url, token=target.token, org=target.org,
            timeout=int(REQUEST_TIMEOUT_S * 1000),
            retries=WritesRetry(total=2, retry_interval=0.2, max_retry_delay=2,
                                exponential_base=2))
        self._write_api = self._client.write_api(write_options=SYNCHRONOUS)

    def healthy(self) -> bool:
        return self._client.ping()

    def write(self, lines: list[str]) -> None:
        from influxdb_client import WritePrecision
        from influxdb_client.rest import ApiException
        from urllib3.exceptions import HTTPError

        body = "\n".join(lines).encode()
        self.traffic.count(len(body))
        try:
            self._write_api.write(bucket=self.target.bucket, org=self.target.org,
                                  record=body, write_precision=WritePrecision.MS)
        except ApiException as exc:
            _classify(exc.status, (exc.body or exc.reason or "")[:200], self.target)
        except (HTTPError, OSError) as exc:
            raise TransientError(f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self._write_api.close()
        self._client.close()


class V1Writer:
    """``POST /write?db=...&precision=ms`` (InfluxDB 1.x); creates the database once."""

    def __init__(self, target: InfluxTarget):
        import requests  # imported here: an agent that only spools stays small

        self._requests = requests
        self.target = target
        self.traffic = _Traffic()
        self._session = requests.Session()
        self._created = False
        token = target.token
        if token and ":" in token:
            self._session.auth = tuple(token.split(":", 1))
        elif token:
            self._session.headers["Authorization"] = f"Token {token}"

    def _url(self, path: str) -> str:
        return f"{self.target.url.rstrip('/')}{path}"

    def healthy(self) -> bool:
        try:
            return self._session.get(self._url("/ping"), timeout=REQUEST_TIMEOUT_S).ok
        except self._requests.RequestException:
            return False

    def write(self, lines: list[str]) -> None:
        body = "\n".join(lines).encode()
        for _ in range(2):
            self.traffic.count(len(body))
            try:
                resp = self._session.post(self._url("/write"), data=body,
                                          params={"db": self.target.db, "precision": "ms"},
                                          timeout=REQUEST_TIMEOUT_S)
            except self._requests.RequestException as exc:
                raise TransientError(f"{type(exc).__name__}: {exc}") from None
            if resp.status_code == 404 and "database not found" in resp.text and not self._created:
                self._create_database()
                continue
            if resp.status_code >= 300:
                _classify(resp.status_code, resp.text[:200], self.target)
            return

    def _create_database(self) -> None:
        # CREATE DATABASE is idempotent in InfluxDB 1.x.
        self._created = True
        resp = self._session.post(self._url("/query"),
                                  params={"q": f'CREATE DATABASE "{self.target.db}"'},
                                  timeout=REQUEST_TIMEOUT_S)
        if resp.status_code >= 300:
            _classify(resp.status_code, resp.text[:200], self.target)
        log.info("created database %s on %s", self.target.db, self.target.url)

    def close(self) -> None:
        self._session.close()


def _classify(status: int | None, text: str, target: InfluxTarget) -> None:
    """Raise the error kind that tells the shipper what to do with this failure."""
    if status in (401, 403):
        raise ConfigError(f"{target.label} refused the token (HTTP {status}): set "
                          "INFLUX_TOKEN or --influx-token-file to a token that may write")
    if status == 404:
        raise ConfigError(f"{target.label}: HTTP 404 {text.strip()}: check --influx-org/"
                          "--influx-bucket (or --influx-db) exist on the server")
    if status in (400, 422):
        raise RejectedBatch(f"HTTP {status} {text.strip()}")
    raise TransientError(f"HTTP {status} {text.strip()}")


def target_from_options(influx_url: str | None = None, influx_org: str | None = None,
                        influx_bucket: str | None = None, influx_db: str | None = None,
                        influx_token_file: Path | None = None, **_ignored) -> InfluxTarget | None:
    """The shipping target the options describe, or None when no --influx-url is given."""
    if not influx_url:
        given = [name for name, value in (("--influx-org", influx_org),
                                          ("--influx-bucket", influx_bucket),
                                          ("--influx-db", influx_db),
                                          ("--influx-token-file", influx_token_file)) if value]
        if given:
            raise ConfigError(f"{given[0]} needs --influx-url: give the server's URL, "
                              "e.g. --influx-url http://127.0.0.1:8086")
        return None
    return check_target(InfluxTarget(url=influx_url, org=influx_org, bucket=influx_bucket,
                                     db=influx_db, token=read_token(influx_token_file)))
