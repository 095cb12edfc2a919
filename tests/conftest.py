"""Shared test helpers.

``need(what, ok)`` skips a test whose real dependency is missing, except under
``CI=true``, where a missing dependency is a failure: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Each pytest-xdist worker has an emulated cluster of its own (worker gwN: instance N+1,
# profiler/cluster/instance.py: its own namespaces, subnet, cgroups and state), so that
# the modules that use one run side by side. Set before anything imports the cluster's
# modules (they read it once), and inherited by every process a test starts.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    os.environ["EDGEPROF_CLUSTER_INSTANCE"] = str(int(_WORKER[2:]) + 1)
    os.environ.pop("EDGEPROF_RUN_DIR", None)  # one state folder per instance


# The user's re-calibrated profiles (~/.config/edgeprof/profiles.yaml, written by any
# study run on this host) override the packaged ones: tests expect the packaged quotas.
# Each test process gets a profiles file of its own, absent until a test writes it.
if "EDGEPROF_USER_PROFILES" not in os.environ:
    import tempfile

    os.environ["EDGEPROF_USER_PROFILES"] = str(
        Path(tempfile.mkdtemp(prefix="edgeprof-test-profiles-")) / "profiles.yaml")


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (setup.cfg: ``-n 2 --dist loadgroup``), the tests that must go
    together are one unit of work (``tests.support.scheduling``: a module's tests on the
    emulated cluster, on the worker's own cluster (above), and a module's tests that use
    a fixture it builds once), while other workers run other units; the largest units are
    dealt first (xdist orders them by their number of tests).

    A scheduler, not ``xdist_group`` markers: xdist 3.8 marks a group by renaming the
    test's nodeid, which pytest 9.2 no longer lets it do (the groups were silently lost).
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    from tests.support.scheduling import unit_of_work

    class Units(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(config.rootpath, nodeid) or super()._split_scope(nodeid)

    return Units(config, log)


def need(what: str, ok: bool) -> None:
    """Skip (locally) or fail (in CI) when ``ok`` is false."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"missing in CI: {what}")
    pytest.skip(f"missing: {what}")


def need_binary(name: str) -> str:
    path = shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.path.exists(p)), None)
    need(f"binary {name}", path is not None)
    return path


def no_children_left() -> list:
    """This process's descendants still alive (zombies aside): empty once a cell is reaped."""
    import psutil

    return [p for p in psutil.Process(os.getpid()).children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def need_root() -> None:
    need("root (network namespaces, cgroups)", os.geteuid() == 0)


@pytest.fixture(autouse=True)
def _one_thread_per_process(monkeypatch):
    # Training processes on a 2-core machine: one OpenMP thread each keeps runs stable.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


# Stop signals a test may leave ignored, and what Python starts with for each.
STOP_SIGNAL_DEFAULTS = {signal.SIGINT: signal.default_int_handler,
                        signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL}


@pytest.fixture(autouse=True)
def _stop_signals_not_left_ignored():
    """Every test starts with the stop signals handled, not ignored. A sweep run in this
    process that was stopped leaves them ignored on its way out (``StopRequest``), and a
    child inherits an ignored signal: a later test's Ctrl-C to its child would go unheard
    (one CI run: an image build that finished where the test expected exit 130)."""
    yield
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, default in STOP_SIGNAL_DEFAULTS.items():
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, default)


@pytest.fixture
def python() -> str:
    return sys.executable


def sshd_nodes(workdir: Path, count: int, *, confine: bool = True, extra_binaries=(),
               profile: str | None = None):
    """Emulated nodes each serving sshd (``tests.support.sshd``): yields the started
    ``SshdNodes``; stops them, and takes the cluster down if this call brought it up.

    ``confine``: run each sshd (and so what it starts) in its node's CPU and memory
    cgroups, like the emulated cluster's own processes. ``profile``: the nodes' profile
    (None: whatever is up, ``pi3b`` when bringing one up).
    """
    from profiler.cluster import emulated
    from tests.support.sshd import SSHD, SshdNodes

    need_root()
    for binary in (*emulated.REQUIRED_BINARIES, "ssh", "ssh-keygen", SSHD, *extra_binaries):
        need_binary(binary)
    cluster, brought_up = emulated.ensure_cluster(count, profile)
    sshd = SshdNodes(cluster.nodes()[:count], workdir, cluster=cluster if confine else None)
    try:
        yield sshd.start()
    finally:
        sshd.stop()
        if brought_up:
            emulated.down()


def assert_one_line(done, *words: str) -> None:
    """Bad input: exit status 2 and one line on stderr, no traceback, naming ``words``."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def emulated_nodes(count: int):
    """The emulated cluster that is up (``count`` nodes at least), or one brought up for
    the caller and taken down after it: a fixture's body, ``yield from
    emulated_nodes(3)``. Needs root and the cluster's binaries (a failure under CI)."""
    from profiler.cluster import emulated

    need_root()
    for binary in emulated.REQUIRED_BINARIES:
        need_binary(binary)
    up, brought_up = emulated.ensure_cluster(count)
    try:
        yield up
    finally:
        if brought_up:
            emulated.down()
