"""A Swarm node's MPI entry (``workloads.mpi serve``) and node 0's ``via`` over TCP, on
loopback with real processes: a request without the cell's ticket is refused and the
entry waits on; with it, the entry runs the daemon (here a stand-in ``orted`` script)
and answers with its status and a line naming the node; the ticket comes from its
file, never a command line (tests/integration/test_swarm_mpi.py runs it on a Swarm)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from profiler.cluster.base import NodeEntry
from tests.conftest import ROOT
from workloads.mpi import NODE_ENTRIES_ENV, TCP_PREFIX


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _entry(tmp_path: Path, ticket: Path, **popen) -> tuple[subprocess.Popen, int, dict]:
    """Node n1's entry (``serve``) on a free loopback port; its port and environment."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), NODE_ENTRIES_ENV: json.dumps(
        {"cell": str(tmp_path), "nodes": {"n1": NodeEntry().to_dict()}})}
    return subprocess.Popen([sys.executable, "-m", "workloads.mpi", "serve", str(ticket),
                             str(port), "n1"], env=env, cwd=ROOT, **popen), port, env


def _via(port: int, ticket: str, argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workloads.mpi", "via",
                           f"{TCP_PREFIX}127.0.0.1:{port}", ticket, "n1", "--", *argv],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


def test_the_entry_runs_only_its_cell_s_daemon_and_answers_its_status(tmp_path):
    orted = tmp_path / "bin" / "orted"
    orted.parent.mkdir()
    orted.write_text("#!/bin/sh\necho \"daemon $*\"\nexit 3\n")
    orted.chmod(0o755)
    ticket = tmp_path / "n1.ticket"
    ticket.write_text("s3cret")
    ticket.chmod(0o600)
    wrong = tmp_path / "wrong.ticket"
    wrong.write_text("guess")
    entry, port, env = _entry(tmp_path, ticket, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        refused = _via(port, f"@{wrong}", [str(orted), "-x"], env)
        assert refused.returncode == 255
        assert "node n1: the entry refused a request" in refused.stderr
        not_orted = _via(port, f"@{ticket}", ["/bin/sh", "-c", "true"], env)
        assert not_orted.returncode == 255 and "refused" in not_orted.stderr
        done = _via(port, f"@{ticket}", [str(orted), "--seq", "1"], env)
        assert done.returncode == 3, done.stderr
        assert f"node n1: the MPI daemon ({orted}) exited 3" in done.stderr
        assert entry.wait(timeout=30) == 3  # the entry ends with its daemon
        out, err = entry.communicate()
        assert b"daemon --seq 1" in out and b"s3cret" not in out + err
    finally:
        entry.kill()
        entry.wait()


def test_a_daemon_outliving_the_connect_timeout_keeps_its_via(tmp_path, monkeypatch):
    """The connect's timeout is not the answer's: a daemon runs as long as its job."""
    import workloads.mpi as mpi

    monkeypatch.setattr(mpi, "die_with_parent", lambda: None)
    orted = tmp_path / "orted"
    orted.write_text("#!/bin/sh\nsleep 2\n")
    orted.chmod(0o755)
    ticket = tmp_path / "t"
    ticket.write_text("x")
    entry, port, _ = _entry(tmp_path, ticket)
    try:
        _listening(port)
        monkeypatch.setattr(mpi, "ENTRY_CONNECT_TIMEOUT_S", 0.5)
        assert mpi.via(f"{TCP_PREFIX}127.0.0.1:{port}", f"@{ticket}", "n1",
                       [str(orted)]) == 0
    finally:
        entry.kill()
        entry.wait()


def _listening(port: int, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return  # (the entry refuses this empty request and waits on)
        time.sleep(0.1)
    raise AssertionError(f"no entry on port {port} within {within_s} s")


def test_an_entry_that_is_not_there_is_a_line_naming_the_node(tmp_path, monkeypatch):
    import workloads.mpi as mpi

    monkeypatch.setattr(mpi, "ENTRY_CONNECT_TIMEOUT_S", 0.5)
    monkeypatch.setattr(mpi, "die_with_parent", lambda: None)
    ticket = tmp_path / "t"
    ticket.write_text("x")
    assert mpi.via(f"{TCP_PREFIX}127.0.0.1:{_free_port()}", f"@{ticket}", "n1",
                   ["orted"]) == mpi.UNREACHABLE_EXIT
