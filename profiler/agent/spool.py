"""The on-disk spool of one node: append-only segments of line protocol, and its writer.

The sampler writes spools here; ``spool_reader`` reads them (for the shipper, and for
the controller's summaries).

Layout of a spool directory::

    seg-000001.lp   "# tags {...}" header, then one point per line (oldest segment first)
    seg-000002.lp   every agent start opens a new segment, so a line torn by a crash
                    stays at the end of a segment that is never appended to again
    ship-<target>.json   how far each shipping target has got (written by the
                         shipper, ``profiler.agent.shipping.ship``)

Durability: each sampling tick is one ``write()`` on an ``O_APPEND`` descriptor, so a
``kill -9`` loses at most the tick being sampled; the kernel keeps what was written.
Against power loss the writer calls ``fsync`` every ``fsync_interval_s`` and on close.

Disk full (the documented policy): when the spool's filesystem refuses a write
(``ENOSPC``, ``EDQUOT``, any ``OSError``, or a short ``write()``), ``append`` does not
raise: the tick's points are dropped and counted in ``points_dropped`` (the ``agent``
measurement reports it), a WARNING is logged the first time and then at most every
``WARN_EVERY_S`` (60 s) with the running count, and sampling goes on. A failed
``write()`` wrote nothing, so the segment stays whole and the next tick tries it again.
A short write leaves a torn line: the whole lines before it are kept, the segment is
closed for good (readers skip a torn last line of an older segment, as after a crash)
and the next tick opens a new segment. Opening one can fail too on a full disk: it is
tried again on every later tick; segments appear under their final name only once
their header is whole (written as ``.seg-N.lp.tmp``, then renamed). Writing resumes by
itself when space returns, with one WARNING saying how many points were lost.

Size bound (the documented policy): a segment is closed at ``segment_max_bytes``
(default 4 MB); when the spool's segments together exceed ``max_bytes`` (default
256 MB) the *oldest* segments are deleted, shipped or not, and the loss is logged at
WARNING with the number of points dropped. The newest data is always kept.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from pathlib import Path
from typing import Mapping

from . import lineproto

log = logging.getLogger(__name__)

SEGMENT_MAX_BYTES = 4 * 1024 * 1024
SPOOL_MAX_BYTES = 256 * 1024 * 1024
FSYNC_INTERVAL_S = 10.0
WARN_EVERY_S = 60.0  # while the disk stays full, one WARNING a minute at most
_SEGMENT = re.compile(r"^seg-(\d{6,})\.lp$")


def segment_path(spool_dir: Path, number: int) -> Path:
    return spool_dir / f"seg-{number:06d}.lp"


def segments(spool_dir: Path) -> list[tuple[int, Path]]:
    """The spool's segments as (number, path), oldest first."""
    if not spool_dir.is_dir():
        return []
    found = []
    for entry in os.scandir(spool_dir):
        match = _SEGMENT.match(entry.name)
        if match:
            found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


