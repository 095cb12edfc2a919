"""An emulated Pi-class cluster on one Linux host: netns + shaped veth + cgroup per node.

``up(nodes, profile)`` builds it (``netns.py`` for the network, ``cgroups.py`` for CPU and
memory, ``profiles.py`` for what a node is) and records it in ``/run/edgeprof/cluster.json``
so any later process (``edgeprof cluster status``, a sweep) can ``attach()`` to it.
``down()`` removes everything carrying the ``edgeprof`` prefix, found on the system rather
than in the state file, so it also cleans up after a crash.

``EmulatedCluster.start`` runs a process in the node's network namespace and, when confined,
moves it into the node's cgroups in ``preexec_fn``, i.e. before ``exec``: not one
instruction runs outside the node's memory limit and CPU accounting. The training roles
(worker, server, scheduler) join the CPU quota itself when their start-up (importing
MXNet, about 2 CPU-seconds) is done, where the cgroup layout allows (cgroup v1);
``workloads.node_limits`` says why.

Before each cell, ``prepare(cell, nodes, max_speedup)`` gives every node the cell uses
the quota its profile has for the cell's model (``cpu_cores_by_model`` of a calibrated
profile, else ``cpu_cores``), dilated: time dilation k gives those nodes the quota
calibrated for k times the board's rate (``cpu_cores_dilated``) and k times their link
rate, so the cell trains k times faster with the same balance of computation and
communication. k is the largest calibrated one this host can give the cell, up to
``max_speedup`` (``profiles.dilation``), recorded with the cell so that its times can be
read back in the board's time (``docs/emulated.md``).

``slow_node(node, factor)`` makes a node a straggler for one cell (its quota x factor,
``profiler.sweep.stragglers``) and ``restore_node`` gives its quota back; ``prepare``
reads each node's quota back from its cgroup, so a node left slowed by a killed sweep is
set right before the next cell.

A mix of tiered profiles gives each node its tier (``Node.tier``) and may give the
links between tiers a delay and a rate (``profiles.TierLink``); ``tc`` cannot delay on
this kernel, so ``up`` then starts a delaying relay on the host (``links``) and
``link_address`` tells a node of one tier where to dial a node of another.

``EmulatedSettings`` is the provider's entry in ``profiler.cluster.PROVIDERS``: a
profile by name (or a ``Profile`` object, as calibration hands over its candidates) and
``--speedup``. The node profiles (``profiles.py``, YAML) are imported where used: the
registry imports this module, and so does every ``remote_exec`` on a node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager, Iterator, Mapping, Sequence

from workloads.node_limits import JOIN_CPU_CGROUP_ENV

from ..errors import ClusterError, ConfigError
from ..fsutil import atomic_write_text
from . import cgroups, instance, netns
from .base import (Cluster, ClusterSettings, GridNeeds, MemoryPressure, Node, NodeEntry,
                   NodeScope, ProviderOption, TierLink, link_between, popen_in_group)
from .netns import TBF_LATENCY_MS

if TYPE_CHECKING:
    from .profiles import Profile

STATE_DIR = Path(instance.RUN_DIR)
STATE_FILE = STATE_DIR / "cluster.json"
LOCK_FILE = STATE_DIR / "cluster.lock"
DEFAULT_PROFILE = "pi3b"
REQUIRED_BINARIES = ("ip", "tc", "ethtool", "sysctl", "nsenter")
# Roles that call workloads.node_limits.join_cpu_limit() once their start-up is done.
LATE_CPU_ROLES = ("worker", "server", "scheduler")


class EmulatedCluster(Cluster):
    """A handle on an emulated cluster that is up (it never brings one up or down)."""

    name = "emulated"
    can_slow_node = True

    def __init__(self, state: dict):
        self._state = state
        self._nodes = [Node(name=n["name"], address=n["address"], profile=n["profile"],
                            cpu_cores=n["cpu_cores"], memory_mb=n["memory_mb"],
                            scope=NodeScope.from_dict(n["scope"]), tier=n.get("tier"))
                       for n in state["nodes"]]
        # node name -> the environment its profile gives the current cell's model
        # (``prepare``), added to every process started on it.
        self._cell_env: dict[str, dict[str, str]] = {}

    @property
    def profile(self) -> str:
        return self._state["profile"]

    @property
    def state(self) -> dict:
        return json.loads(json.dumps(self._state))

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def tier_links(self) -> dict[str, TierLink]:
        """The mix's links between the tiers of the nodes that are up."""
        return {key: TierLink(float(spec["delay_ms"]), spec.get("mbit"))
                for key, spec in self._state.get("links", {}).items()}

    def link_address(self, source: Node, target: Node, port: int) -> tuple[str, int]:
        """Through the links relay when ``source`` and ``target`` are of two tiers the
        mix links (the link's delay and rate applied; the target sees the connection
        come from the host's address); else ``target`` itself."""
        from . import links

        link = link_between(self.tier_links(), source, target)
        if link is None:
            return target.address, port
        return (self._state["host_address"],
                links.route(STATE_DIR, (target.address, port), link))

    def start(self, node: Node, argv: Sequence[str], env: Mapping[str, str],
              log_path: Path, *, confine: bool = True,
              role: str | None = None) -> subprocess.Popen:
        # nsenter, not `ip netns exec`: the latter remounts /sys in a new mount namespace,
        # which hides /sys/fs/cgroup from the agent. Entering only the network namespace
        # keeps the host's filesystem view; /proc/net (what counters are read from)
        # follows the network namespace either way. nsenter execs argv itself (no fork),
        # so the Popen pid is the process.
        wrapped = ["nsenter", f"--net={netns.NETNS_DIR / node.scope.netns}", "--", *argv]
        # The profile's environment for the cell's model is what its quota was calibrated
        # with: it overrides the controller's own (a user's MXNET_ENGINE_TYPE), and the
        # engine's (rendezvous addresses) overrides it.
        env = {**self._cell_env.get(node.name, {}), **env}
        preexec = None
        if confine:
            group = _node_cgroup(node)
            # Training roles pay MXNet's import outside the CPU quota and join it when
            # they start to train or serve (workloads.node_limits says why).
            late = role in LATE_CPU_ROLES and group.can_join_cpu_later()
            if late:
                env = {**env, JOIN_CPU_CGROUP_ENV: str(group.cpu_dir / "cgroup.procs")}
            preexec = lambda: group.attach(os.getpid(), cpu_quota=not late)  # noqa: E731
        return popen_in_group(wrapped, env, log_path, preexec_fn=preexec)

    def entry(self, node: Node, *, role: str | None = None, origin: Node | None = None,
              cell_dir: Path | None = None) -> NodeEntry:
        """What ``start`` does, as data for a process already on a node (an MPI
        launcher's rsh agent, which runs on the host's filesystem like ``start``): the
        node's network namespace, its cgroups (a training role joins the CPU quota
        itself later, as ``start`` arranges) and the profile's environment."""
        group = _node_cgroup(node)
        late = role in LATE_CPU_ROLES and group.can_join_cpu_later()
        env = dict(self._cell_env.get(node.name, {}))
        if late:
            env[JOIN_CPU_CGROUP_ENV] = str(group.cpu_dir / "cgroup.procs")
        procs = tuple(str(d / "cgroup.procs") for d in group.dirs()
                      if not (late and d == group.cpu_dir))
        if late:
            # Out of the launcher's quota (node 0's) until the role joins its own, as
            # ``start`` leaves it in the controller's CPU cgroup.
            procs = (_own_cpu_cgroup_procs(group.cpu_dir), *procs)
        return NodeEntry(("nsenter", f"--net={netns.NETNS_DIR / node.scope.netns}", "--"),
                         env, procs)

    def oom_killed(self, node: Node) -> int:
        return _node_cgroup(node).oom_kills()

    def memory_pressure(self, node: Node) -> MemoryPressure | None:
        if not node.memory_mb:
            return None
        group = _node_cgroup(node)
        return MemoryPressure(group.memory_used_mb(), float(node.memory_mb),
                              group.major_faults())

    def prepare(self, cell, nodes_needed: int, max_speedup: float = 1.0) -> float:
        """Set the first ``nodes_needed`` nodes up for ``cell`` and return its dilation k.

        Each gets its profile's quota for ``cell.model`` at k and k times its link rate
        (k = 1: the profile's own quota and link).
        """
        from .profiles import dilation
        used = list(zip(self._nodes, self._state["nodes"]))[:nodes_needed]
        options: dict[float, list[float | None]] = {}
        for _, rec in used:
            for k, quota in _node_quotas_at(rec, cell.model).items():
                options.setdefault(k, []).append(quota)
        speedup = dilation({k: q for k, q in options.items() if len(q) == len(used)},
                           self._state["host_cores"], max_speedup)
        self._cell_env = {node.name: dict(rec.get("env_by_model", {}).get(cell.model, {}))
                          for node, rec in used}
        changed = False
        for node, rec in used:
            quota = _node_quotas_at(rec, cell.model)[speedup]
            link_mbit = rec["link_mbit"] * speedup
            link_now = rec.get("link_mbit_now", rec["link_mbit"])
            group = _node_cgroup(node)
            # The quota is read back, not taken from the state: a node left slowed (a
            # straggler whose sweep was killed) gets its own again.
            cpu_set = quota == node.cpu_cores and group.has_cpu(quota)
            if cpu_set and link_mbit == link_now and "straggler" not in rec:
                continue
            try:
                if not cpu_set:
                    group.set_cpu(quota)
                if link_mbit != link_now:
                    netns.shape_link(node.name, link_mbit, TBF_LATENCY_MS / speedup)
            except OSError as exc:
                raise ClusterError(f"cannot set the CPU quota of node {node.name} "
                                   f"({exc.strerror}): `edgeprof cluster down` and up "
                                   "again") from exc
            self._nodes[self._nodes.index(node)] = dataclasses.replace(node, cpu_cores=quota)
            rec["cpu_cores"], rec["link_mbit_now"] = quota, link_mbit
            rec.pop("straggler", None)
            changed = True
        if changed:
            # `cluster status` shows the quotas and links in force.
            with _locked():
                _write_state(self._state)
        return speedup

    def slow_node(self, node: Node, factor: float, **_context) -> None:
        """Run ``node`` at ``factor`` x the quota ``prepare`` gave it (a straggler), until
        ``restore_node``; its link is left as it is (a slow board, not a slow wire)."""
        from .profiles import MIN_CPU_CORES
        rec = self._record(node)
        quota = max(MIN_CPU_CORES, rec["cpu_cores"] * factor)
        self._set_cpu(node, quota)
        rec["straggler"] = {"factor": factor, "cpu_cores": round(quota, 6)}
        with _locked():
            _write_state(self._state)  # `cluster status` shows the node slowed

    def restore_node(self, node: Node, **_context) -> None:
        """Give a slowed node its quota back (``prepare`` also would, before a cell)."""
        rec = self._record(node)
        self._set_cpu(node, rec["cpu_cores"])
        if rec.pop("straggler", None) is not None:
            with _locked():
                _write_state(self._state)

    def _record(self, node: Node) -> dict:
        for rec in self._state["nodes"]:
            if rec["name"] == node.name:
                return rec
        raise ClusterError(f"node {node.name} is not in the emulated cluster that is up")

    def _set_cpu(self, node: Node, cpu_cores: float) -> None:
        try:
            _node_cgroup(node).set_cpu(cpu_cores)
        except OSError as exc:
            raise ClusterError(f"cannot set the CPU quota of node {node.name} "
                               f"({exc.strerror}): `edgeprof cluster down` and up "
                               "again") from exc

    def busy(self) -> bool:
        """Whether any process runs on any node (then the cluster must not be rebuilt)."""
        return any(_node_cgroup(n).pids() or netns.netns_pids(n.scope.netns)
                   for n in self._nodes)

    def close(self) -> None:
        pass


