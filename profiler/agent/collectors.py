"""Collectors: one small class per resource, each returning points for one tick.

Every collector primes itself in its constructor (psutil's percentages and our deltas
need a previous reading), and ``collect()`` returns ``(measurement, tags, fields)``
tuples. ``FIELDS`` on each class says what its fields mean and in which unit; the
schema in ``docs/metrics.md`` is written from them. Field types never change between
points (counters are ints, percentages and MB are floats): InfluxDB rejects a field
whose type changes.

A collector whose sensor is missing here (no temperature sensors on x86 VMs, no
``vcgencmd`` off a Pi, no disk counters in a container) raises ``Unavailable`` from its
constructor; the sampler logs that once at INFO and leaves it out. A ``collect()`` that
fails at run time (any exception: a ``vcgencmd`` that times out, a file that vanished)
costs that collector its tick only: the sampler logs it once at WARNING and goes on.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterable

import psutil

from ..cluster.cgroups import read_keyed

log = logging.getLogger(__name__)

MB = 1024 * 1024
Sample = tuple[str, dict[str, str], dict[str, float | int | bool]]


class Unavailable(Exception):
    """This collector's sensor does not exist on this machine."""


class _Deltas:
    """Counter differences and rates between two ticks (``time.monotonic`` based)."""

    def __init__(self):
        self._last: dict[str, tuple[float, dict[str, int]]] = {}

    def fields(self, key: str, counters: dict[str, int]) -> dict[str, float | int]:
        now = time.monotonic()
        out: dict[str, float | int] = dict(counters)
        previous = self._last.get(key)
        self._last[key] = (now, counters)
        if previous is not None:
            elapsed_s = max(now - previous[0], 1e-9)
            for name, value in counters.items():
                # A counter that went backwards was reset (interface re-created): restart.
                delta = max(0, value - previous[1].get(name, value))
                out[f"{name}_delta"] = delta
                out[f"{name}_per_s"] = delta / elapsed_s
        return out


class HostCpu:
    """CPU time shares of the whole host, in total and per core (one /proc/stat read)."""

    FIELDS = {
        "cpu.cpu_percent": "% of all cores busy (100 - idle - iowait), host or cgroup",
        "cpu.user_percent / system_percent / iowait_percent": "% of all cores' time",
        "cpu.cores": "logical cores counted (int)",
        "cpu_core.cpu_percent / user_percent / system_percent / iowait_percent":
            "the same for one core (tag core)",
    }

    def __init__(self, include_total: bool = True):
        self.include_total = include_total
        psutil.cpu_times_percent(percpu=True)

    def collect(self) -> list[Sample]:
        per_core = psutil.cpu_times_percent(percpu=True)
        samples: list[Sample] = []
        totals = {"cpu_percent": 0.0, "user_percent": 0.0, "system_percent": 0.0,
                  "iowait_percent": 0.0}
        for core, times in enumerate(per_core):
            iowait = float(getattr(times, "iowait", 0.0))
            fields = {"cpu_percent": max(0.0, 100.0 - times.idle - iowait),
                      "user_percent": float(times.user), "system_percent": float(times.system),
                      "iowait_percent": iowait}
            samples.append(("cpu_core", {"core": str(core)}, fields))
            for name, value in fields.items():
                totals[name] += value / len(per_core)
        if self.include_total:
            samples.append(("cpu", {}, {**totals, "cores": len(per_core)}))
        return samples


class Load:
    FIELDS = {"load.load1 / load5 / load15": "run-queue length averaged over 1/5/15 min"}

    def collect(self) -> list[Sample]:
        load1, load5, load15 = os.getloadavg()
        return [("load", {}, {"load1": load1, "load5": load5, "load15": load15})]


