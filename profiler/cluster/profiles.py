"""Pi-class node profiles for the emulated cluster, and how they map onto this host.

Profiles come from the packaged ``profiles.yaml``, then ``~/.config/edgeprof/profiles.yaml``,
then the file named by ``$EDGEPROF_PROFILES``; a later file replaces a profile or mix of
the same name, so users extend the set without editing the package.

CPU scaling (the one decision that is not obvious): a profile's ``cpu_cores`` is the
board's compute in host cores. When the nodes together ask for more than the host has,
every node's quota is multiplied by the same factor ``host_cores / sum(cpu_cores)``, so
the nodes stay in proportion to each other (a Pi 4 stays ~2.3x a Pi 3B in a mix) and the
host is never oversubscribed, which would make the quota meaningless.

Per-model quotas: one quota cannot make every model train at a board's rate (MXNet 1.9.1
on x86 runs convolutions far cheaper, next to dense layers, than MXNet 0.9.5 did on a
Cortex-A53), so a calibrated profile may give a model family its own
(``cpu_cores_by_model``); the emulated cluster applies the cell's model's quota before each
cell (``EmulatedCluster.prepare``).

Power models: a profile's ``power: {idle_w, full_w, source}`` is the board's watts idle
and with every core busy, linear in between (``PowerModel.watts``): what a cell's energy
is modelled from where no meter measures it (``profiler.metrics.energy``). ``power:
pi3b`` (a profile's name) shares that profile's model, resolved after every file is
read, so a user's own pi3b model reaches pi3b-park2019 too.

Tiers: a profile may say which tier of a hierarchy its board is (``tier: end``, ``edge``
or ``cloud``, as in Teerapittayanon et al.'s DDNN and Zhang's heterogeneous DDNN); a mix
of tiered profiles may say what links its tiers (``links: {end-edge: {mbit: 20,
delay_ms: 250}}``: ``TierLink``), which the emulated cluster applies with a delaying
relay (``profiler.cluster.links``, docs/tiers.md).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from workloads import models as model_registry

from ..errors import ConfigError
from .base import TIERS, TierLink
from .link_spec import missing_tier, parse_links

PACKAGED_PROFILES = Path(__file__).with_name("profiles.yaml")
# The user's own profiles (``edgeprof cluster calibrate`` and the profile check write
# there); $EDGEPROF_USER_PROFILES moves it (the test suite does: a host's re-calibrated
# quotas must not change what its tests expect).
USER_PROFILES_ENV = "EDGEPROF_USER_PROFILES"
USER_PROFILES = Path(os.environ.get(USER_PROFILES_ENV) or "~/.config/edgeprof/profiles.yaml")
PROFILES_ENV = "EDGEPROF_PROFILES"
# CFS takes a quota of at least 1 ms per period and a period of at most 1 s, so the
# smallest quota is 1 ms per second (cgroups.cfs_period_us).
MIN_CPU_CORES = 0.001
# The keys of cpu_cores_by_model, cpu_cores_dilated and board_rates: the models
# registered in ``workloads.models`` (``model_registry.MODELS``, read when a file is).


@dataclass(frozen=True)
class BoardRate:
    """A board's measured training rate: ``model`` (at ``layers`` if it has a depth
    rule) at ``batch``."""

    model: str
    layers: int | None
    batch: int
    samples_per_s: float

    @property
    def workload(self) -> str:
        """As ``edgeprof cluster calibrate --workload`` takes it: lenet-mlp, resnet-32."""
        return self.model if self.layers is None else f"{self.model}-{self.layers}"

    def as_spec(self) -> dict:
        """As a profile's ``board_rates`` entry holds it."""
        return {"batch": self.batch, "samples_per_s": self.samples_per_s,
                **({"layers": self.layers} if self.layers else {})}


