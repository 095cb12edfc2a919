"""Per-node cgroups of the emulated cluster: a CPU quota and a memory limit, v1 or v2.

Every node gets ``<controller root>/edgeprof/<node>`` (``edgeprof<k>`` for instance k,
see ``instance``) in each controller it needs:
cgroup v1 ``cpu`` (the CFS quota), ``cpuacct`` (CPU time, often the same directory as
``cpu``) and ``memory``; cgroup v2 one unified directory for all three. The groups sit
at the root of each hierarchy, as a container runtime's do, not under the caller's own
cgroup: a shell or CI job may remove its own cgroup when it ends, and the cluster must
outlive the ``edgeprof cluster up`` that created it.

v1 is preferred when its ``cpu`` and ``memory`` controllers are mounted: on a hybrid
host (v1 controllers plus an empty ``/sys/fs/cgroup/unified``) the v2 tree has no
controllers to give.
"""

from __future__ import annotations

import errno
import math
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ..cgroupfs import read_keyed
from ..errors import ClusterError
from . import instance

BASE_NAME = instance.NAME  # "edgeprof", or "edgeprof<k>" for instance k
MIN_CFS_PERIOD_US = 1000  # the kernel's limits: a period from 1 ms to 1 s,
MAX_CFS_PERIOD_US = 1_000_000
MIN_QUOTA_US = 1000  # and a quota of at least 1 ms
MOUNTS_FILE = Path("/proc/self/mounts")
_MB = 1024 * 1024
# The nodes' parent group weighs as much as 16 busy processes of the host (v1 cpu.shares;
# the default 1024 is one: a root-cgroup task weighs 1024 too) or v2's most: on a busy
# host the nodes still get their quotas, which stay their limit, instead of one
# process's share between all of them (a loaded host slowed every node alike and moved
# the emulated cluster's timings with it).
PARENT_CPU_SHARES = 16 * 1024
PARENT_CPU_WEIGHT = 10_000


@dataclass(frozen=True)
class CgroupLayout:
    """Where this host mounts the controllers the emulated cluster needs."""

    version: int
    cpu_root: Path
    cpuacct_root: Path
    memory_root: Path

    def roots(self) -> list[Path]:
        return _unique([self.cpu_root, self.cpuacct_root, self.memory_root])


def detect_layout(mounts_file: Path = MOUNTS_FILE) -> CgroupLayout:
    """Find the cpu, cpuacct and memory controllers (v1) or a v2 tree offering cpu+memory."""
    v1: dict[str, Path] = {}
    v2_mounts: list[Path] = []
    for line in mounts_file.read_text().splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mount_point, fs_type, options = Path(parts[1]), parts[2], parts[3].split(",")
        if fs_type == "cgroup":
            for controller in ("cpu", "cpuacct", "memory"):
                if controller in options:
                    v1.setdefault(controller, mount_point)
        elif fs_type == "cgroup2":
            v2_mounts.append(mount_point)
    if "cpu" in v1 and "memory" in v1:
        return CgroupLayout(1, v1["cpu"], v1.get("cpuacct", v1["cpu"]), v1["memory"])
    for mount_point in v2_mounts:
        controllers = _read(mount_point / "cgroup.controllers").split()
        if "cpu" in controllers and "memory" in controllers:
            return CgroupLayout(2, mount_point, mount_point, mount_point)
    raise ClusterError("no usable cgroup cpu and memory controllers (v1 'cpu'+'memory' or a "
                       "v2 tree offering both): boot with cgroups enabled, e.g. "
                       "cgroup_enable=memory on a Raspberry Pi")


