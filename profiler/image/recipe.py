"""What goes into the image, and the digest of it that names the image's tag.

Everything that decides the image's content is data here: the Debian suite and packages,
the flavour's Python requirements and their pins, the platform, the Horovod build a
``full`` image copies, the node's own source files, and the code that assembles them
(``recipe.py``, ``root.py``, ``layer.py``, ``daemon.py``). The tag carries the first 12
hex digits of the SHA-256 of all of it, so a rebuild with nothing changed finds its
image, and any change (a source file of the agent, a pin, a package) makes a new tag.

Pins are those of the venv: ``constraints.txt``'s lines whose markers hold for the
image's platform (evaluated here for the target, not this host: pip evaluates markers
against the machine it runs on, even with ``--platform``), then the version this venv
has of every other package the image asks for. What pip resolves beyond those (the
dependencies of influxdb-client, say) is not pinned, and not in the digest.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement

from ..errors import ConfigError

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages)
SUITE = "bookworm"
# Debian's python3 (3.11.2 in bookworm); ca-certificates for an agent shipping over HTTPS;
# iproute2 for `tc`, with which an emulated board's task shapes its own link
# (profiler/cluster/swarm/boards.py).
DEBIAN_PACKAGES = ("python3", "ca-certificates", "iproute2")
# MXNet's wheel brings libopenblas and libgfortran but not what they link to (torch's
# wheel brings its own libgomp); Horovod, built with Open MPI as well as Gloo, loads
# libmpi at import, and a `--horovod-ops mpi` cell needs Open MPI's orted on the node.
FLAVOUR_DEBIAN_PACKAGES = {"torch": (), "full": ("libgomp1", "libquadmath0", "libopenmpi3",
                                                 "openmpi-bin")}
# What a node never reads; copyright files stay (Debian's licences travel with the image).
DPKG_EXCLUDES = ("/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*",
                 "/usr/share/doc/*")
DPKG_INCLUDES = ("/usr/share/doc/*/copyright",)
PYTHON_VERSION = "3.11"  # bookworm's; pip fetches cp311 wheels for it
GLIBC_MINOR = 36  # bookworm's glibc 2.36: the newest manylinux tag the image can run

# Docker's and Debian's names for an architecture, and Python's platform_machine.
ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}

# What every image holds for the agent and the workloads (their imports outside the
# standard library; tests/unit/test_image_recipe.py checks the list against them).
NODE_REQUIREMENTS = ("numpy", "click", "psutil", "influxdb-client", "requests", "tqdm")
FLAVOURS = {
    "torch": ("torch",),
    # Horovod itself is copied from this venv (``horovod_dist``); these are its needs.
    "full": ("torch", "mxnet", "cloudpickle", "pyyaml", "packaging"),
}
# Installed alone (--no-deps), their own requirements read from the wheel and evaluated
# for the target: torch's metadata names CUDA packages under x86_64 markers, which pip
# would evaluate on this host even when building for arm64.
NO_DEPS = ("torch",)
HOROVOD = "horovod"

# The node's own code, relative to SOURCE_ROOT: the device's side of the layering
# (.importlinter's "device" contract): the agent, the workloads, and the base modules
# they import (tests/unit/test_image_recipe.py checks it against the import graph).
NODE_SOURCES = ("edgeprof_hooks.py", "workloads/**/*.py", "profiler/__init__.py",
                "profiler/agent/**/*.py", "profiler/errors.py", "profiler/cli_errors.py",
                "profiler/cgroupfs.py", "profiler/fsutil.py", "profiler/secrets.py",
                "profiler/inputs.py", "profiler/plugins.py")
RECIPE_CODE = ("profiler/image/recipe.py", "profiler/image/root.py",
               "profiler/image/layer.py", "profiler/image/daemon.py")

# Where things go inside the image, and how a container starts.
IMAGE_HOME = "/opt/edgeprof"
SITE_DIR = f"{IMAGE_HOME}/site"  # the wheels, pip install --target
SRC_DIR = f"{IMAGE_HOME}/src"  # the node's source files
MANIFEST = f"{IMAGE_HOME}/manifest.json"
# The container's settings (the image config's ``config``, docker image inspect's).
IMAGE_CONFIG = {"Env": [f"PYTHONPATH={SRC_DIR}:{SITE_DIR}", "LANG=C.UTF-8",
                        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "WorkingDir": SRC_DIR, "Cmd": ["python3", "-m", "workloads.train", "--help"]}


@dataclass(frozen=True)
class Recipe:
    """One image's inputs: enough to build it, and to name it before building."""

    flavour: str
    arch: str
    requirements: tuple[str, ...]  # what pip is asked for, each pinned where we can
    constraints: tuple[str, ...]  # constraints.txt's lines that hold for the target
    horovod_record_sha256: str | None  # the venv's Horovod build a full image copies
    sources: dict[str, str] = field(default_factory=dict)  # path -> SHA-256 of the file
    recipe_code: dict[str, str] = field(default_factory=dict)

    @property
    def machine(self) -> str:
        return ARCHES[self.arch]

    @property
    def debian_packages(self) -> tuple[str, ...]:
        return DEBIAN_PACKAGES + FLAVOUR_DEBIAN_PACKAGES[self.flavour]

    def digest(self) -> str:
        """12 hex digits of the SHA-256 of every input (canonical JSON)."""
        inputs = {"suite": SUITE, "debian_packages": self.debian_packages,
                  "dpkg": [DPKG_EXCLUDES, DPKG_INCLUDES], "python": PYTHON_VERSION,
                  "flavour": self.flavour, "arch": self.arch, "config": IMAGE_CONFIG,
                  "requirements": self.requirements, "constraints": self.constraints,
                  "horovod": self.horovod_record_sha256, "sources": self.sources,
                  "recipe_code": self.recipe_code}
        text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def tag(self, prefix: str) -> str:
        return f"{prefix}:{self.flavour}-{self.arch}-{self.digest()}"


