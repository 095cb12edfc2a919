"""Download MNIST and CIFAR-10 into a data folder, verified, before any sweep runs.

Workers never download (a Pi cluster may have no internet during a sweep); this is
the one place that does. Each file is streamed to ``<name>.part`` while its MD5 is
computed, and renamed only when the checksum matches, so a folder never holds a
half-written or corrupt file under its real name. Files already present with the
right checksum are skipped, so a second run downloads nothing.

Checksums are the published ones: MNIST's as listed by torchvision for its mirror,
CIFAR-10 binary's from https://www.cs.toronto.edu/~kriz/cifar.html.
The layout written is what ``workloads.datasets.resolver`` reads:
``DIR/mnist/*.gz`` and ``DIR/cifar10/cifar-10-batches-bin/``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..safe_tar import UnsafeMember, extract_members

MNIST_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
CIFAR_MIRROR = "https://www.cs.toronto.edu/~kriz/"
DOWNLOAD_TIMEOUT_S = 60
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Resource:
    """One file to download: which dataset, its name on the mirror, its MD5."""

    dataset: str  # mnist | cifar10
    filename: str
    md5: str
    extract: str | None = None  # for an archive: the folder it holds


MANIFEST: dict[str, tuple[Resource, ...]] = {
    "mnist": (
        Resource("mnist", "train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        Resource("mnist", "train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
        Resource("mnist", "t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
        Resource("mnist", "t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
    ),
    "cifar10": (
        Resource("cifar10", "cifar-10-binary.tar.gz", "c32a1d4ab5d03f1284b67883e8d87530",
                 extract="cifar-10-batches-bin"),
    ),
}
DATASETS = tuple(MANIFEST)


def md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)  # an integrity check, allowed under FIPS
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _shown(url: str) -> str:
    """``url`` without any ``user:password@`` a private mirror may carry (never logged)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.hostname +
                                                  (f":{parts.port}" if parts.port else "")))


def _download(url: str, target: Path, expected_md5: str, show_progress: bool) -> None:
    """Stream ``url`` to ``target`` through a ``.part`` file; rename only if MD5 matches."""
    import requests
    from tqdm import tqdm

    part = target.with_name(target.name + ".part")
    digest = hashlib.md5(usedforsecurity=False)  # an integrity check, allowed under FIPS
    try:
        with requests.get(url, stream=True, timeout=DOWNLOAD_TIMEOUT_S) as response:
            response.raise_for_status()
            total = int(response.headers.get("content-length") or 0) or None
            with open(part, "wb") as fh, tqdm(total=total, unit="B", unit_scale=True,
                                              desc=target.name, disable=not show_progress,
                                              leave=False) as bar:
                for chunk in response.iter_content(CHUNK_BYTES):
                    fh.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    except (requests.RequestException, OSError) as exc:
        part.unlink(missing_ok=True)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = reason.replace(url, _shown(url))  # requests quotes the URL it tried
        raise DataError(f"cannot download {_shown(url)}: {reason}; check the network or pass "
                        f"another mirror (--mnist-mirror/--cifar-mirror)") from exc
    if digest.hexdigest() != expected_md5:
        part.unlink(missing_ok=True)
        raise DataError(f"checksum mismatch for {_shown(url)}: MD5 {digest.hexdigest()}, expected "
                        f"{expected_md5}; the mirror serves a corrupt file, retry or pass "
                        f"another mirror")
    os.replace(part, target)


def _extract(archive: Path, folder_name: str) -> Path:
    """Extract ``folder_name`` from a tar archive beside it, all-or-nothing."""
    destination = archive.parent / folder_name
    scratch = Path(tempfile.mkdtemp(prefix=".extract-", dir=archive.parent))
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers()
                       if m.isfile() and Path(m.name).parts[:1] == (folder_name,)]
            if not members:
                raise DataError(f"{archive} holds no {folder_name}/ folder; delete it and "
                                f"run `edgeprof data fetch` again")
            # As filter="data" (also where Python has none: Debian 12's 3.11.2): no
            # absolute paths, links out of the tree or devices.
            extract_members(tar, members, scratch)
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(scratch / folder_name, destination)
    except (tarfile.TarError, OSError, UnsafeMember) as exc:
        raise DataError(f"cannot extract {archive}: {exc}; delete it and run "
                        f"`edgeprof data fetch` again") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return destination


def _extracted_ok(data_dir: Path, dataset: str) -> bool:
    from workloads.datasets import resolver

    try:
        resolver.check("resnet" if dataset == "cifar10" else "lenet-mlp", data_dir)
    except DataError:
        return False
    return True


def fetch(data_dir: str | Path, datasets: tuple[str, ...] | list[str] = DATASETS,
          mirrors: dict[str, str] | None = None,
          manifest: dict[str, tuple[Resource, ...]] | None = None,
          show_progress: bool = False) -> dict[str, str]:
    """Make ``data_dir`` hold verified copies of ``datasets``.

    ``mirrors`` maps a dataset to a base URL (default: the public ones above);
    ``manifest`` replaces the published file list and checksums (tests serve small
    files of the real formats). Returns ``{file: "downloaded" | "present"}``.
    """
    manifest = MANIFEST if manifest is None else manifest
    mirrors = {"mnist": MNIST_MIRROR, "cifar10": CIFAR_MIRROR, **(mirrors or {})}
    unknown = [d for d in datasets if d not in manifest]
    if unknown:
        raise DataError(f"unknown dataset {', '.join(unknown)}: use "
                        f"{', '.join(manifest)}")
    data_dir = Path(data_dir)
    outcome = {}
    for dataset in datasets:
        folder = data_dir / dataset
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DataError(f"cannot create {folder}: {exc.strerror}; choose a writable "
                            f"--data-dir") from exc
        for resource in manifest[dataset]:
            target = folder / resource.filename
            if target.is_file() and md5_of(target) == resource.md5:
                outcome[resource.filename] = "present"
            elif resource.extract and not target.exists() and _extracted_ok(data_dir,
                                                                             dataset):
                outcome[resource.filename] = "present"  # extracted earlier, archive gone
                continue
            else:
                url = mirrors[dataset].rstrip("/") + "/" + resource.filename
                _download(url, target, resource.md5, show_progress)
                outcome[resource.filename] = "downloaded"
            if resource.extract and (outcome[resource.filename] == "downloaded"
                                     or not _extracted_ok(data_dir, dataset)):
                _extract(target, resource.extract)
    return outcome
