"""The containers of a cell on this node, for an agent that runs in a container beside
them (``--containers``: the Swarm provider's agent, docs/swarm.md).

Such an agent samples each container's own cgroup (CPU, memory) and network namespace,
not the node's, and follows each container's processes as another agent follows a
role's pids. It learns which containers are the cell's from a folder the controller
writes, one JSON file per container (``<service>.json``, written whole by a rename)::

    {"role": "worker", "id": "<container id>", "pid": <its first process, host pid>}

Swarm's task status gives both the id and the pid (``ContainerStatus``); the pid is the
node's, so the agent reads the node's ``/proc`` (``--proc-root``: the node's /proc
mounted in the agent's container, e.g. ``/host/proc``) and its cgroup tree
(``--cgroup-root``). A container's cgroup directories come from
``<proc-root>/<pid>/cgroup``, checked to name the container's id (a pid reused by another
process is never taken for it); where that path is not under the cgroup root as
mounted (cgroup v2 seen from a private cgroup namespace: ``/../<id>``), the tree is
searched for the directory named by the id.

Containers stay in the set once seen, in the order of their files' names: the
collectors keep an ended container's last counters, so that the node's sums only rise.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# How deep under the cgroup root a container's directory is looked for, when its path
# cannot be read from /proc (docker's cgroupfs layout: <parent>/<id>, a node's parent
# at most a few levels down; systemd's: system.slice/docker-<id>.scope).
SEARCH_DEPTH = 6


@dataclass(frozen=True)
class Container:
    """One container of the cell on this node: its role, id, first process (a pid of
    the node's) and cgroup directories (CPU accounting, memory; None: not found)."""

    key: str
    role: str
    id: str
    pid: int
    cpu_dir: Path | None
    memory_dir: Path | None


class ContainerSet:
    """The containers listed in ``folder`` and resolved on this node (see the module
    docstring). ``refresh()`` costs one ``stat`` a tick while nothing changes."""

    def __init__(self, folder: Path, proc_root: str = "/proc",
                 cgroup_root: str = "/sys/fs/cgroup"):
        self.folder = Path(folder)
        self.proc_root = Path(proc_root)
        self.cgroup_root = Path(cgroup_root)
        self._mtime_ns = -1
        self._found: dict[str, Container] = {}
        self._pending: dict[str, dict] = {}
        self._refused: set[str] = set()

    def refresh(self) -> list[Container]:
        """Every container resolved so far, by file name (ended ones included)."""
        try:
            mtime_ns = self.folder.stat().st_mtime_ns
        except OSError:
            mtime_ns = -1  # not written yet: no container started
        if mtime_ns != self._mtime_ns:
            self._mtime_ns = mtime_ns
            self._read_folder()
        for key, entry in list(self._pending.items()):
            container = self._resolve(key, entry)
            if container is not None:
                self._found[key] = container
                del self._pending[key]
        return [self._found[key] for key in sorted(self._found)]

    def roles(self) -> dict[str, list[int]]:
        """``{role: [pid, ...]}`` of the containers, as a pids file would say it."""
        roles: dict[str, list[int]] = {}
        for container in self.refresh():
            roles.setdefault(container.role, []).append(container.pid)
        return roles

    def _read_folder(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.folder) if n.endswith(".json"))
        except OSError:
            return
        for name in names:
            key = name[:-len(".json")]
            if key in self._found or key in self._pending or key in self._refused:
                continue
            try:
                entry = json.loads((self.folder / name).read_text())
                entry = {"role": str(entry["role"]), "id": str(entry["id"]),
                         "pid": int(entry["pid"])}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("--containers %s: %s is not {role, id, pid} (%s): left out",
                            self.folder, name, exc)
                self._refused.add(key)
                continue
            if not entry["id"] or entry["pid"] <= 0:
                self._refused.add(key)
                continue
            self._pending[key] = entry

    def _resolve(self, key: str, entry: dict) -> Container | None:
        """The container of ``entry`` with its cgroup directories; None to try again
        next tick (its process not readable yet), and left out for good once its
        process is gone without having been seen."""
        try:
            text = (self.proc_root / str(entry["pid"]) / "cgroup").read_text()
        except OSError:
            if not (self.proc_root / str(entry["pid"])).exists():
                log.warning("container %s (%s) ended before it could be sampled",
                            key, entry["id"][:12])
                del self._pending[key]
                self._refused.add(key)
            return None
        paths = _cgroup_paths(text)
        if not any(entry["id"] in path for path in paths.values()):
            log.warning("process %d is not in container %s's cgroup: left out",
                        entry["pid"], entry["id"][:12])
            del self._pending[key]
            self._refused.add(key)
            return None
        cpu = self._directory(paths, ("cpuacct",), "cpuacct.usage", "cpu.stat", entry["id"])
        memory = self._directory(paths, ("memory",), "memory.usage_in_bytes",
                                 "memory.current", entry["id"])
        return Container(key, entry["role"], entry["id"], entry["pid"], cpu, memory)

    def _directory(self, paths: dict[str, str], controllers: tuple[str, ...], v1_file: str,
                   v2_file: str, container_id: str) -> Path | None:
        """The container's directory of a v1 controller (its hierarchy's mount is named
        by its controllers, ``cpu,cpuacct``), else of the v2 tree, else found by id."""
        for names, path in paths.items():
            if names and set(controllers) <= set(names.split(",")):
                found = self.cgroup_root / names / path.lstrip("/")
                if (found / v1_file).exists():
                    return found
        v2 = paths.get("")
        if v2 is not None:
            for base in (self.cgroup_root, self.cgroup_root / "unified"):
                found = base / v2.lstrip("/")
                if ".." not in Path(v2).parts and (found / v2_file).exists():
                    return found
        return _search(self.cgroup_root, container_id, (v1_file, v2_file), controllers)


def _cgroup_paths(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` as {controllers: path} ("" is the v2 hierarchy)."""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths[parts[1]] = parts[2]
    return paths


def _search(root: Path, container_id: str, files: tuple[str, ...],
            controllers: tuple[str, ...]) -> Path | None:
    """A directory under ``root`` (at most ``SEARCH_DEPTH`` down) whose name holds the
    container's id and which holds one of ``files``; under a v1 root only in the
    hierarchies of ``controllers``."""
    tops = [root / name for name in _listdir(root)
            if set(controllers) <= set(name.split(","))] or [root]
    for top in tops:
        base_depth = len(top.parts)
        for folder, subdirs, _ in os.walk(top):
            if container_id in os.path.basename(folder):
                if any((Path(folder) / name).exists() for name in files):
                    return Path(folder)
            if len(Path(folder).parts) - base_depth >= SEARCH_DEPTH:
                subdirs.clear()
    return None


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
