"""Links between the tiers of an emulated hierarchy: the relay's life and its routes.

A mix of tiered profiles may give its tiers links (``profiles.TierLink``: a one-way
delay and a rate). ``tc`` cannot delay here (no ``netem``), so the emulated cluster runs
one delaying relay (``relay.py``) on the host while it is up: ``start_relay`` when the
cluster comes up, ``stop_relay`` when it goes down (also after a crash: the pid file is
found on disk). ``route`` asks the relay for the port that reaches an address over a
link; ``EmulatedCluster.link_address`` is what engines call (docs/tiers.md, "Links").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from ..errors import ClusterError
from .base import TierLink

RELAY_SCRIPT = Path(__file__).with_name("relay.py")
READY_TIMEOUT_S = 20.0
CONTROL_TIMEOUT_S = 10.0
# The relays this process started, by pid: ``stop_relay`` reaps its own children (the
# test suite brings clusters up and down in one process); another's is reaped by init.
_STARTED: dict[int, subprocess.Popen] = {}


def control_path(state_dir: Path) -> Path:
    return state_dir / "links.sock"


def pid_path(state_dir: Path) -> Path:
    return state_dir / "links.pid"


def log_path(state_dir: Path) -> Path:
    return state_dir / "links.log"


def start_relay(state_dir: Path, host: str) -> int:
    """Start the relay listening on ``host`` (the bridge's host address); its pid."""
    state_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_path(state_dir), "ab")
    # Its own session: it outlives `edgeprof cluster up`, as the namespaces do, and
    # Ctrl-C in that terminal later does not reach it.
    process = subprocess.Popen(
        [sys.executable, str(RELAY_SCRIPT), "--host", host,
         "--control", str(control_path(state_dir))],
        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
        start_new_session=True)
    log.close()
    _STARTED[process.pid] = process
    pid_path(state_dir).write_text(str(process.pid))
    deadline = time.monotonic() + READY_TIMEOUT_S
    line = b""
    while time.monotonic() < deadline and process.poll() is None:
        line = process.stdout.readline()
        if line.strip() == b"ready":
            break
    process.stdout.close()
    if line.strip() != b"ready":
        stop_relay(state_dir)
        raise ClusterError(f"the links relay did not start (see {log_path(state_dir)}): "
                           "`edgeprof cluster down` and up again")
    return process.pid


def stop_relay(state_dir: Path) -> str | None:
    """Stop the relay this state directory's cluster started, if it runs; what was
    removed (for ``cluster down``'s list) or None."""
    pid_file = pid_path(state_dir)
    try:
        pid = int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        return None
    if _is_relay(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while _is_relay(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_relay(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    started = _STARTED.pop(pid, None)
    if started is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            started.wait(timeout=5)
    pid_file.unlink()
    for path in (control_path(state_dir), log_path(state_dir)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return f"links relay (pid {pid})"


def _is_relay(pid: int) -> bool:
    """Whether ``pid`` is a live relay (not a pid reused by another process)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return status != "Z" and RELAY_SCRIPT.name.encode() in cmdline


def relay_running(state_dir: Path) -> bool:
    try:
        return _is_relay(int(pid_path(state_dir).read_text()))
    except (FileNotFoundError, ValueError):
        return False


DOWN_AND_UP = "`edgeprof cluster down` and up again"


def route(state_dir: Path, to: tuple[str, int], link: TierLink,
          fix: str = DOWN_AND_UP) -> int:
    """The relay's port that reaches ``to`` (address, port) over ``link``; ``fix``: what
    the refusal of a relay that does not answer tells the user to do."""
    request = {"to": [to[0], int(to[1])], "delay_ms": link.delay_ms, "mbit": link.mbit}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(CONTROL_TIMEOUT_S)
            sock.connect(str(control_path(state_dir)))
            sock.sendall((json.dumps(request) + "\n").encode())
            line = sock.makefile().readline()
            if not line:  # closed unanswered: over an SSH forward, a relay that is gone
                raise ConnectionError("closed without an answer")
            answer = json.loads(line)
    except (OSError, ValueError) as exc:
        raise ClusterError(f"the links relay does not answer ({exc}): {fix}") from None
    if "port" not in answer:
        raise ClusterError(f"the links relay refused a route to {to[0]}:{to[1]}: "
                           f"{answer.get('error', 'no answer')}")
    return int(answer["port"])
