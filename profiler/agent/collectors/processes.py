"""``proc``: RSS, its high-water mark, CPU share and CPU time of each training process
(with its descendants), by role.

Also where the node's roles come from: the sampler tags every node-level point with
``role_tag()`` (the roles present in the pids file, or among the cell's containers of
an agent given ``--containers``).

Read from ``/proc`` directly (``status``, ``stat``, ``task/*/children``), under a root
that can be another mount of it: an agent in a container reads the node's processes
through the node's /proc mounted in it (``--proc-root``), where psutil reads only the
one mount its module-wide ``PROCFS_PATH`` names (the agent's own figures too).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from .base import Collector, Field, Sample

log = logging.getLogger(__name__)
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


class Processes(Collector):
    """RSS and CPU of each training process (with its descendants), by role.

    The cell runner rewrites ``pids_file`` ({"worker": [pid, ...], ...}) as it starts
    processes; it is re-read whenever its mtime changes.
    """

    FIELDS = (
        Field("proc", "rss_mb", "MB", "resident memory of the process and its descendants"),
        Field("proc", "rss_hwm_mb", "MB",
              "their peak resident memory so far (each one's VmHWM, summed: an upper bound "
              "of their simultaneous peak)"),
        Field("proc", "cpu_percent", "% of one core", "CPU of the process and its descendants"),
        Field("proc", "cpu_s", "s",
              "CPU seconds used so far by the process and its descendants, a counter: each "
              "one's user + system time and that of the children it reaped (a tree member "
              "that exits takes its own away)"),
        Field("proc", "num_procs", "count", "processes counted: it and its descendants (int)"),
        Field("proc", "num_threads", "count", "their threads (int)"),
    )
    TAGS = {"proc": "proc: `<role>-<index in the pids file>` (and `role` is the "
                    "process's own role)"}

    @classmethod
    def create(cls, config, spool):
        if config.containers is not None:
            return cls(None, containers=config.container_set(), proc_root=config.proc_root)
        return cls(config.pids_file, proc_root=config.proc_root)

    def __init__(self, pids_file: Path | None, *, containers=None, proc_root: str = "/proc"):
        self.pids_file = Path(pids_file) if pids_file else None
        self.containers = containers  # a ContainerSet: the roles are its containers'
        self.proc_root = str(proc_root)
        self._mtime_ns = -1
        self._unparsed_mtime_ns = -1  # mtime of a read that was not valid JSON
        self.roles: dict[str, list[int]] = {}
        # (pid, start time) -> (monotonic s, its own CPU seconds) at the last reading
        self._cpu: dict[tuple[int, int], tuple[float, float]] = {}

    def refresh(self) -> None:
        """Re-read the pids file if its mtime changed (one ``stat`` per tick otherwise).

        A file that is not ``{"role": [pid, ...]}`` (``[1]``, ``{"worker": "x"}``, or
        invalid JSON twice at the same mtime, i.e. not a write in progress) means "no
        roles", with one WARNING per change of the file.
        """
        if self.containers is not None:
            self.roles = self.containers.roles()
            return
        if self.pids_file is None:
            return
        try:
            mtime_ns = self.pids_file.stat().st_mtime_ns
            if mtime_ns == self._mtime_ns:
                return
            text = self.pids_file.read_text()
        except OSError:
            return  # not written yet (or mid-rename): keep what we had
        try:
            raw = json.loads(text)
        except ValueError as exc:
            if mtime_ns != self._unparsed_mtime_ns:
                # Maybe caught mid-write by a writer that does not rename: read it
                # again next tick before calling it malformed.
                self._unparsed_mtime_ns = mtime_ns
                return
            raw = exc
        self._mtime_ns = mtime_ns
        roles = _parse_roles(raw)
        if roles is None:
            log.warning("--pids-file %s is not {\"role\": [pid, ...]} (%s): no process "
                        "metrics and role \"none\" until it is rewritten", self.pids_file,
                        str(raw)[:80])
            roles = {}
        self.roles = roles

    def role_tag(self) -> str:
        """The roles present on this node, e.g. "worker" or "scheduler+server"."""
        self.refresh()
        present = sorted(role for role, pids in self.roles.items() if pids)
        return "+".join(present) if present else "none"

    def _descendants(self, pid: int) -> list[int]:
        """The process's descendants, from /proc/<pid>/task/*/children when available.

        psutil's ``children()`` reads /proc/*/stat of every process on the machine
        (3 ms a tick here, most of the agent's CPU budget); the kernel's children
        lists cost a few small reads. A kernel without them is read the long way.
        """
        root = self.proc_root
        found: list[int] = []
        stack = [pid]
        try:
            while stack:
                parent = stack.pop()
                for tid in os.listdir(f"{root}/{parent}/task"):
                    with open(f"{root}/{parent}/task/{tid}/children") as handle:
                        kids = [int(child) for child in handle.read().split()]
                    stack.extend(kids)
                    found.extend(kids)
            return found
        except FileNotFoundError:
            if not os.path.exists(f"{root}/{pid}/task/{pid}/children"):  # kernel without it
                return _descendants_by_parent(root, pid)
            return found  # a process exited while walking: report the rest
        except (OSError, ValueError):
            return found

    def _cpu_percent(self, pid: int, start: int, own_s: float, now: float) -> float:
        """The process's CPU since its last reading, in % of one core (0 when first seen,
        as psutil's ``cpu_percent``)."""
        before = self._cpu.get((pid, start))
        self._cpu[(pid, start)] = (now, own_s)
        if before is None:
            return 0.0
        return 100.0 * max(0.0, own_s - before[1]) / max(now - before[0], 1e-9)

    def collect(self) -> list[Sample]:
        self.refresh()
        samples: list[Sample] = []
        seen: set[tuple[int, int]] = set()
        now = time.monotonic()
        for role, pids in sorted(self.roles.items()):
            for index, pid in enumerate(pids):
                if not os.path.exists(f"{self.proc_root}/{pid}"):
                    continue  # exited: nothing to report
                tree = [pid] + self._descendants(pid)
                rss_kb, hwm_kb, cpu_percent, cpu_s, threads, alive = 0, 0, 0.0, 0.0, 0, 0
                for member in tree:
                    try:
                        rss, hwm, count = _status(member, self.proc_root)
                        start, own_s, reaped_s = _stat(member, self.proc_root)
                    except (OSError, ValueError, KeyError, IndexError):
                        continue  # exited, or a zombie (no memory left to report)
                    rss_kb, hwm_kb, threads = rss_kb + rss, hwm_kb + hwm, threads + count
                    cpu_percent += self._cpu_percent(member, start, own_s, now)
                    # A reaped descendant's time is in its reaper's children's fields.
                    cpu_s += own_s + reaped_s
                    alive += 1
                    seen.add((member, start))
                if not alive:
                    # Gone (a zombie until its parent reaps it): a sample of 0 MB would
                    # pass for a reading of its memory.
                    continue
                samples.append(("proc", {"role": role, "proc": f"{role}-{index}"},
                                {"rss_mb": rss_kb / 1024, "rss_hwm_mb": hwm_kb / 1024,
                                 "cpu_percent": cpu_percent, "cpu_s": round(cpu_s, 3),
                                 "num_procs": alive, "num_threads": threads}))
        for key in set(self._cpu) - seen:
            del self._cpu[key]  # forget exited processes
        return samples


def _status(pid: int, root: str = "/proc") -> tuple[int, int, int]:
    """(VmRSS kB, VmHWM kB, threads) of a process: one read of /proc/PID/status.

    VmHWM is the kernel's high-water mark of the process's resident memory: a peak
    between two ticks is in it. A zombie (or kernel thread) has no VmRSS: KeyError.
    """
    with open(f"{root}/{pid}/status", "rb") as handle:
        text = handle.read()
    found = {}
    for line in text.split(b"\n"):
        key = line[:6]
        if key in (b"VmRSS:", b"VmHWM:") or line.startswith(b"Threads:"):
            found[key] = int(line.split()[1])
    return found[b"VmRSS:"], found.get(b"VmHWM:", 0), found.get(b"Thread", 0)


def _stat(pid: int, root: str = "/proc") -> tuple[int, float, float]:
    """(start time in ticks, its own CPU seconds, its reaped children's CPU seconds) of
    a process: one read of /proc/PID/stat (user + system time of each)."""
    with open(f"{root}/{pid}/stat", "rb") as handle:
        text = handle.read()
    # The name (field 2) may hold spaces and parentheses: the fields follow its last ')'.
    fields = text[text.rindex(b")") + 2:].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (int(fields[19]), (utime + stime) / _TICKS_PER_S,
            (cutime + cstime) / _TICKS_PER_S)


def _descendants_by_parent(root: str, pid: int) -> list[int]:
    """``pid``'s descendants from every process's parent (a kernel without children
    lists): one read of each /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for name in os.listdir(root):
        if not name.isdigit():
            continue
        try:
            with open(f"{root}/{name}/stat", "rb") as handle:
                text = handle.read()
            parent = int(text[text.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(name))
    found, stack = [], [pid]
    while stack:
        kids = children.get(stack.pop(), [])
        found.extend(kids)
        stack.extend(kids)
    return found


def _parse_roles(raw) -> dict[str, list[int]] | None:
    """``{"role": [pid, ...]}`` with positive int pids (or digit strings), else None."""
    if not isinstance(raw, dict):
        return None
    roles: dict[str, list[int]] = {}
    for role, pids in raw.items():
        if not isinstance(pids, list):
            return None
        parsed = []
        for pid in pids:
            if isinstance(pid, bool) or not isinstance(pid, (int, str)):
                return None
            if isinstance(pid, str) and not pid.strip().isdigit():
                return None
            if int(pid) <= 0:
                return None
            parsed.append(int(pid))
        roles[str(role)] = parsed
    return roles
