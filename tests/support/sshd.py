"""sshd inside emulated nodes, so tests reach "real hosts" over real SSH (tests only).

Each emulated node (a network namespace on this host, ``profiler.cluster.emulated``) gets
its own Debian ``openssh-server`` daemon listening on the node's address, with a host key,
a client key and a ``known_hosts`` made here: the inventory cluster and
``ansible-playbook`` then connect exactly as they would to a Pi, host keys checked.
Nothing under ``/root/.ssh`` is read or changed.

Facts checked on these machines: sshd in a namespace needs ``/run/sshd`` to exist, an
absolute path to the binary, a PidFile per instance and ``UsePAM no``. The nodes share
this host's filesystem, so "remote" files are files here: tests give each node its own
work folder to keep that honest.

A login shell like a fresh board's (``stock_shell_rc``, the default): sshd runs every
command through the user's shell, and Debian's bash reads ``~/.bashrc`` when sshd starts
it. A stock ``.bashrc`` (``/etc/skel``, what Raspberry Pi OS gives its user) returns at
once for a non-interactive shell; this machine's root ``.bashrc`` runs ``pyenv init``
(about 100 processes, 0.09 s of CPU a session, 0.3 s at a Pi 3B's 0.3-core quota). So
each sshd runs in a mount namespace of its own where the user's ``.bashrc`` is the stock
one (a bind mount that nothing outside sees); ``stock_shell_rc=False`` keeps this
machine's.

Start-up outside the CPU quota, as on the emulated cluster (``startup_outside_quota``,
the default, where the quota is a cgroup hierarchy of its own): each sshd runs in its
node's memory limit and CPU accounting but outside its CPU quota, and names the quota's
cgroup to every session (``SetEnv EDGEPROF_JOIN_CPU_CGROUP``), so that a worker, server
or scheduler started over SSH joins the quota when its start-up ends
(``workloads.node_limits``), exactly as the emulated cluster starts them; what runs
beside them (sshd, ``remote_exec``, the metrics agent) stays outside, as the emulated
cluster's agent does. With ``False`` every session pays everything at the node's quota
(on a 4-core board a one-thread worker leaves three cores to them).
"""

from __future__ import annotations

import os
import pwd
import shlex
import socket
import subprocess
import time
from pathlib import Path

from workloads.node_limits import JOIN_CPU_CGROUP_ENV

from profiler.cluster import cgroups
from profiler.cluster.base import Node, kill_groups, popen_in_group
from profiler.errors import ClusterError

SSHD = "/usr/sbin/sshd"
STOCK_BASHRC = "/etc/skel/.bashrc"
START_TIMEOUT_S = 20.0

_CONFIG = """\
ListenAddress {address}
Port {port}
HostKey {host_key}
PidFile {pid_file}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
{set_env}"""


