"""Runs one process of a cell on a remote node, and makes sure it dies with its cell.

The inventory cluster starts ``python -m profiler.cluster.remote_exec ... -- ARGV`` over
``ssh``. Killing the local ``ssh`` does not stop a remote command (without a terminal,
sshd sends it no signal), so this wrapper:

- starts ARGV in a session of its own, with the given environment (``--env-stdin``: a
  JSON object on the first line of stdin, which keeps it off every command line, the
  controller's and the node's ``ps``);
- registers the child's pid under its role in the node's pids file (``--pids-file``,
  ``{"worker": [pid], ...}``, updated under a lock: the scheduler and a server may share a
  node), so that the node's metrics agent measures the right processes;
- watches its stdin, which the controller's ``ssh`` keeps open: end of file means the
  controller stopped the cell (or died, or the link broke); it then stops the child's
  whole group (SIGTERM, then SIGKILL after a grace), as it does on SIGTERM or SIGHUP;
- exits with the child's status (128 + the signal's number if a signal ended it), which
  ``ssh`` hands back to the controller, as soon as the child ends (a thread waits on it:
  no polling interval).

Only the standard library: it must start fast on a Pi.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time

KILL_GRACE_S = 2.0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    env = dict(os.environ)
    if args.env_stdin:
        env.update(_read_env_line())
    for folder in args.mkdir:
        os.makedirs(folder, exist_ok=True)
    child = subprocess.Popen(args.command, env=env, start_new_session=True,
                             stdin=subprocess.DEVNULL)
    if args.pids_file and args.role:
        _register(args.pids_file, args.role, child.pid)
    stopping = threading.Event()  # set when the child ends, or the cell is over

    def stop(*_signal) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=_wait_for_eof, args=(stopping,), daemon=True).start()
    threading.Thread(target=lambda: (child.wait(), stopping.set()), daemon=True).start()
    # The timeout only bounds how late a signal's handler may run.
    while not stopping.wait(1.0):
        pass
    if child.poll() is None:
        _stop_group(child)
    code = child.wait()
    return 128 - code if code < 0 else code


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m profiler.cluster.remote_exec")
    parser.add_argument("--env-stdin", action="store_true",
                        help="read a JSON object of environment variables from stdin's "
                             "first line")
    parser.add_argument("--mkdir", action="append", default=[], metavar="DIR")
    parser.add_argument("--pids-file")
    parser.add_argument("--role")
    parser.add_argument("command", nargs="+")
    return parser.parse_args(argv)


def _read_env_line() -> dict[str, str]:
    """The JSON object on stdin's first line, read from the descriptor itself (nothing
    buffered past it: the rest of stdin is watched for its end)."""
    data = b""
    while not data.endswith(b"\n"):
        # The controller sends nothing after the line until the end, so a large read
        # never takes more than the line.
        chunk = os.read(sys.stdin.fileno(), 65536)
        if not chunk:
            break
        data += chunk
    env = json.loads(data or b"{}")
    if not isinstance(env, dict):
        raise SystemExit("remote_exec: --env-stdin wants a JSON object on one line")
    return {str(k): str(v) for k, v in env.items()}


def _wait_for_eof(stopping: threading.Event) -> None:
    """Block on stdin until it ends: the controller's ssh is gone."""
    try:
        while os.read(sys.stdin.fileno(), 4096):
            pass
    except OSError:
        pass
    stopping.set()


def _stop_group(child: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            if child.poll() is not None:
                break
            time.sleep(0.02)
    # Children of the leader may outlive it.
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _register(pids_file: str, role: str, pid: int) -> None:
    """Add ``pid`` under ``role`` to the node's pids file, atomically and under a lock."""
    folder = os.path.dirname(pids_file) or "."
    os.makedirs(folder, exist_ok=True)
    with open(pids_file + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(pids_file) as f:
                pids = json.load(f)
            if not isinstance(pids, dict):
                pids = {}
        except (OSError, ValueError):
            pids = {}
        pids.setdefault(role, []).append(pid)
        tmp = f"{pids_file}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(pids, f)
        os.replace(tmp, pids_file)


if __name__ == "__main__":
    sys.exit(main())
