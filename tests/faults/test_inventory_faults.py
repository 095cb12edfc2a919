"""Bad inventories stop a sweep before anything runs: one line naming the fix, exit 2.

Parsing faults go through the real ``ansible-inventory``; the unreachable host, the host
without edgeprof and the hosts that cannot run the grid are real SSH attempts: a bridge
address no node answers on, a node served by sshd whose ``edgeprof_python`` does not
exist, and nodes whose ``edgeprof_python`` sees another edgeprof version or a broken
engine (stand-ins, see ``SHADOWS``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cluster.inventory.hosts import hosts_from_inventory
from profiler.errors import ConfigError
from tests.conftest import ROOT, sshd_nodes

EDGEPROF = [sys.executable, "-m", "profiler.cli"]


def _sweep(inventory: Path, out: Path, *grid: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*EDGEPROF, "sweep", "--cluster", "inventory", "--inventory", str(inventory),
         "--model", "lenet-mlp", "--dataset", "synthetic", "--max-samples", "64",
         "--out", str(out), *(grid or ("--devices", "1"))],
        cwd=ROOT, capture_output=True, text=True, timeout=180)


def _assert_one_line(done: subprocess.CompletedProcess, *words: str, out: Path) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not out.exists(), "nothing may be written for bad input"


BAD_FILES = {
    "missing": (None, ["does not exist", "inventory.example.ini"]),
    "empty": ("", ["no hosts in the groups master and workers"]),
    "no workers": ("[master]\nm ansible_host=10.213.0.1\n", ["no [workers] hosts"]),
    "no address": ("[master]\nm ansible_host=10.213.0.1\n[workers]\nw1\n",
                   ["host w1 has no ansible_host"]),
    "same machine twice": ("[master]\nm ansible_host=10.213.0.1\n[workers]\n"
                           "w1 ansible_host=10.213.0.2\nw2 ansible_host=10.213.0.2\n",
                           ["w1 and w2 are the same machine"]),
    "master and worker": ("[master]\nm ansible_host=10.213.0.1\n[workers]\n"
                          "m\nw1 ansible_host=10.213.0.2\n", ["listed as master and worker"]),
    "broken yaml": ("all: [unclosed\n", ["cannot be parsed"]),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_inventory_file(case, tmp_path):
    text, words = BAD_FILES[case]
    inventory = tmp_path / ("inventory.yml" if case == "broken yaml" else "inventory.ini")
    if text is not None:
        inventory.write_text(text)
    _assert_one_line(_sweep(inventory, tmp_path / "out"), *words, out=tmp_path / "out")


def test_inventory_needs_cluster_inventory_and_back(tmp_path):
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[master]\nm ansible_host=10.213.0.1\n"
                         "[workers]\nw ansible_host=10.213.0.2\n")
    for argv in (["--inventory", str(inventory)], ["--cluster", "inventory"]):
        done = subprocess.run([*EDGEPROF, "sweep", "--model", "lenet-mlp", *argv, "--out",
                               str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        _assert_one_line(done, "--inventory FILE goes with --cluster inventory",
                         out=tmp_path / "out")


def test_hosts_come_master_first_with_their_ssh_settings():
    data = {"_meta": {"hostvars": {
        "w1": {"ansible_host": "192.168.1.22", "ansible_port": 2222, "ansible_user": "pi",
               "ansible_ssh_private_key_file": "~/.ssh/pi", "edgeprof_interface": "wlan0",
               "ansible_ssh_common_args": "-o ProxyJump=bastion"},
        "m": {"ansible_host": "192.168.1.21"}}},
        "all": {"children": ["master", "workers"]},
        "workers": {"children": ["rack1"]}, "rack1": {"hosts": ["w1"]},
        "master": {"hosts": ["m"]}}
    hosts = hosts_from_inventory(data, "inv")
    assert [h.name for h in hosts] == ["m", "w1"]
    w1 = hosts[1]
    assert (w1.address, w1.port, w1.user, w1.interface) == ("192.168.1.22", 2222, "pi", "wlan0")
    argv = w1.ssh(["python", "-c", "print('a b')"])
    assert argv[:2] == ["ssh", "-o"] and "StrictHostKeyChecking=no" not in argv
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "pi"
    assert "ProxyJump=bastion" in argv and argv[-3:-1] == ["192.168.1.22", "--"]
    # One argument for the remote shell, quoted: no word of the command is re-split.
    assert argv[-1] == "python -c 'print('\"'\"'a b'\"'\"')'"
    assert w1.node().scope.interfaces == ("wlan0",)
    # Shared connections: a socket folder of the sweep's own (0700, a path short enough
    # for a unix socket), options after the inventory's own, which win.
    import os
    import stat
    from profiler.cluster.inventory.connections import Connections
    connections = Connections()
    try:
        shared = connections.argv(w1, ["true"])
        path = shared[shared.index(f"ControlPath={connections.control_dir}/%C")].split("=", 1)[1]
        assert stat.S_IMODE(os.stat(connections.control_dir).st_mode) == 0o700
        assert len(path.replace("%C", "x" * 40)) + 17 < 104
        assert shared.index("ProxyJump=bastion") < shared.index("ControlMaster=auto")
        assert shared[-3:] == ["192.168.1.22", "--", "true"]
    finally:
        connections.close()
    assert not os.path.exists(connections.control_dir)
    with pytest.raises(ConfigError, match="no hosts"):
        hosts_from_inventory({"_meta": {"hostvars": {}}}, "inv")


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    work = tmp_path_factory.mktemp("ssh")
    for sshd in sshd_nodes(work, 2, confine=False):
        yield sshd, work


def test_unreachable_host(one_node, tmp_path):
    sshd, work = one_node
    inventory = sshd.write_inventory(tmp_path / "inv.ini", {"master": ["n0"], "workers": ["n1"]},
                                     host_vars={n: {"edgeprof_python": sys.executable}
                                                for n in ("n0", "n1")})
    # n1's address is replaced by one on the bridge that no node answers.
    address = sshd.nodes[1].address
    inventory.write_text(inventory.read_text().replace(
        f"ansible_host={address}", f"ansible_host={address.rsplit('.', 1)[0]}.200"))
    _assert_one_line(_sweep(inventory, tmp_path / "out"), "host n1", "unreachable over SSH",
                     out=tmp_path / "out")


def test_host_without_edgeprof(one_node, tmp_path):
    sshd, work = one_node
    inventory = sshd.write_inventory(
        tmp_path / "inv.ini", {"master": ["n0"], "workers": ["n1"]},
        host_vars={"n0": {"edgeprof_python": sys.executable},
                   "n1": {"edgeprof_python": "/opt/nowhere/bin/python"}})
    _assert_one_line(_sweep(inventory, tmp_path / "out"), "host n1 has no usable edgeprof",
                     "ansible/site.yml", out=tmp_path / "out")


def test_mxnet_without_parameter_server_is_named(monkeypatch):
    """PyPI's aarch64 MXNet wheel has no distributed KVStore (where it imports at all). No
    such wheel runs here, so the host's answer is given as the probe would read it from
    that wheel (a stand-in); the probe's real answer on this machine is checked below."""
    from profiler.cell import CellConfig
    from profiler import __version__
    from profiler.cluster.inventory.hosts import Host
    from profiler.cluster.inventory.probe import check_hosts
    from profiler.errors import ClusterError
    from profiler.sweep.needs import grid_needs

    hosts = [Host(name="pi0", address="192.0.2.1")]
    answers = {"pi0": {"version": __version__, "engines": {
        "mxnet": {"ok": True, "dist_kvstore": False}, "horovod": {"ok": True}}}}
    one = CellConfig(engine="mxnet", devices=1)
    two = CellConfig(engine="mxnet", devices=2)
    hvd = CellConfig(engine="horovod", devices=2)
    check_hosts(hosts, grid_needs([one, hvd]), answers)  # local KVStore and Horovod work
    with pytest.raises(ClusterError, match="pi0 cannot run --engine mxnet.*no distributed "
                                           "KVStore.*edgeprof_mxnet_wheel.*--engine torch"):
        check_hosts(hosts, grid_needs([one, two]), answers)


