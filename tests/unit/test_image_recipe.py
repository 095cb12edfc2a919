"""The image's recipe: its digest names its tag (same inputs, same tag; any input
changed, a new tag), the pins are the target's, and what it copies is what a node
imports (the import graph of the agent and the workloads)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from profiler.image import recipe
from tests.conftest import ROOT


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the recipe reads: the node's sources, the recipe's code, the pins."""
    for pattern in (*recipe.NODE_SOURCES, *recipe.RECIPE_CODE, "constraints.txt"):
        for path in ROOT.glob(pattern):
            if "__pycache__" not in path.parts:
                target = tmp_path / path.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    return tmp_path


def _tag(tree: Path, flavour: str = "torch", arch: str = "amd64") -> str:
    return recipe.make_recipe(flavour, arch, source_root=tree).tag("edgeprof-node")


def test_same_inputs_same_tag(tree):
    first = _tag(tree)
    assert _tag(tree) == first
    assert first.startswith("edgeprof-node:torch-amd64-")
    assert len(first.rsplit("-", 1)[1]) == 12


@pytest.mark.parametrize("changed", ["workloads/train.py", "profiler/agent/sampler.py",
                                     "edgeprof_hooks.py", "profiler/errors.py",
                                     "profiler/image/root.py", "constraints.txt"])
def test_any_input_changed_makes_a_new_tag(tree, changed):
    before = _tag(tree)
    with open(tree / changed, "a") as handle:
        handle.write("\n# changed\n" if changed != "constraints.txt" else "\ntqdm>=4\n")
    assert _tag(tree) != before


def test_a_file_outside_the_node_changes_nothing(tree):
    before = _tag(tree)
    (tree / "profiler" / "sweep").mkdir(parents=True)
    (tree / "profiler" / "sweep" / "grid.py").write_text("# the controller's\n")
    assert _tag(tree) == before


def test_flavour_and_arch_are_in_the_tag(tree):
    tags = [_tag(tree), _tag(tree, arch="arm64")]
    if importlib.util.find_spec("horovod") is not None:  # full copies this venv's build
        tags.append(_tag(tree, flavour="full"))
    names = [tag.split(":")[1].rsplit("-", 1) for tag in tags]
    assert [name for name, _ in names][:2] == ["torch-amd64", "torch-arm64"]
    assert len({digest for _, digest in names}) == len(tags)


def test_pins_are_the_targets_not_this_hosts():
    text = (ROOT / "constraints.txt").read_text()
    assert "torch==2.13.0+cpu" in recipe.target_constraints(text, "x86_64")
    assert "torch==2.9.1" in recipe.target_constraints(text, "aarch64")
    assert "torch==2.13.0+cpu" not in recipe.target_constraints(text, "aarch64")
    assert any(c.startswith("numpy") and "<1.24" in c
               for c in recipe.target_constraints(text, "aarch64"))


def test_full_for_arm64_is_refused_with_the_reason():
    with pytest.raises(recipe.ConfigError, match="aarch64 mxnet 1.9.1 does not import"):
        recipe.check_choice("full", "arm64")


def _closure(graph, roots: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """The project's modules ``roots`` import, however indirectly, and the outside
    packages they import."""
    todo = [m for m in graph.modules if m.startswith(roots)]
    seen, outside = set(todo), set()
    while todo:
        for imported in graph.find_modules_directly_imported_by(todo.pop()):
            top = imported.split(".")[0]
            if top not in ("profiler", "workloads"):
                outside.add(top)
            elif imported not in seen:
                seen.add(imported)
                todo.append(imported)
    return seen, outside


def test_the_image_holds_what_the_node_imports():
    import grimp  # import-linter's import graph

    graph = grimp.build_graph("profiler", "workloads", include_external_packages=True,
                              cache_dir=None)
    modules, outside = _closure(graph, ("profiler.agent", "workloads"))
    copied = set(recipe.file_digests(ROOT, recipe.NODE_SOURCES))
    for module in modules:
        path = module.replace(".", "/")
        assert {f"{path}.py", f"{path}/__init__.py"} & copied, module
    # PIL decodes a folder of images on the controller, before a sweep; urllib3 comes
    # with requests; edgeprof_hooks is copied as a file; the rest are the frameworks.
    wheels = {r.replace("-", "_").lower() for r in recipe.NODE_REQUIREMENTS}
    frameworks = {"torch", "mxnet", "horovod"}
    assert outside - set(sys.stdlib_module_names) - wheels - frameworks <= {
        "PIL", "urllib3", "edgeprof_hooks"}