def _own_cpu_cgroup_procs(node_cpu_dir: Path) -> str:
    """``cgroup.procs`` of this process's cgroup in the CPU hierarchy (cgroup v1, where
    ``cpu`` is mounted apart), under the mount that holds ``node_cpu_dir``."""
    root = node_cpu_dir.parent.parent  # <mount>/edgeprof<N>/<node>
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return str(root / path.lstrip("/") / "cgroup.procs")
    return str(root / "cgroup.procs")


def _node_quotas_at(recorded: dict, model: str) -> dict[float, float]:
    """A node's quota for ``model`` at each time dilation its profile calibrated."""
    default = recorded.get("default_cpu_cores", recorded["cpu_cores"])
    quotas = {1.0: recorded.get("cpu_cores_by_model", {}).get(model, default)}
    for k, quota in recorded.get("cpu_cores_dilated", {}).get(model, {}).items():
        quotas[float(k)] = quota
    return quotas


def _node_cgroup(node: Node) -> cgroups.NodeCgroup:
    scope = node.scope
    return cgroups.NodeCgroup(scope.cgroup_version, Path(scope.cgroup_cpu_quota),
                              Path(scope.cgroup_cpu), Path(scope.cgroup_memory))


def check_host() -> cgroups.CgroupLayout:
    """Raise one line if this host cannot run the emulated cluster; return its cgroup layout."""
    instance.check()
    if os.geteuid() != 0:
        raise ClusterError("the emulated cluster needs root (network namespaces, tc, cgroups): "
                           "run with sudo, or use --cluster local")
    for binary in REQUIRED_BINARIES:
        if shutil.which(binary) is None:
            raise ClusterError(f"{binary} not found: apt-get install iproute2 ethtool procps "
                               "util-linux")
    netns.check_netns_support()
    return cgroups.detect_layout()


