"""Real nodes over SSH: the hosts of an Ansible inventory (``--cluster inventory``).

Hosts are read with Ansible's own parser (``ansible-inventory --list``), so group_vars,
host_vars, ``ansible_host``, ``ansible_port``, ``ansible_user``,
``ansible_ssh_private_key_file`` and ``ansible_ssh_common_args``/``_extra_args`` mean what
they mean to the playbook that provisioned the hosts. Nodes are the ``master`` hosts, then
the ``workers`` (node 0 is the master: the engines put the scheduler and server there).

Processes start with the system's OpenSSH client, so the user's keys, ``~/.ssh/config``,
jump hosts and known_hosts apply; host keys are checked (BatchMode: never a prompt).
Commands are argument lists quoted for the remote shell with ``shlex.join``. Each runs
under ``profiler.cluster.remote_exec``, which stops it when its ``ssh`` goes away and
tells the node's agent its pid. Paths of the cell folder are mapped to the host's
``edgeprof_workdir``; after the cell, ``collect`` brings that folder (events, metrics
spools) back into the local cell folder with ``tar`` over the same SSH, so results have
the same columns as on the emulated cluster. Logs come back live through ssh's output.

Host variables edgeprof reads (defaults as the Ansible roles install them):
``edgeprof_python`` (the venv's python), ``edgeprof_workdir``, ``edgeprof_data_dir``
(replaces ``--data-dir`` on that host), ``edgeprof_interface`` (the NIC that carries
training traffic, for Gloo and the agent), ``edgeprof_profile`` (a label for results: the
``node_profiles`` column).

A straggler (``--straggler``, ``slow_node``) needs cgroup v2 on the node: the cell's
processes there go into ``/sys/fs/cgroup/edgeprof/<cell>-<attempt>-<node>`` with
``cpu.max``, written as root (``sudo -n`` unless the SSH user is root); hosts without
cgroup v2's cpu controller are refused when the sweep checks them.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping, Sequence

from .. import __version__
from ..cell import CellConfig
from ..engines import ENGINES, get_engine
from ..errors import ClusterError, ConfigError
from .base import Node, popen_in_group

DEFAULT_PYTHON = "/opt/edgeprof/venv/bin/python"
DEFAULT_WORKDIR = "/var/lib/edgeprof/runs"
DEFAULT_INTERFACE = "eth0"
GROUPS = ("master", "workers")
SSH_CONNECT_TIMEOUT_S = 10
CHECK_TIMEOUT_S = 60  # importing MXNet takes a few seconds on a Pi 3B
INVENTORY_TIMEOUT_S = 60
COLLECT_TIMEOUT_S = 300
AGENT_SERVICE = "edgeprof-agent"


@dataclass(frozen=True)
class Host:
    """One inventory host as edgeprof reaches it."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    key_file: str | None = None
    ssh_args: tuple[str, ...] = ()
    python: str = DEFAULT_PYTHON
    workdir: str = DEFAULT_WORKDIR
    data_dir: str | None = None
    interface: str = DEFAULT_INTERFACE
    profile: str = "host"

    def ssh(self, remote: Sequence[str]) -> list[str]:
        """The local ``ssh`` argv running ``remote`` (an argv) on this host."""
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=6"]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.user:
            argv += ["-l", self.user]
        if self.key_file:
            argv += ["-i", self.key_file]
        return [*argv, *self.ssh_args, self.address, "--", shlex.join(remote)]

    def node(self) -> Node:
        return Node(name=self.name, address=self.address, profile=self.profile,
                    scope={"interfaces": self.interface, "ssh_host": self.name})


