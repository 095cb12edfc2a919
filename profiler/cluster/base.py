"""What every node provider is: a ``Cluster`` (list nodes, start, stop) and its settings.

A *node* is one device: a local slot (``local``), a network namespace with its own
cgroup (``emulated``) or a real host reached over SSH (``inventory``). Engines never
know which: they get ``Node`` objects and call ``Cluster.start``.

A provider is a ``Cluster`` subclass (``nodes`` and ``start`` are required; the rest has
a no-op default here, so the sweep calls every method on every provider without probing)
and a ``ClusterSettings`` subclass: what the user chose, each setting declared as a
``ProviderOption`` (the CLI's ``--profile``, ``--speedup``, ``--inventory`` are the shipped
providers' own), checked before anything runs (``check``), opened into a cluster for the
sweep (``open``) and recorded for ``--resume`` (``identity``). Both are registered by one
line in ``profiler.cluster.PROVIDERS``.

What a grid needs of the nodes (how many, which engines, whether a node answers for
them) is worked out above this package, from the engines, and handed over as
``GridNeeds``: a provider never asks the engines itself.

This module stays light (standard library only): ``profiler.cluster.remote_exec``, run on
every node for every process, imports the package.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Iterator, Mapping, Sequence

from ..errors import ClusterError, ConfigError

# A hierarchy's tiers, lowest (the devices that make the data) first: a node's ``tier``.
TIERS = ("end", "edge", "cloud")


@dataclass(frozen=True)
class TierLink:
    """The network between two tiers of a mix, in each direction: ``delay_ms`` one way
    (held by the relay before it forwards what it read) and ``mbit`` (None: only the
    nodes' own links limit the rate)."""

    delay_ms: float
    mbit: float | None = None

    def as_spec(self) -> dict:
        return {"delay_ms": self.delay_ms, **({"mbit": self.mbit} if self.mbit else {})}


def link_key(tier_a: str, tier_b: str) -> str:
    """The name of the link between two tiers, lower tier first: ``end-edge``."""
    low, high = sorted((tier_a, tier_b), key=TIERS.index)
    return f"{low}-{high}"


@dataclass(frozen=True)
class NodeScope:
    """What a node's processes (the metrics agent, Gloo) need to scope themselves to it.

    ``interfaces``: the network interfaces that carry the node's traffic (the first one
    is Gloo's); ``netns``: its network namespace (emulated); ``cgroup_*``: its cgroup
    directories (``cgroup_cpu`` the accounting one, ``cgroup_cpu_quota`` the one holding
    the quota, which differ on cgroup v1); ``board_cores``: the cores of the board it
    emulates; ``ssh_host``: the inventory host it is; ``own_meters``: whether the power
    meters its agent reads (RAPL, hwmon) are the node's own (False: a board emulated
    under a quota on a machine that is not it, as an emulated Swarm's). Every field is
    optional.
    """

    interfaces: tuple[str, ...] = ()
    netns: str | None = None
    cgroup_version: int | None = None
    cgroup_cpu: str | None = None
    cgroup_cpu_quota: str | None = None
    cgroup_memory: str | None = None
    board_cores: int | None = None
    ssh_host: str | None = None
    own_meters: bool = True

    def to_dict(self) -> dict:
        """The fields that are set, as JSON (the emulated cluster's state file)."""
        return {k: list(v) if k == "interfaces" else v for k, v in asdict(self).items()
                if v not in (None, ()) and not (k == "own_meters" and v)}

    @classmethod
    def from_dict(cls, data: Mapping) -> "NodeScope":
        """The inverse of ``to_dict``; also reads the string form older state files kept
        (``"interfaces": "eth0"``, ``"cgroup_version": "1"``)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known and v not in (None, "")}
        interfaces = values.get("interfaces", ())
        if isinstance(interfaces, str):
            interfaces = [name for name in interfaces.split(",") if name]
        values["interfaces"] = tuple(interfaces)
        for key in ("cgroup_version", "board_cores"):
            if key in values:
                values[key] = int(float(values[key]))
        return cls(**values)


@dataclass(frozen=True)
class Node:
    """One device of a cluster.

    ``address`` is what other nodes use to reach it (``127.0.0.1`` for local slots, the
    namespace's IP for emulated nodes). ``cpu_cores`` and ``memory_mb`` are the node's
    limits when the provider enforces any (``None``: the host's). ``tier``: its tier in
    a hierarchy (``end``, ``edge``, ``cloud``; None: its profile has none), which a
    node of another tier reaches through ``Cluster.link_address``.
    """

    name: str
    address: str = "127.0.0.1"
    profile: str = "host"
    cpu_cores: float | None = None
    memory_mb: int | None = None
    scope: NodeScope = field(default_factory=NodeScope)
    tier: str | None = None


def nodes_by_tier(nodes: Sequence[Node]) -> dict[str | None, list[Node]]:
    """``nodes`` grouped by tier, each group in the nodes' order (None: untiered)."""
    groups: dict[str | None, list[Node]] = {}
    for node in nodes:
        groups.setdefault(node.tier, []).append(node)
    return groups


def link_between(links: Mapping[str, TierLink], source: Node, target: Node
                 ) -> TierLink | None:
    """The link of ``links`` that ``source`` reaches ``target`` over: None when they are
    of one tier (nodes of a tier talk directly), either is untiered, or their tiers are
    not linked."""
    if not (source.tier and target.tier and source.tier != target.tier):
        return None
    return links.get(link_key(source.tier, target.tier))


@dataclass(frozen=True)
class NodeEntry:
    """How a process the cluster started on one of its nodes (``mpirun`` on node 0)
    starts a command on another node in that node's context, as data its rsh agent
    reads (``python -m workloads.mpi rsh``): run ``argv`` + the command, with ``env``
    added, after writing the process's own pid into each of ``cgroup_procs`` (its
    ``cgroup.procs`` files). Empty: exec the command as it is (the local cluster)."""

    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cgroup_procs: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"argv": list(self.argv), "env": dict(self.env),
                "cgroup_procs": list(self.cgroup_procs)}


@dataclass(frozen=True)
class MemoryPressure:
    """One reading of a node's memory: its charge, its limit, major page faults so far."""

    used_mb: float
    limit_mb: float
    major_faults: int


class Cluster:
    """A set of nodes on which processes can be started (one provider's handle on them).

    Subclasses implement ``nodes`` and ``start``; the other methods are optional and
    their defaults here do nothing, which is right for nodes without limits of their
    own (the local cluster).
    """

    name: ClassVar[str] = ""
    # Whether ``slow_node``/``restore_node`` work: ``--straggler`` is refused on the
    # other providers before anything runs.
    can_slow_node: ClassVar[bool] = False

    def nodes(self) -> list[Node]:
        """All nodes, in a stable order (node 0 first)."""
        raise NotImplementedError

    def start(self, node: Node, argv: Sequence[str], env: Mapping[str, str],
              log_path: Path, *, confine: bool = True,
              role: str | None = None) -> subprocess.Popen:
        """Start ``argv`` on ``node`` in a new process group, stdout+stderr to ``log_path``.

        ``env`` is added to the current environment, less its secrets
        (``SECRET_ENV_VARS``). The process dies with the thread that started it
        (``popen_in_group``). ``confine=False`` runs the process
        on the node (its network) but outside the node's CPU/memory limits: the metrics
        agent uses it so that its own footprint is not charged to training. ``role``
        (``worker``, ``server``, ...) is for providers whose nodes must tell the node's
        agent which process is which themselves (the inventory cluster).
        """
        raise NotImplementedError

    def link_address(self, source: Node, target: Node, port: int) -> tuple[str, int]:
        """The (address, port) a process on ``source`` dials to reach ``port`` on
        ``target`` over the link between their tiers (its delay and rate applied,
        where the provider emulates links: the emulated cluster's relay). Here: the
        target itself, for providers whose network is the real one."""
        return target.address, port

    def tier_links(self) -> dict[str, TierLink]:
        """The links between tiers this cluster emulates, by ``link_key`` (``end-edge``):
        what ``link_address`` applies. Here none: the network is the real one."""
        return {}

    def entry(self, node: Node, *, role: str | None = None, origin: Node | None = None,
              cell_dir: Path | None = None) -> NodeEntry | None:
        """How a process of the cell in ``cell_dir`` started on ``origin`` (one of these
        nodes) starts ``role``'s processes on ``node`` (an MPI launcher's rsh agent,
        ``NodeEntry``); None: this provider cannot (then such a cell fails with a
        reason saying so). ``ClusterError``: it cannot for this node (the reason)."""
        return None

    def prepare(self, cell, nodes_needed: int, max_speedup: float = 1.0) -> float:
        """Set the first ``nodes_needed`` nodes up for ``cell`` before it starts (the
        emulated cluster's per-model CPU quotas) and return the time dilation the cell
        gets (at most ``max_speedup``; 1: none)."""
        return 1.0

    def memory_pressure(self, node: Node) -> MemoryPressure | None:
        """The node's memory against its limit, for providers that limit it (the runner
        watches it for thrashing, ``sweep.thrashing``); None: not watched."""
        return None

    def collect(self, cell_dir: Path, nodes: Sequence[Node]) -> list[str]:
        """Bring what the cell's processes wrote on ``nodes`` back into ``cell_dir``
        (nodes with disks of their own); one problem per node that failed."""
        return []

    def clock_offsets(self, nodes: Sequence[Node]) -> dict[str, float]:
        """Each node's clock minus this host's, in seconds, for nodes with clocks of
        their own; a node left out keeps its own clock."""
        return {}

    def oom_killed(self, node: Node) -> int:
        """How many processes the node's memory limit has killed so far (0 if no limit)."""
        return 0

    def slow_node(self, node: Node, factor: float, *, cell_dir: Path, processes: int = 1,
                  threads: int = 1) -> None:
        """Make ``node`` the cell's straggler: its CPU x ``factor`` until
        ``restore_node`` (``sweep.stragglers``); only where ``can_slow_node``."""
        # A safety net: the sweep refuses --straggler on such a cluster before (naming
        # the providers that can), and check() before anything runs.
        raise ClusterError(f"the {self.name} cluster cannot slow a node (its can_slow_node "
                           "is false)")

    def restore_node(self, node: Node, *, cell_dir: Path) -> None:
        """Undo ``slow_node``."""

    def close(self) -> None:
        """Release what this object holds (not the cluster itself)."""


def _as_typed(text: str) -> str:
    return text  # a text option (a name): as typed


@dataclass(frozen=True)
class ProviderOption:
    """A setting a provider takes from the command line (``--inventory FILE``).

    ``name`` is the option without its dashes (``_`` typed as ``-``) and the field of the
    provider's settings that holds it. ``parse`` turns the typed text into the value
    (``float``, ``Path``; a bad value raises ``ConfigError``, one line); ``default`` is
    the value that means "not given" (another provider's option left at it is not
    refused). ``identity``: part of what ``--resume`` compares (a node profile, a
    speedup: the cells would measure something else). ``refusal``: the line that refuses
    the option on another provider (``{value}`` is what was typed); without it, a line
    naming the provider is made. ``sweep``, ``run``, ``study``, ``cluster`` and
    ``--resume`` read these declarations from the registry (``profiler.cluster``,
    ``cluster.cli_options``); nothing else names a provider's option.
    """

    name: str
    help: str
    default: Any = None
    parse: Callable[[str], Any] = _as_typed
    identity: bool = False
    refusal: str = ""
    metavar: str | None = None

    @property
    def flag(self) -> str:
        """``--inventory``: the option as typed."""
        return "--" + self.name.replace("_", "-")


def _engine_answer_problem(engine: str, answer: dict) -> str | None:
    return None if answer.get("ok") else answer.get("problem") or "no answer"


@dataclass(frozen=True)
class GridNeeds:
    """What a grid asks of a cluster, worked out by the sweep from the engines
    (``profiler.sweep.needs.grid_needs``) so that no provider asks them itself.

    ``nodes``: the most nodes one cell occupies; ``slowed_nodes``: the most a cell with a
    ``--straggler`` occupies (any of them may be slowed); ``engines``: the engines the
    cells run; ``engine_problem(engine, answer)``: on the controller, what keeps a node
    whose own check of ``engine`` answered ``answer`` from running its cells (None:
    nothing), for providers whose nodes have an install of their own;
    ``slowing_providers``: how a refusal of ``--straggler`` names the providers that can
    slow a node (``profiler.cluster.slowing_clusters``, the registry above this module);
    ``monitored``: whether each cell runs the metrics agent on its nodes (a sweep without
    ``--no-agent``).
    """

    cells: tuple = ()
    nodes: int = 1
    slowed_nodes: int = 0
    engines: tuple[str, ...] = ()
    engine_problem: Callable[[str, dict], str | None] = _engine_answer_problem
    slowing_providers: str = "a --cluster that can slow a node"
    monitored: bool = False


@dataclass
class ClusterSettings:
    """One provider's settings for a sweep: checked, opened, recorded.

    ``options`` declares the settings the provider takes (``ProviderOption``), each a
    field of the subclass of the same name; the CLI commands, the refusal of an option
    on another provider and ``--resume`` read them from the registry.
    """

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""  # a few words for ``--cluster``'s help
    options: ClassVar[tuple[ProviderOption, ...]] = ()
    # How fast the nodes train, for the study's estimate: ``host`` (slots sharing this
    # host's cores), ``profile`` (the node profile's quota) or ``board`` (real boards).
    # ``profile``: the nodes are made from a node profile, which calibration measures.
    speed: ClassVar[str] = "host"
    # Whether the nodes run an edgeprof and engines of their own, which ``check`` probes
    # (real boards): this machine then checks only what it needs to plan cells.
    own_install: ClassVar[bool] = False

    @classmethod
    def cluster_type(cls) -> type[Cluster]:
        """The provider's ``Cluster`` class (imported when asked: it may be heavy)."""
        raise NotImplementedError

    @classmethod
    def running(cls) -> bool:
        """Whether a cluster of this provider is up on this host, which opening one
        would take over or rebuild (the emulated cluster); False where nothing is kept
        up between sweeps."""
        return False

    @property
    def max_speedup(self) -> float:
        """The most time dilation a cell may get (the emulated cluster's ``--speedup``)."""
        return 1.0

    @property
    def node_profile(self) -> str | None:
        """The node profile the nodes are made from, by name (``speed == "profile"``;
        None: none named), which a profile check measures on this host."""
        return None

    @property
    def label(self) -> str:
        """``emulated cluster (pi3b, up to speedup 4)``: where a sweep runs, for people."""
        return f"{self.name} cluster"

    def identity(self) -> dict:
        """What ``--resume`` compares (``sweep.json``'s ``identity``): ``cluster`` and
        each option declared ``identity`` (a path as text)."""
        return {"cluster": self.name,
                **{o.name: _recorded(getattr(self, o.name)) for o in self.options
                   if o.identity}}

    def status(self) -> object:
        """What ``edgeprof cluster status`` shows of the nodes, as JSON-able data."""
        raise ConfigError(f"the {self.name} cluster keeps no nodes between sweeps: there is "
                          "no status to show")

    def status_lines(self, info: object) -> list[str]:
        """``status()``'s answer for people, one line each."""
        return [str(info)]

    def check(self, needs: GridNeeds) -> None:
        """Refuse (one line) what cannot run the grid ``needs`` describes; touches nothing."""
        slowed = sorted({c.straggler for c in needs.cells if c.straggler != "none"})
        if slowed and not self.cluster_type().can_slow_node:
            raise ConfigError(f"--straggler {','.join(slowed)} slows one node's CPU, and the "
                              f"{self.name} cluster's nodes share this host's: use "
                              f"{needs.slowing_providers}, or drop --straggler")

    def open(self, needs: GridNeeds) -> ContextManager[Cluster]:
        """The cluster, with at least ``needs.nodes`` nodes, for the length of a
        ``with``; what this call brought up is taken down at its end."""
        raise NotImplementedError

    @staticmethod
    @contextlib.contextmanager
    def closing(cluster: Cluster, teardown: Callable[[], None] | None = None
                ) -> Iterator[Cluster]:
        """``open``'s usual body: yield ``cluster``, then close it (and ``teardown``)."""
        try:
            yield cluster
        finally:
            cluster.close()
            if teardown is not None:
                teardown()


def _recorded(value):
    """An option's value as ``sweep.json`` keeps it (JSON: a path as text)."""
    return str(value) if isinstance(value, os.PathLike) else value


# Secrets a process gets only if it ships metrics itself (see docs/metrics.md): never
# inherited by workers, servers, schedulers or the per-cell agents, which do not ship.
SECRET_ENV_VARS = ("INFLUX_TOKEN", "GRAFANA_TOKEN", "GRAFANA_PASSWORD")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without secrets, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in SECRET_ENV_VARS}
    return {**base, **env}


def popen_in_group(argv: Sequence[str], env: Mapping[str, str], log_path: Path,
                   preexec_fn=None, *,
                   parent_death_signal: int | None = signal.SIGKILL,
                   stdin: int = subprocess.DEVNULL) -> subprocess.Popen:
    """Start a process in its own session (so its whole group can be killed), logging to a file.

    ``parent_death_signal``: the kernel sends it to the process when the thread that
    started it dies, so that a controller killed with ``kill -9`` leaves no training
    process (nor an agent, which gets SIGTERM and closes its spool) behind. A process
    started in its own session does not get the terminal's SIGINT/SIGHUP: the sweep
    handles those and stops its cells itself. ``stdin=subprocess.PIPE`` keeps a pipe
    open to the process until it is reaped (the inventory cluster's ``ssh``: its end
    stops the remote command).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    death = _parent_death(parent_death_signal) if parent_death_signal else None

    def prepare() -> None:  # runs in the child, between fork and exec
        if death is not None:
            death()
        if preexec_fn is not None:
            preexec_fn()

    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv), env=child_env(env), stdout=log, stderr=subprocess.STDOUT,
            stdin=stdin, start_new_session=True,
            preexec_fn=prepare if (death or preexec_fn) else None,
        )


def _parent_death(sig: int):
    """A callable for the child: ask for ``sig`` when the parent dies (Linux only)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: the sweep's own signal handling still reaps cells
    parent_pid = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the request took hold
            os._exit(1)
    return arm


def kill_group(proc: subprocess.Popen, grace_s: float = 2.0) -> int | None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``, and reap the leader."""
    return kill_groups([proc], grace_s)[0]


def kill_groups(procs: Sequence[subprocess.Popen], grace_s: float = 2.0,
                hurry: Callable[[], bool] = lambda: False) -> list[int | None]:
    """Stop many process groups at once: SIGTERM all, SIGKILL all after ``grace_s``.

    All groups share one grace period (a cell of ten nodes stops as fast as one), and
    ``hurry()`` turning true (a second Ctrl-C) cuts it short. Returns each leader's exit
    status (None if it could not be reaped, which only a process stuck in the kernel does).
    """
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not hurry():
        if all(proc.poll() is not None for proc in procs):
            break
        time.sleep(0.02)
    # Children of a leader may outlive it: kill what is left of every group regardless.
    for proc in procs:
        _signal_group(proc.pid, signal.SIGKILL)
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, grace_s)))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