def check_request(nodes: int, profile: "str | Profile") -> None:
    """Refuse a node count or profile that cannot be built, before the host is touched."""
    if nodes < 1:
        raise ConfigError(f"--nodes {nodes}: a cluster needs at least 1 node: give e.g. "
                          "--nodes 4")
    if nodes > netns.MAX_NODES:
        raise ClusterError(f"--nodes {nodes}: at most {netns.MAX_NODES} emulated nodes")
    _node_profiles(profile, nodes)  # unknown profile, mix too small: one line


def _node_profiles(profile: "str | Profile", nodes: int) -> "list[Profile]":
    """Each node's profile: ``profile`` (a name, a mix's name, or a ``Profile``)."""
    from .profiles import Profile, load_catalog
    if isinstance(profile, Profile):
        return [profile] * nodes
    return load_catalog().node_profiles(profile, nodes)


def _profile_name(profile: "str | Profile | None") -> str | None:
    from .profiles import Profile
    return profile.name if isinstance(profile, Profile) else profile


def _node_quotas(node_profiles: "list[Profile]",
                 host_cores: float) -> tuple[list[float], list[dict[str, float]], float]:
    """Each node's default quota, its quota per model, and the default's scale factor
    (quotas scaled down alike when the nodes ask for more than the host has)."""
    from workloads.models import MODELS

    from .profiles import cpu_scale, quota_cores

    def scaled(model: str | None) -> list[float]:
        return quota_cores([p.cpu_cores_for(model) if model else p.cpu_cores
                            for p in node_profiles], host_cores)
    per_model = {m: scaled(m) for m in MODELS}
    by_node = [{m: per_model[m][i] for m in MODELS
                if node_profiles[i].cpu_cores_for(m) != node_profiles[i].cpu_cores}
               for i in range(len(node_profiles))]
    return scaled(None), by_node, cpu_scale([p.cpu_cores for p in node_profiles], host_cores)


