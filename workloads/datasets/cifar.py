"""CIFAR-10 in its binary format: ``cifar-10-batches-bin/data_batch_{1..5}.bin``,
``test_batch.bin``; each record is a label byte, then the R, G and B planes (32x32)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from profiler.errors import DataError

from .catalog import CLASSES

if TYPE_CHECKING:  # NumPy is imported where arrays are made: the controller checks files
    import numpy as np  # through this module (resolver) without it.

SHAPE = (3, 32, 32)
RECORD_BYTES = 1 + 3 * 32 * 32
DIR = "cifar-10-batches-bin"
FILES = {
    "train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
    "test": ("test_batch.bin",),
}


def find_dir(data_dir: Path) -> Path | None:
    for folder in (data_dir / "cifar10" / DIR, data_dir / DIR):
        if folder.is_dir():
            return folder
    return None


def check(data_dir: Path, fix: str) -> dict[str, list[Path]]:
    """split -> batch files; raises ``DataError`` naming the file and ``fix``."""
    folder = find_dir(data_dir)
    if folder is None:
        raise DataError(f"CIFAR-10 folder missing: {data_dir / 'cifar10' / DIR}; {fix}")
    found = {}
    for split, names in FILES.items():
        paths = []
        for name in names:
            path = folder / name
            if not path.is_file():
                raise DataError(f"CIFAR-10 file missing: {path}; {fix}")
            size = path.stat().st_size
            if size == 0 or size % RECORD_BYTES:
                raise DataError(f"CIFAR-10 file corrupt ({size} bytes, not a multiple of "
                                f"{RECORD_BYTES}): {path}; {fix}")
            with open(path, "rb") as fh:
                label = fh.read(1)[0]
            if label >= CLASSES:
                raise DataError(f"CIFAR-10 file corrupt (label {label}): {path}; {fix}")
            paths.append(path)
        found[split] = paths
    return found


def count(found: dict[str, list[Path]], split: str) -> int:
    """Records in one split, from the files' sizes."""
    return sum(p.stat().st_size // RECORD_BYTES for p in found[split])


def read(found: dict[str, list[Path]], split: str, fix: str,
         rows: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 3, 32, 32) and int32 labels of ``rows`` of one split; only those
    records are read (a worker's shard, not the 150 MB set)."""
    import numpy as np

    start, stop, step = rows.indices(count(found, split))
    if step != 1:
        raise ValueError(f"rows must be contiguous, not {rows}")
    parts, first = [], 0  # first: the split's row at the start of each file
    for path in found[split]:
        records = path.stat().st_size // RECORD_BYTES
        lo, hi = max(start, first), min(stop, first + records)
        if lo < hi:
            parts.append(np.fromfile(path, dtype=np.uint8, count=(hi - lo) * RECORD_BYTES,
                                     offset=(lo - first) * RECORD_BYTES
                                     ).reshape(-1, RECORD_BYTES))
        first += records
    parts = parts or [np.empty((0, RECORD_BYTES), dtype=np.uint8)]
    records = np.concatenate(parts) if len(parts) > 1 else parts[0]
    y = records[:, 0].astype(np.int32)
    if y.max(initial=0) >= CLASSES:
        raise DataError(f"CIFAR-10 {split} labels out of range in {found[split][0].parent}; "
                        f"{fix}")
    return records[:, 1:].reshape(-1, *SHAPE), y