def read_inventory(path: Path) -> list[Host]:
    """The ``master`` then ``workers`` hosts of an Ansible inventory; one line on any problem."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"--inventory {path} does not exist: copy "
                          "ansible/inventory.example.ini and list your nodes")
    binary = shutil.which("ansible-inventory") or str(Path(sys.executable).parent /
                                                      "ansible-inventory")
    if not Path(binary).exists():
        raise ClusterError("ansible-inventory not found: install ansible-core "
                           "(scripts/setup.sh does)")
    try:
        done = subprocess.run([binary, "-i", str(path), "--list"], capture_output=True,
                              text=True, timeout=INVENTORY_TIMEOUT_S,
                              env={**_plain_env(),
                                   # A file no plugin can parse is an error, not an
                                   # empty inventory with a warning.
                                   "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
                                   "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
                                   "ANSIBLE_LOCALHOST_WARNING": "False"})
    except subprocess.TimeoutExpired:
        raise ConfigError(f"--inventory {path}: ansible-inventory took over "
                          f"{INVENTORY_TIMEOUT_S} s: check the file") from None
    if done.returncode != 0:
        raise ConfigError(f"--inventory {path} cannot be parsed "
                          f"({_last_line(done.stderr).removeprefix('[ERROR]: ')}): fix it; "
                          f"`ansible-inventory -i {path} --list` shows the details")
    try:
        data = json.loads(done.stdout)
    except ValueError:
        raise ConfigError(f"--inventory {path} cannot be parsed: fix its syntax") from None
    return hosts_from_inventory(data, str(path))


def hosts_from_inventory(data: Mapping, label: str) -> list[Host]:
    """Hosts from ``ansible-inventory --list`` output (a pure function, tested alone)."""
    hostvars = data.get("_meta", {}).get("hostvars", {})
    names: list[str] = []
    for group in GROUPS:
        for name in _group_hosts(data, group):
            if name in names:
                raise ConfigError(f"--inventory {label}: host {name} is listed as master and "
                                  "worker: a node has one role, list it once")
            names.append(name)
    if not names:
        raise ConfigError(f"--inventory {label} has no hosts in the groups master and "
                          "workers: list your nodes under [master] and [workers] (see "
                          "ansible/inventory.example.ini)")
    if not _group_hosts(data, "workers"):
        raise ConfigError(f"--inventory {label} has no [workers] hosts: list the nodes "
                          "that train under [workers]")
    hosts = [_host(name, hostvars.get(name, {}), label) for name in names]
    seen: dict[tuple[str, int | None], str] = {}
    for host in hosts:
        key = (host.address, host.port)
        if key in seen:
            raise ConfigError(f"--inventory {label}: hosts {seen[key]} and {host.name} are "
                              f"the same machine ({host.address}): list each node once")
        seen[key] = host.name
    return hosts


def _group_hosts(data: Mapping, group: str) -> list[str]:
    """Hosts of ``group`` and of its child groups, in inventory order."""
    out: list[str] = []
    stack = [group]
    visited: set[str] = set()
    while stack:
        name = stack.pop(0)
        if name in visited:
            continue
        visited.add(name)
        entry = data.get(name, {}) or {}
        out += [h for h in entry.get("hosts", []) if h not in out]
        stack += entry.get("children", [])
    return out


def _host(name: str, hv: Mapping, label: str) -> Host:
    address = str(hv.get("ansible_host") or "").strip()
    if not address:
        raise ConfigError(f"--inventory {label}: host {name} has no ansible_host: give its "
                          f"address, e.g. `{name} ansible_host=192.168.1.21`")
    ssh_args: list[str] = []
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if hv.get(key):
            ssh_args += shlex.split(str(hv[key]))
    port = hv.get("ansible_port") or hv.get("ansible_ssh_port")
    return Host(
        name=name, address=address, port=int(port) if port else None,
        user=hv.get("ansible_user") or hv.get("ansible_ssh_user"),
        key_file=hv.get("ansible_ssh_private_key_file"), ssh_args=tuple(ssh_args),
        python=_python(hv),
        workdir=str(hv.get("edgeprof_workdir") or DEFAULT_WORKDIR),
        data_dir=str(hv["edgeprof_data_dir"]) if hv.get("edgeprof_data_dir") else None,
        interface=str(hv.get("edgeprof_interface") or DEFAULT_INTERFACE),
        profile=str(hv.get("edgeprof_profile") or "host"))


def _python(hv: Mapping) -> str:
    """``edgeprof_python``, else ``edgeprof_venv``'s python (as group_vars/all.yml derives it).

    ``ansible-inventory`` does not render Jinja, so a templated value is derived here.
    """
    python = str(hv.get("edgeprof_python") or "")
    if python and "{{" not in python:
        return python
    venv = str(hv.get("edgeprof_venv") or "")
    if venv and "{{" not in venv:
        return str(PurePosixPath(venv) / "bin" / "python")
    return DEFAULT_PYTHON


# What a host must answer before a sweep uses it: edgeprof's version, and each engine's
# own check (``Engine.probe_host``, run there: the engines the sweep needs are named in
# argv). A package that exists but does not import (MXNet beside NumPy 2, a Horovod built
# without MXNet or Gloo, a torch that dies with SIGILL) is an answer with its problem,
# not a crash of the check. Importing MXNet or torch takes seconds on a Pi; the hosts
# answer in parallel, so a sweep pays it once.
_PROBE = """\
import json, os, sys
import profiler
answer = {'version': profiler.__version__, 'cpus': os.cpu_count(),
          'memory_mb': os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**20}