def up(nodes: int, profile: "str | Profile" = DEFAULT_PROFILE) -> EmulatedCluster:
    """Bring up ``nodes`` nodes of ``profile`` (a profile or a mix); fails if one is up."""
    check_request(nodes, profile)
    layout = check_host()
    with _locked():
        if STATE_FILE.exists() or netns.list_netns():
            raise ClusterError("an emulated cluster is already up: `edgeprof cluster down` "
                               "first, or use it as it is")
        return _up(layout, nodes, profile)


def _tier_links(profile: "str | Profile", node_profiles: "list[Profile]") -> dict:
    """The links of mix ``profile`` between tiers its first nodes are in, as recorded."""
    from .profiles import Profile, load_catalog
    if isinstance(profile, Profile):
        return {}
    tiers = {p.tier for p in node_profiles}
    return {key: link.as_spec() for key, link in load_catalog().tier_links(profile).items()
            if set(key.split("-")) <= tiers}


def _up(layout: cgroups.CgroupLayout, nodes: int, profile: "str | Profile"
        ) -> EmulatedCluster:
    from . import links
    node_profiles = _node_profiles(profile, nodes)
    tier_links = _tier_links(profile, node_profiles)
    host_cores = float(len(os.sched_getaffinity(0)))
    quotas, quotas_by_model, scale = _node_quotas(node_profiles, host_cores)
    state = {"profile": _profile_name(profile), "created_at": time.time(), "host_cores": host_cores,
             "cpu_scale": round(scale, 4),
             "cgroup_version": layout.version, "bridge": netns.BRIDGE,
             "host_address": netns.HOST_ADDRESS, "nodes": [],
             **({"links": tier_links} if tier_links else {})}
    try:
        netns.create_bridge()
        for index, (node_profile, quota) in enumerate(zip(node_profiles, quotas)):
            name = f"n{index}"
            link_mbit = node_profile.link_mbit
            address = netns.create_node_network(name, index, link_mbit)
            group = cgroups.create_node_cgroup(layout, name, quota, node_profile.memory_mb)
            state["nodes"].append({
                "name": name, "address": address, "profile": node_profile.name,
                "cpu_cores": quota, "default_cpu_cores": quota,
                "cpu_cores_by_model": quotas_by_model[index],
                # Dilated quotas hold only while the host gives every node its own.
                "cpu_cores_dilated": node_profile.cpu_cores_dilated if scale == 1 else {},
                "board_cores": node_profile.board_cores,
                "env_by_model": node_profile.env_by_model,
                "memory_mb": node_profile.memory_mb, "link_mbit": link_mbit,
                **({"tier": node_profile.tier} if node_profile.tier else {}),
                "scope": NodeScope(
                    interfaces=(netns.NODE_IFACE,), netns=netns.netns_name(name),
                    board_cores=node_profile.board_cores or None,
                    cgroup_version=layout.version, cgroup_cpu=str(group.cpuacct_dir),
                    cgroup_cpu_quota=str(group.cpu_dir),
                    cgroup_memory=str(group.memory_dir)).to_dict()})
        if tier_links:
            state["links_relay_pid"] = links.start_relay(STATE_DIR, netns.HOST_ADDRESS)
        _write_state(state)
    except BaseException:
        # Never leave half a cluster behind (also on Ctrl-C).
        _down(layout)
        raise
    return EmulatedCluster(state)


