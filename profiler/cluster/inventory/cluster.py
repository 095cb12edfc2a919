"""The inventory's hosts as a cluster: start processes over SSH, bring their files back,
slow a straggler, read the nodes' clocks.

Processes start with the system's OpenSSH client, so the user's keys, ``~/.ssh/config``,
jump hosts and known_hosts apply; every ssh of the sweep to a host shares one connection
(``connections``: ControlMaster), made once. Each process runs under
``profiler.cluster.remote_exec``, which stops it when its ``ssh`` goes away and tells the
node's agent its pid; its environment goes to ``remote_exec`` on ssh's stdin, never on a
command line. Paths of the cell folder are mapped to the host's ``edgeprof_workdir``;
after the cell, ``collect`` brings that folder (events, metrics spools) back into the
local cell folder with one ``tar`` stream per node over the same SSH, all nodes at once,
so results have the same columns as on the emulated cluster; the stream is unpacked
without trusting the node (``unpack``: no link or path out of the cell folder). Logs
come back live through ssh's output. Each node's clock is read through one Python kept
running on it for the sweep (``ClockEcho``): a cell pays a few round trips for it, not a
session and an interpreter's start. The user's files a sweep stages (``<sweep>/inputs``:
a model file, a dataset, a script; ``profiler.inputs``) go to a node as one ``tar``
stream before its first process that names one, and are removed from every node when the
sweep ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Callable, Mapping, Sequence

from ...errors import ClusterError
from ..base import Cluster, Node, NodeEntry, TierLink, link_between, popen_in_group
from .connections import Connections
from .hosts import SSH_CONNECT_TIMEOUT_S, Host, last_line, plain_env
from .probe import CHECK_TIMEOUT_S
from .straggler import STRAGGLER_WAIT_S, cpu_max_command, straggler_answer, straggler_group
from ...safe_tar import UnsafeMember, unpack_stream

COLLECT_TIMEOUT_S = 300
# On the node: the cell folder as a tar stream on stdout, then (stdout closed, so that the
# local unpacking sees the stream's end) the folder removed if the controller answers ``ok``.
# A node the cell started nothing on (a hierarchy's edge node in End-Cloud, with no
# agent) has no folder: it sends an empty archive, nothing to fetch and no problem.
_PACK_THEN_REMOVE = ('if [ ! -d "$1" ]; then exec tar -cf - -T /dev/null; fi; '
                     'tar -C "$1" --exclude=./pids -cf - . || exit $?; exec >&-; '
                     'read answer; if [ "$answer" = ok ]; then rm -rf -- "$1" || true; fi')
# On the node: the sweep's inputs unpacked from stdin (an old copy replaced whole), and
# removed again at the sweep's end (its folder too, once nothing else is in it).
_UNPACK_INPUTS = 'rm -rf -- "$1" && mkdir -p -- "$1" && tar -C "$1" -xf -'
_REMOVE_INPUTS = 'rm -rf -- "$1"; rmdir -- "$(dirname -- "$1")" 2>/dev/null; true'
INPUTS_TIMEOUT_S = 600  # a dataset over a Pi's 100 Mbit link


class InventoryCluster(Cluster):
    """Nodes reached over SSH; see the module docstring."""

    name = "inventory"
    can_slow_node = True

    def __init__(self, hosts: Sequence[Host]):
        self._hosts = {host.name: host for host in hosts}
        self._nodes = [host.node() for host in hosts]
        self._connections = Connections()
        self._clocks: dict[str, ClockEcho] = {}
        self._clocks_lock = threading.Lock()
        # node name -> the remote inputs folder it holds (shipped once a sweep)
        self._inputs: dict[str, PurePosixPath] = {}
        self._inputs_lock = threading.Lock()
        self._relay = None  # the MPI relay (``mpi_relay``), made by the first MPI cell
        self._relay_lock = threading.Lock()
        # The inventory's edgeprof_links (the same on every host) and their relays on
        # the target hosts (``tier_relay``), started by the first link_address needing one.
        self._links: dict[str, TierLink] = dict(hosts[0].links) if hosts else {}
        self._tier_relays = None

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def host(self, node: Node) -> Host:
        return self._hosts[node.name]

    def ssh_argv(self, host: Host, remote: Sequence[str]) -> list[str]:
        """The ``ssh`` argv running ``remote`` on ``host`` over the sweep's connection
        to it (made first if there is none yet)."""
        self._connections.open([host])
        return self._connections.argv(host, remote)

    def control_argv(self, node: Node, operation: str, forward: str, kind: str = "-R"
                     ) -> list[str]:
        """``ssh -O OPERATION -R|-L FORWARD`` on ``node``'s shared connection."""
        return self._connections.control(self.host(node), operation, forward, kind)

    def tier_links(self) -> dict[str, TierLink]:
        """The inventory's ``edgeprof_links``, by ``link_key``."""
        return dict(self._links)

    def link_address(self, source: Node, target: Node, port: int) -> tuple[str, int]:
        """Through the links relay on ``target``'s host when the inventory links the two
        nodes' tiers (``tier_relay``: started over SSH once a sweep); else ``target``."""
        link = link_between(self._links, source, target)
        if link is None:
            return target.address, port
        with self._relay_lock:
            if self._tier_relays is None:
                from .tier_relay import TierRelays
                self._tier_relays = TierRelays(self, self._connections.control_dir)
        return self._tier_relays.address(target, port, link)

    def entry(self, node: Node, *, role: str | None = None, origin: Node | None = None,
              cell_dir: Path | None = None) -> NodeEntry:
        """For an MPI launcher on ``origin``: its own node as it is (the launcher runs
        there under ``remote_exec``), any other node through the controller's
        connection to it (``mpi_relay``: no node needs a key to another)."""
        if origin is None or cell_dir is None or node.name == origin.name:
            return NodeEntry()
        with self._relay_lock:
            if self._relay is None:
                from .mpi_relay import MpiRelay
                self._relay = MpiRelay(self, self._connections.control_dir)
        return self._relay.entry(node, origin, cell_dir)

    def connect(self, nodes: Sequence[Node]) -> None:
        """Make the shared connection of each of ``nodes`` now, in parallel."""
        self._connections.open([self.host(node) for node in nodes])

    def remote_cell_dir(self, node: Node, cell_dir: Path) -> PurePosixPath:
        """Where the cell folder ``…/<sweep>/cells/<id>/attempt-<N>`` lives on ``node``."""
        cell_dir = Path(cell_dir)
        sweep_rel = cell_dir.relative_to(cell_dir.parents[2].parent)
        return PurePosixPath(self.host(node).workdir) / sweep_rel.as_posix()

    def start(self, node: Node, argv: Sequence[str], env: Mapping[str, str],
              log_path: Path, *, confine: bool = True, role: str | None = None
              ) -> subprocess.Popen:
        host = self.host(node)
        # The runner's layout: <cell_dir>/logs/<name>.log.
        cell_dir = Path(log_path).parent.parent
        remote_dir = self.remote_cell_dir(node, cell_dir)
        command = [host.python, "-m", "profiler.cluster.remote_exec",
                   "--mkdir", str(remote_dir), "--env-stdin"]
        if role:
            command += ["--pids-file", str(remote_dir / "pids" / f"{node.name}.json"),
                        "--role", role]
        if any(str(arg).startswith(str(_inputs_dir(cell_dir)) + "/") for arg in argv):
            self._ship_inputs(node, cell_dir)
        command += ["--", *self._remote_argv(host, argv, cell_dir, remote_dir)]
        # stdin stays an open pipe: its first line is the environment (off every command
        # line), its end tells remote_exec that the cell is over.
        proc = popen_in_group(self.ssh_argv(host, command), {}, Path(log_path),
                              stdin=subprocess.PIPE)
        try:
            proc.stdin.write(json.dumps(dict(env)).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass  # ssh already gone: its exit status tells the runner
        return proc

    def ship_inputs(self, node: Node, cell_dir: Path) -> None:
        """Copy the sweep's staged inputs, if it has any, to ``node`` (once): for a
        process whose command line names them but does not come through ``start``
        (an MPI rank on another node: its command is ``mpirun``'s)."""
        if _inputs_dir(cell_dir).is_dir():
            self._ship_inputs(node, cell_dir)

    def _ship_inputs(self, node: Node, cell_dir: Path) -> None:
        """Copy the sweep's staged inputs to ``node`` unless it has them already."""
        remote = self._remote_inputs(node, cell_dir)
        with self._inputs_lock:
            if self._inputs.get(node.name) == remote:
                return
            host = self.host(node)
            pack = subprocess.Popen(["tar", "-C", str(_inputs_dir(cell_dir)), "-cf", "-", "."],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                done = subprocess.run(
                    self.ssh_argv(host, ["sh", "-c", _UNPACK_INPUTS, "edgeprof-inputs",
                                         str(remote)]),
                    stdin=pack.stdout, capture_output=True, timeout=INPUTS_TIMEOUT_S,
                    env=plain_env())
            except subprocess.TimeoutExpired:
                raise ClusterError(f"node {node.name}: the sweep's inputs did not arrive "
                                   f"within {INPUTS_TIMEOUT_S} s") from None
            finally:
                pack.stdout.close()
                pack.wait()
            if done.returncode != 0 or pack.returncode != 0:
                error = done.stderr.decode(errors="replace") or pack.stderr.read().decode()
                raise ClusterError(f"node {node.name}: the sweep's inputs could not be "
                                   f"copied to {remote}: {last_line(error)}")
            self._inputs[node.name] = remote

    def _remote_inputs(self, node: Node, cell_dir: Path) -> PurePosixPath:
        remote_cell = self.remote_cell_dir(node, cell_dir)
        return remote_cell.parents[2] / _inputs_dir(cell_dir).name

    def _remove_inputs(self) -> None:
        """Remove the inputs from every node that got them (the end of the sweep)."""
        with self._inputs_lock:
            shipped, self._inputs = dict(self._inputs), {}

        def remove(item: tuple[str, PurePosixPath]) -> None:
            name, remote = item
            try:
                subprocess.run(self.ssh_argv(self._hosts[name],
                                             ["sh", "-c", _REMOVE_INPUTS, "edgeprof-inputs",
                                              str(remote)]),
                               capture_output=True, timeout=SSH_CONNECT_TIMEOUT_S * 2,
                               stdin=subprocess.DEVNULL, env=plain_env())
            except (OSError, subprocess.TimeoutExpired):
                pass  # an unreachable node keeps its copy: nothing to wait for
        if shipped:
            with ThreadPoolExecutor(max_workers=min(16, len(shipped))) as pool:
                list(pool.map(remove, shipped.items()))

    @staticmethod
    def _remote_argv(host: Host, argv: Sequence[str], cell_dir: Path,
                     remote_dir: PurePosixPath) -> list[str]:
        local = str(cell_dir)
        inputs = str(_inputs_dir(cell_dir))
        remote_inputs = str(remote_dir.parents[2] / _inputs_dir(cell_dir).name)
        out: list[str] = []
        for index, arg in enumerate(argv):
            # Not only the first: a launcher's command (mpirun's) names the Python too.
            if arg == sys.executable:
                arg = host.python
            elif arg == local or arg.startswith(local + "/"):
                arg = str(remote_dir) + arg[len(local):]
            elif arg.startswith(inputs + "/"):
                arg = remote_inputs + arg[len(inputs):]
            elif host.data_dir and index > 0 and argv[index - 1] == "--data-dir":
                arg = host.data_dir
            out.append(arg)
        return out

    def collect(self, cell_dir: Path, nodes: Sequence[Node]) -> list[str]:
        """Bring each node's part of the cell folder back; return one problem per failure.

        Nodes are fetched in parallel; each remote copy is removed once it arrived whole
        (a Pi's SD card is small).
        """
        unique = list({n.name: n for n in nodes}.values())
        with ThreadPoolExecutor(max_workers=min(16, len(unique))) as pool:
            problems = list(pool.map(lambda node: self._fetch(node, Path(cell_dir)), unique))
        return [problem for problem in problems if problem]

    def _fetch(self, node: Node, cell_dir: Path) -> str | None:
        """One session: the node's tar stream comes in, and once it is unpacked here
        whole, an ``ok`` on its stdin removes the remote copy (anything else keeps it:
        a stream with a member that would reach out of the cell folder too)."""
        host = self.host(node)
        remote_dir = str(self.remote_cell_dir(node, cell_dir))
        pack = self.ssh_argv(host, ["sh", "-c", _PACK_THEN_REMOVE, "edgeprof-collect",
                                    remote_dir])
        unpack_error = None
        try:
            with subprocess.Popen(pack, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.PIPE, env=plain_env()) as sender:
                # A node that stops sending mid-stream: its ssh is killed, the stream ends.
                timer = threading.Timer(COLLECT_TIMEOUT_S, sender.kill)
                timer.start()
                try:
                    unpack_stream(sender.stdout, cell_dir)
                except UnsafeMember as exc:
                    unpack_error = f"refused what it sent: {exc}"
                except (tarfile.TarError, OSError) as exc:
                    unpack_error = f"cannot unpack what it sent: {exc}"
                finally:
                    timer.cancel()
                sender.stdout.close()
                try:
                    if unpack_error is None:
                        sender.stdin.write(b"ok\n")
                    sender.stdin.close()
                except OSError:
                    pass  # the node's side is gone: its status says why
                error = sender.stderr.read().decode(errors="replace")
                sender.wait(timeout=COLLECT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{node.name}: {exc}"
        if unpack_error is not None:  # before the node's own error: a broken pipe then
            return f"{node.name}: {unpack_error}"
        if sender.returncode != 0:
            return f"{node.name}: {last_line(error)}"
        return None

    def clock_offsets(self, nodes: Sequence[Node]) -> dict[str, float]:
        """Each node's clock minus this host's, in seconds (``clock_offset``), measured
        in parallel; a node that cannot be reached is left out."""
        unique = list({n.name: n for n in nodes}.values())
        self.connect(unique)
        with ThreadPoolExecutor(max_workers=min(16, len(unique) or 1)) as pool:
            offsets = list(pool.map(lambda node: self._clock(node).offset(), unique))
        return {node.name: offset for node, offset in zip(unique, offsets)
                if offset is not None}

    def _clock(self, node: Node) -> "ClockEcho":
        with self._clocks_lock:
            if node.name not in self._clocks:
                host = self.host(node)
                self._clocks[node.name] = ClockEcho(
                    lambda: self.ssh_argv(host, [host.python, "-u", "-c", _CLOCK_ECHO]))
            return self._clocks[node.name]

    def oom_killed(self, node: Node) -> int:
        return 0  # a real node's kernel OOM kill shows as the worker's SIGKILL

    def slow_node(self, node: Node, factor: float, *, cell_dir: Path, processes: int = 1,
                  threads: int = 1) -> None:
        """Make ``node`` the cell's straggler: its ``processes`` (the cell's on that node,
        as ``remote_exec`` registers them, with their descendants) go into a cgroup v2
        group of their own whose ``cpu.max`` is ``factor`` x min(the node's CPUs,
        ``processes`` x ``threads``), the cores they can keep busy at full speed."""
        remote_dir = self.remote_cell_dir(node, cell_dir)
        self._cpu_max(node, "slow", straggler_group(node, cell_dir), [
            repr(float(factor)), str(processes), str(threads),
            str(remote_dir / "pids" / f"{node.name}.json"), str(STRAGGLER_WAIT_S)])

    def restore_node(self, node: Node, *, cell_dir: Path, **_context) -> None:
        """Lift the straggler's limit and remove its (by now empty) group, and any other
        empty one a killed sweep left on the node."""
        self._cpu_max(node, "restore", straggler_group(node, cell_dir), [])

    def _cpu_max(self, node: Node, action: str, group: str, args: list[str]) -> dict:
        host = self.host(node)
        try:
            done = subprocess.run(self.ssh_argv(host, cpu_max_command(host.python, action,
                                                                       group, args)),
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=STRAGGLER_WAIT_S + CHECK_TIMEOUT_S,
                                  env=plain_env())
        except subprocess.TimeoutExpired:
            raise ClusterError(f"node {node.name} did not answer within "
                               f"{STRAGGLER_WAIT_S + CHECK_TIMEOUT_S} s while its straggler "
                               f"was being {'slowed' if action == 'slow' else 'restored'}"
                               ) from None
        return straggler_answer(node.name, done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        """Remove the sweep's inputs from the nodes, end the clock echoes and the shared
        connections (``ssh -O exit``)."""
        with self._relay_lock:
            relay, self._relay = self._relay, None
            tier_relays, self._tier_relays = self._tier_relays, None
        if relay is not None:
            relay.close()
        if tier_relays is not None:
            tier_relays.close()
        self._remove_inputs()
        with self._clocks_lock:
            clocks, self._clocks = list(self._clocks.values()), {}
        for clock in clocks:
            clock.close()
        self._connections.close()


def _inputs_dir(cell_dir: Path) -> Path:
    """``<sweep>/inputs`` of a cell folder ``<sweep>/cells/<id>/attempt-<N>``."""
    from ...inputs import INPUTS_DIR

    return Path(cell_dir).parents[2] / INPUTS_DIR


# The node answers each line on its stdin with its time.time(); over one SSH session the
# round trips are a few ms, not the session's set-up.
_CLOCK_ECHO = "import sys, time\nfor _ in sys.stdin:\n    print(repr(time.time()), flush=True)"
CLOCK_SAMPLES = 7


class ClockEcho:
    """One ``_CLOCK_ECHO`` kept running on a node for the sweep: each cell's offset is a
    few round trips on it (started again once if it has gone, e.g. the node rebooted)."""

    def __init__(self, argv: Callable[[], list[str]]):
        self._argv = argv
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def offset(self, samples: int = CLOCK_SAMPLES) -> float | None:
        """The node's clock minus this one's, in seconds, as NTP estimates it: of a few
        request/answer exchanges, the one of the shortest round trip, its answer against
        the midpoint of the trip (error at most half that trip). None if it won't answer."""
        with self._lock:
            for _ in range(2):
                try:
                    if self._proc is None or self._proc.poll() is not None:
                        self._start()
                    best = _exchange(self._proc, samples)
                except (OSError, ValueError):
                    best = None
                if best is not None:
                    return best[1]
                self._stop()
            return None

    def _start(self) -> None:
        self._stop()
        self._proc = subprocess.Popen(self._argv(), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True, env=plain_env(),
                                      # not the terminal's Ctrl-C: the sweep ends it
                                      start_new_session=True)

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()  # its end ends the echo on the node
        except OSError:
            pass
        try:
            proc.wait(timeout=SSH_CONNECT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    def close(self) -> None:
        with self._lock:
            self._stop()


def _exchange(proc: subprocess.Popen, samples: int) -> tuple[float, float] | None:
    """(round trip, offset) of the shortest of ``samples`` exchanges; None on no answer."""
    best: tuple[float, float] | None = None
    for _ in range(samples):
        sent = time.time()
        proc.stdin.write("\n")
        proc.stdin.flush()
        answer = proc.stdout.readline()
        got = time.time()
        if not answer:
            return None
        offset = float(answer) - (sent + got) / 2
        if best is None or got - sent < best[0]:
            best = (got - sent, offset)
    return best

