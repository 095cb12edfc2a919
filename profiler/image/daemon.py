"""The Docker daemon, through the Docker SDK for Python: reach it, find an image, import one.

An image is imported as ``docker import`` does (``POST /images/create?fromSrc=-``), with
the container's settings as Dockerfile lines (``ENV``, ``WORKDIR``, ``CMD``) and what
the build knows (its digest, its manifest, the layer's compressed size) as labels, so a
later run that reuses it can say what is in it. The SDK's ``import_image`` has no
``platform`` parameter, which an arm64 image needs (else it says amd64 and a Pi's
dockerd warns on every run): the same request is made here with it.

The daemon creates the tag only once the whole layer has arrived, so an upload cut
short (Ctrl-C) leaves no image behind.
"""

from __future__ import annotations

import json
import os

import docker
import docker.errors
import requests

from .steps import ImageError

DEFAULT_HOST = "unix:///var/run/docker.sock"
PING_TIMEOUT_S = 10
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


def import_layer(client: docker.DockerClient, layer_tar: str, tag: str, arch: str,
                 config: tuple[str, ...], image_labels: dict[str, str]):
    """Import ``layer_tar`` as ``tag`` (repository:tag) for linux/``arch``."""
    repository, _, name = tag.rpartition(":")
    changes = [*config, *(f"LABEL {key}={json.dumps(value)}"
                          for key, value in sorted(image_labels.items()))]
    api = client.api
    params = {"fromSrc": "-", "repo": repository, "tag": name, "changes": changes,
              "platform": f"linux/{arch}"}
    with open(layer_tar, "rb") as data:
        # The SDK's own import_image request plus `platform` (see the module's doc).
        response = api._post(api._url("/images/create"), params=params, data=data,
                             headers={"Content-Type": "application/tar"}, timeout=None)
    try:
        api._raise_for_status(response)
    except docker.errors.APIError as exc:
        raise ImageError(f"dockerd refused the import of {tag}: {exc.explanation}") from None
    # A failure after the upload began comes as a JSON line of the 200 response.
    for line in response.text.splitlines():
        if '"errorDetail"' in line:
            message = json.loads(line).get("error", line)
            raise ImageError(f"dockerd refused the import of {tag}: {message}")
    image = find(client, tag)
    if image is None:
        raise ImageError(f"dockerd took the layer but has no image {tag}: see its log")
    return image
