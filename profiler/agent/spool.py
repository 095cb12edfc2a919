"""The on-disk spool of one node: append-only segments of line protocol.

Layout of a spool directory::

    seg-000001.lp   "# tags {...}" header, then one point per line (oldest segment first)
    seg-000002.lp   every agent start opens a new segment, so a line torn by a crash
                    stays at the end of a segment that is never appended to again
    ship-<target>.json   how far each shipping target has got (written by ``ship``)

Durability: each sampling tick is one ``write()`` on an ``O_APPEND`` descriptor, so a
``kill -9`` loses at most the tick being sampled; the kernel keeps what was written.
Against power loss the writer calls ``fsync`` every ``fsync_interval_s`` and on close.

Size bound (the documented policy): a segment is closed at ``segment_max_bytes``
(default 4 MB); when the spool's segments together exceed ``max_bytes`` (default
256 MB) the *oldest* segments are deleted, shipped or not, and the loss is logged at
WARNING with the number of points dropped. The newest data is always kept.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from . import lineproto

log = logging.getLogger(__name__)

SEGMENT_MAX_BYTES = 4 * 1024 * 1024
SPOOL_MAX_BYTES = 256 * 1024 * 1024
FSYNC_INTERVAL_S = 10.0
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


def find_spools(root: Path) -> list[Path]:
    """Every spool directory under ``root`` (``root`` included), in a stable order."""
    return sorted({path.parent for path in root.rglob("seg-*.lp")})


class SpoolWriter:
    """Appends ticks of points to a new segment; rotates and bounds the spool's size."""

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
        self._open_next()

    def _open_next(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
        self._number += 1
        path = segment_path(self.spool_dir, self._number)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, self._header)
        self._size = len(self._header)
        self._enforce_bound()

    def append(self, lines: list[str]) -> None:
        """Write one tick's lines with a single ``write()`` (all or nothing on a kill)."""
        lines = [line for line in lines if line]
        if not lines or self._fd is None:
            return
        data = ("\n".join(lines) + "\n").encode()
        os.write(self._fd, data)
        self._size += len(data)
        self.points_written += len(lines)
        now = time.monotonic()
        if now - self._last_fsync >= self.fsync_interval_s:
            os.fsync(self._fd)
            self._last_fsync = now
        if self._size >= self.segment_max_bytes:
            self._open_next()

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
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class Position:
    """Where a reader stands: a segment number and a byte offset inside it."""

    segment: int = 0
    offset: int = 0


def read_batch(spool_dir: Path, position: Position, max_points: int
               ) -> tuple[list[str], Position, int]:
    """Up to ``max_points`` complete lines after ``position``, base tags put back in.

    Returns (lines, new position, segments lost: deleted by the size bound before
    they were read completely).
    """
    lines: list[str] = []
    segments_lost = 0
    all_segments = segments(spool_dir)
    present = {number for number, _ in all_segments}
    for index, (number, path) in enumerate(all_segments):
        if number < position.segment:
            continue
        if number > position.segment:
            if position.segment:
                # Segment numbers are consecutive: a gap is a deletion by the size bound.
                segments_lost += number - position.segment - (position.segment in present)
            position = Position(number, 0)
        is_last = index == len(all_segments) - 1
        with open(path, "rb") as handle:
            fragment = lineproto.tag_fragment(
                lineproto.parse_header(handle.readline().decode()) or {})
            if position.offset:
                handle.seek(position.offset)
            else:
                position = Position(number, handle.tell())
            while len(lines) < max_points:
                raw = handle.readline()
                if not raw.endswith(b"\n"):
                    # A partial line is still being written (last segment) or was torn
                    # by a crash (older segment, never appended to again): skip it there.
                    break
                position = Position(number, position.offset + len(raw))
                text = raw.decode().rstrip("\n")
                if text and not text.startswith("#"):
                    lines.append(lineproto.with_base_tags(text, fragment))
        if len(lines) >= max_points or is_last:
            break
    if segments_lost:
        log.warning("spool %s: %d segment(s) were deleted by the size bound before they "
                    "were shipped", spool_dir, segments_lost)
    return lines, position, segments_lost


def read_points(spool_dir: Path) -> Iterator[tuple[dict[str, str], lineproto.ParsedPoint]]:
    """Every complete point of the spool with its segment's base tags, oldest first."""
    for _, path in segments(spool_dir):
        with open(path, "rb") as handle:
            base: dict[str, str] = {}
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                text = raw.decode()
                if text.startswith("#"):
                    base = lineproto.parse_header(text) or base
                elif text.strip():
                    yield base, lineproto.parse(text)
