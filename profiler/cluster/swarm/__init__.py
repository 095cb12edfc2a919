"""Nodes of a Docker Swarm (``--cluster swarm``): each process of a cell is a Swarm
service of one task, pinned to its node.

One module per job: ``engine`` connects to the manager's Engine API (Docker SDK) and
reads the Swarm's nodes, ``services`` makes a process's service spec and removes what a
cell or a sweep left, ``cluster`` is the ``SwarmCluster`` the sweep runs on, ``task`` is
the small process on the controller that stands for one service (the runner waits on it
and kills it as it does any process). This module holds the provider's settings only
and imports the others (and the Docker SDK) when it needs them: the registry
(``profiler.cluster``) imports it, and so does every ``remote_exec`` on a node.

A node's profile is its Swarm label ``edgeprof.profile`` (``docker node update
--label-add edgeprof.profile=pi4 NODE``), its name the label ``edgeprof.node`` or else its
hostname. docs/swarm.md says how to set a Swarm of boards up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ContextManager

from ...errors import ConfigError
from ..base import Cluster, ClusterSettings, GridNeeds, ProviderOption

DEFAULT_IMAGE = "edgeprof:latest"
# Where the trainer's Python is in edgeprof's image (`edgeprof image build`).
DEFAULT_PYTHON = "/opt/edgeprof/venv/bin/python"
# Swarm's VXLAN overlay adds 50 bytes to each packet: under a 1450-byte underlay its
# default 1450 breaks, 1400 fits every Ethernet link. On edgeprof's emulated nodes (links
# of 9000-byte frames, ``netns.LINK_MTU``) 8950 sends as few packets as the processes
# do: at 1400 the overlay's per-packet work under the nodes' quotas cost DDP a quarter
# of its samples/s (docs/swarm.md, the cost benchmark).
VXLAN_OVERHEAD_BYTES = 50
DEFAULT_MTU = 1400
DEFAULT_SHM_MB = 256
LIMITS = ("profile", "none")


HOST_SCHEMES = ("unix", "tcp", "ssh", "http", "https")


def _host(text: str) -> str:
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in HOST_SCHEMES or not rest:
        raise ConfigError(f"--swarm-host {text} is not the address of an Engine API: give "
                          "unix:///var/run/docker.sock, tcp://HOST:2375 or ssh://USER@HOST "
                          "(a Swarm manager's)")
    return text


def _mtu(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 576 <= value <= 9000:
        raise ConfigError(f"--swarm-mtu {text}: give the overlay's MTU in bytes, from 576 to "
                          f"9000 ({DEFAULT_MTU} fits every Ethernet underlay)")
    return value


def _shm_mb(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"--swarm-shm-mb {text}: give /dev/shm's size in MB, e.g. "
                          f"{DEFAULT_SHM_MB}")
    return value


def _limits(text: str) -> str:
    if text not in LIMITS:
        raise ConfigError(f"--swarm-limits {text}: give profile (each task gets its node "
                          "profile's CPU quota and memory limit) or none (a real board is "
                          "its own limit)")
    return text


def _mounts(text: str) -> tuple[str, ...]:
    paths = tuple(p for p in text.split(",") if p)
    for path in paths:
        if not path.startswith("/"):
            raise ConfigError(f"--swarm-mounts {text}: give absolute paths, comma-separated "
                              "(each bind-mounted read-only at the same path)")
    return paths


def _links(text: str) -> dict:
    from .links import parse_swarm_links
    return parse_swarm_links(text)


@dataclass
class SwarmSettings(ClusterSettings):
    """``--cluster swarm``: the manager at ``--swarm-host``, the image, the overlay's MTU,
    the tasks' limits and ``/dev/shm``, and the host paths the tasks see read-only."""

    swarm_host: str | None = None
    swarm_image: str = DEFAULT_IMAGE
    swarm_python: str = DEFAULT_PYTHON
    swarm_mtu: int = DEFAULT_MTU
    swarm_shm_mb: int = DEFAULT_SHM_MB
    swarm_limits: str = "profile"
    swarm_mounts: tuple[str, ...] = ()
    swarm_links: dict = field(default_factory=dict)
    # The nodes read by the last ``check``, which ``open`` reuses.
    _checked: list | None = field(default=None, init=False, repr=False, compare=False)

    name = "swarm"
    help = "Docker Swarm services, with --swarm-host"
    options = (
        ProviderOption(
            "swarm_host", metavar="URL", identity=True, parse=_host,
            help="--cluster swarm: the Swarm manager's Engine API (unix:///var/run/"
                 "docker.sock, tcp://HOST:2375, ssh://USER@HOST) [default: DOCKER_HOST, "
                 "else the local socket]."),
        ProviderOption(
            "swarm_image", default=DEFAULT_IMAGE, metavar="IMAGE", identity=True,
            help="--cluster swarm: the image every task runs, present on every node "
                 "(`edgeprof image build`; no registry is needed)."),
        ProviderOption(
            "swarm_python", default=DEFAULT_PYTHON, metavar="PATH",
            help="--cluster swarm: the trainer's Python inside the image."),
        ProviderOption(
            "swarm_mtu", default=DEFAULT_MTU, parse=_mtu, metavar="BYTES", identity=True,
            help="--cluster swarm: MTU of each cell's overlay network (VXLAN takes 50 "
                 "bytes of the underlay's: 8950 on edgeprof's emulated nodes, whose "
                 "links carry 9000-byte frames)."),
        ProviderOption(
            "swarm_shm_mb", default=DEFAULT_SHM_MB, parse=_shm_mb, metavar="MB",
            help="--cluster swarm: size of each task's /dev/shm (a tmpfs mount: services "
                 "have no --shm-size)."),
        ProviderOption(
            "swarm_limits", default="profile", parse=_limits, metavar="profile|none",
            identity=True,
            help="--cluster swarm: each task's CPU and memory limit: its node profile's "
                 "(emulated boards) or none (real boards)."),
        ProviderOption(
            "swarm_mounts", default=(), parse=_mounts, metavar="PATHS",
            help="--cluster swarm: host paths bind-mounted read-only at the same path in "
                 "every task, comma-separated (a development image running this host's "
                 "code)."),
        ProviderOption(
            "swarm_links", default={}, parse=_links, metavar="JSON", identity=True,
            help="--cluster swarm: delayed links between the nodes' tiers, as a mix's "
                 "links: ('{\"end-edge\": {\"delay_ms\": 250, \"mbit\": 36}}'), held by "
                 "a relay in the target's task (docs/tiers.md)."),
    )
    speed = "board"

    def __post_init__(self) -> None:
        if isinstance(self.swarm_mounts, str):
            self.swarm_mounts = _mounts(self.swarm_mounts)
        self.swarm_mounts = tuple(self.swarm_mounts or ())
        if isinstance(self.swarm_links, str):
            self.swarm_links = _links(self.swarm_links)

    @classmethod
    def cluster_type(cls) -> type[Cluster]:
        from .cluster import SwarmCluster
        return SwarmCluster

    @property
    def label(self) -> str:
        return f"swarm cluster ({self.swarm_host or 'local Engine'}, {self.swarm_image})"

    def status(self) -> list[dict]:
        """The Swarm's ready nodes: name, id, role, address, profile, tier (its label; None:
        its profile's) and the limits a task gets there (``edgeprof cluster status
        --swarm-host URL``)."""
        from .cluster import task_limits
        from .engine import connect, swarm_nodes

        with connect(self.swarm_host) as client:
            found = swarm_nodes(client, self.swarm_host)
        return [{"name": n.name, "id": n.id[:12], "role": n.role, "address": n.address,
                 "profile": n.profile, "tier": n.tier,
                 **task_limits(n.profile, "profile" if n.host else self.swarm_limits)}
                for n in found]

    def status_lines(self, info) -> list[str]:
        lines = [f"swarm at {self.swarm_host or 'the local Engine'}: {len(info)} ready nodes",
                 f"{'node':<10} {'id':<12} {'role':<8} {'address':<15} {'profile':<8} "
                 f"{'cores':>6} {'mem MB':>7}"]
        for n in info:
            lines.append(f"{n['name']:<10} {n['id']:<12} {n['role']:<8} {n['address']:<15} "
                         f"{n['profile']:<8} {n['cpu_cores'] or '-':>6} "
                         f"{n['memory_mb'] or '-':>7}")
        return lines

    def check(self, needs: GridNeeds) -> None:
        """Reach the manager, read its nodes (each with a known profile), find the image."""
        super().check(needs)
        self._checked = self._nodes(needs)

    def open(self, needs: GridNeeds) -> ContextManager[Cluster]:
        from .cluster import SwarmCluster, TaskSettings

        swarm_nodes = self._checked if self._checked is not None else self._nodes(needs)
        self._checked = None
        settings = TaskSettings(**{o.name: getattr(self, o.name) for o in self.options})
        return self.closing(SwarmCluster(settings, swarm_nodes))

    def _nodes(self, needs: GridNeeds) -> list:
        from .engine import check_image, connect, swarm_nodes

        with connect(self.swarm_host) as client:
            found = swarm_nodes(client, self.swarm_host)
            if len(found) < needs.nodes:
                raise ConfigError(f"the Swarm at {self.swarm_host or 'the local Engine'} has "
                                  f"{len(found)} ready nodes, the grid needs {needs.nodes}: "
                                  "join more nodes or use fewer --devices")
            check_image(client, self.swarm_image)
        return found