def check_choice(flavour: str, arch: str) -> None:
    """Refuse what cannot be built, naming the fix."""
    if flavour not in FLAVOURS:
        raise ConfigError(f"--flavour {flavour!r} is not a flavour: use one of "
                          f"{', '.join(FLAVOURS)}")
    if arch not in ARCHES:
        raise ConfigError(f"--arch {arch!r} is not an architecture: use one of "
                          f"{', '.join(ARCHES)}")
    if flavour == "full" and arch == "arm64":
        raise ConfigError("--flavour full --arch arm64: PyPI's aarch64 mxnet 1.9.1 does not "
                          "import (and has no distributed KVStore; docs/raspberry-pi.md): "
                          "build --flavour torch for arm64")


def host_arch() -> str:
    """This machine's architecture in Docker's words (amd64 where it is neither)."""
    return {machine: arch for arch, machine in ARCHES.items()}.get(platform.machine(), "amd64")


def target_environment(machine: str) -> dict[str, str]:
    """PEP 508 marker values of the image's Python, not this host's."""
    return {"implementation_name": "cpython", "implementation_version": "3.11.2",
            "os_name": "posix", "platform_machine": machine, "platform_release": "",
            "platform_system": "Linux", "platform_version": "",
            "python_full_version": "3.11.2", "platform_python_implementation": "CPython",
            "python_version": PYTHON_VERSION, "sys_platform": "linux", "extra": ""}


def holds(requirement: Requirement, machine: str) -> bool:
    marker = requirement.marker
    return marker is None or marker.evaluate(target_environment(machine))


def target_constraints(text: str, machine: str) -> tuple[str, ...]:
    """constraints.txt's requirement lines that hold on ``machine``, markers dropped."""
    kept = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            requirement = Requirement(line)
        except (InvalidRequirement, InvalidMarker) as exc:
            raise ConfigError(f"constraints.txt: {line!r}: {exc}: fix the line") from None
        if holds(requirement, machine):
            requirement.marker = None
            kept.append(str(requirement))
    return tuple(kept)


def pinned(names: tuple[str, ...], constraints: tuple[str, ...]) -> tuple[str, ...]:
    """Each name as the constraints pin it, else at this venv's version, else bare."""
    constrained = {Requirement(c).name.lower() for c in constraints}
    out = []
    for name in names:
        if name.lower() in constrained:
            out.append(name)  # pip applies the constraint
            continue
        try:
            out.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(name)
    return tuple(out)


def file_digests(root: Path, patterns: tuple[str, ...]) -> dict[str, str]:
    """Relative path -> SHA-256 of every file the patterns match (caches left out)."""
    found = {}
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                found[path.relative_to(root).as_posix()] = hashlib.sha256(
                    path.read_bytes()).hexdigest()
    return found


def horovod_dist() -> importlib.metadata.Distribution:
    """This venv's Horovod, which a full image copies (see docs/image.md for why)."""
    try:
        dist = importlib.metadata.distribution(HOROVOD)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError("--flavour full copies this venv's Horovod, and it has none: "
                          "install it as scripts/setup.sh does (docs/horovod.md)") from None
    if sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64":
        raise ConfigError("--flavour full copies this venv's Horovod build, which only fits "
                          "an amd64 image from a CPython 3.11 venv on x86-64: build it there")
    return dist


def _horovod_record(flavour: str) -> str | None:
    if flavour != "full":
        return None
    record = horovod_dist().read_text("RECORD") or ""
    return hashlib.sha256(record.encode()).hexdigest()


def make_recipe(flavour: str, arch: str, source_root: Path = SOURCE_ROOT) -> Recipe:
    """The recipe of one flavour and architecture, read from the tree and the venv."""
    check_choice(flavour, arch)
    constraints_file = source_root / "constraints.txt"
    if not constraints_file.is_file():
        raise ConfigError(f"{constraints_file} not found: build images from a checkout of "
                          "edgeprof (its constraints.txt pins the frameworks)")
    constraints = target_constraints(constraints_file.read_text(), ARCHES[arch])
    names = NODE_REQUIREMENTS + FLAVOURS[flavour]
    return Recipe(flavour=flavour, arch=arch, requirements=pinned(names, constraints),
                  constraints=constraints, horovod_record_sha256=_horovod_record(flavour),
                  sources=file_digests(source_root, NODE_SOURCES),
                  recipe_code=file_digests(source_root, RECIPE_CODE))
