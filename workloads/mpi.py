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
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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


def via(socket_path: str, ticket: str, host: str, argv: list[str]) -> int:
    """Have the controller start ``argv`` on ``host`` (see the module docstring), and
    wait for its end; its status."""
    die_with_parent()
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(socket_path)
        conn.sendall(json.dumps({"ticket": ticket, "argv": argv, "env": {
            key: os.environ[key] for key in FORWARDED_ENV if key in os.environ}}
            ).encode() + b"\n")
        reply = conn.makefile("rb").readline()
    except OSError as exc:
        node_line(host, f"the controller's relay cannot be reached from here "
                        f"({exc.strerror or exc}): is the sweep still running?")
        return UNREACHABLE_EXIT
    try:
        answer = json.loads(reply)
    except ValueError:
        node_line(host, "the controller's relay ended before the MPI daemon there did")
        return UNREACHABLE_EXIT
    if answer.get("problem"):
        node_line(host, answer["problem"])
    return int(answer.get("exit", UNREACHABLE_EXIT))


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
                 "| enter HOST -- ARGV | via SOCKET TICKET HOST -- ARGV | rank LOG_DIR -- ARGV")
    what, rest = args[0], args[1:]
    after = rest[rest.index("--") + 1:] if "--" in rest else []
    if what == "rsh":
        sys.exit(rsh(rest[0], rest[1:]))
    elif what == "enter":
        sys.exit(enter(rest[0], read_entries()[rest[0]], after))
    elif what == "via":
        sys.exit(via(rest[0], rest[1], rest[2], after))
    elif what == "rank":
        rank(Path(rest[0]), after)
    elif what == "launch":
        sys.exit(launch(after, rest[0].split(",")))
    else:
        sys.exit(f"workloads.mpi: unknown command {what!r}")


if __name__ == "__main__":
    main()
