"""How the suite's tests are dealt to pytest-xdist's workers (tests/conftest.py's
``pytest_xdist_make_scheduler``), read from each module's source so that a new test file
needs no marker.

Two kinds of test go together, as one unit of work that one worker runs in file order:

- the tests of a module that touch the emulated cluster, of which each worker has one
  (its network namespaces, cgroups and state file): a module's cluster fixture, and its
  last test that replaces the cluster, stay as they are;
- the tests of a module that use a fixture it builds once (``scope="module"`` or
  ``"class"``): a worker builds such a fixture for itself, so tests of one module dealt
  to both workers built it twice (the accuracy module's sweep of 20 real cells, 280 s
  on a slow host, was trained on both).

Every other test is a unit of its own.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

# A test module that touches the emulated cluster runs as root (``need_root``, or the
# fixtures of tests/conftest.py that call it) and names the cluster. Root alone is not
# enough: the agent's tests make cgroups and filesystems of their own, and the bad-input
# tests name the cluster only in commands that must be refused before anything runs.
_NEEDS_ROOT = re.compile(r"\b(need_root|sshd_nodes|emulated_nodes)\(")
_NAMES_THE_CLUSTER = re.compile(r"\bemulated\b|netns|sshd")
_BUILT_ONCE = re.compile(r"""\bscope\s*=\s*["'](module|class|package)["']""")
CLUSTER_GROUP = "emulated"  # + the module: one unit of work each
SHARED_GROUP = "shared"  # + the module: its tests that use a fixture built once


@lru_cache(maxsize=None)
def _touches_the_machine(path: Path) -> bool:
    """Whether a test module runs on the emulated cluster (above); unit tests never do."""
    if path.parent.name == "unit" or not path.is_file():
        return False
    source = path.read_text()
    return bool(_NEEDS_ROOT.search(source) and _NAMES_THE_CLUSTER.search(source))


def _reaching(path: Path, is_root) -> dict[str, bool]:
    """Each test of the module at ``path`` (``Class::name`` or ``name``) -> whether it
    reaches a definition ``is_root(node, source)`` holds for: through its body, the module's
    fixtures it asks for (and autouse ones), or the module's functions and constants these
    name."""
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

    def reaches(node, seen: set[str]) -> bool:
        if is_root(node, source):
            return True
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names |= {a.arg for a in node.args.args} | set(autouse)
        return any(reaches(defs[name], seen | {name}) for name in names - seen
                   if name in defs)

    found = {}
    for name, node in defs.items():
        if isinstance(node, ast.ClassDef):
            found.update({f"{name}::{m.name}": reaches(node, {name}) for m in node.body
                          if isinstance(m, ast.FunctionDef)})
        elif name.startswith("test") and not isinstance(node, (ast.Assign, ast.AnnAssign)):
            found[name] = reaches(node, {name})
    return found


def _touches(node, source: str) -> bool:
    text = ast.get_source_segment(source, node) or ""
    return bool(_NEEDS_ROOT.search(text) or _NAMES_THE_CLUSTER.search(text))


def _built_once(node, source: str) -> bool:
    """A fixture (or a class holding one) whose decorator gives it a wider scope than a
    test. The decorators are not in a definition's own source segment, hence the walk."""
    return any(_BUILT_ONCE.search(ast.get_source_segment(source, decorator) or "")
               for inner in ast.walk(node) for decorator in
               getattr(inner, "decorator_list", []))


@lru_cache(maxsize=None)
def _tests_on_the_machine(path: Path) -> dict[str, bool]:
    """For a module that touches the machine: each test -> whether it does itself. Its
    local tests (a factory trained on the local cluster, bad input refused before anything
    runs) then run beside the group."""
    return _reaching(path, _touches)


@lru_cache(maxsize=None)
def _tests_sharing_a_fixture(path: Path) -> dict[str, bool]:
    """Each test of the module -> whether it uses a fixture the module builds once."""
    if not path.is_file() or not _BUILT_ONCE.search(path.read_text()):
        return {}
    return _reaching(path, _built_once)


def _test_of(rootpath: Path, nodeid: str) -> tuple[Path, str]:
    file, _, test = nodeid.partition("::")
    return rootpath / file, test.split("[")[0]


def on_the_machine(rootpath: Path, nodeid: str) -> bool:
    """Whether the test ``nodeid`` touches the emulated cluster (a test the reading above
    cannot place counts as touching it)."""
    path, test = _test_of(rootpath, nodeid)
    if not _touches_the_machine(path):
        return False
    try:
        return _tests_on_the_machine(path).get(test, True)
    except (SyntaxError, ValueError):
        return True


def sharing_a_fixture(rootpath: Path, nodeid: str) -> bool:
    """Whether the test ``nodeid`` uses a fixture its module builds once (a test the
    reading cannot place does not: it then only costs a second build)."""
    path, test = _test_of(rootpath, nodeid)
    try:
        return _tests_sharing_a_fixture(path).get(test, False)
    except (SyntaxError, ValueError):
        return False


def unit_of_work(rootpath: Path, nodeid: str) -> str | None:
    """The group the test ``nodeid`` is dealt in, or None for a unit of its own."""
    file = nodeid.partition("::")[0]
    if on_the_machine(rootpath, nodeid):
        return f"{CLUSTER_GROUP}:{file}"
    if sharing_a_fixture(rootpath, nodeid):
        return f"{SHARED_GROUP}:{file}"
    return None
