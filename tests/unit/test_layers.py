"""The layering is checked, not only written down: import-linter's contracts
(``.importlinter``) hold on the tree, no two modules import each other, and
docs/architecture.md shows the layers the contract checks."""

from __future__ import annotations

import configparser
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, need

BIN = Path(sys.executable).parent


def test_import_contracts_are_kept():
    need("lint-imports (the test extra: import-linter)", (BIN / "lint-imports").exists())
    done = subprocess.run([str(BIN / "lint-imports"), "--no-cache", "--no-logo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and ", 0 broken." in done.stdout, done.stdout + done.stderr


def _cycles(graph) -> list[list[str]]:
    """The import cycles among modules (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def _ignored(config: configparser.ConfigParser) -> list[tuple[str, str]]:
    """The acyclic contract's ignored imports (comments and blank lines aside)."""
    lines = config["importlinter:contract:acyclic"].get("ignore_imports", "").splitlines()
    return [tuple(part.strip() for part in line.split("->"))
            for line in lines if "->" in line and not line.strip().startswith("#")]


def test_no_two_modules_import_each_other():
    """What the package-level contracts cannot see: a module and its own package's
    ``__init__`` (which imports it), or two modules of workloads."""
    import grimp  # import-linter's import graph

    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    graph = grimp.build_graph("profiler", "workloads", cache_dir=None)
    for importer, imported in _ignored(config):
        graph.remove_import(importer=importer, imported=imported)
    assert _cycles(graph) == []


def test_architecture_page_shows_the_contracts_layers():
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layers = config["importlinter:contract:layers"]["layers"].split()
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```\n(profiler\.cli\b.*?)```", page, re.S)
    assert block, "docs/architecture.md: no block of the layers, top to bottom"
    assert block.group(1).split() == layers


def test_every_module_of_profiler_is_in_a_layer():
    """A new top-level module or package cannot escape the contract."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layered = {name for name in config["importlinter:contract:layers"]["layers"].split()
               if name != "|"}
    modules = {f"profiler.{m.name}" for m in pkgutil.iter_modules([str(ROOT / "profiler")])}
    assert modules - layered == set()
    assert layered - modules - {"workloads"} == set()


def _names(config: configparser.ConfigParser, contract: str) -> set[str]:
    return set(config[f"importlinter:contract:{contract}"]["source_modules"].split())


def test_every_module_of_the_agent_is_under_a_lightness_contract():
    """A module added to the agent cannot escape what keeps it small: each is a source of
    ``agent-light`` (with all it imports), of ``agent-command`` (the command), or part
    of the shipping package, which only the command imports."""
    import grimp

    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    light, command = _names(config, "agent-light"), _names(config, "agent-command")
    graph = grimp.build_graph("profiler", cache_dir=None)
    uncovered = [
        module for module in sorted(graph.find_descendants("profiler.agent") | {"profiler.agent"})
        if module not in command and not module.startswith("profiler.agent.shipping")
        and not any(module == name or module.startswith(name + ".") for name in light)]
    assert uncovered == []
    assert "profiler.agent.shipping" in config["importlinter:contract:agent-light"][
        "forbidden_modules"].split()
