"""28x28 grey image sets in MNIST's IDX format: MNIST and Fashion-MNIST.

Each set is four files (each raw or ``.gz``) in one folder:
``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
``t10k-labels-idx1-ubyte``. Fashion-MNIST uses the same names and format, so a folder is
told apart by its content: the test labels of Fashion-MNIST have a known SHA-256.
``check`` reads only headers and sizes (fast enough for the controller to check every
cell's files before a sweep starts); ``read`` reads a split's rows, and only those: a
worker's shard of 6,000 images is 4.7 MB, where reading the whole 47 MB training file
and slicing it left the worker 92 MB larger (``gzip``'s whole-file read builds the
bytes from chunks, and the freed heap stayed the process's) and decompressed 60,000
images on a Pi for the sake of a few thousand.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.errors import DataError

if TYPE_CHECKING:  # NumPy is imported where arrays are made: the controller checks
    import numpy as np  # headers through this module (resolver) without it.

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049
SIDE = 28
FILES = {  # split -> (images, labels)
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# SHA-256 of Fashion-MNIST's t10k-labels-idx1-ubyte, decompressed (10,008 bytes; measured
# on Debian's dataset-fashion-mnist 0.0~git20200523, the set's upstream release).
FASHION_TEST_LABELS_SHA256 = "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"

Found = dict[str, tuple[Path, Path, int]]  # split -> (images, labels, samples)


def find_file(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def has_set(folder: Path) -> bool:
    """Whether ``folder`` holds the four files (by name; ``check`` validates them)."""
    return all(find_file(folder, name) for pair in FILES.values() for name in pair)


def is_fashion(folder: Path) -> bool:
    """Whether the IDX set in ``folder`` is Fashion-MNIST (by its test labels' digest)."""
    path = find_file(folder, FILES["test"][1])
    if path is None:
        return False
    try:
        body = _read_bytes(path)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return False
    return hashlib.sha256(body).hexdigest() == FASHION_TEST_LABELS_SHA256


def _read_bytes(path: Path) -> bytes:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        return fh.read()


def _header(path: Path, what: str, fix: str) -> tuple[int, tuple[int, ...], int]:
    """(magic, dims, uncompressed size in bytes) of an IDX file, without reading it."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                head = fh.read(16)
            # A gzip member's last 4 bytes are the uncompressed size mod 2**32.
            with open(path, "rb") as fh:
                fh.seek(-4, 2)
                size = struct.unpack("<I", fh.read(4))[0]
        else:
            with open(path, "rb") as fh:
                head = fh.read(16)
            size = path.stat().st_size
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:  # zlib: corrupt body
        raise DataError(f"{what} file unreadable: {path} ({exc}); {fix}") from exc
    if len(head) < 8:
        raise DataError(f"{what} file truncated: {path}; {fix}")
    magic, count = struct.unpack(">II", head[:8])
    dims = (count,)
    if magic == IMAGE_MAGIC and len(head) == 16:
        dims = (count, *struct.unpack(">II", head[8:16]))
    return magic, dims, size


def check(folder: Path, what: str, fix: str) -> Found:
    """The set's files in ``folder``; raises ``DataError`` naming the file and ``fix``.

    ``what`` names the set in messages (``MNIST``, ``Fashion-MNIST``).
    """
    found = {}
    for split, names in FILES.items():
        images, labels = (find_file(folder, name) for name in names)
        for path, name in ((images, names[0]), (labels, names[1])):
            if path is None:
                raise DataError(f"{what} file missing: {folder / name}[.gz]; {fix}")
        magic, dims, size = _header(images, what, fix)
        if magic != IMAGE_MAGIC or dims != (dims[0], SIDE, SIDE):
            raise DataError(f"not an {what} image file (magic {magic}, dims {dims}): "
                            f"{images}; {fix}")
        if size != 16 + dims[0] * SIDE * SIDE:
            raise DataError(f"{what} file truncated or padded ({size} bytes for {dims[0]} "
                            f"images): {images}; {fix}")
        l_magic, l_dims, l_size = _header(labels, what, fix)
        if l_magic != LABEL_MAGIC or l_size != 8 + l_dims[0]:
            raise DataError(f"not a valid {what} label file (magic {l_magic}, {l_size} "
                            f"bytes): {labels}; {fix}")
        if l_dims[0] != dims[0]:
            raise DataError(f"{what} {split} images ({dims[0]}) and labels ({l_dims[0]}) "
                            f"differ in count: {labels}; {fix}")
        found[split] = (images, labels, dims[0])
    return found


READ_CHUNK_BYTES = 1 << 20  # what a decompressing read holds beside the array it fills


def read(found: Found, split: str, rows: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 1, 28, 28) and int32 labels of ``rows`` of one split.

    The images are decompressed straight into the array, a chunk at a time, from the
    first row asked for (the rows before it are decompressed and dropped on the way)."""
    import numpy as np

    images, labels, count = found[split]
    start, stop, step = rows.indices(count)
    if step != 1:
        raise ValueError(f"rows must be contiguous, not {rows}")
    x = np.empty((max(0, stop - start), 1, SIDE, SIDE), dtype=np.uint8)
    view = memoryview(x.reshape(-1))  # flat uint8: a view of x, readinto fills it
    opener = gzip.open if images.suffix == ".gz" else open
    with opener(images, "rb") as fh:
        fh.seek(16 + start * SIDE * SIDE)
        done = 0
        while done < len(view):
            got = fh.readinto(view[done:done + READ_CHUNK_BYTES])
            if not got:
                raise DataError(f"image file truncated at image {start + done // SIDE ** 2}"
                                f": {images}")
            done += got
    y = np.frombuffer(_read_bytes(labels), dtype=np.uint8, offset=8)[start:stop]
    return x, y.astype(np.int32)