try:  # a straggler (--straggler) needs cgroup v2's cpu controller
    with open('/sys/fs/cgroup/cgroup.controllers') as f:
        answer['cgroup_v2_cpu'] = 'cpu' in f.read().split()
except OSError:
    answer['cgroup_v2_cpu'] = False
try:
    from profiler.engines import host_check
    answer['engines'] = host_check(sys.argv[1:])
except Exception as exc:  # another edgeprof version: the version check names it
    answer['engines_error'] = (type(exc).__name__ + ': ' + str(exc))[:200]
print(json.dumps(answer))
"""


def probe(host: Host, engines: Sequence[str] = tuple(ENGINES)) -> dict:
    """Ask ``host`` for its edgeprof version, CPUs, memory and each of ``engines``' own
    check (``answer['engines'][name]``); raise one line when it cannot answer."""
    try:
        done = subprocess.run(host.ssh([host.python, "-c", _PROBE, *sorted(engines)]),
                              capture_output=True, text=True, timeout=CHECK_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env=_plain_env())
    except subprocess.TimeoutExpired:
        raise ClusterError(f"host {host.name} ({host.address}) did not answer within "
                           f"{CHECK_TIMEOUT_S} s: check that it is up and reachable") from None
    if done.returncode == 255:
        raise ClusterError(f"host {host.name} ({host.address}) is unreachable over SSH "
                           f"({_last_line(done.stderr)}): check ansible_host, ansible_user "
                           f"and your key with `ssh {host.address}`")
    if done.returncode != 0:
        reason = _last_line(done.stderr)
        if done.returncode == 127 or "No such file" in reason:
            reason = f"{host.python} not found"
        raise ClusterError(f"host {host.name} has no usable edgeprof ({reason}): provision "
                           "it with `ansible-playbook -i INVENTORY ansible/site.yml`, or set "
                           "edgeprof_python to its venv's python")
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ClusterError(f"host {host.name} answered the edgeprof check with "
                           f"{done.stdout.strip()[:80]!r}: rerun ansible/site.yml") from None


def check_hosts(hosts: Sequence[Host], cells: Sequence[CellConfig] = (),
                answers: dict[str, dict] | None = None) -> dict[str, dict]:
    """Probe every host in parallel (unless ``answers`` are given); raise one line naming
    the first host that cannot run ``cells``."""
    names = sorted({cell.engine for cell in cells})
    if answers is None:
        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
            futures = {host.name: pool.submit(probe, host, names) for host in hosts}
        answers = {host.name: futures[host.name].result() for host in hosts}
    for host in hosts:
        info = answers[host.name]
        if info.get("version") != __version__:
            raise ClusterError(f"host {host.name} runs edgeprof {info.get('version')}, this "
                               f"controller {__version__}: provision it again with "
                               "ansible/site.yml so that both run the same version")
        for name in names:
            engine = get_engine(name)
            answer = (info.get("engines") or {}).get(name) or {
                "ok": False, "problem": info.get("engines_error", "no answer")}
            problem = engine.host_problem(answer, [c for c in cells if c.engine == name])
            if problem:
                raise ClusterError(f"host {host.name} cannot run --engine {name} in "
                                   f"{host.python}: {problem} (provision it with "
                                   "ansible/site.yml)")
    slowed = [cell for cell in cells if cell.straggler != "none"]
    # Any node a straggler cell uses may be its straggler: each must have cgroup v2.
    used = max((get_engine(c.engine).nodes_needed(c) for c in slowed), default=0)
    for host in hosts[:used]:
        if not answers[host.name].get("cgroup_v2_cpu"):
            raise ClusterError(
                f"host {host.name} has no cgroup v2 with the cpu controller, which "
                "--straggler needs on a real node (cpu.max): boot it with cgroup v2 "
                "(Raspberry Pi OS 11 and later; else add systemd.unified_cgroup_hierarchy=1 "
                "to /boot/cmdline.txt), or drop --straggler")
    return answers


# A sweep checks its hosts in preflight and again when it opens the cluster, moments
# apart: the second time reuses the first answers (each check imports the engines).
CHECK_REUSE_S = 60.0
_answers: dict[tuple, tuple[float, dict]] = {}


def open_inventory(path: Path, nodes_needed: int,
                   cells: Sequence[CellConfig] = ()) -> "InventoryCluster":
    """The inventory's hosts, checked for ``cells``, as a cluster of at least
    ``nodes_needed`` nodes."""
    hosts = read_inventory(path)
    if len(hosts) < nodes_needed:
        raise ClusterError(f"--inventory {path} lists {len(hosts)} nodes, the grid needs "
                           f"{nodes_needed} (devices + 1 with --placement master): add "
                           "hosts or use fewer --devices")
    key = (tuple(hosts), tuple(sorted({cell.engine for cell in cells})))
    cached = _answers.get(key)
    fresh = cached is not None and time.monotonic() - cached[0] <= CHECK_REUSE_S
    answers = check_hosts(hosts, cells, cached[1] if fresh else None)
    if not fresh:
        _answers[key] = (time.monotonic(), answers)
    return InventoryCluster(hosts)


class InventoryCluster:
    """Nodes reached over SSH; see the module docstring."""

    name = "inventory"

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
                                  stdin=subprocess.DEVNULL, env=_plain_env()) as sender:
                unpacked = subprocess.run(["tar", "-C", str(cell_dir), "-xf", "-"],
                                          stdin=sender.stdout, capture_output=True,
                                          timeout=COLLECT_TIMEOUT_S)
                sender.stdout.close()
                error = sender.stderr.read().decode(errors="replace")
                sender.wait(timeout=COLLECT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{node.name}: {exc}"
        if sender.returncode != 0 or unpacked.returncode != 0:
            return f"{node.name}: {_last_line(error or unpacked.stderr.decode())}"
        subprocess.run(host.ssh(["rm", "-rf", remote_dir]), capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=COLLECT_TIMEOUT_S, env=_plain_env())
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
        self._cpu_max(node, "slow", _straggler_group(node, cell_dir), [
            repr(float(factor)), str(processes), str(threads),
            str(remote_dir / "pids" / f"{node.name}.json"), str(STRAGGLER_WAIT_S)])

    def restore_node(self, node: Node, *, cell_dir: Path, **_context) -> None:
        """Lift the straggler's limit and remove its (by now empty) group, and any other
        empty one a killed sweep left on the node."""
        self._cpu_max(node, "restore", _straggler_group(node, cell_dir), [])

    def _cpu_max(self, node: Node, action: str, group: str, args: list[str]) -> dict:
        host = self.host(node)
        try:
            done = subprocess.run(host.ssh(cpu_max_command(host.python, action, group, args)),
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=STRAGGLER_WAIT_S + CHECK_TIMEOUT_S,
                                  env=_plain_env())
        except subprocess.TimeoutExpired:
            raise ClusterError(f"node {node.name} did not answer within "
                               f"{STRAGGLER_WAIT_S + CHECK_TIMEOUT_S} s while its straggler "
                               f"was being {'slowed' if action == 'slow' else 'restored'}"
                               ) from None
        return straggler_answer(node.name, done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        pass


# A straggler on a real node (``slow_node``): run on the node as root (``sudo -n`` unless
# the SSH user is root), standard library only. ``slow`` waits for the cell's processes
# on the node to be registered in its pids file (``remote_exec``), then moves them and
# their descendants into /sys/fs/cgroup/edgeprof/<group> with cpu.max set; ``restore``
# lifts the limit and removes the empty groups. The root is an argument so that the
# file handling can be tested against a directory laid out like cgroup v2.
# A 10 ms period: short enough that a slowed board is slow all the time rather than in
# bursts of the kernel's default 100 ms (``cgroups.cfs_period_us`` says why that matters).
STRAGGLER_PERIOD_US = 10_000
STRAGGLER_WAIT_S = 60  # for the cell's processes to start on a Pi (ssh, Python, imports)
CGROUP_V2_ROOT = "/sys/fs/cgroup"
_CPU_MAX = """\
import errno, json, os, sys, time
action, root, name = sys.argv[1:4]
PERIOD = %d


