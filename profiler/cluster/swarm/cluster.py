"""The Swarm's nodes as a cluster: each process of a cell a service of one task.

Why a service per process, not per role with ``{{.Task.Slot}}``: the runner starts,
waits on and kills processes one at a time (``Cluster.start``), each with its own
command line, environment (the rank the engine chose) and node (the engine's placement),
and judges each by its own exit status. A service per process keeps all of that as it is
on the other providers; a service per role would move the ranks and the placement
from the engines into Swarm.

Each service's task is pinned to its node by a ``node.id==`` constraint, attached to the
cell's own overlay network (attachable, internal, its MTU ``--swarm-mtu``: made at the
cell's first process, removed by ``collect`` once the cell is over) under an alias: the
node's name for the first process the cell starts on that node (what the engines give
as the node's address: MASTER_ADDR, the MXNet scheduler's URI), ``<node>-<role><k>`` for
the others. The overlay is the container's only network, so its interface is ``eth0``,
which Gloo is told (``NodeScope.interfaces``). The task gets the node profile's CPU quota
and memory limit (``--swarm-limits profile``), ``/dev/shm`` as a tmpfs of
``--swarm-shm-mb``, and the sweep's folder bind-mounted at its own path, so that the
processes write their events, logs and step logs where the controller reads them: this
holds where the controller and the tasks share a filesystem (one host, or an NFS mount
at the same path on every node); boards with disks of their own need the sweep's folder
brought back after each cell, which is not built yet (docs/swarm.md).

ps-lite (MXNet's KVStore) binds the address a process announces: in a container that is
its own, unknown before it starts, so ``DMLC_NODE_HOST`` is dropped (ps-lite then takes
the address of ``DMLC_INTERFACE``, ``eth0``) and the scheduler binds every address
(``DMLC_USE_KUBERNETES=1``, ps-lite's switch for containers), reached by its alias.

Every service and network carries ``edgeprof.sweep``, ``edgeprof.cell`` (the attempt's
folder) and ``edgeprof.controller`` (host:pid) labels: ``collect`` removes a cell's,
``close`` the sweep's, and opening the cluster removes what a controller of this host
that is no longer running left behind (one killed with ``kill -9``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ...errors import ClusterError
from ..base import (SECRET_ENV_VARS, Cluster, Node, NodeEntry, NodeScope, TierLink,
                    kill_groups, link_between, popen_in_group)
from .boards import shaped_command
from .engine import SwarmNode, connect, node_name
from .links import TaskRelays, tier_links
from .mpi_entry import entry_command, via_prefix, write_ticket
from .task import STOP_WAIT_S as TASK_STOP_WAIT_S

OVERLAY_IFACE = "eth0"
STOP_GRACE_S = 2.0
REMOVE_WAIT_S = 30.0
# The controller's variables that say how the trainer runs (threads, the engines' own
# settings): a task gets them, never the controller's PATH, HOME or secrets.
PASSED_ENV_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "MXNET_", "EDGEPROF_", "GLOO_",
                       "TORCH_", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED")
LABEL = "edgeprof"
AGENT_ROLE = "agent"
# Where the agent's container sees the node's /proc and cgroup tree (read-only).
HOST_PROC = "/host/proc"
HOST_CGROUP = "/host/sys/fs/cgroup"
# How long the first training process of a cell waits for the cell's agents to sample
# (a service made, scheduled, its container and Python started: 2 to 4 s here).
AGENT_START_TIMEOUT_S = 30.0
# A container's cgroup and network namespace go with it: once its process ended, a
# container of a cell with agents stays for the agent's interval and this margin (at
# most LINGER_MAX_S), so that the agent reads its final CPU time and traffic.
LINGER_MARGIN_S = 0.5
LINGER_MAX_S = 5.0
# The container's first process, then: runs the command (its output to its log) as a
# child, passes SIGTERM, SIGINT and SIGHUP on to it (a signal also cuts the stay short),
# and exits with its status (128 + N for a signal N, as a shell reports it).
LINGER_SH = ('log=$0 linger=$1; shift; "$@" >>"$log" 2>&1 & child=$!; '
             "trap 'kill -TERM $child 2>/dev/null; linger=0' TERM INT HUP; "
             "while wait $child; code=$?; kill -0 $child 2>/dev/null; do :; done; "
             '[ "$linger" = 0 ] || { sleep "$linger" & wait $!; }; exit $code')


@dataclass(frozen=True)
class TaskSettings:
    """What the cluster needs of ``SwarmSettings`` (the provider's options, same names)."""

    swarm_host: str | None
    swarm_image: str
    swarm_python: str
    swarm_mtu: int
    swarm_shm_mb: int
    swarm_limits: str
    swarm_mounts: tuple[str, ...]
    swarm_links: dict = field(default_factory=dict)  # links.parse_swarm_links's


class SwarmCluster(Cluster):
    """The ready nodes of a Swarm; see the module docstring."""

    name = "swarm"

    def __init__(self, settings: TaskSettings, swarm_nodes: Sequence[SwarmNode]):
        from ..profiles import load_catalog

        self.settings = settings
        self._swarm = {n.name: n for n in swarm_nodes}
        catalog = load_catalog()
        self._nodes = []
        self._link_mbit: dict[str, float] = {}
        # An emulated board (on a host of boards, boards.py) always has its profile's limits.
        limits = {n.name: "profile" if n.host else settings.swarm_limits for n in swarm_nodes}
        for n in swarm_nodes:
            profile = catalog.node_profiles(n.profile, 1)[0]
            self._link_mbit[n.name] = profile.link_mbit
            self._nodes.append(Node(
                name=n.name, address=n.name, profile=n.profile, tier=n.tier or profile.tier,
                **task_limits(n.profile, limits[n.name]),
                # A task limited to a profile's quota is a board emulated on a machine
                # that is not it: the machine's power meters are not the board's.
                scope=NodeScope(interfaces=(OVERLAY_IFACE,),
                                board_cores=profile.board_cores or None,
                                own_meters=limits[n.name] != "profile")))
        self.controller = f"{socket.gethostname()}:{os.getpid()}"
        self._lock = threading.Lock()
        self._cells: dict[str, _Cell] = {}
        self._relays = TaskRelays()
        remove_left_behind(settings.swarm_host, socket.gethostname())

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def tier_links(self) -> dict[str, TierLink]:
        """``--swarm-links``, by ``link_key``."""
        return tier_links(self.settings.swarm_links)

    def link_address(self, source: Node, target: Node, port: int) -> tuple[str, int]:
        """Through the relay in ``target``'s task when ``--swarm-links`` links the two
        nodes' tiers (``links``: ask before the cell starts its process on ``target``);
        else ``target`` itself."""
        link = link_between(self.tier_links(), source, target)
        if link is None:
            return target.address, port
        return target.address, self._relays.port(target.name, port, link)

    def start(self, node: Node, argv: Sequence[str], env: Mapping[str, str],
              log_path: Path, *, confine: bool = True,
              role: str | None = None) -> subprocess.Popen:
        # The runner's layout: <sweep>/cells/<id>/attempt-<N>/logs/<name>.log.
        cell_dir = Path(log_path).parent.parent
        cell = self._cell(cell_dir)
        if not confine:
            return self._start_agent(cell, node, argv, env, Path(log_path), cell_dir)
        return self._start_task(cell, cell_dir, node, argv, env, Path(log_path), role)[0]

    def _start_task(self, cell: "_Cell", cell_dir: Path, node: Node, argv: Sequence[str],
                    env: Mapping[str, str], log_path: Path, role: str | None
                    ) -> tuple[subprocess.Popen, str]:
        """A confined process's service and its task process; and its alias."""
        network, alias = self._cell_network(cell, cell_dir, node, role or "process")
        # The cell's agents sample from before its first container starts, so that each
        # container's counters (from 0) are bracketed by their samples.
        self._await_agents(cell)
        service = self.service_spec(node, argv, env, Path(log_path), cell_dir, network,
                                    alias, role or "process", True,
                                    linger_s=cell.linger_s)
        # Where the node's agent learns this container (``--containers``).
        register = containers_dir(cell_dir, node) / f"{service['name']}.json"
        return self._task_process(node, service, Path(log_path), register={
            "path": str(register), "role": role or "process"}), alias

    def entry(self, node: Node, *, role: str | None = None, origin: Node | None = None,
              cell_dir: Path | None = None) -> NodeEntry:
        """For an MPI launcher on ``origin``: its own node as it is (the launcher's
        container), any other node through an entry started there now (``mpi_entry``)."""
        if origin is None or cell_dir is None or node.name == origin.name:
            return NodeEntry()
        cell = self._cell(cell_dir)
        ticket_path = write_ticket(cell_dir, node)
        argv, env = entry_command(sys.executable, ticket_path, node, cell_dir)
        proc, alias = self._start_task(cell, cell_dir, node, argv, env,
                                       cell_dir / "logs" / f"orted-{node.name}.log",
                                       role or "worker")
        with self._lock:
            cell.entries.append(proc)
        return NodeEntry(via_prefix(self.settings.swarm_python, alias, ticket_path, node))

    def _start_agent(self, cell: "_Cell", node: Node, argv: Sequence[str],
                     env: Mapping[str, str], log_path: Path, cell_dir: Path
                     ) -> subprocess.Popen:
        """The node's metrics agent as a service of its own on the node (no network,
        no limit), reading the node's /proc and cgroup tree mounted read-only, told
        which containers are the cell's by the files their task processes write."""
        argv = [*argv, "--containers", str(containers_dir(cell_dir, node)),
                "--proc-root", HOST_PROC, "--cgroup-root", HOST_CGROUP]
        alias = f"{node.name}-{AGENT_ROLE}"
        service = self.service_spec(node, argv, env, log_path, cell_dir, None, alias,
                                    AGENT_ROLE, False, name=f"{cell_name(cell_dir)}-{alias}")
        proc = self._task_process(node, service, log_path)
        spool = argv[argv.index("--spool") + 1] if "--spool" in argv else None
        interval_s = float(argv[argv.index("--interval") + 1]) if "--interval" in argv else 1.0
        with self._lock:
            cell.agents.append((proc, Path(spool) if spool else None))
            cell.linger_s = min(interval_s + LINGER_MARGIN_S, LINGER_MAX_S)
        return proc

    def _task_process(self, node: Node, service: dict, log_path: Path,
                      register: dict | None = None) -> subprocess.Popen:
        """The process on the controller standing for ``service`` (``task``)."""
        proc = popen_in_group([sys.executable, "-m", "profiler.cluster.swarm.task"],
                              {}, log_path, stdin=subprocess.PIPE, parent_death_signal=15)
        try:
            proc.stdin.write(json.dumps({
                "host": self.settings.swarm_host, "node": node.name,
                "node_id": self._swarm[node.name].id, "service": service,
                "register": register}).encode() + b"\n")
            proc.stdin.close()
        except OSError:
            pass  # gone already: its exit status tells the runner
        return proc

    def _await_agents(self, cell: "_Cell") -> None:
        """Wait (once a cell) until each of its agents wrote its first sample, ended, or
        ``AGENT_START_TIMEOUT_S`` passed (then the cell runs without its samples)."""
        from ...agent.spool import segments

        if cell.agents_awaited:
            return
        cell.agents_awaited = True
        deadline = time.monotonic() + AGENT_START_TIMEOUT_S
        for proc, spool in cell.agents:
            while spool is not None and proc.poll() is None and time.monotonic() < deadline:
                if any(_sampled(path) for _, path in segments(spool)):
                    break
                time.sleep(0.1)

    def labels(self, cell_dir: Path, **more: str) -> dict[str, str]:
        return {LABEL: "1", f"{LABEL}.sweep": cell_dir.parents[2].name,
                f"{LABEL}.cell": str(cell_dir), f"{LABEL}.controller": self.controller,
                **{f"{LABEL}.{k}": v for k, v in more.items()}}

    def _cell(self, cell_dir: Path) -> "_Cell":
        with self._lock:
            return self._cells.setdefault(str(cell_dir), _Cell())

    def _cell_network(self, cell: "_Cell", cell_dir: Path, node: Node,
                      role: str) -> tuple[str, str]:
        """The cell's overlay (made at its first process) and this process's alias on it."""
        with self._lock:
            if cell.network is None:
                name = cell_name(cell_dir)
                with connect(self.settings.swarm_host) as client:
                    client.api.create_network(
                        name, driver="overlay", attachable=True, internal=True,
                        options={"com.docker.network.driver.mtu": str(self.settings.swarm_mtu)},
                        labels=self.labels(cell_dir))
                cell.network = name
            count = cell.started.get(node.name, 0)
            cell.started[node.name] = count + 1
        return cell.network, node.name if count == 0 else f"{node.name}-{role}{count}"

    def service_spec(self, node: Node, argv: Sequence[str], env: Mapping[str, str],
                     log_path: Path, cell_dir: Path, network: str | None, alias: str,
                     role: str, confine: bool, name: str | None = None,
                     linger_s: float = 0.0) -> dict:
        """The ``create_service`` arguments of one process (JSON: the task process posts
        them). ``network`` None: none (the agent); ``confine`` False: no limit, and the
        node's /proc and cgroup tree mounted read-only (the agent); ``linger_s``: how
        long the container stays once its process ended (``LINGER_SH``)."""
        from docker.types import (ContainerSpec, EndpointSpec, Mount,
                                  NetworkAttachmentConfig, Placement, Resources,
                                  RestartPolicy, ServiceMode, TaskTemplate)

        settings = self.settings
        # The controller's Python wherever the command names it: its first word, and
        # the rank's command inside an MPI launcher's (``mpirun ... python -m ...``).
        argv = [settings.swarm_python if a == sys.executable else str(a) for a in argv]
        if confine and network and alias == node.name:  # what link_address dials
            argv = self._relays.wrap(node.name, settings.swarm_python, argv,
                                     str(Path(log_path).with_name(f"relay-{node.name}.log")))
        task_env = {k: v for k, v in os.environ.items()
                    if k.startswith(PASSED_ENV_PREFIXES) and k not in SECRET_ENV_VARS}
        if "PYTHONPATH" in task_env:  # the task's folder is not the controller's
            task_env["PYTHONPATH"] = os.pathsep.join(
                os.path.abspath(p) for p in task_env["PYTHONPATH"].split(os.pathsep) if p)
        task_env.update(env)
        task_env.pop("DMLC_NODE_HOST", None)
        if "DMLC_ROLE" in task_env:
            task_env["DMLC_INTERFACE"] = OVERLAY_IFACE
            if task_env["DMLC_ROLE"] == "scheduler":
                task_env["DMLC_USE_KUBERNETES"] = "1"
        sweep_dir = cell_dir.parents[2]
        mounts = [Mount(str(sweep_dir), str(sweep_dir), type="bind")]
        if confine:
            mounts.append(Mount("/dev/shm", None, type="tmpfs",
                                tmpfs_size=settings.swarm_shm_mb * 1024 * 1024))
        else:
            mounts += [Mount(HOST_PROC, "/proc", type="bind", read_only=True),
                       Mount(HOST_CGROUP, "/sys/fs/cgroup", type="bind", read_only=True)]
        data = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--data-dir"]
        for path in (*settings.swarm_mounts, *data):
            if not Path(path).resolve().is_relative_to(sweep_dir):
                mounts.append(Mount(path, path, type="bind", read_only=True))
        limits = None
        if confine and node.cpu_cores:
            limits = Resources(cpu_limit=task_nano_cpus(node.cpu_cores),
                               mem_limit=(node.memory_mb or 0) * 1024 * 1024 or None)
        labels = self.labels(cell_dir, role=role, node=node.name)
        # The process's output goes to its log in the sweep's folder, as a process's would.
        command = (["sh", "-c", LINGER_SH, str(log_path), f"{linger_s:.2f}", *argv]
                   if linger_s > 0 else ["sh", "-c", 'exec "$@" >>"$0" 2>&1', str(log_path),
                                         *argv])
        swarm_node = self._swarm[node.name]
        if swarm_node.host:  # an emulated board shapes its link (boards.py)
            command = shaped_command(command, self._link_mbit[node.name],
                                     settings.swarm_mtu)
        container = ContainerSpec(
            settings.swarm_image, command=command, env=task_env, labels=labels,
            mounts=mounts, workdir=str(cell_dir), hostname=alias,
            stop_grace_period=int(STOP_GRACE_S * 1e9),
            cap_add=["NET_ADMIN"] if swarm_node.host else None)
        swarm_id = swarm_node.id
        template = TaskTemplate(
            container, resources=limits, restart_policy=RestartPolicy(condition="none"),
            placement=Placement(constraints=[f"node.id=={swarm_id}"]),
            networks=[NetworkAttachmentConfig(network, aliases=[alias])] if network else None)
        return {"task_template": template, "name": name or f"{network}-{alias}",
                "labels": labels,
                "mode": ServiceMode("replicated", replicas=1),
                "endpoint_spec": EndpointSpec(mode="dnsrr")}

    def collect(self, cell_dir: Path, nodes: Sequence[Node]) -> list[str]:
        """The cell's files are in the sweep's folder already (bind mount): remove the
        cell's services (the task processes removed theirs, unless killed) and network.
        A node whose daemon stopped answering keeps its tasks: it is named (the manager
        marks it down within its heartbeat, 5 s by default)."""
        with self._lock:
            cell = self._cells.pop(str(cell_dir), None)
        if cell and cell.entries:  # MPI entries no daemon came to (the launcher failed)
            kill_groups(cell.entries, grace_s=TASK_STOP_WAIT_S + 1.0)
        return remove_labelled(self.settings.swarm_host, {f"{LABEL}.cell": str(cell_dir)})

    def close(self) -> None:
        """Remove whatever of this controller's is left on the Swarm."""
        remove_labelled(self.settings.swarm_host, {f"{LABEL}.controller": self.controller})


@dataclass
class _Cell:
    """What the cluster keeps of a cell while it runs: its overlay (made at its first
    training process), the processes started on each node, and its agents (their task
    processes and spools), awaited once before its first training process."""

    network: str | None = None
    started: dict[str, int] = field(default_factory=dict)
    agents: list[tuple[subprocess.Popen, Path | None]] = field(default_factory=list)
    agents_awaited: bool = False
    linger_s: float = 0.0  # how long its containers stay once their process ended
    entries: list[subprocess.Popen] = field(default_factory=list)  # MPI (mpi_entry)


def cell_name(cell_dir: Path) -> str:
    """The name of a cell's overlay network, and the stem of its services' names."""
    return "edgeprof-" + hashlib.sha1(str(cell_dir).encode()).hexdigest()[:12]


def containers_dir(cell_dir: Path, node: Node) -> Path:
    """The folder naming the cell's containers on ``node`` for its agent: one JSON file
    per service, written by its task process once the container runs."""
    return cell_dir / "containers" / node.name


def _sampled(segment: Path) -> bool:
    """Whether a spool segment holds a sample (a line after its header)."""
    try:
        with open(segment, "rb") as handle:
            return handle.read(1 << 16).count(b"\n") >= 2
    except OSError:
        return False


def task_limits(profile: str, limits: str) -> dict:
    """``cpu_cores`` and ``memory_mb`` a task gets on a node of ``profile`` (None: no
    limit) under ``--swarm-limits``."""
    from ..profiles import load_catalog

    if limits != "profile":
        return {"cpu_cores": None, "memory_mb": None}
    spec = load_catalog().node_profiles(profile, 1)[0]
    return {"cpu_cores": spec.cpu_cores, "memory_mb": spec.memory_mb}


def task_nano_cpus(cpu_cores: float) -> int:
    """A task's CPU limit for ``cpu_cores``, in Swarm's NanoCPUs: the share the emulated
    cluster's CFS quota and period give (``cgroups.cfs_quota_us``), rounded down, so that
    a task on an emulated node of the same profile (its daemon's ``--cgroup-parent``)
    never asks more than the node holds (cgroup v1 refuses a child quota above its
    parent's: 0.7 cores is 1000/1429 us there, 0.69979)."""
    from ..cgroups import cfs_quota_us

    quota_us, period_us = cfs_quota_us(cpu_cores)
    return quota_us * 10**9 // period_us


def remove_labelled(host: str | None, labels: dict[str, str],
                    wait_s: float = REMOVE_WAIT_S) -> list[str]:
    """Remove the services carrying ``labels``, wait until the nodes removed their
    containers (a removed service's tasks stay listed, desired ``remove``, until then),
    then remove the networks carrying ``labels``. What was still there after ``wait_s``,
    one problem a line; a node the manager marks down (its daemon stopped answering)
    is not waited for and is named instead."""
    from docker.errors import APIError, NotFound

    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    try:
        with connect(host) as client:
            networks = {n["Id"]: n["Name"] for n in client.api.networks(filters=filters)}
            services = {s["ID"] for s in client.api.services(filters=filters)}
            for service in services:
                with contextlib.suppress(NotFound):
                    client.api.remove_service(service)
            deadline = time.monotonic() + wait_s
            down: dict[str, str] = {}
            while True:
                # Tasks of these services, or of services a task process removed (their
                # containers carry the same labels: the agents' have no network).
                tasks = [t for t in client.api.tasks() if t.get("ServiceID") in services
                         or labels.items() <= _container_labels(t).items()]
                if tasks:
                    down.update(nodes_down(client, {t.get("NodeID", "") for t in tasks}))
                    tasks = [t for t in tasks if t.get("NodeID") not in down]
                if not tasks or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            left = [f"{len(tasks)} tasks"] if tasks else []
            for network, name in networks.items():
                try:
                    client.api.remove_network(network)
                except NotFound:
                    pass
                except APIError as exc:
                    left.append(f"network {name} ({exc.explanation})")
    except ClusterError as exc:
        return [str(exc)]
    return [*down.values(), *([f"the Swarm kept {', '.join(left)}"] if left else [])]


def _container_labels(task: dict) -> dict[str, str]:
    return task.get("Spec", {}).get("ContainerSpec", {}).get("Labels") or {}


def nodes_down(client, node_ids: set[str]) -> dict[str, str]:
    """Of ``node_ids``, those the manager no longer counts ready (their daemon stopped,
    or the board is off): {id: "node NAME (down: the manager's message)"}."""
    found = {}
    for node in client.api.nodes():
        status = node.get("Status", {})
        if node["ID"] in node_ids and status.get("State") != "ready":
            found[node["ID"]] = (f"node {node_name(node)} ({status.get('State', '?')}: "
                                 f"{status.get('Message') or 'its daemon does not answer'})")
    return found


def remove_left_behind(host: str | None, hostname: str) -> None:
    """Remove what a controller on ``hostname`` that no longer runs left on the Swarm."""
    with connect(host) as client:
        found = {*(s["Spec"].get("Labels", {}).get(f"{LABEL}.controller", "")
                   for s in client.api.services(filters={"label": LABEL})),
                 *(n.get("Labels", {}).get(f"{LABEL}.controller", "")
                   for n in client.api.networks(filters={"label": LABEL}))}
    for controller in sorted(found):
        where, _, pid = controller.rpartition(":")
        if where == hostname and pid.isdigit() and not _running(int(pid)):
            remove_labelled(host, {f"{LABEL}.controller": controller})


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
