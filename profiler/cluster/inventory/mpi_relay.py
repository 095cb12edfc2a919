"""How an MPI launcher on one inventory node starts Open MPI's daemons on the others:
through the controller's own SSH connections, so no node needs a key to another.

``mpirun`` runs on the cell's node 0 and starts one ``orted`` per node through its rsh
agent (``workloads.mpi rsh``). For another node that agent runs ``workloads.mpi via``,
which connects to a Unix socket on node 0 that the sweep's SSH connection to node 0
forwards back here (``ssh -O forward -R``, on the ControlMaster connection: sshd's
default ``AllowStreamLocalForwarding yes``; the socket is the SSH user's, mode 0600).
This relay reads the request (a ticket naming the cell and the node, the daemon's argv)
and starts ``workloads.mpi enter NODE -- orted ...`` on that node with
``InventoryCluster.start``, exactly as any process of a cell: under ``remote_exec``
(its pid registered for the node's agent, stopped when its ssh goes), its output in
``logs/orted-<node>.log``. Lifelines both ways: the ``via`` ending (``mpirun`` stopping
the job, or dying) closes its connection, and the relay then stops that ssh (so the
daemon there); the daemon ending ends its ssh, and the relay answers the ``via`` with
its status and, when it failed, a line naming the node (an unreachable node: ssh's own
words).

Only ``orted`` is started (the request's command must be Open MPI's daemon), only on
the node and for the cell its ticket names. The rank's command line comes from
``mpirun`` on node 0, so its paths are node 0's: each daemon gets where its own node
keeps them (``PATHS_ENV``, ``DATA_DIR_ENV``), which ``workloads.mpi rank`` applies.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping, Protocol, Sequence

from workloads.mpi import (DATA_DIR_ENV, FORWARDED_ENV, NODE_ENTRIES_ENV, NODE_LINE,
                           PATHS_ENV, UNREACHABLE_EXIT, answer_via)

from ...errors import ClusterError
from ..base import Node, NodeEntry, kill_group
from .hosts import SSH_CONNECT_TIMEOUT_S, Host, last_line, plain_env

DAEMON = "orted"
POLL_S = 0.2  # how soon a daemon's end or its via's is noticed
REMOTE_SOCKET_DIR = PurePosixPath("/tmp")  # short: a Unix socket's path is limited


class RelayCluster(Protocol):
    """What the relay asks of the inventory cluster (``cluster.InventoryCluster``),
    named here so that this module does not import the one that imports it."""

    def host(self, node: Node) -> Host: ...
    def ssh_argv(self, host: Host, remote: Sequence[str]) -> list[str]: ...
    def control_argv(self, node: Node, operation: str, forward: str,
                     kind: str = "-R") -> list[str]: ...
    def remote_cell_dir(self, node: Node, cell_dir: Path) -> PurePosixPath: ...
    def ship_inputs(self, node: Node, cell_dir: Path) -> None: ...
    def start(self, node: Node, argv: Sequence[str], env: Mapping[str, str],
              log_path: Path, *, confine: bool = True, role: str | None = None
              ) -> subprocess.Popen: ...


@dataclass(frozen=True)
class Ticket:
    """What one ``via`` may ask for: ``node``'s daemon, for the cell in ``cell_dir``
    whose launcher runs on ``origin``."""

    node: Node
    origin: Node
    cell_dir: Path


class MpiRelay:
    """The sweep's relay (one listener here, one forwarded socket per launcher node)."""

    def __init__(self, cluster: RelayCluster, control_dir: str):
        self._cluster = cluster
        self._local = os.path.join(control_dir, "mpi-relay.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self._local)
        self._listener.listen(64)
        self._lock = threading.Lock()
        self._tickets: dict[str, Ticket] = {}
        self._forwards: dict[str, tuple[Node, str]] = {}  # name -> (origin, its socket)
        self._running: set[subprocess.Popen] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="mpi-relay").start()

    def entry(self, node: Node, origin: Node, cell_dir: Path) -> NodeEntry:
        """``node``'s entry for a launcher on ``origin``: a ``via`` with a ticket."""
        host, origin_host = self._cluster.host(node), self._cluster.host(origin)
        if host.python != origin_host.python:
            raise ClusterError(
                f"node {node.name}'s edgeprof_python ({host.python}) is not node "
                f"{origin.name}'s ({origin_host.python}), and mpirun starts every rank with "
                "node 0's command: install edgeprof at the same path on every node")
        ticket = secrets.token_hex(8)
        with self._lock:
            self._tickets[ticket] = Ticket(node, origin, Path(cell_dir))
        return NodeEntry((origin_host.python, "-m", "workloads.mpi", "via",
                          self._remote_socket(origin), ticket, node.name, "--"))

    def _remote_socket(self, origin: Node) -> str:
        """The socket on ``origin`` that leads here (forwarded once a sweep)."""
        with self._lock:
            if origin.name in self._forwards:
                return self._forwards[origin.name][1]
            path = str(REMOTE_SOCKET_DIR / f"edgeprof-mpi-{secrets.token_hex(6)}.sock")
            done = subprocess.run(self._cluster.control_argv(origin, "forward",
                                                             f"{path}:{self._local}"),
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  env=plain_env(), timeout=SSH_CONNECT_TIMEOUT_S * 2)
            if done.returncode != 0:
                raise ClusterError(
                    f"node {origin.name}: its SSH connection cannot forward the MPI relay's "
                    f"socket ({last_line(done.stderr)}): MPI cells need the shared "
                    "connection (no ControlMaster=no for it) and sshd's "
                    "AllowStreamLocalForwarding (its default)")
            self._forwards[origin.name] = (origin, path)
            return path

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        """One ``via``: start its daemon, then wait for whichever of the two ends first."""
        with conn:
            try:
                request = json.loads(conn.makefile("rb").readline())
                ticket = self._tickets.get(str(request.get("ticket")))
                argv = [str(arg) for arg in request.get("argv", [])]
            except (OSError, ValueError, AttributeError):
                return
            if ticket is None or not argv or os.path.basename(argv[0]) != DAEMON:
                answer_via(conn, UNREACHABLE_EXIT, "the relay refused a request that is "
                                                     "not an MPI daemon of this sweep's cells")
                return
            try:
                proc = self._start(ticket, argv, request.get("env") or {})
            except (OSError, ClusterError) as exc:
                answer_via(conn, UNREACHABLE_EXIT, str(exc))
                return
            code = self._wait(conn, proc)
            if code is not None:
                answer_via(conn, code, self._problem(ticket, code))

    def _start(self, ticket: Ticket, argv: list[str], forwarded: dict) -> subprocess.Popen:
        cluster, node = self._cluster, ticket.node
        here = cluster.remote_cell_dir(node, ticket.cell_dir)
        there = cluster.remote_cell_dir(ticket.origin, ticket.cell_dir)
        pairs = [[str(there), str(here)], [str(there.parents[2]), str(here.parents[2])]]
        own = {PATHS_ENV: json.dumps(pairs)}
        data_dir = cluster.host(node).data_dir
        if data_dir:
            own[DATA_DIR_ENV] = data_dir
        entries = {"cell": str(here),
                   "nodes": {node.name: NodeEntry(env=own).to_dict()}}
        env = {NODE_ENTRIES_ENV: json.dumps(entries),
               **{k: str(v) for k, v in forwarded.items() if k in FORWARDED_ENV}}
        cluster.ship_inputs(node, ticket.cell_dir)  # the rank's model or data files
        with self._lock:
            if self._closed:
                raise ClusterError("the sweep is ending")
            proc = cluster.start(node, [sys.executable, "-m", "workloads.mpi", "enter",
                                        node.name, "--", *argv], env,
                                 ticket.cell_dir / "logs" / f"orted-{node.name}.log",
                                 role="worker")
            self._running.add(proc)
        return proc

    def _wait(self, conn: socket.socket, proc: subprocess.Popen) -> int | None:
        """The daemon's status when it ends first; None when the ``via`` went first
        (then the daemon is stopped: its ssh's end stops it there)."""
        try:
            while proc.poll() is None:
                readable, _, _ = select.select([conn], [], [], POLL_S)
                if readable and not conn.recv(1):
                    kill_group(proc)
                    return None
            return proc.returncode
        finally:
            with self._lock:
                self._running.discard(proc)

    def _problem(self, ticket: Ticket, code: int) -> str:
        if code == 0:
            return ""
        log = ticket.cell_dir / "logs" / f"orted-{ticket.node.name}.log"
        try:
            text = log.read_text(errors="replace")
        except OSError:
            text = ""
        lines = [line for line in text.splitlines() if line.startswith(NODE_LINE)]
        if lines:  # the node's own account (workloads.mpi enter), without the prefix
            return lines[0].split(": ", 2)[-1]
        if code == UNREACHABLE_EXIT:
            return (f"unreachable over SSH ({last_line(text)}): check that it is up and "
                    "that the controller reaches it")
        return f"the MPI daemon exited {code} ({last_line(text)})"

    def close(self) -> None:
        """Stop what still runs, end the forwards and remove their sockets there."""
        with self._lock:
            self._closed = True
            running, self._running = list(self._running), set()
            forwards, self._forwards = dict(self._forwards), {}
        self._listener.close()
        for proc in running:
            kill_group(proc)
        for node, path in forwards.values():
            for argv in (self._cluster.control_argv(node, "cancel", f"{path}:{self._local}"),
                         self._cluster.ssh_argv(self._cluster.host(node),
                                                ["rm", "-f", "--", path])):
                try:
                    subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL,
                                   env=plain_env(), timeout=SSH_CONNECT_TIMEOUT_S)
                except (OSError, subprocess.TimeoutExpired):
                    pass  # an unreachable node keeps a dead socket file in /tmp
        try:
            os.unlink(self._local)
        except OSError:
            pass
