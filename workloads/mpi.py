"""Horovod over Open MPI on edgeprof's nodes: the small programs around ``mpirun``.

``profiler.engines.horovod`` (``--horovod-ops mpi``) starts one process per cell, the
``launcher`` on node 0, through the cluster like any other: ``python -m workloads.mpi
launch -- mpirun ...``. From there Open MPI starts one ``orted`` per node through its rsh
agent and each ``orted`` starts its node's rank:

- ``launch NODES -- mpirun ...``: runs ``mpirun`` (with this module's ``rsh`` as its rsh
  agent, named here: only this process knows the node's own Python) as a child, copies
  its output to the log and, when it fails, ends with one line naming the rank that
  failed first, its node and how (``worker-1 on n1 was killed by signal 9 (Killed)``),
  or the node whose daemon could not start: the cell's reason is the launcher's last
  line, and Open MPI's own message ends in a ruler.
- ``rsh HOST WORDS...`` (``plm_rsh_agent``): what ``ssh HOST WORDS...`` would be, for a
  node of edgeprof's: it enters ``HOST`` the way the cluster says
  (``profiler.cluster.base.NodeEntry``, from ``NODE_ENTRIES_ENV``: the emulated
  cluster's network namespace, cgroups and the node's environment; the local cluster's
  and the launcher's own node's plain start; another inventory node's ``via``) and runs
  ``orted`` there as its child, so the rank ``orted`` forks runs in that node's network
  and cgroup (the node's agent measures it there), a training rank joins the node's CPU
  quota once its start-up is done, as a Gloo worker does, and a daemon that fails is
  named with its node (``orted`` stays attached: ``orte_leave_session_attached``).
- ``enter HOST -- ARGV``: ``rsh`` with the words already split (what ``via`` has the
  controller run on the other node).
- ``via SOCKET TICKET HOST -- ARGV`` (an inventory node's entry): asks the controller,
  through the socket its SSH connection forwards to this node, to start ``ARGV`` on
  ``HOST`` over its own connection to that host
  (``profiler.cluster.inventory.mpi_relay``), and lives as long as that does: its end
  (``mpirun`` stopping the job, or dying) stops the daemon there, and the daemon's end
  is its own, with a line naming the node when it failed or could not be reached.
  ``ADDRESS`` may instead be ``tcp:NAME:PORT``, a Swarm node's entry on the cell's
  overlay, and ``TICKET`` ``@FILE``, the file holding it (a mode-0600 file in the cell's
  folder: a container's command line and environment are the Swarm's to show).
- ``serve TICKET_FILE PORT HOST`` (a Swarm node's entry, ``profiler.cluster.swarm.
  cluster``): a one-task service on ``HOST`` with a worker's limits, network and mounts
  that waits for node 0's ``via`` bringing the ticket, runs ``enter HOST -- orted ...``
  as its child (so the daemon and its rank run in that container), answers with its
  status and a line naming the node, and ends with it; the ``via`` going stops it.
- ``rank LOG_DIR -- ARGV``: how ``orted`` starts a rank: its output into
  ``LOG_DIR/worker-<rank>.log`` (as the cluster logs a Gloo worker), then exec ``ARGV``
  (``workloads.train``), whose events go to the cell's ``events/`` as any worker's. On a
  node whose cell folder is elsewhere than node 0's (``PATHS_ENV``), the paths are that
  node's.

Nothing may outlive the cell. ``mpirun`` stops the job when a rank fails; each daemon is
a child of its rsh agent (``orte_leave_session_attached``; Open MPI would otherwise
daemonize it out of reach, and a daemon failing after that left ``mpirun`` waiting for
it forever), every one of these processes asks the kernel to SIGKILL it when its parent
dies (``PR_SET_PDEATHSIG``), and a ``via``'s end stops its daemon on the other node.
Each node's daemon gets a session directory of its own (``session_dir``): the daemons
of a cell's nodes may share one /tmp, and two of them creating the same directory at
once made one fail. ``enter`` removes it when its daemon has ended; one it could not
(killed first) names its pid (``OWNER_FILE``), and the next ``enter`` or ``launch`` on
that node removes it.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from workloads.events import NODE_ENV

# How ``rsh`` enters each node: JSON ``{"cell": ..., "nodes": {name: NodeEntry}}``, or
# the path of a file holding ``{name: NodeEntry}``; the cell runner sets it in the
# launcher's environment (on a remote node, the file would not be there).
NODE_ENTRIES_ENV = "EDGEPROF_NODE_ENTRIES"
# ``[[prefix on node 0, prefix here], ...]``: where this node keeps what node 0's
# command line names (the cell folder, the sweep's inputs; ``via``'s other nodes).
PATHS_ENV = "EDGEPROF_MPI_PATHS"
DATA_DIR_ENV = "EDGEPROF_MPI_DATA_DIR"  # this node's --data-dir, when it has its own
# What ``via`` takes along to the other node (Open MPI refuses root without them).
FORWARDED_ENV = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
PR_SET_PDEATHSIG = 1
SHELL_SYNTAX = (";", "&&", "||", "|", "&")
STALE_SESSION_S = 600.0
OWNER_FILE = "edgeprof-owner"  # in a session folder: the pid of the ``enter`` it is for
# The lines this module writes about a node (``launch`` makes the first one the reason).
NODE_LINE = "edgeprof-mpi: "
UNREACHABLE_EXIT = 255  # what ssh exits with when it cannot reach the host
TCP_PREFIX = "tcp:"  # ``via``'s address of a Swarm node's entry (``serve``)
# How long ``via`` retries a Swarm entry whose container is still starting (a service
# scheduled, an image's container and Python started on a loaded board).
ENTRY_CONNECT_TIMEOUT_S = 120.0

# mpirun's own report of the first failure (Open MPI 4.1).
_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal "
                        r"(\d+) \(([^)]*)\)")
_EXITED = re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]")
_EXIT_CODE = re.compile(r"Exit code:\s+(\d+)")


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (exit if it already has)."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def node_line(node: str, what: str) -> None:
    """Tell ``mpirun``'s output (the launcher's log) what happened on ``node``."""
    sys.stderr.write(f"{NODE_LINE}node {node}: {what}\n")
    sys.stderr.flush()


def _entries_value() -> str:
    return os.environ[NODE_ENTRIES_ENV]


def read_entries() -> dict:
    """Node name -> entry (``NodeEntry.to_dict``), from ``NODE_ENTRIES_ENV``."""
    value = _entries_value()
    if value.lstrip().startswith("{"):
        return json.loads(value)["nodes"]
    return json.loads(Path(value).read_text())


def session_dir(host: str) -> Path:
    """Open MPI's session directory base for ``host``'s daemon in this cell: one of its
    own in /tmp (short: Open MPI's sockets live there), named after the cell's entries
    so that cells running at once never share one."""
    tag = hashlib.sha1(_entries_value().encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"edgeprof-ompi-{tag}-{host}"


def command_argv(words: list[str]) -> list[str]:
    """A remote shell's command line (as ssh gets it) as an argv."""
    command = " ".join(words)
    argv = shlex.split(command)
    if any(token in SHELL_SYNTAX or token.endswith(";") for token in argv):
        argv = ["sh", "-c", command]  # a shell's line (a PATH prefix): the shell forks it
    return argv


def rsh(host: str, words: list[str]) -> int:
    """Run ``words`` (a remote shell's command line) on node ``host``; its status."""
    entry = read_entries().get(host)
    if entry is None:
        node_line(host, f"not a node of this cell ({', '.join(sorted(read_entries()))})")
        return UNREACHABLE_EXIT
    return enter(host, entry, command_argv(words))


def enter(host: str, entry: dict, argv: list[str]) -> int:
    """Run ``argv`` in node ``host``'s context (``entry``) as this process's child, to
    its end; its status, and a line naming the node when it failed."""
    die_with_parent()
    for procs in entry["cgroup_procs"]:
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))
    os.environ.update(entry["env"])
    os.environ[NODE_ENV] = host  # the rank's start event names its node
    # A session directory of the node's own: daemons of "hosts" sharing one /tmp (the
    # local cluster's slots, emulated nodes) race creating the same path, and the
    # loser's orte_init fails ("mkdir ... File exists").
    remove_stale_sessions()  # a killed cell's on this node (its daemon's)
    session = session_dir(host)
    session.mkdir(mode=0o700, exist_ok=True)
    (session / OWNER_FILE).write_text(str(os.getpid()))
    os.environ["OMPI_MCA_orte_tmpdir_base"] = str(session)
    # A stop (SIGTERM to the group, the daemon's too) is the daemon's to act on: this
    # process waits for it, then removes its session folder, which a daemon killed by
    # this process's death (PR_SET_PDEATHSIG) could not. A handler, not SIG_IGN: the
    # daemon would inherit that.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    try:
        child = subprocess.Popen([*entry["argv"], *argv], preexec_fn=die_with_parent)
    except OSError as exc:
        what = "not found" if isinstance(exc, FileNotFoundError) else \
            f"cannot be started ({exc.strerror})"
        node_line(host, f"{argv[0]} {what}: install Open MPI there (apt-get install "
                        "openmpi-bin)")
        return 127
    code = child.wait()
    code = code if code >= 0 else 128 - code
    shutil.rmtree(session, ignore_errors=True)  # the daemon and its rank are gone
    if code != 0:  # after a ``via``'s own line, which the reason takes (the first)
        if code == 127:
            node_line(host, f"{argv[0]} not found: install Open MPI there "
                            "(apt-get install openmpi-bin)")
        else:
            node_line(host, f"the MPI daemon ({argv[0]}) exited {code}")
    return code


