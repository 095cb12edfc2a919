"""The image's one layer: the Debian root, the wheels, the node's code and a manifest.

Written in one pass as an uncompressed tar (an image's layer, as ``docker save`` holds
it) while the same bytes go through gzip (level 6, gzip's default) only to count them:
the compressed size is what moving the image costs (``docker save | gzip``, a registry's
layer), measured without writing a second file. Every member is owned by root, whoever
ran pip. """

from __future__ import annotations

import hashlib
import io
import json
import queue
import tarfile
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .recipe import MANIFEST, SITE_DIR, SRC_DIR

GZIP_LEVEL = 6
DPKG_STATUS = "var/lib/dpkg/status"


@dataclass(frozen=True)
class LayerSizes:
    tar_bytes: int
    gzip_bytes: int
    sha256: str  # of the tar: the layer's diff_id in the image's config


class _CountingWriter:
    """A write-only file that counts its bytes, and their gzip, on their way to disk,
    and hashes them.

    gzip and SHA-256 run in a thread of their own (zlib and hashlib let go of the GIL),
    on chunks of ``CHUNK_BYTES``: on two cores, the tar and its compression take the
    time of one.
    """

    CHUNK_BYTES = 1 << 20

    def __init__(self, out):
        self.out = out
        self.tar_bytes = 0
        self.gzip_bytes = 0
        self._sha256 = hashlib.sha256()
        self._pending = bytearray()
        self._chunks: queue.Queue = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._compress, daemon=True)
        self._thread.start()

    def _compress(self) -> None:
        gzip = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: gzip framing
        while (chunk := self._chunks.get()) is not None:
            self.gzip_bytes += len(gzip.compress(chunk))
            self._sha256.update(chunk)
        self.gzip_bytes += len(gzip.flush())

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.tar_bytes += len(data)
        self._pending += data
        if len(self._pending) >= self.CHUNK_BYTES:
            self._chunks.put(bytes(self._pending))
            self._pending.clear()
        return len(data)

    def finish(self) -> LayerSizes:
        self._chunks.put(bytes(self._pending))
        self._chunks.put(None)
        self._thread.join()
        return LayerSizes(self.tar_bytes, self.gzip_bytes, self._sha256.hexdigest())


def _as_root(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    return member


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return _as_root(info)


def debian_versions(status_text: str) -> dict[str, str]:
    """Package -> version of what dpkg installed (its status file)."""
    versions = {}
    for stanza in status_text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines()
                      if ": " in line and not line.startswith(" "))
        if "installed" in fields.get("Status", "") and "Package" in fields:
            versions[fields["Package"]] = fields.get("Version", "")
    return versions


def _copy_root(base: Path, tar: tarfile.TarFile) -> dict[str, str]:
    """Every member of mmdebstrap's tar; returns the Debian packages' versions."""
    versions: dict[str, str] = {}
    with tarfile.open(base) as root:
        for member in root:
            data = root.extractfile(member) if member.isreg() else None
            if member.name.lstrip("./") == DPKG_STATUS and data is not None:
                versions = debian_versions(data.read().decode(errors="replace"))
                data = root.extractfile(member)
            tar.addfile(member, data)
    return versions


def _add_tree(tar: tarfile.TarFile, source: Path, files: list[str], into: str) -> None:
    """``files`` (relative to ``source``) under ``into``, with their folders."""
    folders = sorted({str(parent) for f in files for parent in PurePosixPath(f).parents
                      if str(parent) != "."})
    for folder in folders:
        tar.addfile(_dir(f"{into}/{folder}"))
    for name in files:
        tar.add(source / name, arcname=f"{into}/{name}", recursive=False, filter=_as_root)


def write_layer(base: Path, site: Path, source_root: Path, sources: list[str],
                manifest: dict, out: Path) -> tuple[LayerSizes, dict[str, str]]:
    """The layer's tar at ``out``; its sizes and the Debian packages' versions."""
    home = SITE_DIR.rsplit("/", 1)[0].lstrip("/")
    with open(out, "wb") as raw:
        counter = _CountingWriter(raw)
        with tarfile.open(fileobj=counter, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            debian = _copy_root(base, tar)
            tar.addfile(_dir(home))
            tar.add(site, arcname=SITE_DIR.lstrip("/"), filter=_as_root)
            tar.addfile(_dir(SRC_DIR.lstrip("/")))
            _add_tree(tar, source_root, sources, SRC_DIR.lstrip("/"))
            manifest = {**manifest, "debian": {p: debian.get(p, "") for p in
                                               ("python3", "python3.11", "libc6")}}
            body = json.dumps(manifest, indent=1, sort_keys=True).encode()
            info = _as_root(tarfile.TarInfo(MANIFEST.lstrip("/")))
            info.size, info.mode = len(body), 0o644
            tar.addfile(info, io.BytesIO(body))
    return counter.finish(), debian

