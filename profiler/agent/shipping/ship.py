"""Shipping spools to a server: exactly once, in order, resumable after any outage.

For each spool and target, ``ship-<target.key>.json`` beside the segments records the
position (segment, byte offset) up to which the server has acknowledged points. A
batch is read after that position, written, and only once the whole batch is resolved
is the position advanced (``fsutil.atomic_write_text``), so

- a server outage or shipper crash re-sends at most the one unacknowledged batch;
- batches go in spool order, one at a time, so every series arrives in order;
- a batch re-sent after a lost acknowledgement carries the same series and timestamps,
  which InfluxDB stores once (a point is keyed by series and time) and VictoriaMetrics
  collapses with ``-dedup.minScrapeInterval``: every point is stored exactly once.

A batch the server refuses (HTTP 400/422: a field type conflict, a line it cannot
parse) is bisected until the refused lines are found: every other line is delivered,
the refused ones are appended to ``quarantine-<target.key>.lp`` beside the spool (each
after a ``#`` comment with the server's reason), counted in the state file and logged
at WARNING. What each server kind guarantees is written down in docs/metrics.md.

One shipper per spool and target at a time (an ``flock`` on ``ship-<key>.lock``), so
the live shipper and a later ``edgeprof ship`` never interleave.

The shipper counts what it sends (``shipper-traffic.jsonl`` in the sweep folder) so that
summaries can take its traffic out of the loopback counters (docs/metrics.md).
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import logging
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

from ...errors import ClusterError
from ...fsutil import atomic_write_text, remove_stale_temps
from .. import spool_reader
from ..spool_reader import Position
from . import TRAFFIC_FILE
from .backoff import Backoff
from .targets import InfluxTarget, RejectedBatch, TransientError, check_server

log = logging.getLogger(__name__)

BATCH_POINTS = 10_000
# Control characters other than tab and newline: never in a line the agent wrote.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
DAMAGED_REASON = "damaged spool line (a control character): not sent"


def _state_path(spool_dir: Path, target: InfluxTarget) -> Path:
    return spool_dir / f"ship-{target.key}.json"


def quarantine_path(spool_dir: Path, target: InfluxTarget) -> Path:
    """Where points ``target`` refused for good are kept (line protocol, base tags in)."""
    return spool_dir / f"quarantine-{target.key}.lp"


def _load_state(spool_dir: Path, target: InfluxTarget) -> dict:
    try:
        state = json.loads(_state_path(spool_dir, target).read_text())
        return {"segment": int(state["segment"]), "offset": int(state["offset"]),
                "points": int(state["points"]),
                "quarantined": int(state.get("quarantined", 0))}
    except (OSError, ValueError, KeyError, TypeError):
        return {"segment": 0, "offset": 0, "points": 0, "quarantined": 0}


def _save_state(spool_dir: Path, target: InfluxTarget, position: Position, points: int,
                quarantined: int) -> None:
    # target.label is the URL without credentials (see InfluxTarget).
    atomic_write_text(_state_path(spool_dir, target), json.dumps(
        {**asdict(position), "points": points, "quarantined": quarantined,
         "target": target.label}))


@contextmanager
def _locked(spool_dir: Path, target: InfluxTarget, wait: bool):
    """Hold this spool's shipping lock for ``target``; yields False if busy and not waiting."""
    with open(spool_dir / f"ship-{target.key}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class DrainResult:
    """What one drain of one spool did."""

    sent: int = 0          # points the server acknowledged now
    quarantined: int = 0   # points it refused for good, now in the quarantine file
    complete: bool = False  # reached the end of what was spooled (not stopped early)
    busy: bool = False     # another shipper holds this spool: nothing was done


def drain_spool(spool_dir: Path, target: InfluxTarget, writer, *,
                batch_points: int = BATCH_POINTS, wait: bool = True,
                stop: threading.Event | None = None) -> int:
    """Ship everything complete in one spool; returns points sent now.

    Raises ``TransientError`` with the position saved up to the last resolved batch.
    """
    return _drain_spool(spool_dir, target, writer, batch_points=batch_points, wait=wait,
                        stop=stop).sent


def _drain_spool(spool_dir: Path, target: InfluxTarget, writer, *, batch_points: int,
                 wait: bool, stop: threading.Event | None) -> DrainResult:
    with _locked(spool_dir, target, wait) as held:
        if not held:
            return DrainResult(busy=True)
        # A shipper killed while saving its position left its temporary file behind.
        remove_stale_temps(_state_path(spool_dir, target))
        state = _load_state(spool_dir, target)
        # Reading and re-tagging the next batch (Python work) overlaps with the server
        # taking this one (a socket wait): about 1.3x the points/s of doing them in turn.
        with ThreadPoolExecutor(max_workers=1) as reader:
            return _drain(spool_dir, target, writer, reader, state, batch_points, stop)


def _drain(spool_dir: Path, target: InfluxTarget, writer, reader: ThreadPoolExecutor,
           state: dict, batch_points: int, stop: threading.Event | None) -> DrainResult:
    """Send batch after batch, saving the position after each fully resolved one."""
    result = DrainResult()
    position = Position(state["segment"], state["offset"])
    ahead = reader.submit(spool_reader.read_batch, spool_dir, position, batch_points)
    while stop is None or not stop.is_set():
        lines, after, _lost = ahead.result()
        if after != position:
            ahead = reader.submit(spool_reader.read_batch, spool_dir, after, batch_points)
        if lines:
            sent, refused = write_resolving(writer, lines)
            if refused:
                _quarantine(spool_dir, target, refused)
            result.sent += sent
            result.quarantined += len(refused)
            state["points"] += sent
            state["quarantined"] += len(refused)
        if after == position:
            result.complete = True
            break
        position = after
        _save_state(spool_dir, target, position, state["points"], state["quarantined"])
    return result


def write_resolving(writer, lines: list[str]) -> tuple[int, list[tuple[str, str]]]:
    """Write ``lines``; when the server rejects the batch, bisect it down to the lines
    it refuses. Returns (points acknowledged, [(refused line, server's reason)]).

    Sending a good half again is harmless: InfluxDB 1.x keeps the good points of a
    rejected batch ("partial write") and a point re-sent with the same series and
    timestamp overwrites itself. ``TransientError``/``ConfigError`` propagate (the
    caller re-sends the whole batch later; nothing of it was recorded yet).

    A line with a control character (only a damaged spool holds one: the agent escapes
    them) is refused here, unsent: InfluxDB 1.x echoes a line it cannot parse in a
    response header, which the HTTP client then refuses, so the batch would look like
    an outage and be retried forever (found by tests/fuzz/test_fuzz_spool.py).
    """
    if _CONTROL.search("\n".join(lines)):
        damaged = [(line, DAMAGED_REASON) for line in lines if _CONTROL.search(line)]
        clean = [line for line in lines if not _CONTROL.search(line)]
        sent, refused = write_resolving(writer, clean)
        return sent, refused + damaged
    if not lines:
        return 0, []
    try:
        writer.write(lines)
        return len(lines), []
    except RejectedBatch as exc:
        if len(lines) == 1:
            return 0, [(lines[0], str(exc))]
    middle = len(lines) // 2
    sent_a, refused_a = write_resolving(writer, lines[:middle])
    sent_b, refused_b = write_resolving(writer, lines[middle:])
    return sent_a + sent_b, refused_a + refused_b


def _quarantine(spool_dir: Path, target: InfluxTarget,
                refused: list[tuple[str, str]]) -> None:
    path = quarantine_path(spool_dir, target)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = "".join(f"# {stamp} {' '.join(reason.split())[:300]}\n{line}\n"
                   for line, reason in refused)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
    log.warning("%s refused %d point(s) from %s for good (e.g. %s); the rest of the batch "
                "was delivered; the refused points are kept in %s", target.label,
                len(refused), spool_dir, " ".join(refused[0][1].split())[:200], path)


def ship_sweep(sweep_dir: Path, target: InfluxTarget, *, batch_points: int = BATCH_POINTS,
               attempts: int = 6) -> int:
    """Drain every spool of a sweep to ``target`` once; returns points sent.

    Resumable: points already delivered to this target are not sent again. Raises
    ``ClusterError`` when the server is unreachable or stays away through ``attempts``
    retries with backoff (what was delivered so far stays delivered).
    """
    sweep_dir = Path(sweep_dir)
    writer = target.writer()
    try:
        # TLS and credentials first: ConfigError (one line) when they are refused.
        if not check_server(target, writer):
            raise ClusterError(f"{target.label} does not answer its health check (an "
                               "empty write): start the server or fix --influx-url, then "
                               "run edgeprof ship again")
        total = 0
        for spool_dir in spool_reader.find_spools(sweep_dir):
            backoff = Backoff()
            for attempt in range(attempts):
                try:
                    total += drain_spool(spool_dir, target, writer, batch_points=batch_points)
                    break
                except TransientError as exc:
                    log.warning("writing to %s failed (attempt %d of %d), retrying in "
                                "%.1f s: %s", target.label, attempt + 1, attempts,
                                backoff.delay_s, exc)
                    time.sleep(backoff.next_s())
            else:
                raise ClusterError(f"{target.label} kept failing; {total} points were "
                                   "delivered: run edgeprof ship again to resume")
        _record_traffic(sweep_dir, target, writer)
        return total
    finally:
        writer.close()


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine's loopback (its traffic crosses ``lo``)."""
    host = urlparse(url).hostname or ""
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def _record_traffic(sweep_dir: Path, target: InfluxTarget, writer,
                    since=(0, 0, 0)) -> tuple[int, int, int]:
    """Append the writer's traffic since ``since`` to the sweep's traffic file."""
    now = (writer.traffic.sent_bytes, writer.traffic.recv_bytes, writer.traffic.requests)
    sent, recv, requests = (a - b for a, b in zip(now, since))
    if requests:
        record = {"t_ms": int(time.time() * 1000), "sent_bytes": sent, "recv_bytes": recv,
                  "requests": requests, "loopback": is_loopback(target.url)}
        with open(sweep_dir / TRAFFIC_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")
    return now


class LiveShipper:
    """A background thread that ships the spools of the cells running now.

    Its cost follows the running cells, not the sweep's size: it looks only under the
    paths it was told to ``watch`` (a cell attempt's folder, or a spool folder), and
    once a path is ``finish``-ed its spools are drained one last time and never opened
    again. Traffic is appended to ``root/shipper-traffic.jsonl`` after every round.

    Never raises into the sweep: failures are logged at WARNING and retried with
    exponential backoff (0.5 s doubling to 30 s). ``stop()`` makes a final drain, retried
    the same way but bounded in time when the server answered during the run (its
    health check, or a delivery), tried once when it never did: waiting for a server
    that was down all along would only hold the sweep's exit. What it cannot deliver
    stays in the spools for ``edgeprof ship``.
    """

    def __init__(self, root: Path, target: InfluxTarget, *, interval_s: float = 1.0,
                 batch_points: int = BATCH_POINTS):
        self.root = Path(root)
        self.target = target
        self.interval_s = interval_s
        self.batch_points = batch_points
        self.points_sent = 0
        self.points_quarantined = 0
        self._lock = threading.Lock()
        self._watched: dict[Path, None] = {}    # insertion-ordered set
        self._finishing: dict[Path, None] = {}
        self._wake = threading.Event()      # a finish() or stop(): do a round now
        self._stopping = threading.Event()  # stop(): end the loop, final round
        self._abort = threading.Event()     # stop()'s time is up: leave the rest
        self._thread: threading.Thread | None = None
        self._writer = None
        self._traffic_mark = (0, 0, 0)
        self._delivered_all = False  # set by the final round

    def start(self) -> "LiveShipper":
        self._writer = self.target.writer()
        self._thread = threading.Thread(target=self._run, name="edgeprof-shipper",
                                        daemon=True)
        self._thread.start()
        return self

    def watch(self, path: Path) -> None:
        """Ship the spools found under ``path`` from now on (found again every round)."""
        with self._lock:
            self._watched[Path(path)] = None

    def finish(self, path: Path) -> None:
        """The spools under ``path`` are complete: drain them once more, then leave them."""
        path = Path(path)
        with self._lock:
            self._watched.pop(path, None)
            self._finishing[path] = None
        self._wake.set()

    def _run(self) -> None:
        # The health check runs here, not in start(): a server that does not answer
        # must not hold the sweep for its request timeout.
        try:
            # Quiet: the command that started this shipper warned when it did not answer.
            healthy = check_server(self.target, self._writer, quiet=True)
        except Exception as exc:  # noqa: BLE001 - refused TLS or credentials: preflight said so
            log.warning("%s; points stay in the spool", exc)
            healthy = False
        backoff = Backoff()
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self._round(self._stopping)
                backoff.reset()
                self._wake.wait(self.interval_s)
            except Exception as exc:  # noqa: BLE001 - the sweep goes on whatever the server does
                log.warning("shipping to %s failed, retrying in %.1f s: %s",
                            self.target.label, backoff.delay_s, exc)
                self._stopping.wait(backoff.next_s())
        # The final drain retries like the loop does (a server just back from an outage
        # may fail the first request), until it is complete or stop()'s time is up.
        backoff = Backoff()
        while True:
            try:
                self._delivered_all = self._round(self._abort)
                if self._delivered_all:
                    break
            except Exception as exc:  # noqa: BLE001 - retried, then given up on
                if not (healthy or self.points_sent):  # it never answered
                    log.warning("final shipping to %s failed: it has not answered during "
                                "this run, so it is not waited for: %s",
                                self.target.label, exc)
                    break
                log.warning("final shipping to %s failed, retrying in %.1f s: %s",
                            self.target.label, backoff.delay_s, exc)
            if self._abort.wait(backoff.next_s()):
                break

    def _round(self, stop: threading.Event) -> bool:
        """Drain the finishing paths (then forget them) and the watched ones; True if
        everything spooled so far was delivered."""
        with self._lock:
            finishing = list(self._finishing)
            watched = list(self._watched)
        complete = True
        try:
            for path in finishing:
                if stop.is_set():
                    return False
                if self._drain_path(path, stop):
                    with self._lock:
                        self._finishing.pop(path, None)
                else:
                    complete = False
            for path in watched:
                if stop.is_set():
                    return False
                complete = self._drain_path(path, stop) and complete
            return complete
        finally:
            self._traffic_mark = _record_traffic(self.root, self.target, self._writer,
                                                 self._traffic_mark)

    def _drain_path(self, path: Path, stop: threading.Event) -> bool:
        """Drain every spool under ``path``; True if all were drained to their end.

        Never waits for a spool's lock (an ``edgeprof ship`` running meanwhile): a busy
        spool is tried again next round.
        """
        complete = True
        for spool_dir in spool_reader.find_spools(path):
            result = _drain_spool(spool_dir, self.target, self._writer,
                                  batch_points=self.batch_points, wait=False, stop=stop)
            self.points_sent += result.sent
            self.points_quarantined += result.quarantined
            complete = complete and result.complete and not result.busy
        return complete

    def stop(self, timeout_s: float = 30.0) -> int:
        """Stop the thread after one final drain of what is watched or finishing,
        within ``timeout_s`` in all; returns points sent in total."""
        if self._thread is None:
            return self.points_sent
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._abort.set()  # ends the drain after the batch in flight
            self._thread.join(min(1.0, timeout_s))
            log.warning("shipping to %s did not finish within %.0f s: what is not "
                        "delivered stays in the spools; run edgeprof ship %s to deliver it",
                        self.target.label, timeout_s, self.root)
        elif not self._delivered_all:
            log.warning("not every spooled point under %s reached %s: they stay in the "
                        "spools; run edgeprof ship %s to deliver them", self.root,
                        self.target.label, self.root)
        if not self._thread.is_alive() and self._writer is not None:
            self._writer.close()
        return self.points_sent
