"""Where points go: an InfluxDB-compatible server, written to in batches.

Two writers, one interface (``write(lines) -> None``, ``check() -> None``):

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

TLS: an ``https://`` server's certificate is verified, against the system's CAs or the
private CA of ``--influx-ca``; ``--influx-insecure`` turns verification off (warned
once, and recorded in the sweep's ``sweep.json`` by ``recorded()``). A certificate that
does not verify is a ``ConfigError`` naming both options, not a retry: waiting cannot
fix it.

``check_server`` is the preflight: one empty write with the credentials, which InfluxDB
1.x answers 204 when the account may write the database and 401/403 when not, so a
wrong password or an unknown CA is one line at the start instead of a spool that never
drains. A server that does not answer is only a warning: points wait in the spools.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from ...errors import ConfigError
from ...secrets import read_secret

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
    ca_file: Path | None = None  # private CA that signed the server's certificate
    insecure: bool = False       # https without verifying the certificate

    @property
    def verify(self) -> bool | str:
        """What ``requests``' ``verify=`` takes: the CA file, True (system CAs) or False."""
        if self.insecure:
            return False
        return str(self.ca_file) if self.ca_file else True

    def recorded(self) -> dict:
        """Where and how points were shipped, for ``sweep.json`` (no credentials)."""
        tls = ("off" if not self.url.startswith("https://") else
               "not verified (--influx-insecure)" if self.insecure else
               f"verified against {self.ca_file}" if self.ca_file else
               "verified against the system's CAs")
        return {"url": self.url, "api": self.api, "db": self.db, "org": self.org,
                "bucket": self.bucket, "tls": tls, "insecure": self.insecure,
                "authenticated": bool(self.token)}

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
    if target.ca_file and target.insecure:
        raise ConfigError("--influx-ca and --influx-insecure exclude each other: give the "
                          "CA to verify the server with, or turn verification off")
    if (target.ca_file or target.insecure) and not target.url.startswith("https://"):
        option = "--influx-ca" if target.ca_file else "--influx-insecure"
        raise ConfigError(f"{option} applies to an https:// server and --influx-url is "
                          f"{target.url}: write https://..., or drop {option}")
    if target.ca_file:
        _check_ca(Path(target.ca_file))
    return target


def _check_ca(path: Path) -> None:
    """A CA file Python's ssl module can load (PEM, at least one certificate)."""
    try:
        ssl.create_default_context(cafile=str(path))
    except FileNotFoundError:
        raise ConfigError(f"--influx-ca {path} does not exist: give the PEM file of the "
                          "CA that signed the server's certificate") from None
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--influx-ca {path} is not a PEM certificate file ({exc}): give "
                          "the CA's certificate, e.g. /etc/edgeprof/influx-ca.pem") from None


def _tls_problem(exc: BaseException) -> str | None:
    """The certificate check's complaint, if ``exc`` or what it wraps is one (requests
    and urllib3 wrap the ``ssl`` error in two or three layers)."""
    for _ in range(8):
        if isinstance(exc, ssl.SSLCertVerificationError):
            return exc.verify_message or str(exc)
        if isinstance(exc, ssl.SSLError):
            return str(exc)
        inner = [getattr(exc, "reason", None), exc.__cause__, exc.__context__,
                 *(exc.args[:1] if exc.args else ())]
        exc = next((e for e in inner if isinstance(e, BaseException)), None)
        if exc is None:
            return None
    return None


def _tls_error(target: InfluxTarget, problem: str) -> ConfigError:
    return ConfigError(f"{target.label}: its TLS certificate was not verified ({problem}): "
                       "give the CA that signed it with --influx-ca FILE, or skip the "
                       "check with --influx-insecure")


