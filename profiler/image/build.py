"""``edgeprof image build``'s steps in order, and the image it leaves (built or reused).

Cheap checks first (the choice, the tools, the daemon), then the recipe's digest: an
image already tagged with it is reused in seconds. Otherwise the root, the wheels and
the layer are made in a work folder that is removed whatever happens (Ctrl-C included),
and the layer is loaded as an image under the digest's tag. The CLI and a test both call
``build_image``; it says what it is doing through ``say`` and prints nothing itself.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import __version__
from . import daemon, layer, recipe, root
from .steps import ImageError, remove_tree

# The manifest's packages: the frameworks, and what their versions are checked against.
MANIFEST_PACKAGES = ("torch", "mxnet", "horovod", "numpy")


@dataclass(frozen=True)
class BuildSettings:
    flavour: str = "torch"
    arch: str = recipe.host_arch()
    docker_host: str = daemon.DEFAULT_HOST
    tag_prefix: str = "edgeprof-node"
    work_parent: Path | None = None  # where the work folder goes (the system's temp)
    keep_work: bool = False


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str
    reused: bool
    unpacked_bytes: int  # the image's size as dockerd unpacked it
    gzip_bytes: int | None  # its layer's tar through gzip -6, measured when built
    manifest: dict
    elapsed_s: float


def build_image(settings: BuildSettings, say: Callable[[str], None]) -> BuiltImage:
    """The image of ``settings``: found by its digest's tag, or built and loaded."""
    started = time.monotonic()
    recipe.check_choice(settings.flavour, settings.arch)
    root.check_tools(settings.arch, recipe.host_arch())
    client = daemon.connect(settings.docker_host)
    say("digest: the node's sources, the pins, the Debian packages")
    wanted = recipe.make_recipe(settings.flavour, settings.arch)
    tag = wanted.tag(settings.tag_prefix)
    image = daemon.find(client, tag)
    reused = image is not None
    if not reused:
        work = _work_folder(settings.work_parent)
        try:
            image = _build(client, wanted, tag, work, say)
        except OSError as exc:  # a full disk, a folder that went away
            raise ImageError(f"building {tag} in {work} failed: {exc}: free space or "
                             "give another --work-dir") from None
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"interrupted: no image {tag}; its work folder and "
                                    "steps are removed") from None
        finally:
            if settings.keep_work:
                say(f"work folder kept: {work}")
            else:
                remove_tree(work)
    return _described(image, tag, reused=reused, elapsed_s=time.monotonic() - started)


def _work_folder(parent: Path | None) -> Path:
    try:
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="edgeprof-image-", dir=parent))
    except OSError as exc:
        raise ImageError(f"no work folder in {parent or tempfile.gettempdir()}: {exc}: "
                         "give a writable --work-dir") from None


def _build(client, wanted: recipe.Recipe, tag: str, work: Path, say):
    say(f"root: mmdebstrap --variant=minbase {recipe.SUITE} for {wanted.arch}")
    base = work / "root.tar"
    root.debian_root(wanted, base, work)
    say(f"wheels: pip install --target for {wanted.machine} ({len(wanted.requirements)} "
        f"requirements)")
    site = work / "site"
    root.python_packages(wanted, site, work)
    say("layer: writing the tar (and counting its gzip)")
    manifest = _manifest(wanted, root.installed_versions(site))
    layer_tar = work / "layer.tar"
    sizes, debian = layer.write_layer(base, site, recipe.SOURCE_ROOT, sorted(wanted.sources),
                                      manifest, layer_tar)
    manifest["python"] = debian.get("python3.11", "")
    say(f"load: {sizes.tar_bytes / 1e6:.0f} MB into dockerd as {tag}")
    labels = {f"{daemon.LABEL}.digest": wanted.digest(),
              f"{daemon.LABEL}.manifest": json.dumps(manifest, sort_keys=True),
              f"{daemon.LABEL}.layer-gzip-bytes": str(sizes.gzip_bytes)}
    return daemon.load_layer(client, layer_tar, sizes.sha256, tag, wanted.arch,
                             recipe.IMAGE_CONFIG, labels, work)


def _manifest(wanted: recipe.Recipe, versions: dict[str, str]) -> dict:
    return {"flavour": wanted.flavour, "arch": wanted.arch, "digest": wanted.digest(),
            "edgeprof": __version__, "commit": _commit(sorted(wanted.sources)),
            "packages": {name: versions.get(name) for name in MANIFEST_PACKAGES},
            "built_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _commit(sources: list[str]) -> str:
    """The checkout's commit, marked when a node source file differs from it."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(recipe.SOURCE_ROOT), *args],
                              capture_output=True, text=True, check=False)
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--", *sources)
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def _described(image, tag: str, reused: bool, elapsed_s: float) -> BuiltImage:
    found = daemon.labels(image)
    gzip_bytes = found.get(f"{daemon.LABEL}.layer-gzip-bytes")
    return BuiltImage(tag=tag, image_id=image.id, reused=reused,
                      unpacked_bytes=int(image.attrs.get("Size", 0)),
                      gzip_bytes=int(gzip_bytes) if gzip_bytes else None,
                      manifest=json.loads(found.get(f"{daemon.LABEL}.manifest", "{}")),
                      elapsed_s=elapsed_s)
