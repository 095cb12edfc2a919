"""The chaos soak's fault driver: seeded faults injected into running sweeps, each logged.

``FaultDriver.tick(run)`` is called every poll of the soak's loop with the sweep that
runs now; at moments drawn from a seeded RNG it injects one fault, and later undoes what
must be undone (a link brought back up, a node's quota given back, InfluxDB restarted,
a full disk freed, a stopped worker continued once its cell is over). Every injection
and every undo is one JSON line in the fault log, with the sweep, cell and attempt it
hit, so the checks (``soak_checks``) can say what each cell's record should be.

How each fault is made, as the tests in ``tests/faults`` make it alone:
- ``kill_worker`` / ``kill_server`` / ``kill_scheduler``: SIGKILL to the role's first
  process as the runner recorded it (``pids/<node>.json``), once the cell trains.
- ``kill_agent``: SIGKILL to a node's metrics agent (``python -m profiler.agent``).
- ``kill_controller``: SIGKILL to ``edgeprof sweep``; the soak reruns it with ``--resume``.
- ``sigterm_controller``: SIGTERM to it (recorded ``failed (interrupted)``), then resumed.
- ``sigstop_worker``: SIGSTOP to a worker until its cell's record exists (``timeout``).
- ``link_down``: the node's bridge port (``ip link set edgeprof-<node>h down``) for a
  few seconds, as a cable pulled at the switch.
- ``slow_node``: the node's CPU quota x ``SLOW_FACTOR`` for a few seconds (the emulated
  cluster's own ``slow_node``/``restore_node``).
- ``influx_kill``: SIGKILL to ``influxd``, restarted on the same port and data after a
  few seconds.
- ``enospc``: the next cell's spool folder of one node is a small tmpfs, filled up
  before its agent starts; freed once the agent logs that it cannot write.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# Faults that hit one cell attempt, and what its record must then say.
CELL_FAULTS = ("kill_worker", "kill_server", "kill_scheduler", "kill_agent",
               "kill_controller", "sigterm_controller", "sigstop_worker", "link_down",
               "slow_node", "enospc")
FAULTS = CELL_FAULTS + ("influx_kill",)
LINK_DOWN_S = 3.0
SLOW_S = 4.0
SLOW_FACTOR = 0.3
INFLUX_DOWN_S = 3.0
ENOSPC_HOLD_S = 2.0     # how long the agent meets a full disk before it is freed
ENOSPC_FREE_AFTER_S = 20.0  # freed by then whatever the agent said
TMPFS_SIZE = "1m"
TMPFS_LEFT_BYTES = 6 * 1024  # room left for the header and a few ticks
PENDING_GIVE_UP_S = 60.0  # a fault no cell could take by then is dropped (logged)
FAULT_NODE = "n1"  # a worker's node in the sweeps the soak runs (n0 is the master)
EMULATED_ONLY = ("link_down", "slow_node")


@dataclass
class Attempt:
    """One running cell attempt of a sweep: its folder and what the runner recorded."""

    folder: Path
    cell_id: str
    attempt: int

    def events(self, rank: int = 0) -> list[str]:
        path = self.folder / "events" / f"worker-{rank}.jsonl"
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return []
        found = []
        for line in lines:
            try:
                found.append(json.loads(line)["event"])
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def training(self) -> bool:
        events = self.events()
        return "first_step" in events and "end" not in events

    def pids(self, role: str) -> list[int]:
        """The role's live processes, those of a worker still training first."""
        found = []
        for path in sorted((self.folder / "pids").glob("*.json")):
            try:
                pids = json.loads(path.read_text()).get(role, [])
            except (OSError, ValueError):
                continue
            # A worker that wrote its end event is about to exit: hit it last.
            ended = role == "worker" and "end" in self.events(self.rank_on(path.stem))
            found += [(ended, pid) for pid in pids if _alive(pid)]
        return [pid for _, pid in sorted(found, key=lambda item: item[0])]

    def rank_on(self, node: str) -> int:
        """The rank of the worker on ``node`` (its start event names its node)."""
        for path in self.folder.glob("events/worker-*.jsonl"):
            try:
                start = json.loads(path.read_text().splitlines()[0])
            except (OSError, ValueError, IndexError):
                continue
            if start.get("node") == node:
                return int(start["rank"])
        return -1

    def agent(self, node: str) -> psutil.Process | None:
        spool = str(self.folder / "metrics" / node)
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if "profiler.agent" in cmdline and spool in cmdline:
                return proc
        return None


@dataclass
class Undo:
    at: float               # monotonic time to undo at (or 0: when ``until`` is true)
    kind: str
    action: object          # callable() -> dict of details
    until: object = None    # callable() -> bool, checked every tick