def check_server(target: InfluxTarget, writer=None, *, quiet: bool = False) -> bool:
    """The preflight: may these credentials write to ``target``, over verified TLS?

    Raises ``ConfigError`` (one line) for a certificate that does not verify, credentials
    refused, or a database/bucket that is missing and cannot be made. Returns False (and
    warns, at INFO when ``quiet``: the CLI's own check said it) when the server does not
    answer: its points wait in the spools.
    """
    own = writer is None
    writer = writer or target.writer()
    try:
        writer.check()
        return True
    except TransientError as exc:
        log.log(logging.INFO if quiet else logging.WARNING,
                "%s does not answer its health check (%s): metrics stay in the spools and "
                "are shipped when it does", target.label, exc)
        return False
    finally:
        if own:
            writer.close()


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
        _quiet_if_insecure(target)
        self._client = InfluxDBClient(
            url=target.url, token=target.token, org=target.org,
            timeout=int(REQUEST_TIMEOUT_S * 1000), verify_ssl=not target.insecure,
            ssl_ca_cert=str(target.ca_file) if target.ca_file else None,
            retries=WritesRetry(total=2, retry_interval=0.2, max_retry_delay=2,
                                exponential_base=2))
        self._write_api = self._client.write_api(write_options=SYNCHRONOUS)

    def check(self) -> None:
        """An empty write: the server checks the token and the bucket, stores nothing."""
        self.write([])

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
            if problem := _tls_problem(exc):
                raise _tls_error(self.target, problem) from None
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
        _quiet_if_insecure(target)
        self._session = requests.Session()
        # verify= goes with each request: a Session's own is overridden by
        # $REQUESTS_CA_BUNDLE, which would drop --influx-ca (and --influx-insecure).
        self._created = False
        token = target.token
        if token and ":" in token:
            self._session.auth = tuple(token.split(":", 1))
        elif token:
            self._session.headers["Authorization"] = f"Token {token}"

    def _url(self, path: str) -> str:
        return f"{self.target.url.rstrip('/')}{path}"

    def check(self) -> None:
        """An empty write: InfluxDB 1.x checks the user's right to write the database
        (401/403 when it may not) and stores nothing; a missing database is made."""
        self.write([])

    def write(self, lines: list[str]) -> None:
        body = "\n".join(lines).encode()
        for _ in range(2):
            self.traffic.count(len(body))
            try:
                resp = self._session.post(self._url("/write"), data=body,
                                          params={"db": self.target.db, "precision": "ms"},
                                          timeout=REQUEST_TIMEOUT_S, verify=self.target.verify)
            except self._requests.RequestException as exc:
                if problem := _tls_problem(exc):
                    raise _tls_error(self.target, problem) from None
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
                                  timeout=REQUEST_TIMEOUT_S, verify=self.target.verify)
        if resp.status_code == 403:  # a write-only account, as the Ansible roles make
            raise ConfigError(f"{self.target.label}: the database does not exist and this "
                              "account may not create it: create it as InfluxDB's admin "
                              f"(CREATE DATABASE \"{self.target.db}\"), or check --influx-db")
        if resp.status_code >= 300:
            _classify(resp.status_code, resp.text[:200], self.target)
        log.info("created database %s on %s", self.target.db, self.target.url)

    def close(self) -> None:
        self._session.close()


def _quiet_if_insecure(target: InfluxTarget) -> None:
    """urllib3 warns on every unverified request; --influx-insecure was warned once."""
    if target.insecure:
        import urllib3
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)


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
                        influx_token_file: Path | None = None, influx_ca: Path | None = None,
                        influx_insecure: bool = False, **_ignored) -> InfluxTarget | None:
    """The shipping target the options describe, or None when no --influx-url is given."""
    if not influx_url:
        given = [name for name, value in (("--influx-org", influx_org),
                                          ("--influx-bucket", influx_bucket),
                                          ("--influx-db", influx_db),
                                          ("--influx-token-file", influx_token_file),
                                          ("--influx-ca", influx_ca),
                                          ("--influx-insecure", influx_insecure)) if value]
        if given:
            raise ConfigError(f"{given[0]} needs --influx-url: give the server's URL, "
                              "e.g. --influx-url http://127.0.0.1:8086")
        return None
    if split_userinfo(influx_url)[1] is not None:
        log.warning("--influx-url carries a password, which every user of this machine "
                    "can read in ps: put user:password in a 0600 file for "
                    "--influx-token-file instead")
    target = check_target(InfluxTarget(
        url=influx_url, org=influx_org, bucket=influx_bucket, db=influx_db,
        token=read_token(influx_token_file), ca_file=influx_ca, insecure=influx_insecure))
    if target.insecure:
        log.warning("--influx-insecure: the certificate of %s is not verified; anyone on "
                    "the path can read the metrics and credentials", target.url)
    return target
