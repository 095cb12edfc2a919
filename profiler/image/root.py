"""The image's two halves, made on this host: a Debian root and a folder of wheels.

The root comes from ``mmdebstrap --variant=minbase`` as a tar (mmdebstrap keeps its own
temporary tree and mounts, and undoes them). An arm64 root runs Debian's maintainer
scripts under qemu-user through binfmt_misc, as ``benchmarks/bench_aarch64.py`` does.

The Python packages are installed by this host's pip with ``--target`` for the image's
platform (``--platform`` manylinux tags up to bookworm's glibc, ``--python-version
3.11``, ``--only-binary=:all:``), not by pip inside the root: it uses this host's pip
configuration (the index, find-links, the global constraint file) and its cache of
wheels (torch's is 190 MB), it needs no pip, no network set-up and no compiler in the
image, and it works for arm64 without running pip under qemu (minutes, not seconds).
PyPI wheels only: nothing is compiled. The one exception is Horovod, which has no
wheel: a ``full`` image copies the build this venv made (see docs/image.md).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

from .recipe import (ARCHES, DPKG_EXCLUDES, DPKG_INCLUDES, GLIBC_MINOR,
                     HOROVOD, NO_DEPS, PYTHON_VERSION, SUITE, Recipe, holds, horovod_dist,
                     pinned)
from .steps import ImageError, run_step

# Not needed to run (headers and test binaries for building extensions; pip's console
# scripts, whose shebang names this host's Python).
PRUNE = ("bin", "torch/include", "torch/test")
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")


def check_tools(arch: str, host_arch: str) -> None:
    """mmdebstrap, and for a foreign root qemu-user registered with binfmt_misc."""
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap is not installed: apt-get install mmdebstrap "
                         "(scripts/setup.sh installs it)")
    if arch != host_arch and not (BINFMT_DIR / f"qemu-{ARCHES[arch]}").exists():
        raise ImageError(f"an {arch} root runs Debian's package scripts under qemu, and "
                         f"qemu-{ARCHES[arch]} is not registered with binfmt_misc: "
                         f"apt-get install qemu-user-static, then load "
                         f"/usr/lib/binfmt.d/qemu-{ARCHES[arch]}.conf into "
                         f"{BINFMT_DIR}/register (docs/image.md)")


def debian_root(recipe: Recipe, out: Path, work: Path) -> None:
    """``out``: a tar of a minimal bookworm with Debian's python3, for the recipe's arch."""
    argv = ["mmdebstrap", "--variant=minbase", f"--arch={recipe.arch}",
            f"--include={','.join(recipe.debian_packages)}",
            *[f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES],
            *[f"--dpkgopt=path-include={p}" for p in DPKG_INCLUDES],
            SUITE, str(out)]
    # Its temporary root goes in our work folder: what an interrupted run leaves is
    # removed with it.
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "TMPDIR": str(work), "LANG": "C.UTF-8"}
    run_step(argv, work / "mmdebstrap.log", "mmdebstrap", env=env)


def _platform_args(machine: str) -> list[str]:
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(GLIBC_MINOR, 16, -1)]
    tags += [f"manylinux2014_{machine}", f"linux_{machine}"]
    return [arg for tag in tags for arg in ("--platform", tag)]


def _pip(recipe: Recipe, target: Path, pins: Path, requirements: list[str], log: Path,
         *extra: str) -> None:
    argv = [sys.executable, "-m", "pip", "install", "--target", str(target),
            "--only-binary=:all:", "--python-version", PYTHON_VERSION,
            "--implementation", "cp", "--abi", f"cp{PYTHON_VERSION.replace('.', '')}",
            *_platform_args(recipe.machine), "--no-warn-script-location",
            "--disable-pip-version-check", "-c", str(pins), *extra, *requirements]
    run_step(argv, log, f"pip install for {recipe.arch}")


def _wheel_requirements(target: Path, machine: str) -> list[str]:
    """The requirements of the dists installed in ``target`` that hold on ``machine``."""
    needed = []
    for metadata in sorted(target.glob("*.dist-info/METADATA")):
        message = Parser().parsestr(metadata.read_text(errors="replace"))
        for line in message.get_all("Requires-Dist") or []:
            requirement = Requirement(line)
            if holds(requirement, machine):
                requirement.marker = None
                needed.append(requirement.name)
    return needed


def python_packages(recipe: Recipe, site: Path, work: Path) -> None:
    """Every wheel of the recipe installed into ``site`` for the image's platform."""
    pins = work / "pins.txt"
    pins.write_text("\n".join(recipe.constraints) + "\n")
    alone = [r for r in recipe.requirements if Requirement(r).name in NO_DEPS]
    rest = [r for r in recipe.requirements if Requirement(r).name not in NO_DEPS]
    no_deps = work / "no-deps"
    if alone:
        _pip(recipe, no_deps, pins, alone, work / "pip-no-deps.log", "--no-deps")
        rest += pinned(tuple(_wheel_requirements(no_deps, recipe.machine)),
                       recipe.constraints)
    _pip(recipe, site, pins, rest, work / "pip.log")
    if alone:
        _merge(no_deps, site)
    if recipe.horovod_record_sha256 is not None:
        _copy_horovod(horovod_dist(), site)
    for relative in PRUNE:
        shutil.rmtree(site / relative, ignore_errors=True)


def _merge(source: Path, site: Path) -> None:
    for entry in source.iterdir():
        if not (site / entry.name).exists():
            entry.rename(site / entry.name)


def _copy_horovod(dist: importlib.metadata.Distribution, site: Path) -> None:
    """This venv's Horovod build (package and dist-info), without its console script."""
    base = Path(dist.locate_file(""))
    for entry in dist.files or []:
        if entry.parts[0].startswith(HOROVOD) and "__pycache__" not in entry.parts:
            destination = site / entry
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(base / entry, destination)


def installed_versions(site: Path) -> dict[str, str]:
    """Name -> version of each dist in ``site`` (from the dist-info folders' names)."""
    versions = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name[:-len(".dist-info")].partition("-")
        versions[name.lower().replace("_", "-")] = version
    return versions