def via(address: str, ticket: str, host: str, argv: list[str]) -> int:
    """Have the controller (or ``host``'s entry) start ``argv`` on ``host`` (see the
    module docstring), and wait for its end; its status."""
    die_with_parent()
    try:
        conn = _connect(address, host)
        conn.sendall(json.dumps({"ticket": _ticket(ticket), "argv": argv, "env": {
            key: os.environ[key] for key in FORWARDED_ENV if key in os.environ}}
            ).encode() + b"\n")
        reply = conn.makefile("rb").readline()
    except OSError as exc:
        where = "the controller's relay" if not address.startswith(TCP_PREFIX) else \
            f"the node's entry ({address[len(TCP_PREFIX):]})"
        node_line(host, f"{where} cannot be reached from here "
                        f"({exc.strerror or exc}): is the sweep still running?")
        return UNREACHABLE_EXIT
    try:
        answer = json.loads(reply)
    except ValueError:
        where = "the controller's relay" if not address.startswith(TCP_PREFIX) else \
            "its entry (the container there: killed, or out of memory?)"
        node_line(host, f"{where} ended before the MPI daemon there did")
        return UNREACHABLE_EXIT
    if answer.get("problem"):
        node_line(host, answer["problem"])
    return int(answer.get("exit", UNREACHABLE_EXIT))


