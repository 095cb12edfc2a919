"""Delayed links between tiers on real nodes: the links relay (``relay.py``) started on
each target host over SSH, for the inventory's ``edgeprof_links``.

Where it runs: on the host being dialled (``target``), listening on every address of
that host (``0.0.0.0``: a cloud VM's ``ansible_host`` may be a public address it cannot
bind) on ports of its own, one per route, and forwarding to the target's port at its
``ansible_host``. A source dials ``(target.address, relay port)`` instead of
``(target.address, port)``: the bytes cross the real network once, then the relay holds
them for the link's delay (and paces them at its rate) on the target, each direction.
It runs on the target's CPU (a few ms per message; docs/tiers.md, "Real nodes and
the Swarm"), outside the cell's cgroup: it is the network, not a board's work.

How it is run: ``edgeprof_python -m profiler.cluster.remote_exec -- edgeprof_python -m
profiler.cluster.relay --host 0.0.0.0 --control /tmp/edgeprof-links-<token>.sock``, both
modules standard library only, as every remote process of a cell (so the relay stops
when its ``ssh`` goes: the sweep's end, or a killed controller, whose end closes the ssh
client's stdin; ``remote_exec`` then SIGTERMs the relay, which removes its socket). One
relay per target host for the whole sweep (started by the first ``link_address`` that
needs it). Routes are asked through its control socket, forwarded here over the sweep's
shared SSH connection (``ssh -O forward -L``; sshd's default
``AllowStreamLocalForwarding yes``), with ``links.route`` exactly as on the emulated
cluster.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from ...errors import ClusterError
from .. import links
from ..base import Node, TierLink, kill_group, popen_in_group
from .hosts import SSH_CONNECT_TIMEOUT_S, Host, last_line, plain_env

# Every address of the target: its ansible_host may not be bindable there (NAT).
LISTEN_ADDRESS = "0.0.0.0"
# Importing the package on a Pi 3B takes a few seconds (remote_exec pays it too).
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
REMOTE_SOCKET_DIR = "/tmp"  # short: a Unix socket's path is limited


class RelayCluster(Protocol):
    """What the relays ask of the inventory cluster (``cluster.InventoryCluster``)."""

    def host(self, node: Node) -> Host: ...
    def ssh_argv(self, host: Host, remote: Sequence[str]) -> list[str]: ...
    def control_argv(self, node: Node, operation: str, forward: str,
                     kind: str = "-R") -> list[str]: ...


@dataclass
class _Relay:
    """One target host's relay: its ssh, the local end of its control socket's forward."""

    node: Node
    process: subprocess.Popen
    state_dir: Path  # holds ``links.control_path(state_dir)``, the forwarded socket
    remote_socket: str
    forwarded: bool = False

    @property
    def forward(self) -> str:
        return f"{links.control_path(self.state_dir)}:{self.remote_socket}"


class TierRelays:
    """The sweep's relays on the inventory's hosts, one per target host."""

    def __init__(self, cluster: RelayCluster, control_dir: str):
        self._cluster = cluster
        self._control_dir = Path(control_dir)
        self._relays: dict[str, _Relay] = {}
        self._lock = threading.Lock()
        self._closed = False

    def address(self, target: Node, port: int, link: TierLink) -> tuple[str, int]:
        """What a source dials to reach ``port`` on ``target`` over ``link``."""
        relay = self._relay(target)
        log = relay.state_dir / "relay.log"
        if relay.process.poll() is not None:
            text = log.read_text(errors="replace") if log.exists() else ""
            raise ClusterError(f"node {target.name}: the links relay stopped mid-sweep "
                               f"(exit {relay.process.returncode}: {last_line(text)}): "
                               "check that the node is up, and run the sweep again")
        try:
            return target.address, links.route(
                relay.state_dir, (target.address, port), link,
                fix="check that the node is up, and run the sweep again")
        except ClusterError as exc:
            raise ClusterError(f"node {target.name}: {exc}") from None

    def _relay(self, target: Node) -> _Relay:
        with self._lock:
            if self._closed:
                raise ClusterError("the sweep is ending: no new link relay")
            if target.name not in self._relays:
                self._relays[target.name] = self._start(target, len(self._relays))
            return self._relays[target.name]

    def _start(self, node: Node, index: int) -> _Relay:
        host = self._cluster.host(node)
        state_dir = self._control_dir / f"links-{index}"  # short: a socket is in it
        state_dir.mkdir(parents=True, exist_ok=True)
        remote_socket = f"{REMOTE_SOCKET_DIR}/edgeprof-links-{secrets.token_hex(6)}.sock"
        log = state_dir / "relay.log"
        argv = self._cluster.ssh_argv(host, [
            host.python, "-m", "profiler.cluster.remote_exec", "--",
            host.python, "-m", "profiler.cluster.relay", "--host", LISTEN_ADDRESS,
            "--control", remote_socket])
        # No parent-death signal: the thread asking may end before the sweep does. The
        # stdin pipe is the lifeline: it closes when this process ends, however it ends.
        process = popen_in_group(argv, {}, log, parent_death_signal=None,
                                 stdin=subprocess.PIPE)
        relay = _Relay(node, process, state_dir, remote_socket)
        try:
            self._wait_ready(relay, log)
            done = subprocess.run(
                self._cluster.control_argv(node, "forward", relay.forward, kind="-L"),
                capture_output=True, text=True, stdin=subprocess.DEVNULL, env=plain_env(),
                timeout=SSH_CONNECT_TIMEOUT_S * 2)
            if done.returncode != 0:
                raise ClusterError(
                    f"node {node.name}: its SSH connection cannot forward the links relay's "
                    f"control socket ({last_line(done.stderr)}): delayed links need the "
                    "shared connection (no ControlMaster=no for it) and sshd's "
                    "AllowStreamLocalForwarding (its default)")
            relay.forwarded = True
        except BaseException:
            self._stop(relay)
            raise
        return relay

    @staticmethod
    def _wait_ready(relay: _Relay, log: Path) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and relay.process.poll() is None:
            if "ready" in log.read_text(errors="replace").split():
                return
            time.sleep(0.05)
        text = log.read_text(errors="replace") if log.exists() else ""
        state = (f"exited {relay.process.returncode}" if relay.process.poll() is not None
                 else f"did not start within {READY_TIMEOUT_S:g} s")
        raise ClusterError(f"node {relay.node.name}: the links relay {state} "
                           f"({last_line(text)}): check that edgeprof_python runs there")

    def _stop(self, relay: _Relay) -> None:
        """Cancel the forward, end the relay's ssh (its stdin's end stops the relay
        there, which removes its socket), remove the local end."""
        if relay.forwarded:
            try:
                subprocess.run(self._cluster.control_argv(relay.node, "cancel",
                                                          relay.forward, kind="-L"),
                               capture_output=True, stdin=subprocess.DEVNULL,
                               env=plain_env(), timeout=SSH_CONNECT_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass  # the master's exit (Connections.close) ends the forward too
        try:
            relay.process.stdin.close()
        except OSError:
            pass
        try:
            relay.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_group(relay.process)  # the node is unreachable: its sshd ends it later
        else:
            # A relay stopped by SIGTERM removed its socket; one killed (or crashed)
            # could not: removed here, as long as the node answers.
            try:
                subprocess.run(self._cluster.ssh_argv(self._cluster.host(relay.node),
                                                      ["rm", "-f", "--", relay.remote_socket]),
                               capture_output=True, stdin=subprocess.DEVNULL,
                               env=plain_env(), timeout=SSH_CONNECT_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass  # an unreachable node keeps a dead socket file in /tmp
        shutil.rmtree(relay.state_dir, ignore_errors=True)

    def close(self) -> None:
        """Stop every relay of the sweep."""
        with self._lock:
            self._closed = True
            relays, self._relays = list(self._relays.values()), {}
        for relay in relays:
            self._stop(relay)