def answer(**fields):
    print(json.dumps(fields))
    sys.exit(0)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ''


def write(path, text):
    with open(path, 'w') as f:
        f.write(text)


base = os.path.join(root, 'edgeprof')
group = os.path.join(base, name)
if action == 'slow':
    if 'cpu' not in read(os.path.join(root, 'cgroup.controllers')).split():
        answer(ok=False, problem='no cgroup v2 cpu controller in ' + root)
    factor, processes, threads = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    pids_file, wait_s = sys.argv[7], float(sys.argv[8])
    for parent in (root, base):
        os.makedirs(parent, exist_ok=True)
        control = os.path.join(parent, 'cgroup.subtree_control')
        if 'cpu' not in read(control).split():
            write(control, '+cpu')
    os.makedirs(group, exist_ok=True)
    cores = factor * min(len(os.sched_getaffinity(0)), processes * threads)
    quota = max(1000, int(round(cores * PERIOD)))
    write(os.path.join(group, 'cpu.max'), '%%d %%d' %% (quota, PERIOD))
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(pids_file) as f:
                pids = [int(p) for ps in json.load(f).values() for p in ps]
        except (OSError, ValueError, AttributeError, TypeError):
            pids = []
        if len(pids) >= processes or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    moved, stack = [], list(pids)
    while stack:
        pid = stack.pop()
        try:
            write(os.path.join(group, 'cgroup.procs'), str(pid))
        except OSError:
            continue  # it exited
        moved.append(pid)
        try:
            tasks = os.listdir('/proc/%%d/task' %% pid)
        except OSError:
            tasks = []
        for task in tasks:
            stack += [int(c) for c in read('/proc/%%d/task/%%s/children' %% (pid, task)).split()]
    if not moved:
        answer(ok=False, problem="none of the cell's %%d process(es) on the node appeared "
               "in %%s within %%g s" %% (processes, pids_file, wait_s))
    answer(ok=True, cores=round(cores, 4), cpu_max='%%d %%d' %% (quota, PERIOD), moved=moved)