def _ticket(ticket: str) -> str:
    """A ticket as ``via`` is given it: itself, or ``@PATH`` of the file holding it (the
    Swarm's: never in a command line)."""
    return Path(ticket[1:]).read_text().strip() if ticket.startswith("@") else ticket


def _connect(address: str, host: str) -> socket.socket:
    """A connection to ``address``: a Unix socket's path, or ``tcp:NAME:PORT`` (a Swarm
    node's entry, which may still be starting: refused or not yet named in the
    network's DNS until ``ENTRY_CONNECT_TIMEOUT_S``)."""
    if not address.startswith(TCP_PREFIX):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(address)
        return conn
    name, _, port = address[len(TCP_PREFIX):].rpartition(":")
    deadline = time.monotonic() + ENTRY_CONNECT_TIMEOUT_S
    while True:
        try:
            conn = socket.create_connection((name, int(port)), timeout=ENTRY_CONNECT_TIMEOUT_S)
            conn.settimeout(None)  # the answer comes when the daemon ends: hours later
            return conn
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def serve(ticket_path: str, port: int, host: str) -> int:
    """A Swarm node's entry: wait on ``port`` for the ``via`` of node 0's rsh agent that
    brings this file's ticket, run its daemon here (``enter``, as this process's
    child) and answer with its status; end with it. A request without the ticket, or
    not for ``orted``, is refused and the entry waits on. The ``via`` going (``mpirun``
    stopping the job) stops the daemon."""
    die_with_parent()
    ticket = Path(ticket_path).read_text().strip()
    listener = socket.create_server(("", port), reuse_port=False)
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                conn.settimeout(ENTRY_CONNECT_TIMEOUT_S)
                request = json.loads(conn.makefile("rb").readline())
                argv = [str(arg) for arg in request.get("argv", [])]
                good = hmac.compare_digest(str(request.get("ticket", "")).encode(),
                                           ticket.encode())
            except (OSError, ValueError, AttributeError):
                continue
            if not good or not argv or os.path.basename(argv[0]) != "orted":
                answer_via(conn, UNREACHABLE_EXIT, "the entry refused a request that is not "
                                                "this cell's MPI daemon")
                continue
            conn.settimeout(None)
            env = {**os.environ, **{k: str(v) for k, v in (request.get("env") or {}).items()
                                    if k in FORWARDED_ENV}}
            child = subprocess.Popen([sys.executable, "-m", "workloads.mpi", "enter", host,
                                      "--", *argv], env=env, stderr=subprocess.PIPE,
                                     preexec_fn=die_with_parent, start_new_session=True)
            lines: list[str] = []
            threading.Thread(target=_copy_lines, args=(child.stderr, lines),
                             daemon=True).start()
            while child.poll() is None:
                readable, _, _ = select.select([conn], [], [], 0.2)
                if readable and not _alive(conn):  # the via went: stop the daemon
                    return _stop_group(child)
            problem = next((line[len(NODE_LINE):].split(": ", 1)[-1].strip()
                            for line in lines if line.startswith(NODE_LINE)), "")
            if child.returncode and not problem:
                problem = f"the MPI daemon exited {child.returncode}"
            answer_via(conn, child.returncode, problem if child.returncode else "")
            return child.returncode