@dataclass(frozen=True)
class NodeCgroup:
    """One node's cgroup directories (v2: the same directory three times)."""

    version: int
    cpu_dir: Path
    cpuacct_dir: Path
    memory_dir: Path

    def dirs(self) -> list[Path]:
        return _unique([self.cpu_dir, self.cpuacct_dir, self.memory_dir])

    def can_join_cpu_later(self) -> bool:
        """Whether the CPU quota is a hierarchy of its own (v1, ``cpu`` not co-mounted
        with ``cpuacct`` or ``memory``), so a process can be limited in memory and counted
        from its start but join the quota later (``workloads.node_limits``)."""
        return self.version == 1 and self.cpu_dir not in (self.cpuacct_dir, self.memory_dir)

    def attach(self, pid: int, *, cpu_quota: bool = True) -> None:
        """Move ``pid`` into every directory of the node (its children follow it);
        with ``cpu_quota=False`` into all but the CPU quota's (see ``can_join_cpu_later``).

        Safe in a ``preexec_fn``: only ``os`` calls, no locks, no allocation-heavy code.
        """
        data = str(pid).encode()
        for directory in self.dirs():
            if not cpu_quota and directory == self.cpu_dir:
                continue
            fd = os.open(str(directory / "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def set_limits(self, cpu_cores: float, memory_mb: int) -> None:
        """Apply the CFS quota and the hard memory limit, swap included."""
        self.set_cpu(cpu_cores)
        limit_bytes = str(int(memory_mb) * _MB)
        if self.version == 1:
            _write(self.memory_dir / "memory.limit_in_bytes", limit_bytes)
            # memsw (memory+swap) exists only with swap accounting; a Pi-like node must
            # not escape its limit into host swap when it does.
            memsw = self.memory_dir / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                _write(memsw, limit_bytes)
        else:
            _write(self.memory_dir / "memory.max", limit_bytes)
            swap_max = self.memory_dir / "memory.swap.max"
            if swap_max.exists():
                _write(swap_max, "0")

    def set_cpu(self, cpu_cores: float) -> None:
        """Apply the CFS quota of ``cpu_cores`` (quota / period), also to running processes."""
        quota_us, period_us = cfs_quota_us(cpu_cores)
        if self.version == 1:
            # The kernel checks each write alone: lift the quota first, so that no
            # intermediate quota/period pair falls outside its limits.
            _write(self.cpu_dir / "cpu.cfs_quota_us", "-1")
            _write(self.cpu_dir / "cpu.cfs_period_us", str(period_us))
            _write(self.cpu_dir / "cpu.cfs_quota_us", str(quota_us))
        else:
            _write(self.cpu_dir / "cpu.max", f"{quota_us} {period_us}")

    def cpu_quota_us(self) -> tuple[int, int] | None:
        """The CFS quota and period in force, in µs, as the kernel reports them (None: no
        quota, or the group is gone)."""
        if self.version == 1:
            quota, period = (_read(self.cpu_dir / name).strip()
                             for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
        else:
            quota, _, period = _read(self.cpu_dir / "cpu.max").strip().partition(" ")
        if not quota.lstrip("-").isdigit() or not period.isdigit() or int(quota) < 0:
            return None
        return int(quota), int(period)

    def has_cpu(self, cpu_cores: float) -> bool:
        """Whether the quota in force is the one ``set_cpu(cpu_cores)`` writes (read back:
        a controller killed while a node was slowed leaves another one behind)."""
        return self.cpu_quota_us() == cfs_quota_us(cpu_cores)

    def oom_kills(self) -> int:
        """Processes killed by this node's memory limit so far."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        fields = read_keyed(self.memory_dir / name)
        if "oom_kill" in fields:
            return fields["oom_kill"]
        if self.version == 1:
            # Kernels before 4.13 lack oom_kill: under_oom is the best remaining signal.
            return fields.get("under_oom", 0)
        return 0

    def cpu_usage_s(self) -> float:
        """CPU time the node's processes used (user + system), in seconds."""
        if self.version == 1:
            return int(_read(self.cpuacct_dir / "cpuacct.usage") or 0) / 1e9
        return read_keyed(self.cpuacct_dir / "cpu.stat").get("usage_usec", 0) / 1e6

    def memory_used_mb(self) -> float:
        """Memory charged to the node (page cache included, as the limit counts it)."""
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        return int(_read(self.memory_dir / name) or 0) / _MB

    def major_faults(self) -> int:
        """Pages the node's processes faulted in from disk so far (``memory.stat``)."""
        fields = read_keyed(self.memory_dir / "memory.stat")
        # cgroup v1 counts a group's own and its children's as total_*; v2 has one count.
        return fields.get("total_pgmajfault", fields.get("pgmajfault", 0))

    def pids(self) -> list[int]:
        found: set[int] = set()
        for directory in self.dirs():
            found.update(int(p) for p in _read(directory / "cgroup.procs").split())
        return sorted(found)


def cfs_period_us(cpu_cores: float) -> int:
    """The CFS period for a quota of ``cpu_cores``: the one that gives 1 ms of CPU a
    period (0.05 cores: 1 ms every 20 ms; 0.3 cores: every 3.3 ms), within the kernel's
    limits.

    Not the kernel's default 100 ms: a node of 0.05 cores would run 5 ms and then be
    frozen for 95 ms, answering a parameter server's message up to 95 ms late and
    paying its training steps in whole periods (a 5.6 ms step takes two). A slow board
    is slow all the time, not in bursts: the shortest slice the kernel allows spreads
    the quota evenly. And a node k times as fast (time dilation) gets a period k times
    as short, so the delays throttling adds shrink with the rest of the cell's time.
    """
    if cpu_cores <= 0:
        return MAX_CFS_PERIOD_US
    return min(MAX_CFS_PERIOD_US, max(MIN_CFS_PERIOD_US, math.ceil(MIN_QUOTA_US / cpu_cores)))


def cfs_quota_us(cpu_cores: float) -> tuple[int, int]:
    """The (quota, period) in µs that give ``cpu_cores`` (``cfs_period_us`` says which
    period; the kernel takes at least 1 ms of quota)."""
    period_us = cfs_period_us(cpu_cores)
    return max(MIN_QUOTA_US, int(round(cpu_cores * period_us))), period_us


def node_cgroup(layout: CgroupLayout, node_name: str) -> NodeCgroup:
    """The (possibly not yet created) cgroup of node ``node_name``."""
    return NodeCgroup(layout.version, layout.cpu_root / BASE_NAME / node_name,
                      layout.cpuacct_root / BASE_NAME / node_name,
                      layout.memory_root / BASE_NAME / node_name)


def create_node_cgroup(layout: CgroupLayout, node_name: str, cpu_cores: float,
                       memory_mb: int) -> NodeCgroup:
    """Create the node's cgroup directories and apply its limits."""
    group = node_cgroup(layout, node_name)
    try:
        if layout.version == 2:
            # v2 only hands controllers to children that the parent enables for them.
            _enable_v2_controllers(layout.cpu_root)
            (layout.cpu_root / BASE_NAME).mkdir(exist_ok=True)
            _enable_v2_controllers(layout.cpu_root / BASE_NAME)
        for directory in group.dirs():
            directory.mkdir(parents=True, exist_ok=True)
        _prioritise(layout)
        group.set_limits(cpu_cores, memory_mb)
    except OSError as exc:
        raise ClusterError(f"cannot set up cgroup for node {node_name} ({exc.strerror}: "
                           f"{exc.filename}): run as root on a host with cgroup cpu and "
                           f"memory controllers") from exc
    return group


def _prioritise(layout: CgroupLayout) -> None:
    """Give the nodes' parent group its weight (``PARENT_CPU_SHARES``), where the host
    has the file."""
    name, value = (("cpu.shares", PARENT_CPU_SHARES) if layout.version == 1
                   else ("cpu.weight", PARENT_CPU_WEIGHT))
    path = layout.cpu_root / BASE_NAME / name
    if path.exists():
        _write(path, str(value))


def remove_all(layout: CgroupLayout, timeout_s: float = 10.0) -> list[str]:
    """Kill what runs in any ``edgeprof`` cgroup and remove them all; returns the paths."""
    removed: list[str] = []
    for root in layout.roots():
        base = root / BASE_NAME
        if not base.is_dir():
            continue
        # Deepest first: a cgroup directory can only go once its children are gone.
        for directory in sorted((p for p in base.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True) + [base]:
            _empty_and_remove(directory, timeout_s)
            removed.append(str(directory))
    return removed


def _empty_and_remove(directory: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        for pid in (int(p) for p in _read(directory / "cgroup.procs").split()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            # EBUSY while killed processes are still exiting.
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise ClusterError(f"cannot remove cgroup {directory} ({exc.strerror}): "
                                   f"stop the processes in {directory}/cgroup.procs and run "
                                   f"`edgeprof cluster down` again") from exc
            time.sleep(0.05)


def _enable_v2_controllers(directory: Path) -> None:
    enabled = _read(directory / "cgroup.subtree_control").split()
    for controller in ("cpu", "memory"):
        if controller not in enabled:
            _write(directory / "cgroup.subtree_control", f"+{controller}")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _unique(paths: list[Path]) -> list[Path]:
    return list(dict.fromkeys(paths))