class SshdNodes:
    """sshd (Debian openssh-server) inside each emulated node's netns, for tests only."""

    def __init__(self, nodes: list[Node], workdir: Path, user: str = "root", port: int = 22,
                 *, cluster=None, stock_shell_rc: bool = True,
                 startup_outside_quota: bool = True):
        self.nodes = list(nodes)
        # With the emulated cluster given, each sshd (and so every session it serves)
        # runs inside its node's CPU and memory cgroups, as on a board of that size;
        # without, only in the node's network namespace.
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.user = user
        self.stock_shell_rc = stock_shell_rc
        self.startup_outside_quota = startup_outside_quota
        self.port = port
        self.key_path = self.workdir / "id_ed25519"
        self.known_hosts_path = self.workdir / "known_hosts"
        self.ssh_common_args = (
            f"-o UserKnownHostsFile={self.known_hosts_path} -o StrictHostKeyChecking=yes "
            "-o BatchMode=yes -o ConnectTimeout=5")
        self._procs: list[subprocess.Popen] = []

    def start(self) -> "SshdNodes":
        """Start one sshd per node; returns once every one accepts connections."""
        if not os.path.exists(SSHD):
            raise ClusterError(f"{SSHD} not found: apt-get install openssh-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        if not self.key_path.exists():
            _keygen(self.key_path)
        (self.workdir / "authorized_keys").write_text(
            Path(f"{self.key_path}.pub").read_text())
        known = []
        for node in self.nodes:
            folder = self.workdir / f"sshd-{node.name}"
            folder.mkdir(exist_ok=True)
            host_key = folder / "ssh_host_ed25519_key"
            if not host_key.exists():
                _keygen(host_key)
            public = Path(f"{host_key}.pub").read_text().split()
            known.append(f"{_known_name(node.address, self.port)} {public[0]} {public[1]}")
            config = folder / "sshd_config"
            group, late = None, False
            if self.cluster is not None:
                scope = node.scope
                group = cgroups.NodeCgroup(scope.cgroup_version, Path(scope.cgroup_cpu_quota),
                                           Path(scope.cgroup_cpu), Path(scope.cgroup_memory))
                late = self.startup_outside_quota and group.can_join_cpu_later()
            set_env = (f"SetEnv {JOIN_CPU_CGROUP_ENV}={group.cpu_dir / 'cgroup.procs'}\n"
                       if late else "")
            config.write_text(_CONFIG.format(
                address=node.address, port=self.port, host_key=host_key,
                pid_file=folder / "sshd.pid", authorized_keys=self.workdir / "authorized_keys",
                set_env=set_env))
            argv = self._with_stock_rc([SSHD, "-D", "-e", "-f", str(config)])
            preexec = None
            if group is not None:
                # Inside the node's limits (its memory, its CPU accounting; the CPU quota
                # too unless the roles join it late), like the emulated cluster's own.
                preexec = lambda group=group, late=late: group.attach(  # noqa: E731
                    os.getpid(), cpu_quota=not late)
            proc = popen_in_group(["nsenter", f"--net=/run/netns/{node.scope.netns}", "--",
                                   *argv], {}, folder / "sshd.log", preexec_fn=preexec)
            self._procs.append(proc)
        self.known_hosts_path.write_text("\n".join(known) + "\n")
        self._wait_accepting()
        return self

    def _with_stock_rc(self, argv: list[str]) -> list[str]:
        """``argv`` in a mount namespace where the user's ``.bashrc`` is the stock one."""
        rc = Path(pwd.getpwnam(self.user).pw_dir) / ".bashrc"
        if not self.stock_shell_rc or not rc.exists() or not os.path.exists(STOCK_BASHRC):
            return argv
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                'mount --bind "$0" "$1" && shift && exec "$@"', STOCK_BASHRC, str(rc),
                *argv]

    def _wait_accepting(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        for node, proc in zip(self.nodes, self._procs):
            while True:
                if proc.poll() is not None:
                    log = (self.workdir / f"sshd-{node.name}" / "sshd.log").read_text()
                    self.stop()
                    raise ClusterError(f"sshd on {node.name} exited {proc.returncode}: "
                                       f"{log.strip()[-300:]}")
                try:
                    with socket.create_connection((node.address, self.port), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise ClusterError(f"sshd on {node.name} did not accept within "
                                           f"{START_TIMEOUT_S:g} s") from None
                    time.sleep(0.1)

    def stop(self) -> None:
        """Kill every sshd started here (and the sessions it forked), idempotent."""
        kill_groups(self._procs, grace_s=1.0)
        self._procs.clear()

    def __enter__(self) -> "SshdNodes":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def processes(self) -> list[str]:
        """``node pid: command`` of every process in a node's network namespace but sshd
        itself (its listener, and the connection handlers it forks, which go with their
        connection): what a cell left there, whether or not it names a path."""
        import psutil

        from profiler.cluster import netns

        found = []
        for node in self.nodes:
            for pid in netns.netns_pids(node.scope.netns):
                try:
                    proc = psutil.Process(pid)
                    if proc.exe() == SSHD:
                        continue
                    cmd = " ".join(proc.cmdline())
                except psutil.Error:
                    continue  # gone meanwhile
                found.append(f"{node.name} {pid}: {cmd[:160]}")
        return found

    def host_line(self, node: Node) -> str:
        """The inventory line of ``node``: its address, user, port, key and interpreter."""
        return (f"{node.name} ansible_host={node.address} ansible_user={self.user} "
                f"ansible_port={self.port} ansible_ssh_private_key_file={self.key_path} "
                "ansible_python_interpreter=/usr/bin/python3")

    def write_inventory(self, path: Path, groups: dict[str, list[str]],
                        host_vars: dict[str, dict] | None = None,
                        group_vars_all: dict | None = None) -> Path:
        """An INI inventory of ``groups`` (group -> node names) reaching the nodes over SSH."""
        by_name = {node.name: node for node in self.nodes}
        host_vars = host_vars or {}
        lines: list[str] = []
        for group, names in groups.items():
            lines.append(f"[{group}]")
            for name in names:
                extra = " ".join(f"{k}={_ini_value(v)}"
                                 for k, v in sorted(host_vars.get(name, {}).items()))
                lines.append(f"{self.host_line(by_name[name])} {extra}".rstrip())
            lines.append("")
        lines.append("[all:vars]")
        lines.append(f"ansible_ssh_common_args={_ini_value(self.ssh_common_args)}")
        for key, value in sorted((group_vars_all or {}).items()):
            lines.append(f"{key}={_ini_value(value)}")
        path = Path(path)
        path.write_text("\n".join(lines) + "\n")
        return path


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgeprof-test",
                    "-f", str(path)], check=True, capture_output=True, timeout=30)
    os.chmod(path, 0o600)


def _known_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _ini_value(value) -> str:
    text = str(value)
    return shlex.quote(text) if any(c in text for c in " '\"") else text