class CpuFreq:
    FIELDS = {"cpu_freq.freq_mhz": "current CPU frequency, MHz (mean over cores)"}

    def __init__(self):
        if not hasattr(psutil, "cpu_freq") or not psutil.cpu_freq():
            raise Unavailable("CPU frequency (no cpufreq in /sys or /proc/cpuinfo)")

    def collect(self) -> list[Sample]:
        freq = psutil.cpu_freq()
        return [("cpu_freq", {}, {"freq_mhz": float(freq.current)})] if freq else []


class HostMemory:
    FIELDS = {
        "mem.used_mb": "memory in use, MB (total - available: what the kernel cannot "
                       "reclaim; excludes page cache), host or cgroup",
        "mem.available_mb": "memory available to new work, MB",
        "mem.total_mb": "memory size (or the cgroup's limit), MB",
        "mem.used_percent": "used_mb / total_mb, %",
    }

    def collect(self) -> list[Sample]:
        mem = psutil.virtual_memory()
        used = mem.total - mem.available
        return [("mem", {}, {"used_mb": used / MB, "available_mb": mem.available / MB,
                             "total_mb": mem.total / MB,
                             "used_percent": 100.0 * used / mem.total})]


class CgroupCpu:
    """A node's CPU from its cgroup, as % of the node's quota (``cpu_cores``)."""

    FIELDS = {"cpu.quota_cores": "the node's CPU quota in cores (cgroup nodes only)",
              "cpu.cores": "cores of the board the node emulates (int; when its profile "
                           "says, e.g. 4 for a Pi 3B)"}

    def __init__(self, cgroup_dir: str, quota_cores: float | None,
                 board_cores: int | None = None):
        self.path = Path(cgroup_dir)
        self.v2 = (self.path / "cpu.stat").exists() and not (self.path / "cpuacct.usage").exists()
        if not self.v2 and not (self.path / "cpuacct.usage").exists():
            raise Unavailable(f"cgroup CPU accounting in {cgroup_dir}")
        self.quota_cores = quota_cores or float(psutil.cpu_count() or 1)
        # The % is of the node's whole compute, as Ganglia's is of a board's four cores:
        # the core count says what one busy core of the board would show (25% on a Pi 3B).
        self.board = {"cores": int(board_cores)} if board_cores else {}
        self._last = (time.monotonic(), self._usage_s())

    def _usage_s(self) -> tuple[float, float, float]:
        """(total, user, system) CPU seconds used by the cgroup so far."""
        if self.v2:
            stat = read_keyed(self.path / "cpu.stat")
            return (stat["usage_usec"] / 1e6, stat.get("user_usec", 0) / 1e6,
                    stat.get("system_usec", 0) / 1e6)
        total_s = int((self.path / "cpuacct.usage").read_text()) / 1e9
        stat = read_keyed(self.path / "cpuacct.stat")  # in USER_HZ ticks
        hz = os.sysconf("SC_CLK_TCK")
        return total_s, stat.get("user", 0) / hz, stat.get("system", 0) / hz

    def collect(self) -> list[Sample]:
        now, usage = time.monotonic(), self._usage_s()
        then, before = self._last
        self._last = (now, usage)
        capacity_s = max(now - then, 1e-9) * self.quota_cores
        shares = [100.0 * max(0.0, a - b) / capacity_s for a, b in zip(usage, before)]
        return [("cpu", {}, {"cpu_percent": shares[0], "user_percent": shares[1],
                             "system_percent": shares[2], "quota_cores": self.quota_cores,
                             **self.board})]


