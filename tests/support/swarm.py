"""A real Docker Swarm of several nodes on one host, for the tests: one dockerd per
emulated node, inside that node's network namespace, joined over the emulated links.

``SwarmOnNodes(nodes, workdir).start()`` starts, for each emulated node (``Node`` of the
emulated cluster that is up), Debian's ``dockerd`` with a data-root, exec-root, socket and
pidfile of its own under ``workdir``, entered into the node's network namespace with
``nsenter --net`` (not ``ip netns exec``: that remounts /sys in a new mount namespace,
the cgroup mounts vanish and dockerd stops with "Devices cgroup isn't mounted"), and
its containers under the node's cgroup (``--cgroup-parent``), so that the node's CPU
quota and memory limit hold for its tasks. Node 0 runs ``swarm init`` on its emulated
address, the others join it over their veth links, and each node is labelled with its
profile (``edgeprof.profile=pi4``) and its name (``edgeprof.node=n1``: every daemon
here has the host's hostname). ``stop()`` stops the daemons, removes their data, the
cgroups runc made for them in the controllers the emulated cluster does not use, and
``/etc/docker/key.json`` if a daemon wrote it.

Each dockerd rewrites iptables (its FORWARD policy DROP), but inside its node's network
namespace only: the host's tables, and so the emulated cluster of the suite's other
worker, are not touched; ``host_iptables()`` is what a test compares before and after.

``dev_image_tar(path)`` makes the root of a development image (``mmdebstrap
--variant=minbase bookworm``, 12 to 21 s here, once per test session): a bare Debian in
which the host's Python (``/root/.pyenv``), the venv and the repository are bind-mounted
read-only at their own paths (``dev_mounts()``), so that the containers run the host's
exact code. The real image is ``edgeprof image build``'s; the provider only needs an
image name and the path of Python inside it.

``swarm_on_emulated(count, workdir, tar, image)`` is a module fixture's whole body: the
emulated cluster of ``count`` Pi 4s (its own, when one of another size is up), a Swarm
on it with the image imported, and after it everything gone, the host's tables as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from profiler.cluster import netns
from profiler.cluster.base import Node
from profiler.cluster.swarm import VXLAN_OVERHEAD_BYTES

DAEMON_START_TIMEOUT_S = 60
DAEMON_STOP_TIMEOUT_S = 20
KEY_FILE = Path("/etc/docker/key.json")
# The overlay networks' subnets, away from the emulated cluster's 10.213.x.0/24.
ADDRESS_POOL = "10.199.0.0/16"
EMULATED_CONTROLLERS = ("cpu", "cpuacct", "memory")
# The cells' overlay on the emulated links (9000-byte frames): as few packets as the
# processes send (``--swarm-mtu``; the default 1400 is for a board's Ethernet).
OVERLAY_MTU = netns.LINK_MTU - VXLAN_OVERHEAD_BYTES
# What the venv's wheels load from the system and minbase lacks: MXNet's OpenMP and
# quad-precision maths, Horovod's Open MPI (it loads libmpi at import), the Python's
# ctypes, ssl and sqlite3; tc (iproute2), with which an emulated board's task
# shapes its own link (profiler.cluster.swarm.boards); and Open MPI's mpirun and orted
# (openmpi-bin), for Horovod over MPI (``--horovod-ops mpi``).
DEV_IMAGE_PACKAGES = ("libgomp1", "libquadmath0", "libopenmpi3", "libffi8", "libssl3",
                      "libsqlite3-0", "iproute2", "openmpi-bin")


@contextlib.contextmanager
def swarm_on_emulated(count: int, workdir: Path, tar: Path, image: str,
                      labels=None):
    """A started ``SwarmOnNodes`` on ``count`` emulated Pi 4s with ``image`` imported on
    each (``labels(name)``: a node's labels, when given), stopped after; the emulated
    cluster brought down if it was brought up here, and the host's iptables unchanged."""
    from profiler.cluster import emulated

    before = host_iptables()
    cluster, brought_up = emulated.ensure_cluster(count, "pi4")
    if not brought_up and len(cluster.nodes()) != count:
        # A larger pi4 cluster scales its quotas below the profile's, under which a
        # task's limit does not fit: the caller wants its own.
        emulated.down()
        cluster, brought_up = emulated.up(count, "pi4"), True
    swarm = SwarmOnNodes(cluster.nodes()[:count], workdir)
    try:
        swarm.start()
        began = time.monotonic()
        swarm.import_image(tar, image)
        swarm.imported_s = time.monotonic() - began
        for daemon in swarm.daemons if labels else ():
            swarm.label(daemon.node.name, labels(daemon.node.name))
        yield swarm
    finally:
        swarm.stop()
        if brought_up:
            emulated.down()
    assert host_iptables() == before


def host_iptables() -> str:
    """The host namespace's iptables rules (filter and nat), as ``iptables -S`` prints them."""
    return "".join(subprocess.run(["iptables", "-t", table, "-S"], capture_output=True,
                                  text=True, check=True).stdout for table in ("filter", "nat"))


def dev_image_tar(path: Path) -> Path:
    """A minbase Debian bookworm root as a tar file at ``path`` (made if missing)."""
    if not path.exists():
        partial = path.with_name(path.stem + ".partial.tar")  # mmdebstrap: format by suffix
        subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase",
                        "--include=" + ",".join(DEV_IMAGE_PACKAGES), "bookworm", str(partial)],
                       check=True, capture_output=True)
        partial.rename(path)
    return path


