"""The inventory's hosts as a cluster: start processes over SSH, bring their files back,
slow a straggler, read the nodes' clocks.

Processes start with the system's OpenSSH client, so the user's keys, ``~/.ssh/config``,
jump hosts and known_hosts apply. Each runs under ``profiler.cluster.remote_exec``, which
stops it when its ``ssh`` goes away and tells the node's agent its pid. Paths of the cell
folder are mapped to the host's ``edgeprof_workdir``; after the cell, ``collect`` brings
that folder (events, metrics spools) back into the local cell folder with ``tar`` over
the same SSH, so results have the same columns as on the emulated cluster. Logs come
back live through ssh's output.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Mapping, Sequence

from ...errors import ClusterError
from ..base import Cluster, Node, popen_in_group
from .hosts import SSH_CONNECT_TIMEOUT_S, Host, last_line, plain_env
from .probe import CHECK_TIMEOUT_S
from .straggler import STRAGGLER_WAIT_S, cpu_max_command, straggler_answer, straggler_group

COLLECT_TIMEOUT_S = 300


class InventoryCluster(Cluster):
    """Nodes reached over SSH; see the module docstring."""

    name = "inventory"
    can_slow_node = True

    def __init__(self, hosts: Sequence[Host]):
        self._hosts = {host.name: host for host in hosts}
        self._nodes = [host.node() for host in hosts]

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def host(self, node: Node) -> Host:
        return self._hosts[node.name]

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
                   "--mkdir", str(remote_dir)]
        for key, value in sorted(env.items()):
            command += ["--setenv", f"{key}={value}"]
        if role:
            command += ["--pids-file", str(remote_dir / "pids" / f"{node.name}.json"),
                        "--role", role]
        command += ["--", *self._remote_argv(host, argv, cell_dir, remote_dir)]
        # stdin stays an open pipe: its end tells remote_exec that the cell is over.
        return popen_in_group(host.ssh(command), {}, Path(log_path), stdin=subprocess.PIPE)

    @staticmethod
    def _remote_argv(host: Host, argv: Sequence[str], cell_dir: Path,
                     remote_dir: PurePosixPath) -> list[str]:
        local = str(cell_dir)
        out: list[str] = []
        for index, arg in enumerate(argv):
            if index == 0 and arg == sys.executable:
                arg = host.python
            elif arg == local or arg.startswith(local + "/"):
                arg = str(remote_dir) + arg[len(local):]
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
        host = self.host(node)
        remote_dir = str(self.remote_cell_dir(node, cell_dir))
        pack = host.ssh(["tar", "-C", remote_dir, "--exclude=./pids", "-cf", "-", "."])
        try:
            with subprocess.Popen(pack, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, env=plain_env()) as sender:
                unpacked = subprocess.run(["tar", "-C", str(cell_dir), "-xf", "-"],
                                          stdin=sender.stdout, capture_output=True,
                                          timeout=COLLECT_TIMEOUT_S)
                sender.stdout.close()
                error = sender.stderr.read().decode(errors="replace")
                sender.wait(timeout=COLLECT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{node.name}: {exc}"
        if sender.returncode != 0 or unpacked.returncode != 0:
            return f"{node.name}: {last_line(error or unpacked.stderr.decode())}"
        subprocess.run(host.ssh(["rm", "-rf", remote_dir]), capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=COLLECT_TIMEOUT_S, env=plain_env())
        return None

    def clock_offsets(self, nodes: Sequence[Node]) -> dict[str, float]:
        """Each node's clock minus this host's, in seconds (``clock_offset``), measured
        in parallel; a node that cannot be reached is left out."""
        unique = list({n.name: n for n in nodes}.values())
        with ThreadPoolExecutor(max_workers=min(16, len(unique) or 1)) as pool:
            offsets = list(pool.map(lambda node: clock_offset(self.host(node)), unique))
        return {node.name: offset for node, offset in zip(unique, offsets)
                if offset is not None}

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
            done = subprocess.run(host.ssh(cpu_max_command(host.python, action, group, args)),
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
        pass


# The node answers each line on its stdin with its time.time(); over one SSH session the
# round trips are a few ms, not the session's set-up.
_CLOCK_ECHO = "import sys, time\nfor _ in sys.stdin:\n    print(repr(time.time()), flush=True)"
CLOCK_SAMPLES = 7


def clock_offset(host: Host, samples: int = CLOCK_SAMPLES) -> float | None:
    """The host's clock minus this one's, in seconds, as NTP estimates it: of a few
    request/answer exchanges, the one of the shortest round trip, its answer against the
    midpoint of the trip (error at most half that trip). None if the host won't answer."""
    try:
        with subprocess.Popen(host.ssh([host.python, "-u", "-c", _CLOCK_ECHO]),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=plain_env()) as proc:
            best: tuple[float, float] | None = None
            try:
                for _ in range(samples):
                    sent = time.time()
                    proc.stdin.write("\n")
                    proc.stdin.flush()
                    answer = proc.stdout.readline()
                    got = time.time()
                    if not answer:
                        break
                    offset = float(answer) - (sent + got) / 2
                    if best is None or got - sent < best[0]:
                        best = (got - sent, offset)
            finally:
                proc.stdin.close()
                try:
                    proc.wait(timeout=SSH_CONNECT_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
    except (OSError, ValueError):
        return None
    return None if best is None else best[1]