class CgroupMemory:
    """A node's memory from its cgroup: usage minus inactive page cache (as docker does)."""

    def __init__(self, cgroup_dir: str, limit_mb: float | None):
        self.path = Path(cgroup_dir)
        self.v2 = (self.path / "memory.current").exists()
        if not self.v2 and not (self.path / "memory.usage_in_bytes").exists():
            raise Unavailable(f"cgroup memory accounting in {cgroup_dir}")
        self.limit_mb = limit_mb or self._limit_mb()

    def _limit_mb(self) -> float:
        raw = (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).read_text()
        total = psutil.virtual_memory().total
        limit = total if raw.strip() == "max" else min(int(raw), total)
        return limit / MB

    def collect(self) -> list[Sample]:
        if self.v2:
            usage = int((self.path / "memory.current").read_text())
            inactive = read_keyed(self.path / "memory.stat").get("inactive_file", 0)
        else:
            usage = int((self.path / "memory.usage_in_bytes").read_text())
            inactive = read_keyed(self.path / "memory.stat").get("total_inactive_file", 0)
        used_mb = max(0, usage - inactive) / MB
        return [("mem", {}, {"used_mb": used_mb,
                             "available_mb": max(0.0, self.limit_mb - used_mb),
                             "total_mb": self.limit_mb,
                             "used_percent": 100.0 * used_mb / self.limit_mb})]


class Network:
    FIELDS = {
        "net.sent_bytes / recv_bytes / sent_packets / recv_packets":
            "interface counters since boot (int; tag interface)",
        "net.<counter>_delta": "increase since the previous tick (int)",
        "net.<counter>_per_s": "that increase per second (float)",
    }

    def __init__(self, interfaces: Iterable[str] | None = None):
        self.interfaces = [name for name in (interfaces or []) if name]
        counters = psutil.net_io_counters(pernic=True)
        if not counters:
            raise Unavailable("network counters")
        self._deltas = _Deltas()
        self.collect()

    def collect(self) -> list[Sample]:
        counters = psutil.net_io_counters(pernic=True)
        names = self.interfaces or sorted(counters)
        samples: list[Sample] = []
        for name in names:
            nic = counters.get(name)
            if nic is None:
                continue
            samples.append(("net", {"interface": name}, self._deltas.fields(name, {
                "sent_bytes": nic.bytes_sent, "recv_bytes": nic.bytes_recv,
                "sent_packets": nic.packets_sent, "recv_packets": nic.packets_recv})))
        return samples


class Disk:
    FIELDS = {"disk.read_bytes / write_bytes / read_count / write_count":
              "all disks' IO counters (int), with _delta and _per_s like net"}

    def __init__(self):
        if not psutil.disk_io_counters():
            raise Unavailable("disk IO counters")
        self._deltas = _Deltas()
        self.collect()

    def collect(self) -> list[Sample]:
        io = psutil.disk_io_counters()
        if io is None:
            return []
        return [("disk", {}, self._deltas.fields("all", {
            "read_bytes": io.read_bytes, "write_bytes": io.write_bytes,
            "read_count": io.read_count, "write_count": io.write_count}))]


class Temperature:
    FIELDS = {"thermal.temp_c": "sensor temperature, °C (tag sensor; hottest reading)"}

    def __init__(self):
        if not hasattr(psutil, "sensors_temperatures") or not psutil.sensors_temperatures():
            raise Unavailable("temperature sensors")

    def collect(self) -> list[Sample]:
        samples: list[Sample] = []
        for sensor, readings in sorted(psutil.sensors_temperatures().items()):
            if readings:
                samples.append(("thermal", {"sensor": sensor},
                                {"temp_c": float(max(r.current for r in readings))}))
        return samples


# Bits of the Raspberry Pi firmware's get_throttled word.
THROTTLE_BITS = {"under_voltage": 0, "freq_capped": 1, "throttled": 2, "soft_temp_limit": 3,
                 "under_voltage_occurred": 16, "freq_capped_occurred": 17,
                 "throttled_occurred": 18, "soft_temp_limit_occurred": 19}
_THROTTLED_SYSFS = Path("/sys/devices/platform/soc/soc:firmware/get_throttled")