@dataclass(frozen=True)
class PowerModel:
    """A board's power, linear in its CPU use: ``idle_w`` idle, ``full_w`` with every
    core busy, and where the figures come from (``source``)."""

    idle_w: float
    full_w: float
    source: str

    def watts(self, utilisation: float) -> float:
        """The board's watts at ``utilisation`` (0 to 1 of all its cores; clipped)."""
        return self.idle_w + (self.full_w - self.idle_w) * min(1.0, max(0.0, utilisation))

    def as_spec(self) -> dict:
        return {"idle_w": self.idle_w, "full_w": self.full_w, "source": self.source}


@dataclass(frozen=True)
class Profile:
    """What one emulated node is: link rate, memory limit and compute."""

    name: str
    link_mbit: float
    memory_mb: int
    cpu_cores: float
    description: str = ""
    # A model family's own quota (keys: registered models); others train at ``cpu_cores``.
    cpu_cores_by_model: dict[str, float] = field(default_factory=dict, hash=False,
                                                 compare=False)
    # How many cores the board has (a Pi 3B: 4): its CPU % is a share of all of them.
    board_cores: int | None = None
    # Time dilation, calibrated: model -> {k: the quota at which that model trains k
    # times the board's rate}. Not k x the quota: at a few hundredths of a core a
    # process trains less per CPU-second than at one core (docs/emulated.md).
    cpu_cores_dilated: dict[str, dict[float, float]] = field(default_factory=dict,
                                                             hash=False, compare=False)
    # What the quotas were calibrated to: model family -> the board's training rate
    # (``BoardRate``), which ``edgeprof study`` checks on the host it runs on
    # (``profiler.calibrate.check``).
    board_rates: dict[str, "BoardRate"] = field(default_factory=dict, hash=False,
                                                compare=False)
    # The board's power model (None: none known, energy is then measured or unknown).
    power: PowerModel | None = field(default=None, hash=False, compare=False)
    # The environment a model family's processes get on a node of this profile: part of
    # what its quotas were calibrated with (MXNet's engine type for the LeNets: under a
    # few hundredths of a core, MXNet's default per-device pool moved a LeNet cell's time
    # by up to 1.3 x from one process to the next; docs/emulated.md).
    env_by_model: dict[str, dict[str, str]] = field(default_factory=dict, hash=False,
                                                    compare=False)
    # The board's tier in a hierarchy (one of ``TIERS``); None: the profile has none.
    tier: str | None = None

    def cpu_cores_for(self, model: str, speedup: float = 1.0) -> float | None:
        """The quota a node of this profile gets while it trains ``model``, k times as
        fast as the board with ``speedup`` k (None: no quota calibrated for that k)."""
        if speedup == 1:
            return self.cpu_cores_by_model.get(model, self.cpu_cores)
        return self.cpu_cores_dilated.get(model, {}).get(float(speedup))

    def speedups(self, model: str) -> list[float]:
        """The time dilations calibrated for ``model`` (1 always)."""
        return [1.0, *sorted(self.cpu_cores_dilated.get(model, {}))]

    def as_spec(self) -> dict:
        """This profile as a profiles.yaml entry (what ``_parse_profile`` reads back)."""
        spec = {"description": self.description, "link_mbit": self.link_mbit,
                "memory_mb": self.memory_mb, "cpu_cores": self.cpu_cores}
        if self.board_cores:
            spec["board_cores"] = self.board_cores
        if self.cpu_cores_by_model:
            spec["cpu_cores_by_model"] = dict(self.cpu_cores_by_model)
        if self.cpu_cores_dilated:
            spec["cpu_cores_dilated"] = {m: dict(v) for m, v in self.cpu_cores_dilated.items()}
        if self.board_rates:
            spec["board_rates"] = {m: r.as_spec() for m, r in self.board_rates.items()}
        if self.power:
            spec["power"] = self.power.as_spec()
        if self.env_by_model:
            spec["env_by_model"] = {m: dict(v) for m, v in self.env_by_model.items()}
        if self.tier:
            spec["tier"] = self.tier
        return spec