class SpoolWriter:
    """Appends ticks of points to a new segment; rotates and bounds the spool's size.

    Never raises on a write (see the module docstring's disk-full policy): a tick that
    cannot be written is dropped and counted in ``points_dropped``.
    """

    def __init__(self, spool_dir: Path, base_tags: Mapping[str, str], *,
                 segment_max_bytes: int = SEGMENT_MAX_BYTES,
                 max_bytes: int = SPOOL_MAX_BYTES,
                 fsync_interval_s: float = FSYNC_INTERVAL_S):
        self.spool_dir = Path(spool_dir)
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self._header = lineproto.header(base_tags).encode()
        self.segment_max_bytes = segment_max_bytes
        self.max_bytes = max(max_bytes, 2 * segment_max_bytes)
        self.fsync_interval_s = fsync_interval_s
        self.points_written = 0
        self.points_dropped = 0
        existing = segments(self.spool_dir)
        self._number = existing[-1][0] if existing else 0
        self._fd: int | None = None
        self._size = 0
        self._last_fsync = time.monotonic()
        self._closed = False
        # Disk-full bookkeeping: points dropped since writing last succeeded, and when
        # the last WARNING about it was logged (monotonic s; None: none yet this time).
        self._failing_dropped = 0
        self._warned_at: float | None = None
        self._open_next()

    def _open_next(self) -> bool:
        """Close the current segment and open the next one; False if the disk refused.

        The segment is written under a temporary name and renamed into place once its
        header is whole, so a reader never sees a segment with a torn header.
        """
        self._close_fd()
        number = self._number + 1
        path = segment_path(self.spool_dir, number)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = None
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            if os.write(fd, self._header) != len(self._header):
                raise OSError(errno.ENOSPC, "short write of the segment header")
            os.rename(tmp, path)
        except OSError as exc:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(tmp)  # gives back what the failed attempt took
            except OSError:
                pass
            self._write_failed(exc, 0)
            return False
        self._fd, self._number, self._size = fd, number, len(self._header)
        self._enforce_bound()
        return True

    def append(self, lines: list[str]) -> None:
        """Write one tick's lines with a single ``write()`` (all or nothing on a kill).

        Never raises ``OSError``: on a full disk (or any write error) the tick is
        dropped and counted, and writing resumes when the disk takes it again.
        """
        lines = [line for line in lines if line]
        if not lines or self._closed:
            return
        if self._fd is None and not self._open_next():
            self._drop(len(lines))
            return
        data = ("\n".join(lines) + "\n").encode()
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            # A failed write() of a regular file wrote nothing: the segment is intact.
            self._write_failed(exc, len(lines))
            return
        if written < len(data):
            # A short write (the disk filled up mid-tick) leaves a torn line: the whole
            # lines before it are kept, and the segment is never appended to again, so
            # readers skip its torn tail as they do after a crash.
            kept = data.count(b"\n", 0, written)
            self.points_written += kept
            self._size += written
            self._close_fd()
            self._write_failed(OSError(errno.ENOSPC, "short write"), len(lines) - kept)
            return
        self._size += written
        self.points_written += len(lines)
        if self._warned_at is not None:
            log.warning("spool %s is writable again: %d points were dropped while it was "
                        "not", self.spool_dir, self._failing_dropped)
            self._warned_at, self._failing_dropped = None, 0
        now = time.monotonic()
        if now - self._last_fsync >= self.fsync_interval_s:
            self._fsync()
            self._last_fsync = now
        if self._size >= self.segment_max_bytes:
            self._open_next()

    def _drop(self, points: int) -> None:
        self.points_dropped += points
        self._failing_dropped += points

    def _write_failed(self, exc: OSError, points: int) -> None:
        """Count ``points`` as dropped; WARNING the first time, then at most every 60 s."""
        self._drop(points)
        now = time.monotonic()
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY_S:
            first = self._warned_at is None
            self._warned_at = now
            log.warning("spool %s cannot be written (%s): %s; %d points dropped so far "
                        "(%d in all); sampling goes on and writing resumes when there "
                        "is room", self.spool_dir, exc.strerror or exc,
                        "dropping ticks" if first else "still dropping ticks",
                        self._failing_dropped, self.points_dropped)

    def _fsync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:  # e.g. EIO/ENOSPC on write-back: say so, keep sampling
            self._write_failed(exc, 0)

    def _close_fd(self) -> None:
        if self._fd is not None:
            self._fsync()
            os.close(self._fd)
            self._fd = None

    def _enforce_bound(self) -> None:
        existing = segments(self.spool_dir)
        total = sum(path.stat().st_size for _, path in existing)
        for number, path in existing:
            if total <= self.max_bytes or number == self._number:
                break
            size = path.stat().st_size
            with open(path, "rb") as handle:
                dropped = max(0, handle.read().count(b"\n") - 1)
            path.unlink()
            total -= size
            self.points_dropped += dropped
            log.warning("spool %s is over its %d MB bound: deleted its oldest segment %s "
                        "(%d points not kept)", self.spool_dir, self.max_bytes // 2**20,
                        path.name, dropped)

    def close(self) -> None:
        self._closed = True
        self._close_fd()