class PiThrottling:
    """Raspberry Pi throttling flags: the firmware's sysfs file, else ``vcgencmd``."""

    FIELDS = {"throttle.flags": "the raw get_throttled word (int)",
              "throttle.<flag>": "one bit of it (bool): " + ", ".join(THROTTLE_BITS)}
    # Spawning vcgencmd costs more CPU than a whole tick; the sticky *_occurred bits
    # keep what happened between two readings (agent.summary.throttled_during), so a
    # reading every 10 s misses nothing.
    VCGENCMD_EVERY_S = 10.0
    VCGENCMD_TIMEOUT_S = 5.0

    def __init__(self):
        self.vcgencmd = None if _THROTTLED_SYSFS.exists() else shutil.which("vcgencmd")
        if not _THROTTLED_SYSFS.exists() and not self.vcgencmd:
            raise Unavailable("Raspberry Pi throttling flags (no vcgencmd)")
        self._cached: tuple[float, int | None] | None = None

    def _flags(self) -> int | None:
        if not self.vcgencmd:
            return int(_THROTTLED_SYSFS.read_text().strip(), 16)
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] >= self.VCGENCMD_EVERY_S:
            # Cached before running it: a vcgencmd that fails or hangs is tried again
            # only after VCGENCMD_EVERY_S, not on every tick (the sampler logs the error).
            self._cached = (now, None)
            out = subprocess.run([self.vcgencmd, "get_throttled"], capture_output=True,
                                 text=True, timeout=self.VCGENCMD_TIMEOUT_S,
                                 check=True).stdout
            self._cached = (now, int(out.strip().split("=")[-1], 16))
        return self._cached[1]

    def collect(self) -> list[Sample]:
        flags = self._flags()
        if flags is None:
            return []  # the last vcgencmd failed: nothing until the next try
        fields: dict[str, float | int | bool] = {"flags": flags}
        fields.update({name: bool(flags >> bit & 1) for name, bit in THROTTLE_BITS.items()})
        return [("throttle", {}, fields)]


class Processes:
    """RSS and CPU of each training process (with its descendants), by role.

    The cell runner rewrites ``pids_file`` ({"worker": [pid, ...], ...}) as it starts
    processes; it is re-read whenever its mtime changes.
    """

    FIELDS = {"proc.rss_mb": "resident memory of the process and its descendants, MB",
              "proc.cpu_percent": "CPU of the process and its descendants, % of one core",
              "proc.num_procs / num_threads": "processes and threads counted (int)",
              "(tags)": "role, proc (role-index in the pids file)"}

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
                rss_bytes, cpu_percent, threads, alive = 0, 0.0, 0, 0
                for proc in tree:  # cached, primed psutil objects (see _process)
                    try:
                        with proc.oneshot():
                            rss_bytes += proc.memory_info().rss
                            cpu_percent += proc.cpu_percent()
                            threads += proc.num_threads()
                        alive += 1
                        seen.add(proc.pid)
                    except psutil.Error:
                        continue
                samples.append(("proc", {"role": role, "proc": f"{role}-{index}"},
                                {"rss_mb": rss_bytes / MB, "cpu_percent": cpu_percent,
                                 "num_procs": alive, "num_threads": threads}))
        for pid in set(self._procs) - seen:
            del self._procs[pid]  # forget exited processes
        return samples


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


class Agent:
    """The agent's own footprint, so that its cost is visible beside what it measures."""

    FIELDS = {"agent.rss_mb": "the agent's resident memory, MB",
              "agent.cpu_s": "CPU seconds the agent has used (user+system)",
              "agent.points_written / points_dropped": "spool counters (int)"}

    def __init__(self, spool=None):
        self.spool = spool
        self._self = psutil.Process()

    def collect(self) -> list[Sample]:
        with self._self.oneshot():
            times = self._self.cpu_times()
            rss_mb = self._self.memory_info().rss / MB
        fields: dict[str, float | int | bool] = {"rss_mb": rss_mb,
                                                 "cpu_s": times.user + times.system}
        if self.spool is not None:
            fields["points_written"] = self.spool.points_written
            fields["points_dropped"] = self.spool.points_dropped
        return [("agent", {}, fields)]