def attach() -> EmulatedCluster:
    """The cluster that is up, as recorded by ``up``; raises if none is (fully) up."""
    try:
        state = json.loads(STATE_FILE.read_text())
    except FileNotFoundError:
        raise ClusterError("no emulated cluster is up: `edgeprof cluster up --nodes N "
                           "--profile pi3b`") from None
    except json.JSONDecodeError as exc:
        raise ClusterError(f"{STATE_FILE} is corrupt: `edgeprof cluster down` and up "
                           f"again") from exc
    present = set(netns.list_netns())
    missing = [n["scope"]["netns"] for n in state["nodes"]
               if n["scope"]["netns"] not in present]
    if missing:
        raise ClusterError(f"the emulated cluster lost {', '.join(missing)}: "
                           f"`edgeprof cluster down` and up again")
    if state.get("links"):
        from . import links
        if not links.relay_running(STATE_DIR):
            raise ClusterError("the emulated cluster lost its links relay (the delays "
                               f"between tiers; see {links.log_path(STATE_DIR)}): "
                               "`edgeprof cluster down` and up again")
    return EmulatedCluster(state)


def ensure_cluster(nodes: int, profile: "str | Profile | None" = None
                   ) -> tuple[EmulatedCluster, bool]:
    """A cluster of at least ``nodes`` nodes; True if this call brought it up.

    An idle cluster that is too small or of another profile is rebuilt; a busy one
    (processes running on its nodes) is an error rather than pulled from under its user.
    ``profile=None`` accepts whatever profile is up (``pi3b`` when bringing one up). A
    ``Profile`` object fits a cluster of its name.
    """
    check_request(nodes, profile or DEFAULT_PROFILE)
    layout = check_host()
    with _locked():
        try:
            current = attach()
        except ClusterError:
            current = None
        if current is not None:
            fits = (len(current.nodes()) >= nodes
                    and _profile_name(profile) in (None, current.profile))
            if fits:
                return current, False
            if current.busy():
                raise ClusterError(
                    f"the emulated cluster that is up ({len(current.nodes())} x "
                    f"{current.profile}) is busy and does not fit {nodes} x "
                    f"{_profile_name(profile) or current.profile}: wait for it or "
                    "`edgeprof cluster down`")
        # Also clears what a crash left behind, which would make `_up` fail.
        _down(layout)
        return _up(layout, nodes, profile or DEFAULT_PROFILE), True


