"""The Swarm manager's Engine API through the Docker SDK: connect, read the nodes, find
the image; every refusal one line naming the fix.

A node is ready when its state is ``ready`` and its availability ``active`` (a drained
or paused node is left out, as Swarm itself leaves it out of scheduling). Its name is its
``edgeprof.node`` label, else its hostname (several daemons on one host share one); its
profile is its ``edgeprof.profile`` label, a profile of the catalogue
(``profiler/cluster/profiles.yaml``). A node labelled ``edgeprof.boards=N`` hosts N
emulated boards of its profile, each a node of its own here (``boards.py``). Its tier in a
hierarchy (``Node.tier``) is its ``edgeprof.tier`` label (``end``, ``edge`` or ``cloud``),
else its profile's ``tier``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

from ...errors import ClusterError, ConfigError
from ..base import TIERS
from .boards import board_count, board_names

PROFILE_LABEL = "edgeprof.profile"
NAME_LABEL = "edgeprof.node"
TIER_LABEL = "edgeprof.tier"
CONNECT_TIMEOUT_S = 10
API_TIMEOUT_S = 60


def node_name(node: dict) -> str:
    """A Swarm node's name (the Engine API's node): its ``edgeprof.node`` label, else its
    hostname."""
    return ((node.get("Spec", {}).get("Labels") or {}).get(NAME_LABEL)
            or node.get("Description", {}).get("Hostname", node.get("ID", "?")[:12]))


@dataclass(frozen=True)
class SwarmNode:
    """One ready node of the Swarm: its id, name, profile and address on the underlay."""

    id: str
    name: str
    profile: str
    address: str
    role: str
    host: str = ""  # the Swarm node hosting this emulated board (boards.py), else ""
    tier: str | None = None  # its edgeprof.tier label (None: its profile's tier, if any)


def _where(host: str | None) -> str:
    return f"--swarm-host {host}" if host else "the local Engine (DOCKER_HOST or its socket)"


@contextlib.contextmanager
def connect(host: str | None, timeout_s: float = API_TIMEOUT_S) -> Iterator:
    """A ``docker.DockerClient`` of the manager at ``host`` (None: the environment's),
    checked to answer and to be a Swarm manager; closed after the ``with``."""
    import docker
    from docker.errors import DockerException

    try:
        client = (docker.DockerClient(base_url=host, timeout=CONNECT_TIMEOUT_S) if host
                  else docker.from_env(timeout=CONNECT_TIMEOUT_S))
        client.ping()
        info = client.info()
    except (DockerException, OSError) as exc:
        raise ClusterError(f"no Docker Engine answers at {_where(host)}: "
                           f"{_short(exc)}: start dockerd there, or give the manager's "
                           "address with --swarm-host") from None
    swarm = info.get("Swarm") or {}
    try:
        if swarm.get("LocalNodeState") != "active":
            raise ClusterError(f"the Docker Engine at {_where(host)} is not in a Swarm "
                               f"({swarm.get('LocalNodeState') or 'inactive'}): `docker swarm "
                               "init` there, or give a manager's address")
        if not swarm.get("ControlAvailable"):
            raise ClusterError(f"the Docker Engine at {_where(host)} is a Swarm worker, not a "
                               "manager: give a manager's address with --swarm-host "
                               "(`docker node ls` on a manager lists them)")
        client.api.timeout = timeout_s
        yield client
    finally:
        client.close()


def swarm_nodes(client, host: str | None) -> list[SwarmNode]:
    """The Swarm's ready nodes, sorted by name; a node without a known profile label is
    refused (one line, with the command that labels it)."""
    from ..profiles import load_catalog

    known = load_catalog().names()
    nodes = []
    for node in client.api.nodes():
        spec, status = node.get("Spec", {}), node.get("Status", {})
        if status.get("State") != "ready" or spec.get("Availability") != "active":
            continue
        labels = spec.get("Labels") or {}
        hostname = node.get("Description", {}).get("Hostname", "")
        name = labels.get(NAME_LABEL) or hostname
        profile = labels.get(PROFILE_LABEL)
        if not profile:
            raise ConfigError(f"Swarm node {name} ({node['ID'][:12]}) has no {PROFILE_LABEL} "
                              f"label: `docker node update --label-add {PROFILE_LABEL}=pi4 "
                              f"{node['ID'][:12]}` (one of {', '.join(known)})")
        if profile not in known:
            raise ConfigError(f"Swarm node {name} ({node['ID'][:12]}) has {PROFILE_LABEL}="
                              f"{profile}, not a node profile: use one of {', '.join(known)}")
        tier = labels.get(TIER_LABEL) or None
        if tier is not None and tier not in TIERS:
            raise ConfigError(f"Swarm node {name} ({node['ID'][:12]}) has {TIER_LABEL}="
                              f"{tier}, not a tier: `docker node update --label-add "
                              f"{TIER_LABEL}=end {node['ID'][:12]}` (one of "
                              f"{', '.join(TIERS)}), or --label-rm it")
        boards = board_count(labels, name, node["ID"])
        nodes += [SwarmNode(node["ID"], board, profile, status.get("Addr", ""),
                            spec.get("Role", ""), host=name if boards else "", tier=tier)
                  for board in (board_names(name, boards) if boards else [name])]
    names = [n.name for n in nodes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"Swarm nodes share the name {', '.join(twice)}: give each an "
                          f"{NAME_LABEL} label of its own (`docker node update --label-add "
                          f"{NAME_LABEL}=n1 NODE`)")
    return sorted(nodes, key=lambda n: _natural(n.name))


def check_image(client, image: str) -> None:
    """Refuse an image the manager does not hold (no registry: each node holds its own
    copy, loaded by ``docker load``; a worker without it rejects its task, which the
    cell's reason then names)."""
    from docker.errors import DockerException, ImageNotFound

    try:
        client.images.get(image)
    except ImageNotFound:
        raise ConfigError(f"--swarm-image {image} is not on the Swarm's manager: build it "
                          "(`edgeprof image build`) and load it on every node (`docker save "
                          "| docker load`), or name one `docker image ls` lists") from None
    except DockerException as exc:
        raise ClusterError(f"cannot look --swarm-image {image} up: {_short(exc)}") from None


def _natural(name: str) -> tuple:
    import re
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200]