def _alive(conn: socket.socket) -> bool:
    """Whether the ``via`` at the other end of a readable ``conn`` is still there."""
    try:
        return bool(conn.recv(1))
    except OSError:  # reset: its container or node went
        return False


def _stop_group(child: subprocess.Popen, grace_s: float = 5.0) -> int:
    """SIGTERM ``child``'s group (``enter`` waits, its daemon stops its rank), then
    SIGKILL what is left after ``grace_s``; the child's status."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
            return child.wait(timeout=grace_s)
        except ProcessLookupError:
            return child.wait()
        except subprocess.TimeoutExpired:
            continue
    return child.wait()


def _copy_lines(stream, lines: list[str]) -> None:
    """Copy ``stream`` to our stderr (the entry's log), keeping its lines."""
    for raw in stream:
        line = raw.decode(errors="replace")
        lines.append(line)
        sys.stderr.write(line)
        sys.stderr.flush()


def answer_via(conn: socket.socket, code: int, problem: str) -> None:
    """Answer a ``via`` (``conn``): its daemon's status and what to say of its node."""
    try:
        conn.sendall(json.dumps({"exit": code, "problem": problem}).encode() + b"\n")
    except OSError:
        pass  # the via is gone


def local_paths(argv: list[str]) -> list[str]:
    """``argv`` (node 0's paths) with this node's folders (``PATHS_ENV``,
    ``DATA_DIR_ENV``)."""
    pairs = json.loads(os.environ.get(PATHS_ENV) or "[]")
    data_dir = os.environ.get(DATA_DIR_ENV)
    out = []
    for index, arg in enumerate(argv):
        for there, here in pairs:
            if arg == there or arg.startswith(there + "/"):
                arg = here + arg[len(there):]
                break
        if data_dir and index > 0 and argv[index - 1] == "--data-dir":
            arg = data_dir
        out.append(arg)
    return out


def rank(log_dir: Path, argv: list[str]) -> None:
    """Exec ``argv`` as this MPI rank's worker, its output in ``worker-<rank>.log``."""
    number = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    log_dir, *argv = local_paths([str(log_dir), *argv])
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_dir / f"worker-{number}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    die_with_parent()
    os.execvp(argv[0], argv)


def failure_line(output: str, nodes: list[str]) -> str:
    """One line naming the rank that failed first in ``mpirun``'s ``output``, or else the
    node whose daemon failed (empty if neither was said); ``nodes``: the node of each
    rank, in rank order."""
    signalled = _SIGNALLED.search(output)
    if signalled:
        number, node, sig, name = signalled.groups()
        return f"worker-{number} on {node} was killed by signal {sig} ({name})"
    exited = _EXITED.search(output)
    if exited:
        number = int(exited.group(1))
        code = _EXIT_CODE.search(output, exited.end())
        node = nodes[number] if number < len(nodes) else "?"
        return (f"worker-{number} on {node} exited "
                f"{code.group(1) if code else 'with an error'}")
    for line in output.splitlines():
        if line.startswith(NODE_LINE):
            return line[len(NODE_LINE):].strip()
    return ""


def remove_stale_sessions(min_age_s: float = STALE_SESSION_S) -> None:
    """Remove the session directories of earlier cells that were killed before they
    could (SIGKILL after the stop's grace, a controller killed with kill -9): one whose
    owner (``enter``, ``OWNER_FILE``) is no longer running, or one without an owner
    that is empty and older than ``min_age_s`` (one in use is never empty past its
    first moment)."""
    now = time.time()
    for path in Path(tempfile.gettempdir()).glob("edgeprof-ompi-*"):
        try:
            owner = int((path / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = None
        try:
            if owner is not None:
                if not _is_running_enter(owner):
                    shutil.rmtree(path)
            elif now - path.stat().st_mtime > min_age_s:
                path.rmdir()  # only if empty
        except OSError:
            pass


def _is_running_enter(pid: int) -> bool:
    """Whether ``pid`` is a running ``workloads.mpi`` process (not a reused pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"workloads.mpi" in handle.read()
    except OSError:
        return False


def launch(argv: list[str], nodes: list[str]) -> int:
    """Run ``mpirun`` (``argv``) to its end, its output to ours; its exit status."""
    remove_stale_sessions()
    # The rsh agent is this node's Python (the engine planned on the controller).
    argv = [argv[0], "--mca", "plm_rsh_agent", f"{sys.executable} -m workloads.mpi rsh",
            *argv[1:]]
    # A stop signal reaches mpirun too (same process group): it stops its job itself;
    # this process keeps copying its output until it ends.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    seen = []
    for raw in proc.stdout or ():
        line = raw.decode(errors="replace")
        seen.append(line)
        sys.stdout.write(line)
        sys.stdout.flush()
    code = proc.wait()
    if NODE_ENTRIES_ENV in os.environ:  # the daemons' session directories, emptied by them
        for node in nodes:
            shutil.rmtree(session_dir(node), ignore_errors=True)
    if code != 0:
        what = failure_line("".join(seen), nodes) or "mpirun did not say which rank failed"
        print(f"mpirun exited {code}: {what}", flush=True)
    return code if code >= 0 else 128 - code


def main(args: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if args is None else args)
    if not args:
        sys.exit("usage: python -m workloads.mpi launch NODES -- ARGV | rsh HOST WORDS... "
                 "| enter HOST -- ARGV | via ADDRESS TICKET HOST -- ARGV "
                 "| serve TICKET_FILE PORT HOST | rank LOG_DIR -- ARGV")
    what, rest = args[0], args[1:]
    after = rest[rest.index("--") + 1:] if "--" in rest else []
    if what == "rsh":
        sys.exit(rsh(rest[0], rest[1:]))
    elif what == "enter":
        sys.exit(enter(rest[0], read_entries()[rest[0]], after))
    elif what == "via":
        sys.exit(via(rest[0], rest[1], rest[2], after))
    elif what == "serve":
        sys.exit(serve(rest[0], int(rest[1]), rest[2]))
    elif what == "rank":
        rank(Path(rest[0]), after)
    elif what == "launch":
        sys.exit(launch(after, rest[0].split(",")))
    else:
        sys.exit(f"workloads.mpi: unknown command {what!r}")


if __name__ == "__main__":
    main()
