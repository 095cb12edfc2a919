"""Reading spools: for shipping (in batches, ``shipping.ship``) and for the controller's
summaries, report and calibration (point by point).

The format is the one ``spool`` writes: segments of line protocol, each opened by a
``# tags`` header. A reader skips a last line without its newline: in the
newest segment it is still being written, in an older one it was torn by a crash (a
segment is never appended to after its agent stopped).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterator

from . import lineproto
from .spool import segments

log = logging.getLogger(__name__)


def find_spools(root: Path) -> list[Path]:
    """Every spool directory under ``root`` (``root`` included), in a stable order."""
    return sorted({path.parent for path in root.rglob("seg-*.lp")})


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
                lineproto.parse_header(handle.readline().decode(errors="replace")) or {})
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
                # Bytes that are not UTF-8 (a damaged spool) go as U+FFFD: the server
                # judges the line, and quarantines it if it cannot take it.
                text = raw.decode(errors="replace").rstrip("\n")
                if text and not text.startswith("#"):
                    lines.append(lineproto.with_base_tags(text, fragment))
        if len(lines) >= max_points or is_last:
            break
    if segments_lost:
        log.warning("spool %s: %d segment(s) were deleted by the size bound before they "
                    "were shipped", spool_dir, segments_lost)
    return lines, position, segments_lost


def read_points(spool_dir: Path, measurements: Collection[str] | None = None
                ) -> Iterator[tuple[dict[str, str], lineproto.ParsedPoint]]:
    """Every complete point of the spool with its segment's base tags, oldest first;
    only those of ``measurements`` when given (the others are not parsed at all: the
    report wants 3 of a tick's ~10 lines, and parsing was most of its reading)."""
    wanted = None if measurements is None else {m.encode() for m in measurements}
    for _, path in segments(spool_dir):
        skipped = 0
        with open(path, "rb") as handle:
            base: dict[str, str] = {}
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                if raw.startswith(b"#"):
                    base = lineproto.parse_header(raw.decode(errors="replace")) or base
                    continue
                # The agent's measurement names are plain identifiers: the first
                # ',' or ' ' ends them (as ``lineproto.with_base_tags`` reads them).
                if (raw.split(b" ", 1)[0].split(b",", 1)[0] not in wanted
                        if wanted is not None else not raw.strip()):
                    continue
                try:
                    point = lineproto.parse(raw.decode())
                except ValueError:  # a damaged line (UnicodeDecodeError is one too)
                    skipped += 1
                    continue
                yield base, point
        if skipped:
            log.warning("spool %s: %d damaged line(s) skipped", path, skipped)