@dataclass(frozen=True)
class Catalog:
    """All known profiles and mixes (a mix: ordered list of profile names, one per node)."""

    profiles: dict[str, Profile]
    mixes: dict[str, tuple[str, ...]]
    # A mix's links between its tiers: link_key -> TierLink (mixes without: absent).
    links: dict[str, dict[str, TierLink]] = field(default_factory=dict)

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
                    f"{len(members)} (or fewer --devices) or define a larger mix in "
                    "profiles.yaml")
            return [self.profiles[m] for m in members[:nodes]]
        raise ConfigError(f"unknown profile {name!r}: use one of {', '.join(self.names())} "
                          f"or add it to {USER_PROFILES} or ${PROFILES_ENV}")

    def tier_links(self, name: str) -> dict[str, TierLink]:
        """The links between the tiers of profile or mix ``name`` ({}: none)."""
        return dict(self.links.get(name, {}))


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
    raw_links: dict[str, tuple[Path, dict[str, TierLink]]] = {}
    power_refs: dict[str, tuple[Path, str]] = {}  # profile -> (its file, the profile named)
    for path in files if files is not None else profile_files():
        doc = _read_yaml(path)
        for name, spec in _mapping(doc, "profiles", path).items():
            profiles[str(name)] = _parse_profile(path, name, spec)
            power_refs.pop(str(name), None)
            if isinstance(spec, dict) and isinstance(spec.get("power"), str):
                power_refs[str(name)] = (path, spec["power"])
        for name, spec in _mapping(doc, "mixes", path).items():
            raw_mixes[str(name)] = _parse_mix(path, name, spec)
            raw_links[str(name)] = (path, _parse_links(path, name, spec))
    for name, members in raw_mixes.items():
        unknown = sorted(set(members) - set(profiles))
        if unknown:
            raise ConfigError(f"mix {name} uses unknown profile(s) {', '.join(unknown)}: "
                              f"define them under 'profiles:'")
        path, links = raw_links[name]
        _check_link_tiers(path, name, links, {profiles[m].tier for m in members})
    for name, (path, board) in power_refs.items():
        if board not in profiles or board in power_refs:
            raise ConfigError(f"{path}: profile {name}: power: {board} names no profile with "
                              "a power model of its own: give power: {idle_w: W, full_w: W, "
                              "source: ...} or such a profile's name")
        # A board replaced by a user's profile without a model leaves this one without.
        profiles[name] = replace(profiles[name], power=profiles[board].power)
    return Catalog(profiles=profiles, mixes=raw_mixes,
                   links={name: links for name, (_, links) in raw_links.items() if links})


def _parse_power(path: Path, name: str, spec) -> PowerModel | None:
    """A profile's ``power:`` mapping (None when absent or a profile's name, resolved
    by ``load_catalog``)."""
    if spec is None or isinstance(spec, str):
        return None
    fix = 'give power: {idle_w: W, full_w: W, source: "where the watts come from"}'
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: profile {name}: power must be a mapping or a profile's "
                          f"name: {fix}")
    missing = [k for k in ("idle_w", "full_w", "source") if spec.get(k) in (None, "")]
    if missing:
        raise ConfigError(f"{path}: profile {name}: power lacks {', '.join(missing)}: {fix}")
    try:
        model = PowerModel(float(spec["idle_w"]), float(spec["full_w"]), str(spec["source"]))
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: profile {name}: power's idle_w and full_w must be "
                          f"numbers (watts): {fix}") from None
    # Written as ``not (...)`` so that .nan is refused.
    if not (0 <= model.idle_w <= model.full_w < math.inf):
        raise ConfigError(f"{path}: profile {name}: power needs 0 <= idle_w <= full_w "
                          f"(watts), got idle_w {spec['idle_w']}, full_w {spec['full_w']}")
    return model


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
    except RecursionError:
        raise ConfigError(f"{path} is nested too deep to be a profiles file: see "
                          f"{PACKAGED_PROFILES.name} in the package for the format") from None
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