def session_dev_image_tar(tmp_path_factory) -> Path:
    """The test session's development image root (one per session and xdist worker, for
    every module that forms a Swarm)."""
    folder = tmp_path_factory.getbasetemp() / "swarm-dev-image"
    folder.mkdir(exist_ok=True)
    # The package list's hash in the name: a cached root made from another list (an
    # earlier checkout's, a session's basetemp reused) is never taken for this one.
    tag = hashlib.sha1(",".join(DEV_IMAGE_PACKAGES).encode()).hexdigest()[:8]
    return dev_image_tar(folder / f"bookworm-minbase-{tag}.tar")


def dev_mounts(repo: Path) -> list[str]:
    """What the development image needs from the host, read-only at the same paths: the
    repository, the venv it links to, the Python the venv was made from, and Debian's
    Fashion-MNIST (the default dataset of the small models)."""
    venv = Path(sys.prefix).resolve()
    python_home = Path(os.path.realpath(sys.executable)).parents[1]
    paths = {str(repo.resolve()), str(repo), str(venv), str(python_home),
             "/usr/share/datasets"}
    if str(python_home).startswith("/root/.pyenv/"):
        paths.add("/root/.pyenv")
        paths.discard(str(python_home))
    return sorted(paths)


@dataclass
class Daemon:
    node: Node
    root: Path
    proc: subprocess.Popen | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "dockerd.log"

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def argv(self, cgroup_parent: str) -> list[str]:
        return ["nsenter", f"--net={netns.NETNS_DIR / self.node.scope.netns}", "--",
                "dockerd", "--data-root", str(self.root / "data"),
                "--exec-root", str(self.root / "exec"), "-H", self.url,
                "--pidfile", str(self.root / "docker.pid"),
                "--cgroup-parent", cgroup_parent, "--bridge", "none",
                "--storage-driver", "overlay2", "--log-level", "warn"]


