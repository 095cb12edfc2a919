"""``edgeprof image build`` refuses bad input in one line naming the problem and its
fix, exit status 2, no traceback, before any work: through the real command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, need_binary


def _build(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler.cli", "image", "build", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                               **(env or {})})


def _one_line(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error: "), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("args, words", [
    (("--flavour", "tiny"), ("--flavour 'tiny'", "torch, full")),
    (("--arch", "riscv64"), ("--arch 'riscv64'", "amd64, arm64")),
    (("--flavour", "full", "--arch", "arm64"), ("mxnet 1.9.1 does not import",
                                               "--flavour torch")),
])
def test_bad_choices(args, words):
    _one_line(_build(*args, "--docker-host", "unix:///nonexistent/docker.sock"), *words)


def test_no_daemon_at_the_docker_host(tmp_path):
    need_binary("mmdebstrap")
    socket = f"unix://{tmp_path}/docker.sock"
    _one_line(_build("--arch", "amd64", "--docker-host", socket),
              f"no Docker daemon answers at {socket}", "No such file or directory",
              "--docker-host")


def test_no_daemon_on_a_closed_port():
    need_binary("mmdebstrap")
    _one_line(_build("--arch", "amd64", "--docker-host", "tcp://127.0.0.1:1"),
              "Connection refused", "start dockerd")


def test_mmdebstrap_missing(tmp_path):
    _one_line(_build("--arch", "amd64", env={"PATH": str(tmp_path)}),
              "mmdebstrap is not installed", "apt-get install mmdebstrap")