def test_mxnet_wheel_without_arm_performance_libraries_is_named(monkeypatch):
    """PyPI's aarch64 ``mxnet==1.9.1`` does not import on a stock 64-bit Pi OS: its
    libmxnet.so needs Arm Performance Libraries that it does not ship. No aarch64 MXNet
    runs here, so its import error is a stand-in raised by a patched import; the rewrite
    of that error into one line naming the way out is what is checked."""
    import importlib

    from profiler.engines import get_engine

    real = importlib.import_module

    def failing(name, *args):
        if name == "mxnet":
            raise OSError("libarmpl_lp64_mp.so: cannot open shared object file: No such "
                          "file or directory")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", failing)
    answer = get_engine("mxnet").probe_host()
    assert answer["ok"] is False
    assert "Arm Performance Libraries" in answer["problem"]
    assert "--engine torch" in answer["problem"] and "docs/raspberry-pi.md" in answer["problem"]


def test_probe_runs_each_engines_check_on_this_machine():
    from profiler.cluster.inventory.probe import _PROBE

    done = subprocess.run([sys.executable, "-c", _PROBE, "horovod", "mxnet", "torch"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    engines = answer["engines"]
    # The x86-64 wheel of MXNet 1.9.1 is built with USE_DIST_KVSTORE=1; setup.sh builds
    # Horovod against it with Gloo and MPI (and Open MPI's orted, which --horovod-ops
    # mpi needs on every node), and installs torch's CPU build, which has Gloo.
    assert engines["mxnet"] == {"ok": True, "dist_kvstore": True}, answer
    assert engines["horovod"] == {"ok": True, "mpi": {"built": True, "orted": True}}, answer
    assert engines["torch"]["ok"] is True and "+cpu" in engines["torch"]["torch"], answer


# A host whose venv is not what the controller expects. Each stand-in is the real Python
# of this machine behind a wrapper that puts a folder of shadowing packages first on its
# path: an edgeprof of another version, an MXNet that is found but does not import (as
# beside NumPy 2: find_spec finds it, and its libmxnet.so loads), a Horovod built
# without MXNet (``horovod`` is there, ``horovod.mxnet`` is not).
SHADOWS = {
    "version": {"profiler/__init__.py": '__version__ = "0.0.1"\n'},
    "mxnet": {"mxnet/__init__.py": "raise AttributeError(\"module 'numpy' has no "
                                    "attribute 'bool'\")\n"},
    "horovod": {"horovod/__init__.py": ""},
    # A torch wheel built for newer cores than the node's: it dies with SIGILL on import,
    # as PyPI's aarch64 torch 2.10 does on the Pi 3B/4's ARMv8.0 cores.
    "torch-sigill": {"torch/__init__.py": "import os, signal\nos.kill(os.getpid(), "
                                          "signal.SIGILL)\n"},
    "torch-broken": {"torch/__init__.py": "raise ImportError('libtorch_cpu.so: cannot open "
                                          "shared object file')\n"},
}


def _shadowed_python(folder: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    if "mxnet/__init__.py" in files:  # the real libraries beside it: libmxnet.so loads
        real = Path(importlib.util.find_spec("mxnet").origin).parent
        for library in real.glob("*.so*"):
            (folder / "mxnet" / library.name).symlink_to(library)
    wrapper = folder / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={folder} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.parametrize("case, grid, words", [
    ("version", (), ["host n1 runs edgeprof 0.0.1", "ansible/site.yml"]),
    ("mxnet", (), ["host n1 cannot run --engine mxnet", "AttributeError",
                   "ansible/site.yml"]),
    ("horovod", ("--engine", "horovod", "--devices", "2"),
     ["host n1 cannot run --engine horovod", "No module named 'horovod.mxnet'"]),
    ("torch-sigill", ("--engine", "torch-ddp", "--devices", "2"),
     ["host n1 cannot run --engine torch-ddp", "dies with SIGILL", "torch==2.9.1"]),
    ("torch-broken", ("--engine", "torch", "--devices", "1"),
     ["host n1 cannot run --engine torch", "does not work", "libtorch_cpu.so"]),
])
def test_host_that_cannot_run_the_grid(one_node, tmp_path, case, grid, words):
    sshd, work = one_node
    python = _shadowed_python(tmp_path / "shadow", SHADOWS[case])
    inventory = sshd.write_inventory(
        tmp_path / "inv.ini", {"master": ["n0"], "workers": ["n1"]},
        host_vars={"n0": {"edgeprof_python": sys.executable},
                   "n1": {"edgeprof_python": str(python)}})
    _assert_one_line(_sweep(inventory, tmp_path / "out", *grid), *words,
                     out=tmp_path / "out")