class SwarmOnNodes:
    """See the module docstring. ``formed_s``: how long ``start()`` took (daemons up,
    Swarm formed, nodes labelled)."""

    def __init__(self, nodes: list[Node], workdir: Path):
        self.nodes = list(nodes)
        self.workdir = Path(workdir)
        self.daemons = [Daemon(node, self.workdir / node.name) for node in self.nodes]
        self.formed_s: float | None = None
        self._key_existed = KEY_FILE.exists()

    @property
    def manager_url(self) -> str:
        return self.daemons[0].url

    def client(self, daemon: Daemon | None = None):
        """A client of ``daemon``'s Engine API (the manager's by default), for a ``with``."""
        import docker
        return contextlib.closing(docker.DockerClient(
            base_url=(daemon or self.daemons[0]).url, timeout=60))

    def start(self, form: bool = True) -> "SwarmOnNodes":
        """Start the daemons and, with ``form``, make them one Swarm (else each stands
        alone: an engine a test only keeps images in)."""
        began = time.monotonic()
        try:
            for daemon in self.daemons:
                self._start_daemon(daemon)
            for daemon in self.daemons:
                self._wait_daemon(daemon)
            if form:
                self._form()
        except BaseException:
            self.stop()
            raise
        self.formed_s = time.monotonic() - began
        return self

    def _start_daemon(self, daemon: Daemon) -> None:
        daemon.root.mkdir(parents=True, exist_ok=True)
        # The node's cgroup, relative to each controller's root (/edgeprof7/n0).
        parent = "/" + str(_node_cgroup_relative(daemon.node))
        with open(daemon.log, "ab") as log:
            daemon.proc = subprocess.Popen(daemon.argv(parent), stdout=log,
                                           stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait_daemon(self, daemon: Daemon) -> None:
        import docker
        deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if daemon.proc.poll() is not None:
                raise RuntimeError(f"dockerd of {daemon.node.name} exited "
                                   f"{daemon.proc.returncode}: {daemon.log.read_text()[-800:]}")
            if daemon.socket.exists():
                with contextlib.suppress(docker.errors.DockerException, OSError):
                    with self.client(daemon) as client:
                        client.ping()
                        return
            time.sleep(0.1)
        raise RuntimeError(f"dockerd of {daemon.node.name} did not answer within "
                           f"{DAEMON_START_TIMEOUT_S} s: {daemon.log.read_text()[-800:]}")

    def _form(self) -> None:
        manager = self.daemons[0]
        with self.client(manager) as client:
            client.swarm.init(advertise_addr=manager.node.address,
                              listen_addr=f"{manager.node.address}:2377",
                              default_addr_pool=[ADDRESS_POOL], subnet_size=24)
            token = client.swarm.attrs["JoinTokens"]["Worker"]
        for daemon in self.daemons[1:]:
            with self.client(daemon) as client:
                client.swarm.join(remote_addrs=[f"{manager.node.address}:2377"],
                                  join_token=token, advertise_addr=daemon.node.address,
                                  listen_addr=f"{daemon.node.address}:2377")
        ids = {}
        for daemon in self.daemons:
            with self.client(daemon) as client:
                ids[daemon.node.name] = client.info()["Swarm"]["NodeID"]
        for daemon in self.daemons:
            self.label(daemon.node.name, {"edgeprof.profile": daemon.node.profile,
                                          "edgeprof.node": daemon.node.name}, ids)

    def daemon(self, node_name: str) -> Daemon:
        return next(d for d in self.daemons if d.node.name == node_name)

    def stop_daemon(self, node_name: str) -> None:
        """Stop one node's dockerd (SIGTERM, as ``systemctl stop docker`` does): its
        containers stop with it, and the manager marks the node down once its
        heartbeat fails."""
        daemon = self.daemon(node_name)
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.proc.wait(timeout=DAEMON_STOP_TIMEOUT_S)

    def restart_daemon(self, node_name: str, ready_s: float = DAEMON_START_TIMEOUT_S) -> None:
        """Start a stopped node's dockerd again and wait until the manager counts the
        node ready (it then removes what the manager removed meanwhile)."""
        daemon = self.daemon(node_name)
        self._start_daemon(daemon)
        self._wait_daemon(daemon)
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            with self.client() as client:
                states = {n.attrs["Spec"].get("Labels", {}).get("edgeprof.node"):
                          n.attrs["Status"]["State"] for n in client.nodes.list()}
            if states.get(node_name) == "ready":
                return
            time.sleep(0.2)
        raise RuntimeError(f"node {node_name} not ready within {ready_s} s of its restart")

    def label(self, node_name: str, labels: dict[str, str], ids: dict | None = None) -> None:
        """Set the Swarm node's labels to ``labels`` (through the manager)."""
        with self.client() as client:
            node_id = (ids or {}).get(node_name) or next(
                n.id for n in client.nodes.list()
                if n.attrs["Spec"].get("Labels", {}).get("edgeprof.node") == node_name)
            node = client.nodes.get(node_id)
            spec = dict(node.attrs["Spec"])
            spec["Labels"] = dict(labels)
            node.update(spec)

    def availability(self, node_name: str, availability: str) -> None:
        """Set the Swarm node's availability (``active``, ``pause``, ``drain``)."""
        with self.client() as client:
            node = next(n for n in client.nodes.list()
                        if n.attrs["Spec"].get("Labels", {}).get("edgeprof.node") == node_name)
            node.update({**node.attrs["Spec"], "Availability": availability})

    def import_image(self, tar: Path, name: str) -> None:
        """``docker import`` ``tar`` as ``name`` on every node (no registry: each daemon
        has its own image store)."""
        for daemon in self.daemons:
            with self.client(daemon) as client:
                with contextlib.suppress(Exception):
                    client.images.get(name)
                    continue
                with open(tar, "rb") as data:
                    client.api.import_image_from_data(data, repository=name.split(":")[0],
                                                      tag=(name.split(":") + ["latest"])[1])

    def stop(self) -> None:
        """Stop every daemon (SIGTERM; SIGKILL after ``DAEMON_STOP_TIMEOUT_S``), then remove
        what they left: mounts under their roots, their roots, their cgroups."""
        for daemon in self.daemons:
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.proc.send_signal(signal.SIGTERM)
        for daemon in self.daemons:
            if daemon.proc is None:
                continue
            try:
                daemon.proc.wait(timeout=DAEMON_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.proc.pid, signal.SIGKILL)
                daemon.proc.wait()
            # containerd-shims outlive a killed dockerd: their pids sit in the node's cgroup.
        for daemon in self.daemons:
            remove_leftovers(daemon.root, daemon.node)
        # The daemons' identity key: another dockerd on this host may use it.
        if not self._key_existed and not _other_dockerd_running():
            KEY_FILE.unlink(missing_ok=True)


def remove_leftovers(root: Path, node: Node) -> None:
    """What a stopped dockerd with everything under ``root`` leaves: its shims, mounts,
    folder, and the cgroups runc made for it under ``node``'s."""
    _kill_shims(root)
    _unmount_under(root)
    shutil.rmtree(root, ignore_errors=True)
    _remove_runc_cgroups(node)


def _kill_shims(root: Path) -> None:
    """Kill what still runs from under ``root`` (containerd-shim-runc-v2 and its tasks)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(root) in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _unmount_under(root: Path) -> None:
    """Lazily unmount every mount point under ``root``, deepest first."""
    points = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            point = line.split()[1].replace("\\040", " ")
            if point == str(root) or point.startswith(str(root) + "/"):
                points.append(point)
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _node_cgroup_relative(node: Node) -> Path:
    """``edgeprof7/n0``: the node's cgroup below each controller's root."""
    memory = Path(node.scope.cgroup_memory)
    return memory.relative_to(memory.parents[1])


def _remove_runc_cgroups(node: Node) -> None:
    """runc makes the node's cgroup (and its containers' below it) in every controller:
    here go the containers' everywhere, and the node's own where the emulated cluster
    does not make it (it removes its cpu, cpuacct and memory groups itself)."""
    relative = _node_cgroup_relative(node)
    for controller in Path("/sys/fs/cgroup").iterdir():
        group = controller / relative
        if not group.is_dir():
            continue
        for directory in sorted((p for p in group.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        if controller.name in EMULATED_CONTROLLERS:
            continue
        with contextlib.suppress(OSError):
            group.rmdir()
        with contextlib.suppress(OSError):
            group.parent.rmdir()  # /edgeprof7, once empty


def _other_dockerd_running() -> bool:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if (proc / "comm").read_text().strip() == "dockerd":
                    return True
    return False
