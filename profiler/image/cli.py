"""``edgeprof image``: the trainer's image, built from Debian packages and PyPI wheels."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..cli_errors import UsageFailure, reports_errors
from . import daemon, recipe
from .build import BuildSettings, BuiltImage, build_image

# Lerat et al.'s image (lerat-ddl-cpu-vms-paper.md, IV.B-C): both sizes compressed.
LERAT_COMPRESSED_MB = 143.34
LERAT_WITH_DATA_MB = 275.36
MB = 1e6


def _one_of(choices):
    """A choice refused in one line naming the choices (Click's own is three lines)."""
    def check(ctx, param, value: str) -> str:
        if value not in choices:
            raise UsageFailure(f"--{param.name.replace('_', '-')} {value!r} is not one of "
                               f"{', '.join(choices)}: use one of them")
        return value
    return check


@click.group()
def image() -> None:
    """The trainer's image: the agent, the workloads and the frameworks, for Docker.

    Example:

    \b
        edgeprof image build --flavour torch --arch arm64
    """


@image.command("build")
@click.option("--flavour", default="torch", show_default=True, callback=_one_of(recipe.FLAVOURS),
              help=f"What frameworks it holds: {', '.join(recipe.FLAVOURS)} (torch: the "
                   "PyTorch engines; full: MXNet 1.9.1 and Horovod too, amd64 only).")
@click.option("--arch", default=recipe.host_arch(), show_default=True,
              callback=_one_of(recipe.ARCHES),
              help="The boards' architecture (arm64: a 64-bit Pi OS; needs qemu-user-static "
                   "here).")
@click.option("--docker-host", default=daemon.default_host, show_default="DOCKER_HOST or "
              + daemon.DEFAULT_HOST, help="The Docker daemon to import the image into.")
@click.option("--tag-prefix", default="edgeprof-node", show_default=True,
              help="The image's repository; its tag is FLAVOUR-ARCH-DIGEST.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the build's work folder goes (about 3 GB while it runs; the "
                   "system's temporary folder by default).")
@click.option("--keep-work", is_flag=True, help="Keep the work folder (the root's tar, the "
              "wheels, each step's log) to look into.")
@reports_errors
def build_command(flavour: str, arch: str, docker_host: str, tag_prefix: str,
                  work_dir: Path | None, keep_work: bool) -> None:
    """Build the image of what a node runs, or reuse it when nothing changed.

    Its tag carries a digest of everything that goes in (the Debian packages, the pins,
    the flavour, the architecture, the node's source files): a rebuild with nothing
    changed finds it in seconds. Prints its sizes and what it holds.

    Example:

    \b
        edgeprof image build --flavour full
        docker save edgeprof-node:torch-arm64-... | ssh pi@board docker load
    """
    started = time.monotonic()

    def say(phase: str) -> None:
        click.echo(f"[{time.monotonic() - started:5.0f} s] {phase}", err=True)

    settings = BuildSettings(flavour=flavour, arch=arch, docker_host=docker_host,
                             tag_prefix=tag_prefix, work_parent=work_dir, keep_work=keep_work)
    _show(build_image(settings, say))


def _show(built: BuiltImage) -> None:
    how = "up to date (reused)" if built.reused else "built"
    click.echo(f"{built.tag}: {how} in {built.elapsed_s:.1f} s ({built.image_id[7:19]})")
    gzip_mb = f"{built.gzip_bytes / MB:,.0f} MB" if built.gzip_bytes else "unknown"
    click.echo(f"  compressed {gzip_mb:>9} (gzip of its layer; Lerat et al.: "
               f"{LERAT_COMPRESSED_MB} MB, {LERAT_WITH_DATA_MB} MB with their data and script)")
    click.echo(f"  unpacked   {built.unpacked_bytes / MB:>6,.0f} MB (docker image ls)")
    manifest = built.manifest
    packages = manifest.get("packages", {})
    held = ", ".join(f"{name} {version or '-'}" for name, version in packages.items())
    click.echo(f"  holds: Python {manifest.get('python', '?')} (Debian {recipe.SUITE}), "
               f"{held}; edgeprof {manifest.get('edgeprof', '?')} at "
               f"{manifest.get('commit', '?')}")
