"""Pi-class node profiles for the emulated cluster, and how they map onto this host.

Profiles come from the packaged ``profiles.yaml``, then ``~/.config/edgeprof/profiles.yaml``,
then the file named by ``$EDGEPROF_PROFILES``; a later file replaces a profile or mix of
the same name, so users extend the set without editing the package.

CPU scaling (the one decision that is not obvious): a profile's ``cpu_cores`` is the
board's compute in host cores. When the nodes together ask for more than the host has,
every node's quota is multiplied by the same factor ``host_cores / sum(cpu_cores)``, so
the nodes stay in proportion to each other (a Pi 4 stays ~2.3x a Pi 3B in a mix) and the
host is never oversubscribed, which would make the quota meaningless.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfigError

PACKAGED_PROFILES = Path(__file__).with_name("profiles.yaml")
USER_PROFILES = Path("~/.config/edgeprof/profiles.yaml")
PROFILES_ENV = "EDGEPROF_PROFILES"
# CFS needs a quota of at least 1 ms per period; keep a node at 1% of a core or more.
MIN_CPU_CORES = 0.01


@dataclass(frozen=True)
class Profile:
    """What one emulated node is: link rate, memory limit and compute."""

    name: str
    link_mbit: float
    memory_mb: int
    cpu_cores: float
    description: str = ""


@dataclass(frozen=True)
class Catalog:
    """All known profiles and mixes (a mix: ordered list of profile names, one per node)."""

    profiles: dict[str, Profile]
    mixes: dict[str, tuple[str, ...]]

    def names(self) -> list[str]:
        return sorted(self.profiles) + sorted(self.mixes)

    def node_profiles(self, name: str, nodes: int) -> list[Profile]:
        """The profile of each of ``nodes`` nodes for profile or mix ``name``."""
        if nodes < 1:
            raise ConfigError(f"--nodes {nodes}: a cluster needs at least 1 node")
        if name in self.profiles:
            return [self.profiles[name]] * nodes
        if name in self.mixes:
            members = self.mixes[name]
            if nodes > len(members):
                raise ConfigError(
                    f"mix {name} has {len(members)} nodes, {nodes} asked: use --nodes "
                    f"{len(members)} or define a larger mix in profiles.yaml")
            return [self.profiles[m] for m in members[:nodes]]
        raise ConfigError(f"unknown profile {name!r}: use one of {', '.join(self.names())} "
                          f"or add it to {USER_PROFILES} or ${PROFILES_ENV}")


def profile_files() -> list[Path]:
    """The profile files read, in order (later ones override earlier ones)."""
    files = [PACKAGED_PROFILES]
    user = USER_PROFILES.expanduser()
    if user.is_file():
        files.append(user)
    env_path = os.environ.get(PROFILES_ENV)
    if env_path:
        path = Path(env_path).expanduser()
        if not path.is_file():
            raise ConfigError(f"${PROFILES_ENV}={env_path} is not a file: fix or unset it")
        files.append(path)
    return files


def load_catalog(files: list[Path] | None = None) -> Catalog:
    """Read and validate the profile files (default: ``profile_files()``)."""
    profiles: dict[str, Profile] = {}
    raw_mixes: dict[str, tuple[str, ...]] = {}
    for path in files if files is not None else profile_files():
        doc = _read_yaml(path)
        for name, spec in _mapping(doc, "profiles", path).items():
            profiles[str(name)] = _parse_profile(path, name, spec)
        for name, spec in _mapping(doc, "mixes", path).items():
            raw_mixes[str(name)] = _parse_mix(path, name, spec)
    for name, members in raw_mixes.items():
        unknown = sorted(set(members) - set(profiles))
        if unknown:
            raise ConfigError(f"mix {name} uses unknown profile(s) {', '.join(unknown)}: "
                              f"define them under 'profiles:'")
    return Catalog(profiles=profiles, mixes=raw_mixes)


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror}): fix its permissions, "
                          f"or unset ${PROFILES_ENV} if it names this file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file (not UTF-8): give a profiles YAML "
                          f"file, see {PACKAGED_PROFILES.name} in the package") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # The exception's own text spans several lines; its position is enough.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path} is not valid YAML{where}: fix it, see "
                          f"{PACKAGED_PROFILES.name} in the package for the format") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected 'profiles:' and 'mixes:' mappings, found a "
                          f"{type(doc).__name__}: see {PACKAGED_PROFILES.name} for the format")
    return doc


def _mapping(doc: dict, key: str, path: Path) -> dict:
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: '{key}:' must be a mapping of names to settings, found a "
                          f"{type(value).__name__}: see {PACKAGED_PROFILES.name} for the format")
    return value


def _parse_profile(path: Path, name: str, spec) -> Profile:
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: profile {name} must be a mapping with link_mbit, "
                          f"memory_mb, cpu_cores")
    missing = [k for k in ("link_mbit", "memory_mb", "cpu_cores") if k not in spec]
    if missing:
        raise ConfigError(f"{path}: profile {name} lacks {', '.join(missing)}: add them")
    try:
        profile = Profile(name=str(name), link_mbit=float(spec["link_mbit"]),
                          memory_mb=int(spec["memory_mb"]), cpu_cores=float(spec["cpu_cores"]),
                          description=str(spec.get("description", "")))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: profile {name}: link_mbit, memory_mb and cpu_cores "
                          f"must be numbers") from exc
    # Written as ``not (x >= y)`` so that .nan (which YAML reads as a float) is refused.
    if not (0 < profile.link_mbit < math.inf and profile.memory_mb >= 16
            and MIN_CPU_CORES <= profile.cpu_cores < math.inf):
        raise ConfigError(f"{path}: profile {name}: need link_mbit > 0, memory_mb >= 16, "
                          f"cpu_cores >= {MIN_CPU_CORES}")
    return profile


def _parse_mix(path: Path, name: str, spec) -> tuple[str, ...]:
    entries = spec.get("nodes") if isinstance(spec, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: mix {name} needs 'nodes: [{{profile: pi4, count: 2}}, ...]'")
    members: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict) or "profile" not in entry:
            raise ConfigError(f"{path}: mix {name}: each node entry needs 'profile:' "
                              f"(and optional 'count:')")
        count = entry.get("count", 1)
        if not isinstance(count, int) or count < 1:
            raise ConfigError(f"{path}: mix {name}: count must be a positive integer")
        members += [str(entry["profile"])] * count
    return tuple(members)


def cpu_scale(requested_cores: list[float], host_cores: float) -> float:
    """The factor (<= 1) applied to every node's cpu_cores so their sum fits the host."""
    total = sum(requested_cores)
    if total <= host_cores:
        return 1.0
    return host_cores / total


def quota_cores(requested_cores: list[float], host_cores: float) -> list[float]:
    """Each node's CFS quota in cores after scaling (never below ``MIN_CPU_CORES``)."""
    scale = cpu_scale(requested_cores, host_cores)
    return [max(MIN_CPU_CORES, round(c * scale, 4)) for c in requested_cores]
