"""The canonical file of a user's dataset: one uncompressed ``.npz`` with fixed bytes.

A user's data (``workloads.datasets.user``) is converted once on the controller into
this form and staged to the nodes. Two choices make it what it is:

- **Fixed bytes.** ``numpy.savez`` stamps each member with the time of writing, so the
  same arrays written twice differ. Here members are written in a fixed order with a
  fixed timestamp: the same data always makes the same file, whose SHA-256 names the
  data in results and in the staged file's name, and a resumed sweep finds it again.
- **Stored, not deflated.** Each array's rows then sit at a known offset of the file,
  so a worker reads its shard's rows only (``Reader.rows``), as the IDX and CIFAR-10
  readers do, and never holds the whole training set.

It is still an ordinary ``.npz``: ``numpy.load`` reads it.
"""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

import numpy as np

from profiler.errors import DataError

# A zip's local file header: signature, then fixed fields; name and extra field follow.
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say


def write(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` (in the dict's order) to ``path``; replaced whole, never torn."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array),
                                          allow_pickle=False)
    os.replace(partial, path)


class Reader:
    """An ``.npz`` opened for reading arrays, or some rows of one, without the rest."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._members: dict[str, tuple[int, tuple[int, ...], np.dtype] | None] = {}
        try:
            with zipfile.ZipFile(self.path) as archive, open(self.path, "rb") as fh:
                for info in archive.infolist():
                    name = info.filename.removesuffix(".npy")
                    stored = info.compress_type == zipfile.ZIP_STORED
                    self._members[name] = self._locate(fh, info) if stored else None
        except (OSError, zipfile.BadZipFile, ValueError) as exc:
            raise DataError(f"{self.path} is not a readable .npz file ({exc}): write it "
                            "with numpy.savez(path, x_train=..., y_train=..., x_test=..., "
                            "y_test=...)") from None

    @staticmethod
    def _locate(fh, info: zipfile.ZipInfo) -> tuple[int, tuple[int, ...], np.dtype]:
        """Where a stored member's array data starts, its shape and dtype."""
        fh.seek(info.header_offset)
        fields = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
        if fields[0] != _LOCAL_SIGNATURE:
            raise ValueError(f"member {info.filename} has no local header")
        fh.seek(fields[-2] + fields[-1], os.SEEK_CUR)  # the name, the extra field
        version = np.lib.format.read_magic(fh)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(fh)
        if fortran or dtype.hasobject:
            raise ValueError(f"member {info.filename} is not a plain C-ordered array")
        return fh.tell(), shape, dtype

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._members)

    def shape(self, name: str) -> tuple[int, ...]:
        located = self._members[name]
        return located[1] if located else self._load(name).shape

    def array(self, name: str) -> np.ndarray:
        return self.rows(name, slice(None))

    def rows(self, name: str, rows: slice) -> np.ndarray:
        """Rows ``rows`` (a step-1 slice) of array ``name``, read alone where stored."""
        located = self._members[name]
        if located is None:  # a deflated member: read whole, then cut
            return np.ascontiguousarray(self._load(name)[rows])
        offset, shape, dtype = located
        if not shape:
            return self._load(name)
        start, stop, step = rows.indices(shape[0])
        if step != 1:
            raise ValueError("rows must be a slice with step 1")
        count = max(stop - start, 0)
        per_row = int(np.prod(shape[1:], dtype=np.int64))
        with open(self.path, "rb") as fh:
            fh.seek(offset + start * per_row * dtype.itemsize)
            data = np.fromfile(fh, dtype=dtype, count=count * per_row)
        if len(data) != count * per_row:
            raise DataError(f"{self.path} is cut short (array {name}): convert the data "
                            "again (a new sweep does)")
        return data.reshape((count, *shape[1:]))

    def _load(self, name: str) -> np.ndarray:
        with np.load(self.path, allow_pickle=False) as archive:
            return archive[name]