def _is_env(value) -> bool:
    """An ``env_by_model`` entry: environment names to text."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and k.isidentifier() and isinstance(x, str)
        for k, x in value.items())


# The per-model mappings of a profile, checked in this order: the key, what each model's
# entry must be, and the fix (``{known}``: the registered models; ``{depth}``: those
# with a depth rule).
MODEL_MAPS = (
    ("cpu_cores_by_model", lambda v: True,
     "cpu_cores_by_model must map {known} to cores, e.g. {{lenet-cnn: 0.01}}"),
    ("cpu_cores_dilated", lambda v: isinstance(v, dict),
     "cpu_cores_dilated must map {known} to {{speedup: cores}}, e.g. "
     "{{lenet-cnn: {{10: 0.3}}}}"),
    ("board_rates", lambda v: isinstance(v, dict) and "samples_per_s" in v and "batch" in v,
     "board_rates must map {known} to {{batch: B, samples_per_s: R}} (with layers: N for "
     "{depth})"),
    ("env_by_model", _is_env,
     "env_by_model must map {known} to {{NAME: text}}, e.g. "
     "{{lenet-mlp: {{MXNET_ENGINE_TYPE: ThreadedEngine}}}} (quote numbers)"),
)


def _parse_profile(path: Path, name: str, spec) -> Profile:
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: profile {name} must be a mapping with link_mbit, "
                          f"memory_mb, cpu_cores")
    missing = [k for k in ("link_mbit", "memory_mb", "cpu_cores") if k not in spec]
    if missing:
        raise ConfigError(f"{path}: profile {name} lacks {', '.join(missing)}: add them")
    maps = {key: _model_map(path, name, spec, key, entry_ok, fix)
            for key, entry_ok, fix in MODEL_MAPS}
    try:
        profile = _build_profile(path, name, spec, maps)
    except (TypeError, ValueError, OverflowError) as exc:  # Overflow: int(.inf)
        raise ConfigError(f"{path}: profile {name}: link_mbit, memory_mb, cpu_cores, "
                          f"cpu_cores_by_model, cpu_cores_dilated, board_cores and "
                          "board_rates must be numbers") from exc
    _check_ranges(path, name, profile)
    return profile


def _model_map(path: Path, name: str, spec: dict, key: str, entry_ok, fix: str) -> dict:
    """``spec[key]`` ({} when absent) if it maps registered models to entries
    ``entry_ok`` accepts; else ``ConfigError`` with ``fix``."""
    value = spec.get(key) or {}
    known = model_registry.MODELS
    if not isinstance(value, dict) or not set(value) <= set(known) or not all(
            entry_ok(v) for v in value.values()):
        raise ConfigError(f"{path}: profile {name}: " + fix.format(
            known=", ".join(known), depth=", ".join(model_registry.with_depth())))
    return value


def _build_profile(path: Path, name: str, spec: dict, maps: dict[str, dict]) -> Profile:
    """The profile ``spec`` describes, its per-model ``maps`` checked; TypeError,
    ValueError or OverflowError where a number is not one."""
    board_rates = {str(m): _board_rate(m, v) for m, v in maps["board_rates"].items()}
    return Profile(name=str(name), link_mbit=float(spec["link_mbit"]),
                   memory_mb=int(spec["memory_mb"]), cpu_cores=float(spec["cpu_cores"]),
                   description=str(spec.get("description", "")),
                   cpu_cores_by_model={str(k): float(v)
                                       for k, v in maps["cpu_cores_by_model"].items()},
                   cpu_cores_dilated={str(m): {float(k): float(q) for k, q in v.items()}
                                      for m, v in maps["cpu_cores_dilated"].items()},
                   board_cores=(int(spec["board_cores"])
                                if spec.get("board_cores") is not None else None),
                   board_rates=board_rates,
                   power=_parse_power(path, name, spec.get("power")),
                   env_by_model={str(m): dict(v) for m, v in maps["env_by_model"].items()},
                   tier=_parse_tier(path, name, spec.get("tier")))


def _parse_tier(path: Path, name: str, tier) -> str | None:
    """A profile's ``tier:`` (None when absent); one of ``TIERS``."""
    if tier is None or tier in TIERS:
        return tier
    raise ConfigError(f"{path}: profile {name}: tier {tier!r} is not a tier: give tier: "
                      f"{', '.join(TIERS)} (or leave it out)")


