"""One SSH connection per host for a whole sweep (OpenSSH's ControlMaster), shared by
every ssh the sweep runs there.

A fresh ssh pays a TCP handshake, a key exchange and authentication: 0.57 s to an
emulated Pi 3B's sshd (0.3 cores) here, and a cell used 16 of them. Multiplexed over one
master, an ssh opens a channel on the existing connection instead (the key exchange
is paid once per host per sweep).

- ``ControlPath`` is a socket in a folder of this sweep's own (``mkdtemp``: mode 0700,
  owned by this user) under ``/tmp`` (a unix socket's path is limited to ~104 bytes;
  ``%C`` is a 40-character hash of the connection, and ssh adds 17 while binding);
- ``ControlMaster=auto``, and ``open`` makes each host's master before a cell uses it,
  in parallel, so that concurrent first ssh calls do not race to be the master;
- ``ControlPersist`` keeps the master in the background between cells (no session open
  then); ``close`` ends every master (``ssh -O exit``) when the cluster closes, which
  the sweep does on success, failure and Ctrl-C. A controller killed with SIGKILL
  leaves masters that end ``CONTROL_PERSIST_S`` after their last session (each cell's
  ssh clients die with the controller, and the remote processes with them).

These three options are given on ssh's command line, so they replace what
``~/.ssh/config`` says of them for the inventory's hosts (everything else there
applies: user, keys, ProxyJump, known_hosts); the inventory's own
``ansible_ssh_common_args`` come first and win (``-o ControlMaster=no`` there turns the
sharing off for that host).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from .hosts import SSH_CONNECT_TIMEOUT_S, Host, plain_env

# A master with no session left ends after this; the sweep's cells keep it busy, and
# ``close`` ends it at once.
CONTROL_PERSIST_S = 300
SHORT_TMP = "/tmp"  # short: the socket's path must fit in ~104 bytes


class Connections:
    """The sweep's shared SSH connections; ``argv`` is ``Host.ssh`` through them."""

    def __init__(self) -> None:
        parent = SHORT_TMP if os.path.isdir(SHORT_TMP) else None
        self.control_dir = tempfile.mkdtemp(prefix="edgeprof-ssh-", dir=parent)
        self._options = ("-o", "ControlMaster=auto",
                         "-o", f"ControlPath={self.control_dir}/%C",
                         "-o", f"ControlPersist={CONTROL_PERSIST_S}")
        self._lock = threading.Lock()
        self._opened: dict[str, threading.Event] = {}  # host name -> master attempted
        self._hosts: dict[str, Host] = {}
        self._closed = False

    def argv(self, host: Host, remote: Sequence[str]) -> list[str]:
        """The ``ssh`` argv running ``remote`` on ``host`` over the shared connection."""
        return host.ssh(remote, self._options)

    def control(self, host: Host, operation: str, forward: str, kind: str = "-R"
                ) -> list[str]:
        """The ``ssh -O forward|cancel -R REMOTE:LOCAL`` argv asking ``host``'s master to
        add or remove a remote forwarding (the MPI relay's socket); ``kind="-L"``:
        ``LOCAL:REMOTE``, a local one (the links relay's control socket)."""
        self.open([host])
        argv = host.ssh([], self._options)[:-2]  # no command: ``-O ... HOST``
        argv[1:1] = ["-O", operation, kind, forward]
        return argv

    def open(self, hosts: Sequence[Host]) -> None:
        """Make the master of each of ``hosts`` that has none yet, in parallel; returns
        when each is up or failed (a host that cannot be reached then fails its own ssh
        calls, with their own messages)."""
        todo = [host for host in hosts if self._claim(host)]
        if len(todo) == 1:
            self._connect(todo[0])
        elif todo:
            with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
                list(pool.map(self._connect, todo))
        for host in hosts:
            self._opened[host.name].wait(SSH_CONNECT_TIMEOUT_S + 5)

    def _claim(self, host: Host) -> bool:
        with self._lock:
            if self._closed or host.name in self._opened:
                return False
            self._opened[host.name] = threading.Event()
            self._hosts[host.name] = host
            return True

    def _connect(self, host: Host) -> None:
        try:
            # ``true`` through ControlMaster=auto: this ssh becomes the master, goes to
            # the background (ControlPersist), and runs ``true`` as its first client.
            subprocess.run(self.argv(host, ["true"]), capture_output=True,
                           stdin=subprocess.DEVNULL, env=plain_env(),
                           timeout=SSH_CONNECT_TIMEOUT_S + 5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            self._opened[host.name].set()

    def close(self) -> None:
        """End every master (``ssh -O exit``), in parallel, and remove the folder."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            hosts = list(self._hosts.values())

        def exit_master(host: Host) -> None:
            argv = host.ssh([], self._options)[:-2]  # no command: ``-O exit HOST``
            argv[1:1] = ["-O", "exit"]
            try:
                subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL,
                               env=plain_env(), timeout=SSH_CONNECT_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if hosts:
            with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
                list(pool.map(exit_master, hosts))
        shutil.rmtree(self.control_dir, ignore_errors=True)