if os.path.isdir(group):
    write(os.path.join(group, 'cpu.max'), 'max %%d' %% PERIOD)
removed = []
for entry in sorted(os.listdir(base)) if os.path.isdir(base) else []:
    path = os.path.join(base, entry)
    for attempt in range(30):
        try:
            os.rmdir(path)
            removed.append(entry)
            break
        except OSError as exc:
            if path != group or exc.errno != errno.EBUSY:
                break  # another cell's, still busy; or not a cgroup at all
            time.sleep(0.1)  # killed processes still exiting
answer(ok=True, removed=removed)
""" % STRAGGLER_PERIOD_US


def cpu_max_command(python: str, action: str, group: str, args: Sequence[str],
                    root: str = CGROUP_V2_ROOT, elevate: bool = True) -> list[str]:
    """The argv run on a node to ``slow`` or ``restore`` a straggler (see ``_CPU_MAX``);
    as root, through ``sudo -n`` when the SSH user is not root."""
    command = [python, "-c", _CPU_MAX, action, root, group, *args]
    if not elevate:
        return command
    return ["sh", "-c", 'if [ "$(id -u)" -eq 0 ]; then exec "$@"; fi; exec sudo -n "$@"',
            "sh", *command]


def straggler_answer(node: str, returncode: int, stdout: str, stderr: str) -> dict:
    """The node's answer to ``cpu_max_command``, or one ``ClusterError`` line naming it."""
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if returncode == 0 and isinstance(answer, dict) and answer.get("ok"):
        return answer
    if isinstance(answer, dict) and "cgroup v2" in str(answer.get("problem")):
        raise ClusterError(f"node {node} has no cgroup v2 with the cpu controller, which "
                           "--straggler needs on a real node: boot it with cgroup v2 "
                           "(Raspberry Pi OS 11 and later), or drop --straggler")
    if isinstance(answer, dict):
        raise ClusterError(f"cannot slow node {node}: {answer.get('problem')}")
    reason = _last_line(stderr)
    if returncode == 255:
        raise ClusterError(f"node {node} is unreachable over SSH ({reason})")
    raise ClusterError(f"cannot write node {node}'s cgroups ({reason}): a straggler on a "
                       "real node needs root there, or passwordless sudo for the SSH user")


