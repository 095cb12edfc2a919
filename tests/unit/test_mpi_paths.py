"""A rank on another inventory node gets node 0's command line (mpirun's): its paths
become that node's (``workloads.mpi.local_paths``), and the controller's relay starts
nothing but Open MPI's daemon, for a ticket it gave out."""

from __future__ import annotations

import json
import socket
from pathlib import Path, PurePosixPath

from workloads.mpi import DATA_DIR_ENV, PATHS_ENV, local_paths


def test_node_0_paths_become_this_nodes(monkeypatch):
    monkeypatch.setenv(PATHS_ENV, json.dumps([
        ["/w0/s/cells/c/attempt-1", "/w1/s/cells/c/attempt-1"], ["/w0/s", "/w1/s"]]))
    monkeypatch.setenv(DATA_DIR_ENV, "/data1")
    argv = ["py", "-m", "workloads.train", "--events-dir", "/w0/s/cells/c/attempt-1/events",
            "--model-file", "/w0/s/inputs/m.py", "--data-dir", "/data0", "/w0/sx"]
    assert local_paths(argv) == [
        "py", "-m", "workloads.train", "--events-dir", "/w1/s/cells/c/attempt-1/events",
        "--model-file", "/w1/s/inputs/m.py", "--data-dir", "/data1", "/w0/sx"]


def test_without_pairs_nothing_changes(monkeypatch):
    monkeypatch.delenv(PATHS_ENV, raising=False)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert local_paths(["a", "--data-dir", "/d"]) == ["a", "--data-dir", "/d"]


class _Hosts:
    """Only what the relay asks before it would start anything."""

    def host(self, node):
        from profiler.cluster.inventory.hosts import Host
        return Host(node.name, "10.0.0.1")

    def remote_cell_dir(self, node, cell_dir):
        return PurePosixPath("/w") / node.name

    def control_argv(self, node, operation, forward):
        return ["true"]

    def ssh_argv(self, host, remote):
        return ["true"]


def test_the_relay_starts_only_an_mpi_daemon_for_a_ticket(tmp_path):
    from profiler.cluster.base import Node
    from profiler.cluster.inventory.mpi_relay import MpiRelay

    relay = MpiRelay(_Hosts(), str(tmp_path))
    try:
        entry = relay.entry(Node("n1"), Node("n0"), tmp_path / "s" / "cells" / "c" / "attempt-1")
        ticket = entry.argv[entry.argv.index("via") + 2]
        for request in ({"ticket": ticket, "argv": ["sh", "-c", "touch /tmp/x"]},
                        {"ticket": "0" * 16, "argv": ["orted", "-mca", "ess", "env"]}):
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(str(tmp_path / "mpi-relay.sock"))
                conn.sendall(json.dumps(request).encode() + b"\n")
                answer = json.loads(conn.makefile("rb").readline())
            assert answer["exit"] == 255 and "refused" in answer["problem"], answer
    finally:
        relay.close()
    assert not Path(tmp_path / "mpi-relay.sock").exists()


def test_a_killed_daemons_session_folder_goes_a_running_ones_stays(tmp_path, monkeypatch):
    import subprocess
    import sys
    import tempfile

    from workloads.mpi import OWNER_FILE, remove_stale_sessions

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                "workloads.mpi"])
    try:
        folders = {}
        for name, owner in (("dead", 2 ** 22 + 1), ("alive", running.pid), ("none", None)):
            folder = tmp_path / f"edgeprof-ompi-abc-{name}"
            (folder / "ompi.vm.0").mkdir(parents=True)
            if owner is not None:
                (folder / OWNER_FILE).write_text(str(owner))
            folders[name] = folder
        remove_stale_sessions()
        # No owner (another version's): only once empty and old, as before.
        assert not folders["dead"].exists()
        assert folders["alive"].exists() and folders["none"].exists()
    finally:
        running.kill()
        running.wait()
    remove_stale_sessions()
    assert not folders["alive"].exists()
