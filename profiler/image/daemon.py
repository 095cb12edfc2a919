"""The Docker daemon, through the Docker SDK for Python: reach it, find an image, load one.

The layer goes in as a one-layer image in ``docker save``'s format (``manifest.json``,
the image's config, the layer's tar), loaded with ``client.images.load`` (what ``docker
load`` does), not with ``docker import``: an import takes the architecture of the
daemon, not the layer's (dockerd 20.10 ignores ``platform`` there), so an arm64 image
imported here said amd64, and a Pi's dockerd warns on every run of it. The config is
written here with its architecture, the container's settings (``Env``, ``WorkingDir``,
``Cmd``) and what the build knows as labels (its digest, its manifest, the layer's
compressed size), so a later run that reuses the image can say what is in it.

The daemon tags the image only once the whole stream has arrived and checked out (the
layer's SHA-256 is its diff_id), so a load cut short (Ctrl-C) leaves no image behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path

import docker
import docker.errors
import requests

from .steps import ImageError

DEFAULT_HOST = "unix:///var/run/docker.sock"
PING_TIMEOUT_S = 10
LOAD_TIMEOUT_S = 1800  # a 1 GB layer unpacked on a loaded host, or on a Pi's SD card
LABEL = "org.edgeprof"  # the labels' prefix: .digest, .manifest, .layer-gzip-bytes
# What a failed connection says, in words a user can act on (the SDK's message nests
# urllib3's several levels deep).
_REASONS = ("No such file or directory", "Connection refused", "Permission denied",
            "timed out", "Name or service not known")


def default_host() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def connect(url: str) -> docker.DockerClient:
    """A client of the daemon at ``url``, which answered a ping."""
    try:
        client = docker.DockerClient(base_url=url, timeout=PING_TIMEOUT_S)
        client.ping()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        text = str(exc)
        reason = next((r for r in _REASONS if r.lower() in text.lower()), type(exc).__name__)
        raise ImageError(f"no Docker daemon answers at {url} ({reason}): start dockerd "
                         f"or give its socket with --docker-host unix:///PATH/docker.sock"
                         ) from None
    return client


def find(client: docker.DockerClient, tag: str):
    """The image tagged ``tag``, or None."""
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def labels(image) -> dict[str, str]:
    return image.attrs.get("Config", {}).get("Labels") or {}


def _image_config(arch: str, diff_id: str, config: dict, image_labels: dict) -> bytes:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    image = {"architecture": arch, "os": "linux", "created": created,
             **({"variant": "v8"} if arch == "arm64" else {}),
             "config": {**config, "Labels": image_labels},
             "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
             "history": [{"created": created, "created_by": "edgeprof image build"}]}
    return json.dumps(image, sort_keys=True).encode()


def _member(tar: tarfile.TarFile, name: str, body: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(body), 0o644
    tar.addfile(info, io.BytesIO(body))


def load_layer(client: docker.DockerClient, layer_tar: Path, diff_id: str, tag: str,
               arch: str, config: dict, image_labels: dict[str, str], work: Path):
    """Load ``layer_tar`` (SHA-256 ``diff_id``) as the image ``tag`` for linux/``arch``."""
    body = _image_config(arch, diff_id, config, image_labels)
    config_name = f"{hashlib.sha256(body).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{diff_id}/layer.tar"]}]
    saved = work / "image.tar"
    with tarfile.open(saved, "w") as tar:
        _member(tar, config_name, body)
        _member(tar, "manifest.json", json.dumps(manifest).encode())
        tar.add(layer_tar, arcname=f"{diff_id}/layer.tar")
    layer_tar.unlink()  # its copy is in image.tar: not twice on disk
    client.api.timeout = LOAD_TIMEOUT_S  # dockerd answers once the layer is unpacked
    try:
        with open(saved, "rb") as data:
            client.images.load(data)
    except docker.errors.DockerException as exc:
        raise ImageError(f"dockerd refused to load {tag}: {exc}") from None
    image = find(client, tag)
    if image is None:
        raise ImageError(f"dockerd loaded the image but has no {tag}: see its log")
    return image
