"""Shipping spools to a server: exactly once, in order, resumable after any outage.

For each spool and target, ``ship-<target.key>.json`` beside the segments records the
position (segment, byte offset) up to which the server has acknowledged points. A
batch is read after that position, written, and only then is the position advanced
(atomically: tmp + rename), so

- a server outage or shipper crash re-sends at most the one unacknowledged batch;
- batches go in spool order, one at a time, so every series arrives in order;
- a batch re-sent after a lost acknowledgement carries the same series and timestamps,
  which InfluxDB stores once (a point is keyed by series and time) and VictoriaMetrics
  collapses with ``-dedup.minScrapeInterval``: every point is stored exactly once.

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
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlparse

from ..errors import ClusterError
from . import spool as spool_mod
from .spool import Position
from .targets import InfluxTarget, RejectedBatch, TransientError

log = logging.getLogger(__name__)

BATCH_POINTS = 10_000
BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 30.0
TRAFFIC_FILE = "shipper-traffic.jsonl"


def _state_path(spool_dir: Path, target: InfluxTarget) -> Path:
    return spool_dir / f"ship-{target.key}.json"


def load_position(spool_dir: Path, target: InfluxTarget) -> tuple[Position, int]:
    """Where shipping to ``target`` stands, and how many points it has delivered."""
    try:
        state = json.loads(_state_path(spool_dir, target).read_text())
        return Position(state["segment"], state["offset"]), state["points"]
    except (OSError, ValueError, KeyError):
        return Position(), 0


def _save_position(spool_dir: Path, target: InfluxTarget, position: Position,
                   points: int) -> None:
    path = _state_path(spool_dir, target)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**asdict(position), "points": points,
                               "target": target.label}))
    os.replace(tmp, path)


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


def drain_spool(spool_dir: Path, target: InfluxTarget, writer, *,
                batch_points: int = BATCH_POINTS, wait: bool = True,
                stop: threading.Event | None = None) -> int:
    """Ship everything complete in one spool; returns points sent now.

    Raises ``TransientError`` with the position saved up to the last acknowledged batch.
    """
    with _locked(spool_dir, target, wait) as held:
        if not held:
            return 0
        position, delivered = load_position(spool_dir, target)
        # Reading and re-tagging the next batch (Python work) overlaps with the server
        # taking this one (a socket wait): about 1.3x the points/s of doing them in turn.
        with ThreadPoolExecutor(max_workers=1) as reader:
            sent, delivered = _drain(spool_dir, target, writer, reader, position, delivered,
                                     batch_points, stop)
    return sent


def _drain(spool_dir: Path, target: InfluxTarget, writer, reader: ThreadPoolExecutor,
           position: Position, delivered: int, batch_points: int,
           stop: threading.Event | None) -> tuple[int, int]:
    """Send batch after batch, saving the position after each acknowledged one."""
    sent = 0
    ahead = reader.submit(spool_mod.read_batch, spool_dir, position, batch_points)
    while stop is None or not stop.is_set():
        lines, after, _lost = ahead.result()
        if after != position:
            ahead = reader.submit(spool_mod.read_batch, spool_dir, after, batch_points)
        if lines:
            try:
                writer.write(lines)
            except RejectedBatch as exc:
                # Resending cannot succeed: skip these points, loudly.
                log.warning("%s rejected %d points from %s, skipped: %s",
                            target.label, len(lines), spool_dir, exc)
            else:
                sent += len(lines)
                delivered += len(lines)
        if after == position:
            break
        position = after
        _save_position(spool_dir, target, position, delivered)
    return sent, delivered


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
        if not writer.healthy():
            raise ClusterError(f"{target.label} does not answer its health check: start "
                               "the server or fix --influx-url, then run edgeprof ship again")
        total = 0
        for spool_dir in spool_mod.find_spools(sweep_dir):
            backoff_s = BACKOFF_START_S
            for attempt in range(attempts):
                try:
                    total += drain_spool(spool_dir, target, writer, batch_points=batch_points)
                    break
                except TransientError as exc:
                    log.warning("writing to %s failed (attempt %d of %d), retrying in "
                                "%.1f s: %s", target.label, attempt + 1, attempts,
                                backoff_s, exc)
                    time.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)
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
    """A background thread that keeps draining a sweep's spools while it runs.

    Never raises into the sweep: failures are logged at WARNING and retried with
    exponential backoff (0.5 s doubling to 30 s). ``stop()`` makes one final drain.
    """

    def __init__(self, sweep_dir: Path, target: InfluxTarget, *, interval_s: float = 1.0,
                 batch_points: int = BATCH_POINTS):
        self.sweep_dir = Path(sweep_dir)
        self.target = target
        self.interval_s = interval_s
        self.batch_points = batch_points
        self.points_sent = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writer = None
        self._traffic_mark = (0, 0, 0)

    def start(self) -> "LiveShipper":
        self._writer = self.target.writer()
        if not self._writer.healthy():
            log.warning("%s does not answer its health check: points stay in the spool "
                        "and are shipped when it comes back", self.target.label)
        self._thread = threading.Thread(target=self._run, name="edgeprof-shipper",
                                        daemon=True)
        self._thread.start()
        return self

    def _drain_all(self, stop: threading.Event | None = None) -> None:
        for spool_dir in spool_mod.find_spools(self.sweep_dir):
            self.points_sent += drain_spool(spool_dir, self.target, self._writer,
                                            batch_points=self.batch_points, wait=False,
                                            stop=stop)
        self._traffic_mark = _record_traffic(self.sweep_dir, self.target, self._writer,
                                             self._traffic_mark)

    def _run(self) -> None:
        backoff_s = BACKOFF_START_S
        while not self._stop.is_set():
            try:
                self._drain_all(self._stop)
                backoff_s = BACKOFF_START_S
                self._stop.wait(self.interval_s)
            except Exception as exc:  # the sweep must go on whatever the server does
                log.warning("shipping to %s failed, retrying in %.1f s: %s",
                            self.target.label, backoff_s, exc)
                self._stop.wait(backoff_s)
                backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)

    def stop(self, timeout_s: float = 30.0) -> int:
        """Stop the thread, drain once more; returns points sent in total."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        try:
            self._drain_all()
        except Exception as exc:
            log.warning("final shipping to %s failed: %s; run edgeprof ship to deliver "
                        "the rest", self.target.label, exc)
        finally:
            if self._writer is not None:
                self._writer.close()
        return self.points_sent