def _straggler_group(node: Node, cell_dir: Path) -> str:
    """``<cell_id>-attempt-<N>-<node>``: one group per cell attempt and node."""
    cell_dir = Path(cell_dir)
    return f"{cell_dir.parent.name}-{cell_dir.name}-{node.name}"


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
                              stderr=subprocess.DEVNULL, text=True, env=_plain_env()) as proc:
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


def status(path: Path) -> list[dict]:
    """Each host: reachable, CPUs, memory, edgeprof version, whether the agent service runs."""
    hosts = read_inventory(path)

    def one(host: Host) -> dict:
        row: dict = {"name": host.name, "address": host.address}
        try:
            info = probe(host)
        except ClusterError as exc:
            return {**row, "reachable": False, "problem": str(exc)}
        row.update(reachable=True, cpus=info.get("cpus"), memory_mb=info.get("memory_mb"),
                   edgeprof=info.get("version"), engines=info.get("engines") or {},
                   agent=_agent_state(host))
        return row

    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return list(pool.map(one, hosts))


def _agent_state(host: Host) -> str:
    """``active``/``inactive``/... from systemd, ``unknown`` where systemd does not run."""
    command = ["sh", "-c", f"if [ -d /run/systemd/system ]; then systemctl is-active "
               f"{AGENT_SERVICE}; else echo unknown; fi"]
    try:
        done = subprocess.run(host.ssh(command), capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env=_plain_env())
    except subprocess.TimeoutExpired:
        return "unknown"
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"


def _plain_env() -> dict[str, str]:
    from .base import child_env
    return child_env({})


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no message"


__all__ = ["Host", "InventoryCluster", "read_inventory", "hosts_from_inventory",
           "check_hosts", "open_inventory", "status"]
