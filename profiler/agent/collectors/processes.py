"""``proc``: RSS, its high-water mark, CPU share and CPU time of each training process
(with its descendants), by role.

Also where the node's roles come from: the sampler tags every node-level point with
``role_tag()`` (the roles present in the pids file).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import psutil

from .base import Collector, Field, Sample

log = logging.getLogger(__name__)


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
        return cls(config.pids_file)

    def __init__(self, pids_file: Path | None):
        self.pids_file = Path(pids_file) if pids_file else None
        self._mtime_ns = -1
        self._unparsed_mtime_ns = -1  # mtime of a read that was not valid JSON
        self.roles: dict[str, list[int]] = {}
        self._procs: dict[int, psutil.Process] = {}

    def refresh(self) -> None:
        """Re-read the pids file if its mtime changed (one ``stat`` per tick otherwise).

        A file that is not ``{"role": [pid, ...]}`` (``[1]``, ``{"worker": "x"}``, or
        invalid JSON twice at the same mtime, i.e. not a write in progress) means "no
        roles", with one WARNING per change of the file.
        """
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

    def _process(self, pid: int) -> psutil.Process:
        proc = self._procs.get(pid)
        if proc is None:
            proc = self._procs[pid] = psutil.Process(pid)
            proc.cpu_percent()  # primes it: the first call always returns 0
        return proc

    def _descendants(self, pid: int) -> list[psutil.Process]:
        """The process's descendants, from /proc/<pid>/task/*/children when available.

        psutil's ``children()`` reads /proc/*/stat of every process on the machine
        (3 ms a tick here, most of the agent's CPU budget); the kernel's children
        lists cost a few small reads.
        """
        found: list[psutil.Process] = []
        stack = [pid]
        try:
            while stack:
                parent = stack.pop()
                for tid in os.listdir(f"/proc/{parent}/task"):
                    with open(f"/proc/{parent}/task/{tid}/children") as handle:
                        kids = [int(child) for child in handle.read().split()]
                    stack.extend(kids)
                    found.extend(self._process(kid) for kid in kids)
            return found
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):  # kernel without it
                return [self._process(child.pid)
                        for child in self._process(pid).children(recursive=True)]
            return found  # a process exited while walking: report the rest
        except (OSError, psutil.Error):
            return found

    def collect(self) -> list[Sample]:
        self.refresh()
        samples: list[Sample] = []
        seen: set[int] = set()
        for role, pids in sorted(self.roles.items()):
            for index, pid in enumerate(pids):
                try:
                    tree = [self._process(pid)] + self._descendants(pid)
                except psutil.Error:
                    continue  # exited: nothing to report
                rss_kb, hwm_kb, cpu_percent, cpu_s, threads, alive = 0, 0, 0.0, 0.0, 0, 0
                for proc in tree:  # cached, primed psutil objects (see _process)
                    try:
                        rss, hwm, count = _status(proc.pid)
                        # One read of /proc/PID/stat gives both (oneshot caches it).
                        with proc.oneshot():
                            cpu_percent += proc.cpu_percent()
                            times = proc.cpu_times()
                    except (OSError, ValueError, KeyError, psutil.Error):
                        continue  # exited, or a zombie (no memory left to report)
                    rss_kb, hwm_kb, threads = rss_kb + rss, hwm_kb + hwm, threads + count
                    # A reaped descendant's time is in its reaper's children_* fields.
                    cpu_s += (times.user + times.system + times.children_user
                              + times.children_system)
                    alive += 1
                    seen.add(proc.pid)
                if not alive:
                    # Gone (a zombie until its parent reaps it): a sample of 0 MB would
                    # pass for a reading of its memory.
                    continue
                samples.append(("proc", {"role": role, "proc": f"{role}-{index}"},
                                {"rss_mb": rss_kb / 1024, "rss_hwm_mb": hwm_kb / 1024,
                                 "cpu_percent": cpu_percent, "cpu_s": round(cpu_s, 3),
                                 "num_procs": alive, "num_threads": threads}))
        for pid in set(self._procs) - seen:
            del self._procs[pid]  # forget exited processes
        return samples


def _status(pid: int) -> tuple[int, int, int]:
    """(VmRSS kB, VmHWM kB, threads) of a process: one read of /proc/PID/status.

    VmHWM is the kernel's high-water mark of the process's resident memory: a peak
    between two ticks is in it. A zombie (or kernel thread) has no VmRSS: KeyError.
    """
    with open(f"/proc/{pid}/status", "rb") as handle:
        text = handle.read()
    found = {}
    for line in text.split(b"\n"):
        key = line[:6]
        if key in (b"VmRSS:", b"VmHWM:") or line.startswith(b"Threads:"):
            found[key] = int(line.split()[1])
    return found[b"VmRSS:"], found.get(b"VmHWM:", 0), found.get(b"Thread", 0)


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