def down() -> list[str]:
    """Remove every edgeprof namespace, link and cgroup (and the state file)."""
    layout = check_host()
    with _locked():
        return _down(layout)


def _down(layout: cgroups.CgroupLayout) -> list[str]:
    from . import links
    removed: list[str] = []
    relay = links.stop_relay(STATE_DIR)
    if relay:
        removed.append(relay)
    namespaces = netns.list_netns()
    # Processes outside the node cgroups (the unconfined agent) still hold a namespace
    # alive after `ip netns del`: stop them first.
    for ns in namespaces:
        for pid in netns.netns_pids(ns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
    removed += [f"cgroup {path}" for path in cgroups.remove_all(layout)]
    # Deleting a veth's host end deletes the pair at once; namespace teardown alone
    # would leave the host end around until the kernel's async cleanup ran.
    links = netns.list_links()
    for link in sorted(links, key=lambda name: name == netns.BRIDGE):
        with contextlib.suppress(ClusterError):
            netns.delete_link(link)
            removed.append(f"link {link}")
    for ns in namespaces:
        netns.delete_netns(ns)
        removed.append(f"netns {ns}")
    if STATE_FILE.exists():
        STATE_FILE.unlink()
        removed.append(f"state {STATE_FILE}")
    left = netns.list_netns() + netns.list_links()
    if left:
        raise ClusterError(f"could not remove {', '.join(left)}: remove them with `ip netns "
                           f"del` / `ip link del` and run `edgeprof cluster down` again")
    return removed


def status_lines(info: dict) -> list[str]:
    """``status()`` for people: the cluster, then a line per node (or why none is up)."""
    # Instance 0 is the cluster every earlier release made: named only when it is not.
    number = info.get("instance")
    if not info["up"]:
        where = f" on instance {number}" if number else ""
        return [f"no cluster up{where} ({info['reason']})"] + (
            ["leftovers (remove with `edgeprof cluster down`): " + ", ".join(info["leftovers"])]
            if info["leftovers"] else [])
    lines = [
        f"emulated cluster{f' (instance {number})' if number else ''}: "
        f"{len(info['nodes'])} x {info['profile']}, cgroup "
        f"v{info['cgroup_version']}, host {info['host_address']}, CPU quotas x"
        f"{info['cpu_scale']} of the profiles' ({info['host_cores']:g} host cores)",
        f"{'node':<5} {'address':<12} {'profile':<8} {'tier':<5} {'Mbit':>6} {'cores':>6} "
        f"{'mem MB':>7} {'procs':>5} {'cpu s':>8} {'used MB':>8} {'oom':>4} "
        f"{'rx KB':>9} {'tx KB':>9}"]
    for n in info["nodes"]:
        lines.append(
            f"{n['name']:<5} {n['address']:<12} {n['profile']:<8} {n.get('tier') or '-':<5} "
            f"{n['link_mbit']:>6g} "
            f"{n['cpu_cores']:>6g} {n['memory_mb']:>7} {n['processes']:>5} "
            f"{n['cpu_used_s']:>8.1f} {n['mem_used_mb']:>8.1f} {n['oom_kills']:>4} "
            f"{n['rx_bytes'] / 1024:>9.1f} {n['tx_bytes'] / 1024:>9.1f}"
            + (f"  straggler: x{n['straggler']['factor']:g}, "
               f"{n['straggler']['cpu_cores']:g} cores" if n.get("straggler") else ""))
    from .link_spec import link_line

    lines += [link_line(key, link, "through the links relay on the host")
              for key, link in sorted(info.get("links", {}).items())]
    return lines


def status() -> dict:
    """What is up: per node its limits, current usage and interface counters."""
    check_host()
    try:
        cluster = attach()
    except ClusterError as exc:
        leftovers = netns.list_netns() + netns.list_links()
        return {"up": False, "instance": instance.NUMBER, "reason": str(exc),
                "leftovers": leftovers}
    state = cluster.state
    nodes = []
    for node, recorded in zip(cluster.nodes(), state["nodes"]):
        group = _node_cgroup(node)
        counters = netns.interface_counters(node.scope.netns)
        nodes.append({"name": node.name, "address": node.address, "profile": node.profile,
                      "tier": node.tier,
                      "link_mbit": recorded.get("link_mbit_now", recorded["link_mbit"]),
                      "cpu_cores": node.cpu_cores,
                      **({"straggler": recorded["straggler"]} if "straggler" in recorded
                         else {}),
                      "memory_mb": node.memory_mb, "processes": len(group.pids()),
                      "cpu_used_s": round(group.cpu_usage_s(), 2),
                      "mem_used_mb": round(group.memory_used_mb(), 1),
                      "oom_kills": group.oom_kills(), **counters})
    return {"up": True, "instance": instance.NUMBER, "profile": state["profile"],
            "host_cores": state["host_cores"],
            "cpu_scale": state["cpu_scale"], "cgroup_version": state["cgroup_version"],
            "host_address": state["host_address"], "nodes": nodes,
            **({"links": state["links"]} if state.get("links") else {})}


def _write_state(state: dict) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    atomic_write_text(STATE_FILE, json.dumps(state, indent=2, sort_keys=True))


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Serialise up/down/ensure across processes (two sweeps starting together)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _speedup(text: str) -> float:
    """``--speedup``'s typed text as a factor (its range is checked with the grid)."""
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--speedup {text}: give a factor such as 2 (1: the profile's own "
                          "speed)") from None


@dataclass
class EmulatedSettings(ClusterSettings):
    """``--cluster emulated``: ``--profile`` (a name or mix, or a ``Profile`` object;
    None: the profile of the cluster that is up, else ``pi3b``) and ``--speedup``."""

    profile: "str | Profile | None" = None
    speedup: float = 1.0

    name = "emulated"
    help = "Pi-class nodes, root"
    options = (
        ProviderOption(
            "profile", identity=True, metavar="NAME",
            help="Node profile of the emulated cluster [default: the cluster that is up, "
                 "else pi3b].",
            refusal="--profile {value} is a node profile of the emulated cluster: drop it "
                    "or use --cluster emulated"),
        ProviderOption(
            "speedup", default=1.0, parse=_speedup, identity=True, metavar="FACTOR",
            help="Emulated cluster: every node's CPU quota and link rate x this factor "
                 "(time dilation: same balance of compute and network, docs/emulated.md).",
            refusal="--speedup {value:g} applies to the emulated cluster only (real and "
                    "local nodes run at their own speed): drop it or use --cluster emulated"),
    )
    speed = "profile"

    @classmethod
    def cluster_type(cls) -> type[Cluster]:
        return EmulatedCluster

    @property
    def profile_name(self) -> str | None:
        return _profile_name(self.profile)

    @property
    def node_profile(self) -> str | None:
        return self.profile_name

    @property
    def max_speedup(self) -> float:
        return self.speedup

    @property
    def label(self) -> str:
        how = [p for p in (self.profile_name, self.speedup != 1 and
                           f"up to speedup {self.speedup:g}") if p]
        return "emulated cluster" + (f" ({', '.join(how)})" if how else "")

    def identity(self) -> dict:
        return {**super().identity(), "profile": self.profile_name}

    def status(self) -> dict:
        return status()

    def status_lines(self, info) -> list[str]:
        return status_lines(info)

    def check(self, needs: GridNeeds) -> None:
        from .profiles import MAX_SPEEDUP

        if not 1 <= self.speedup <= MAX_SPEEDUP:
            raise ConfigError(f"--speedup {self.speedup:g}: give a factor from 1 (the "
                              f"profile's own speed) to {MAX_SPEEDUP:g}")
        super().check(needs)
        check_request(needs.nodes, self.profile or DEFAULT_PROFILE)

    def open(self, needs: GridNeeds) -> ContextManager[Cluster]:
        cluster, created = ensure_cluster(needs.nodes, self.profile)
        return self.closing(cluster, down if created else None)

    @classmethod
    def running(cls) -> bool:
        """Whether an emulated cluster is up on this host."""
        try:
            attach()
        except ClusterError:
            return False
        return True
