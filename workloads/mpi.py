"""Horovod over Open MPI on edgeprof's nodes: the three small programs around ``mpirun``.

``profiler.engines.horovod`` (``--horovod-ops mpi``) starts one process per cell, the
``launcher`` on node 0, through the cluster like any other: ``python -m workloads.mpi
launch -- mpirun ...``. From there Open MPI starts one ``orted`` per node through its rsh
agent and each ``orted`` starts its node's rank:

- ``launch -- mpirun ...``: runs ``mpirun`` as a child, copies its output to the log and,
  when it fails, ends with one line naming the rank that failed first, its node and how
  (``worker-1 on n1 was killed by signal 9 (Killed)``): the cell's reason is the
  launcher's last line, and Open MPI's own message ends in a ruler.
- ``rsh HOST WORDS...`` (``plm_rsh_agent``): what ``ssh HOST WORDS...`` would be, for a
  node of edgeprof's: it enters ``HOST`` the way the cluster says
  (``profiler.cluster.base.NodeEntry``, read from the file ``NODE_ENTRIES_ENV`` names:
  the emulated cluster's network namespace, cgroups and the node's environment; the
  local cluster's plain exec) and execs ``orted`` there, so the rank ``orted`` forks runs
  in that node's network and cgroup (the node's agent measures it there) and a training
  rank joins the node's CPU quota once its start-up is done, as a Gloo worker does.
- ``rank LOG_DIR -- ARGV``: how ``orted`` starts a rank: its output into
  ``LOG_DIR/worker-<rank>.log`` (as the cluster logs a Gloo worker), then exec ``ARGV``
  (``workloads.train``), whose events go to the cell's ``events/`` as any worker's.

Nothing may outlive the cell. ``orted`` daemonizes into a session of its own, out of
reach of the runner's process-group kill: Open MPI's own lifeline ends it when it loses
``mpirun`` (and ``mpirun`` stops the job when a rank fails). Each rank also asks the
kernel to SIGKILL it when its ``orted`` dies (``PR_SET_PDEATHSIG``), and ``mpirun`` the
same when the launcher dies. Each node's daemon gets a session directory of its own
(``session_dir``): the daemons of a cell's nodes share one /tmp, and two of them
creating the same directory at once made one fail and ``mpirun`` hang.
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workloads.events import NODE_ENV

# The file (JSON: node name -> NodeEntry) that tells ``rsh`` how to enter each node;
# the cell runner writes it and names it in the launcher's environment.
NODE_ENTRIES_ENV = "EDGEPROF_NODE_ENTRIES"
PR_SET_PDEATHSIG = 1
SHELL_SYNTAX = (";", "&&", "||", "|", "&")
STALE_SESSION_S = 600.0

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


def session_dir(host: str) -> Path:
    """Open MPI's session directory base for ``host``'s daemon in this cell: one of its
    own in /tmp (short: Open MPI's sockets live there), named after the cell's entries
    file so that cells running at once never share one."""
    tag = hashlib.sha1(os.environ[NODE_ENTRIES_ENV].encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"edgeprof-ompi-{tag}-{host}"


def rsh(host: str, words: list[str]) -> None:
    """Exec ``words`` (a remote shell's command line, as ssh gets it) on node ``host``."""
    entries = json.loads(Path(os.environ[NODE_ENTRIES_ENV]).read_text())
    entry = entries.get(host)
    if entry is None:
        sys.stderr.write(f"workloads.mpi rsh: {host} is not a node of this cell "
                         f"({', '.join(sorted(entries))})\n")
        sys.exit(255)  # what ssh exits with when it cannot reach the host
    for procs in entry["cgroup_procs"]:
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))
    os.environ.update(entry["env"])
    os.environ[NODE_ENV] = host  # the rank's start event names its node
    # A session directory of the node's own: daemons of "hosts" sharing one /tmp (the
    # local cluster's slots, emulated nodes) race creating the same path, and the
    # loser's orte_init fails ("mkdir ... File exists"), which leaves mpirun hanging.
    session = session_dir(host)
    session.mkdir(mode=0o700, exist_ok=True)
    os.environ["OMPI_MCA_orte_tmpdir_base"] = str(session)
    command = " ".join(words)
    argv = shlex.split(command)
    if any(token in SHELL_SYNTAX or token.endswith(";") for token in argv):
        argv = ["sh", "-c", command]  # a shell's line (a PATH prefix): the shell forks it
    die_with_parent()
    full = [*entry["argv"], *argv]
    os.execvp(full[0], full)


def rank(log_dir: Path, argv: list[str]) -> None:
    """Exec ``argv`` as this MPI rank's worker, its output in ``worker-<rank>.log``."""
    number = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    log_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_dir / f"worker-{number}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    die_with_parent()
    os.execvp(argv[0], argv)


def failure_line(output: str, nodes: list[str]) -> str:
    """One line naming the rank that failed first in ``mpirun``'s ``output`` (empty if
    mpirun did not say); ``nodes``: the node of each rank, in rank order."""
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
    return ""


def remove_stale_sessions(min_age_s: float = STALE_SESSION_S) -> None:
    """Remove the empty session directories of earlier cells that were killed before
    their launcher could (a daemon empties its own as it exits; one in use is never
    empty past its first moment, hence the age)."""
    now = time.time()
    for path in Path(tempfile.gettempdir()).glob("edgeprof-ompi-*"):
        try:
            if now - path.stat().st_mtime > min_age_s:
                path.rmdir()  # only if empty
        except OSError:
            pass


def launch(argv: list[str], nodes: list[str]) -> int:
    """Run ``mpirun`` (``argv``) to its end, its output to ours; its exit status."""
    remove_stale_sessions()
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
                 "| rank LOG_DIR -- ARGV")
    what, rest = args[0], args[1:]
    if what == "rsh":
        rsh(rest[0], rest[1:])
    elif what == "rank":
        rank(Path(rest[0]), rest[rest.index("--") + 1:])
    elif what == "launch":
        sys.exit(launch(rest[rest.index("--") + 1:], rest[0].split(",")))
    else:
        sys.exit(f"workloads.mpi: unknown command {what!r}")


if __name__ == "__main__":
    main()
