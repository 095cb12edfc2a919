"""Unpacking a tar without trusting who made it: a node's cell folder, a download.

What a node sends back (``InventoryCluster.collect``) is a tar stream made by whatever
runs on that node: a hostile or broken one can put a symlink in it and then a file
"through" the symlink, writing anywhere the controller can. The stream is unpacked with
Python's ``tarfile`` and its ``filter="data"`` (PEP 706), as ``profiler.data.fetch``
unpacks a download: absolute names, ``..``, links pointing out of the folder, a member
whose path resolves out of it (through a link already there), devices and FIFOs are
refused, set-uid bits dropped, and nothing is given the archive's owners. The ``tar``
binary did none of that for a link planted in the same archive.

Pythons before 3.11.4 (Debian 12's own 3.11.2) have no filters: there the stream may
hold regular files and folders only (a cell folder holds nothing else), under names that
stay in the folder (a leading ``/`` dropped, as ``data`` does), given the modes and
owners ``data`` gives.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

HAS_FILTERS = hasattr(tarfile, "data_filter")


class UnsafeMember(Exception):
    """A member of a node's stream that would write outside the folder, or is no file."""


def unpack_stream(stream: IO[bytes], dest: Path) -> None:
    """Unpack the tar stream ``stream`` into ``dest`` (made if missing), refusing what
    would reach outside it (``UnsafeMember``); ``tarfile.TarError`` or ``OSError`` for a
    stream that is not a whole tar. Members before a refused one stay unpacked."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        if HAS_FILTERS:
            try:
                tar.extractall(dest, filter="data")
            except tarfile.FilterError as exc:
                raise UnsafeMember(str(exc)) from None
            return
        for member in tar:
            tar.extract(_checked(member, dest), dest, numeric_owner=True)


def extract_members(tar: tarfile.TarFile, members: list[tarfile.TarInfo], dest: Path) -> None:
    """Extract ``members`` of an archive opened for reading into ``dest``, as
    ``filter="data"`` does (or the fallback where Python has no filters);
    ``UnsafeMember`` for one that would reach outside ``dest``."""
    if HAS_FILTERS:
        try:
            tar.extractall(dest, members=members, filter="data")
        except tarfile.FilterError as exc:
            raise UnsafeMember(str(exc)) from None
        return
    for member in members:
        tar.extract(_checked(member, Path(dest)), dest, numeric_owner=True)


def _checked(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo:
    """The fallback filter (module docstring): ``member`` made safe, or ``UnsafeMember``."""
    if not (member.isreg() or member.isdir()):
        raise UnsafeMember(f"{member.name!r} is not a regular file or a folder")
    # As filter="data": a leading "/" is dropped (the name is then inside the folder).
    member.name = member.name.lstrip("/")
    name = PurePosixPath(member.name)
    if ".." in name.parts:
        raise UnsafeMember(f"{member.name!r} names a path outside the folder")
    root = os.path.realpath(dest)
    if os.path.commonpath([root, os.path.realpath(dest / name)]) != root:
        raise UnsafeMember(f"{member.name!r} would be written outside the folder")
    # As filter="data": no set-uid/gid or sticky bits, no write for group or others,
    # readable and writable by the owner; owned by whoever unpacks.
    mode = stat.S_IMODE(member.mode) & 0o755
    if member.isreg() and not mode & 0o100:
        mode &= ~0o011  # executable by others only if by its owner
    member.mode = mode | (0o700 if member.isdir() else 0o600)
    member.uid, member.gid = os.geteuid(), os.getegid()
    member.uname = member.gname = ""
    return member