@dataclass
class FaultDriver:
    seed: int
    log_path: Path
    mean_gap_s: float
    influx: object           # profiler.testing.servers.LocalServer
    kinds: tuple[str, ...] = FAULTS
    node: str = FAULT_NODE  # the node whose agent, link, quota and spool are hit
    rng: random.Random = field(init=False)
    next_at: float = field(init=False)
    pending: str | None = None
    pending_since: float = 0.0
    undos: list[Undo] = field(default_factory=list)
    hit: set = field(default_factory=set)  # (sweep, cell_id, attempt) already hit
    mounts: list[Path] = field(default_factory=list)
    armed_enospc: dict | None = None
    stopped: bool = False

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.t0 = time.monotonic()
        self.next_at = self.t0 + self.rng.expovariate(1.0 / self.mean_gap_s)

    # -- the log -------------------------------------------------------------------
    def log(self, kind: str, phase: str, **details) -> dict:
        entry = {"t_s": round(time.monotonic() - self.t0, 3), "wall": time.time(),
                 "kind": kind, "phase": phase, **details}
        with open(self.log_path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
        return entry

    # -- the loop ------------------------------------------------------------------
    def tick(self, run) -> None:
        """One poll: undo what is due, arm the ENOSPC trap, inject when it is time."""
        now = time.monotonic()
        for undo in list(self.undos):
            due = undo.until() if undo.until is not None else now >= undo.at
            if due:
                self.undos.remove(undo)
                self.log(undo.kind, "undone", **(undo.action() or {}))
        if run is not None:
            self._spring_enospc(run)
        if self.stopped:
            return
        if self.pending is None and now >= self.next_at:
            self.pending = self.rng.choice(self.kinds)
            self.pending_since = now
            self.next_at = now + self.rng.expovariate(1.0 / self.mean_gap_s)
        if self.pending is not None and run is not None:
            if self._inject(self.pending, run):
                self.pending = None
            elif now - self.pending_since > PENDING_GIVE_UP_S:
                self.log(self.pending, "dropped", why="no cell could take it in time")
                self.pending = None

    def stop(self) -> None:
        """No new faults from now on (undos still run)."""
        self.stopped = True
        self.pending = None
        if self.armed_enospc is not None and not self.armed_enospc.get("mounted"):
            self.armed_enospc = None

    def finish(self) -> None:
        """Undo everything still undone now (the soak is over)."""
        for undo in list(self.undos):
            self.undos.remove(undo)
            self.log(undo.kind, "undone", at_end=True, **(undo.action() or {}))

    # -- injection -------------------------------------------------------------------
    def _target(self, run, need_training: bool = True) -> Attempt | None:
        attempt = run.running_attempt()
        if attempt is None or (run.sweep, attempt.cell_id, attempt.attempt) in self.hit:
            return None
        if need_training and not attempt.training():
            return None
        return attempt

    def _hit(self, kind: str, run, attempt: Attempt, **details) -> bool:
        self.hit.add((run.sweep, attempt.cell_id, attempt.attempt))
        self.log(kind, "injected", sweep=run.sweep, cell_id=attempt.cell_id,
                 attempt=attempt.attempt, engine=run.engine, **details)
        return True

    def _inject(self, kind: str, run) -> bool:
        if kind == "influx_kill":
            return self._influx_kill()
        if kind == "enospc":
            return self._arm_enospc(run)
        attempt = self._target(run)
        if attempt is None:
            return False
        if kind in ("kill_worker", "kill_server", "kill_scheduler", "sigstop_worker"):
            role = kind.split("_")[1]
            pids = attempt.pids(role)
            if not pids:
                if run.engine_lacks(role):
                    self.pending = self.rng.choice([k for k in self.kinds
                                                    if k not in ("kill_server",
                                                                 "kill_scheduler")])
                return False
            pid = pids[0]
            sig = signal.SIGSTOP if kind == "sigstop_worker" else signal.SIGKILL
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return False
            if kind == "sigstop_worker":
                key = (run.sweep, attempt.cell_id, attempt.attempt)
                self.undos.append(Undo(0, kind, lambda: _cont(pid),
                                       until=lambda: run.has_record(key[1], key[2])
                                       or not run.alive()))
            return self._hit(kind, run, attempt, role=role, pid=pid)
        if kind == "kill_agent":
            agent = attempt.agent(self.node)
            if agent is None:
                return False
            agent.kill()
            return self._hit(kind, run, attempt, node=self.node, pid=agent.pid)
        if kind in ("kill_controller", "sigterm_controller"):
            sig = signal.SIGKILL if kind == "kill_controller" else signal.SIGTERM
            run.proc.send_signal(sig)
            return self._hit(kind, run, attempt, pid=run.proc.pid)
        if kind == "link_down":
            device = _veth(self.node)
            _link(device, "down")
            self.undos.append(Undo(time.monotonic() + LINK_DOWN_S, kind,
                                   lambda: _link(device, "up") or {"device": device}))
            return self._hit(kind, run, attempt, node=self.node, device=device,
                             seconds=LINK_DOWN_S)
        if kind == "slow_node":
            from profiler.cluster import emulated
            cluster = emulated.attach()
            node = next(n for n in cluster.nodes() if n.name == self.node)
            cluster.slow_node(node, SLOW_FACTOR)
            self.undos.append(Undo(time.monotonic() + SLOW_S, kind, lambda: _restore(node)))
            return self._hit(kind, run, attempt, node=self.node, factor=SLOW_FACTOR,
                             seconds=SLOW_S)
        raise ValueError(kind)

    def _influx_kill(self) -> bool:
        proc = self.influx.proc
        if proc is None or proc.poll() is not None:
            return False
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.influx.proc = None

        def restart() -> dict:
            self.influx.start()
            return {"pid": self.influx.proc.pid}
        self.undos.append(Undo(time.monotonic() + INFLUX_DOWN_S, "influx_kill", restart))
        self.log("influx_kill", "injected", pid=proc.pid, seconds=INFLUX_DOWN_S)
        return True

    # -- ENOSPC: a tmpfs under the next attempt's spool -----------------------------
    def _arm_enospc(self, run) -> bool:
        """Wait for the next attempt folder of this sweep; then mount before its agent."""
        if self.armed_enospc is None:
            self.armed_enospc = {"sweep": run.sweep, "seen": run.attempt_folders()}
        return True  # the trap is set; ``_spring_enospc`` does the rest

    def _spring_enospc(self, run) -> None:
        trap = self.armed_enospc
        if trap is None or trap.get("mounted"):
            return
        if trap["sweep"] != run.sweep:  # armed as a sweep ended: the next one's first cell
            trap.update(sweep=run.sweep, seen=run.attempt_folders())
            return
        new = [f for f in run.attempt_folders() if f not in trap["seen"]]
        if not new:
            return
        folder = new[0]
        cell_id, attempt = folder.parent.name, int(folder.name.split("-")[1])
        spool = folder / "metrics" / self.node
        trap["mounted"] = True
        self.armed_enospc = None
        try:
            spool.mkdir(parents=True)
        except FileExistsError:
            self.log("enospc", "missed", sweep=run.sweep, cell_id=cell_id, attempt=attempt,
                     why="the agent made its spool first")
            return
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs",
                        str(spool)], check=True, timeout=30)
        self.mounts.append(spool)
        filler = spool / ".soak-filler"
        _fill(filler, TMPFS_LEFT_BYTES)
        self.hit.add((run.sweep, cell_id, attempt))
        self.log("enospc", "injected", sweep=run.sweep, cell_id=cell_id, attempt=attempt,
                 engine=run.engine, node=self.node, spool=str(spool))
        agent_log = folder / "logs" / f"agent-{self.node}.log"
        started = time.monotonic()
        met = {}

        def full() -> bool:
            try:
                text = agent_log.read_text(errors="replace")
            except OSError:
                text = ""
            if "cannot be written" in text and "t" not in met:
                met["t"] = time.monotonic()
            return ("t" in met and time.monotonic() - met["t"] >= ENOSPC_HOLD_S) or \
                time.monotonic() - started > ENOSPC_FREE_AFTER_S

        def free() -> dict:
            filler.unlink(missing_ok=True)
            return {"spool": str(spool), "agent_met_enospc": "t" in met}
        self.undos.append(Undo(0, "enospc", free, until=full))

    def unmount_all(self) -> list[str]:
        """Each tmpfs's files copied onto the folder under it, then unmounted."""
        problems = []
        for spool in self.mounts:
            keep = spool.parent / f".{spool.name}.soak-copy"
            subprocess.run(["cp", "-a", f"{spool}/.", str(keep)], check=False)
            done = subprocess.run(["umount", str(spool)], capture_output=True, text=True,
                                  check=False)
            if done.returncode:
                problems.append(f"umount {spool}: {done.stderr.strip()}")
                continue
            hidden = [p.name for p in spool.iterdir()] if spool.is_dir() else []
            if hidden:
                problems.append(f"{spool} had files under its tmpfs: {hidden}")
            subprocess.run(["cp", "-a", f"{keep}/.", str(spool)], check=True)
            subprocess.run(["rm", "-rf", str(keep)], check=True)
            (spool / ".soak-filler").unlink(missing_ok=True)
        self.mounts.clear()
        return problems


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def _cont(pid: int) -> dict:
    try:
        os.kill(pid, signal.SIGCONT)
        return {"pid": pid, "alive": True}
    except ProcessLookupError:
        return {"pid": pid, "alive": False}


def _restore(node) -> dict:
    # Attached anew: the sweep's controller rewrote the cluster's state meanwhile.
    from profiler.cluster import emulated
    emulated.attach().restore_node(node)
    return {"node": node.name}


def _veth(node: str) -> str:
    from profiler.cluster import netns
    return netns.host_veth_name(node)


def _link(device: str, state: str) -> None:
    if state == "up" and not os.path.exists(f"/sys/class/net/{device}"):
        return
    subprocess.run(["ip", "link", "set", device, state], check=True, timeout=30)
    return


def _fill(path: Path, leave_bytes: int) -> None:
    """Take all but about ``leave_bytes`` of ``path``'s filesystem."""
    stat = os.statvfs(path.parent)
    size = max(0, stat.f_bavail * stat.f_frsize - leave_bytes)
    with open(path, "wb") as handle:
        handle.write(b"x" * size)
