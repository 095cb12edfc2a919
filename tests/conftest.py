"""Shared test helpers.

``need(what, ok)`` skips a test whose real dependency is missing, except under
``CI=true``, where a missing dependency is a failure: CI must never pass by skipping.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import sys
from functools import lru_cache
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


# A test module that touches what there is one of per worker, its emulated cluster
# (its network namespaces, cgroups and state file), runs as root (``need_root``, or the
# fixtures below that call it) and names the cluster. Root alone is not enough: the agent's
# tests make cgroups and filesystems of their own, and the bad-input tests name the
# cluster only in commands that must be refused before anything runs.
_NEEDS_ROOT = re.compile(r"\b(need_root|sshd_nodes|emulated_nodes)\(")
_NAMES_THE_CLUSTER = re.compile(r"\bemulated\b|netns|sshd")
CLUSTER_GROUP = "emulated"  # + the module: one unit of work each


@lru_cache(maxsize=None)
def _touches_the_machine(path: Path) -> bool:
    """Whether a test module runs on the emulated cluster (above); unit tests never do."""
    if path.parent.name == "unit" or not path.is_file():
        return False
    source = path.read_text()
    return bool(_NEEDS_ROOT.search(source) and _NAMES_THE_CLUSTER.search(source))


@lru_cache(maxsize=None)
def _tests_on_the_machine(path: Path) -> dict[str, bool]:
    """For a module that touches the machine (``_touches_the_machine``): each test's
    ``Class::name`` or ``name`` -> whether it does itself, that is whether its body, the
    module's fixtures it asks for (and autouse ones), or the module's functions and
    constants these name, call root's helpers or name the cluster. Its local tests (a
    factory trained on the local cluster, bad input refused before anything runs) then
    run beside the group."""
    tree = ast.parse(source := path.read_text())
    defs = {node.name: node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defs.update({t.id: node for t in targets if isinstance(t, ast.Name)})
    autouse = [name for name, node in defs.items() if "autouse=True" in
               " ".join(ast.get_source_segment(source, d) or "" for d in
                        getattr(node, "decorator_list", []))]

    def touches(node, seen: set[str]) -> bool:
        if _NEEDS_ROOT.search(text := ast.get_source_segment(source, node) or "") or \
                _NAMES_THE_CLUSTER.search(text):
            return True
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names |= {a.arg for a in node.args.args} | set(autouse)
        return any(touches(defs[name], seen | {name}) for name in names - seen
                   if name in defs)

    found = {}
    for name, node in defs.items():
        if isinstance(node, ast.ClassDef):
            found.update({f"{name}::{m.name}": touches(node, {name}) for m in node.body
                          if isinstance(m, ast.FunctionDef)})
        elif name.startswith("test") and not isinstance(node, (ast.Assign, ast.AnnAssign)):
            found[name] = touches(node, {name})
    return found


def _on_the_machine(rootpath: Path, nodeid: str) -> bool:
    """Whether the test ``nodeid`` touches the emulated cluster (the two functions above;
    a test they cannot place counts as touching it)."""
    file, _, test = nodeid.partition("::")
    path = rootpath / file
    if not _touches_the_machine(path):
        return False
    try:
        return _tests_on_the_machine(path).get(test.split("[")[0], True)
    except (SyntaxError, ValueError):
        return True


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (setup.cfg: ``-n 2 --dist loadgroup``), the tests of a module
    that touch the emulated cluster are one unit of work: one worker runs them one after
    another, in file order (a module's cluster fixture, and its last test that replaces
    the cluster, stay as they are), on that worker's own cluster (above), while other
    workers run other modules, on theirs, and the rest. Read from the module's source, so
    a new test file needs no marker.

    A scheduler, not ``xdist_group`` markers: xdist 3.8 marks a group by renaming the
    test's nodeid, which pytest 9.2 no longer lets it do (the groups were silently lost).
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ClusterModules(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if _on_the_machine(config.rootpath, nodeid):
                return f"{CLUSTER_GROUP}:{nodeid.partition('::')[0]}"
            return super()._split_scope(nodeid)

    return ClusterModules(config, log)


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