def _board_rate(model, entry: dict) -> BoardRate:
    return BoardRate(str(model), int(entry["layers"]) if entry.get("layers") else None,
                     int(entry["batch"]), float(entry["samples_per_s"]))


def _check_ranges(path: Path, name: str, profile: Profile) -> None:
    """Refuse speedups not above 1 and rates, memory, quotas and cores out of range."""
    # Written as ``not (x >= y)`` so that .nan (which YAML reads as a float) is refused.
    quotas = [profile.cpu_cores, *profile.cpu_cores_by_model.values(),
              *(q for v in profile.cpu_cores_dilated.values() for q in v.values())]
    if any(not 1 < k < math.inf for v in profile.cpu_cores_dilated.values() for k in v):
        raise ConfigError(f"{path}: profile {name}: the speedups of cpu_cores_dilated must "
                          "be numbers above 1")
    if not (0 < profile.link_mbit < math.inf and profile.memory_mb >= 16
            and all(MIN_CPU_CORES <= q < math.inf for q in quotas)
            and (profile.board_cores is None or profile.board_cores >= 1)):
        raise ConfigError(f"{path}: profile {name}: need link_mbit > 0, memory_mb >= 16, "
                          f"cpu_cores (and each of cpu_cores_by_model) >= {MIN_CPU_CORES}, "
                          "board_cores >= 1")


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


_LINK_FIX = "give links: {end-edge: {delay_ms: 250, mbit: 20}} (mbit optional)"


def _parse_links(path: Path, name: str, spec) -> dict[str, TierLink]:
    """A mix's ``links:`` (``{}`` when absent): link_key -> ``TierLink``."""
    value = spec.get("links") if isinstance(spec, dict) else None
    return parse_links(value, f"{path}: mix {name}", _LINK_FIX)


def _check_link_tiers(path: Path, name: str, links: dict[str, TierLink],
                      tiers: set[str | None]) -> None:
    """Refuse a link naming a tier none of the mix's nodes is in (a typo, most likely)."""
    missing = missing_tier(links, tiers)
    if missing:
        key, tier = missing
        raise ConfigError(f"{path}: mix {name}: link {key} joins tier {tier}, "
                          "which no node of the mix is in: give a profile of that "
                          f"tier (tier: {tier}) or drop the link")


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


# Time dilation (``--speedup``): how much of the host a dilated cell may book (the rest
# is for the sweep, the agents and the kernel's networking, outside the nodes' quotas),
# and the most one node's quota may grow to: a single-threaded training process cannot
# use more than one core, and a quota it cannot fill would no longer set its pace.
MAX_SPEEDUP = 100.0
DILATION_HOST_SHARE = 0.75
MAX_NODE_CORES = 1.0


def dilation(options: dict[float, list[float | None]], host_cores: float,
             max_speedup: float) -> float:
    """The time dilation k for a cell: the largest calibrated one that fits.

    ``options`` maps each speedup k to the quotas the cell's nodes would get at k (None
    where a node's profile has no quota calibrated for k). The largest k up to
    ``max_speedup`` whose quotas all exist, sum to at most ``DILATION_HOST_SHARE`` of
    the host and stay under ``MAX_NODE_CORES`` each; 1 if none does.
    """
    best = 1.0
    for k, quotas in options.items():
        if not 1 < k <= max_speedup or not quotas or any(q is None for q in quotas):
            continue
        if sum(quotas) <= host_cores * DILATION_HOST_SHARE and max(quotas) <= MAX_NODE_CORES:
            best = max(best, k)
    return best
