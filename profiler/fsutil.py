"""Writing files so that a reader (or a crash) never sees half of one.

One helper for every small state file edgeprof replaces while others may read it: the
results table, the agents' pids files, the shippers' positions, the emulated cluster's
state. Write to a temporary file in the same folder, flush it to disk, then rename it
over the target (``rename`` is atomic within a filesystem).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` atomically; ``mode`` sets its permission bits."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None,
                       fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; ``mode`` sets its permission bits.

    A link at ``path`` is replaced, never written through (the temporary file is made
    with ``O_EXCL``). ``fsync=False`` for files a crash may lose (a report's figures)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def remove_stale_temps(path: Path) -> int:
    """Remove what a writer killed mid-``atomic_write_text`` left beside ``path`` (its
    ``.<name>.*.tmp``); only for a caller that holds the one writer's lock. Returns how
    many were removed."""
    path = Path(path)
    return remove_matching(path.parent, f".{path.name}.*.tmp")


def remove_matching(folder: Path, pattern: str) -> int:
    """Remove the files of ``folder`` that match the glob ``pattern``; how many were."""
    removed = 0
    for stale in Path(folder).glob(pattern):
        try:
            stale.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed
