"""The node providers' registry is the only place that knows them: the sweep, preflight,
the study and calibration import no provider module, and the CLI derives from it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler.cluster import PROVIDERS, cluster_settings, get_provider
from profiler.cluster.base import NodeScope
from profiler.errors import ConfigError
from tests.conftest import ROOT

PROVIDER_MODULES = ("profiler.cluster.emulated", "profiler.cluster.inventory",
                    "profiler.cluster.local", "profiler.cluster.swarm")
USERS = ("sweep", "study", "calibrate")


def _imports(path: Path, package: str) -> set[str]:
    """Every module ``path`` (a module of ``package``) imports, relative imports made
    absolute, at any depth (function-level imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("package", USERS)
def test_the_sweep_study_and_calibration_import_no_provider_module(package):
    for path in sorted((ROOT / "profiler" / package).rglob("*.py")):
        package = ".".join(path.relative_to(ROOT).parent.parts)
        named = {m for m in _imports(path, package)
                 if any(m == p or m.startswith(p + ".") for p in PROVIDER_MODULES)}
        assert not named, f"{path.relative_to(ROOT)} imports {sorted(named)}"


def test_the_ast_check_sees_relative_and_nested_provider_imports(tmp_path):
    """The check above can fail: the imports it must see are seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("from ..cluster.emulated import down\n"
                     "def f():\n    from ..cluster import inventory\n")
    assert {"profiler.cluster.emulated", "profiler.cluster.inventory"} <= _imports(
        probe, "profiler.sweep")


def test_cluster_option_help_names_every_provider():
    from profiler.cli import cli

    help_text = CliRunner().invoke(cli, ["sweep", "--help"]).output
    for name, settings in PROVIDERS.items():
        assert name in help_text and settings.help.split()[0] in help_text


def test_an_unknown_provider_and_options_of_another_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="unknown cluster 'mars': use one of local, "
                                          "emulated, inventory"):
        get_provider("mars")
    with pytest.raises(ConfigError, match="--inventory FILE goes with --cluster inventory"):
        cluster_settings("local", inventory=Path("hosts.ini"))
    with pytest.raises(ConfigError, match="--inventory FILE goes with --cluster inventory"):
        cluster_settings("inventory")
    with pytest.raises(ConfigError, match="--speedup 3 applies to the emulated cluster only"):
        cluster_settings("inventory", inventory=Path("hosts.ini"), speedup=3)


def test_each_provider_records_its_identity_options_and_nothing_of_the_others():
    assert cluster_settings("local").identity() == {"cluster": "local"}
    assert cluster_settings("emulated", profile="pi4", speedup=2).identity() == {
        "cluster": "emulated", "profile": "pi4", "speedup": 2}
    assert cluster_settings("inventory", inventory=Path("hosts.ini")).identity() == {
        "cluster": "inventory", "inventory": "hosts.ini"}
    assert cluster_settings("emulated", profile="pi4", speedup=2).label == \
        "emulated cluster (pi4, up to speedup 2)"


def test_the_options_come_from_the_providers_declarations():
    from profiler.cluster import declared_options

    options = declared_options()
    swarm = ["swarm_host", "swarm_image", "swarm_python", "swarm_mtu", "swarm_shm_mb",
             "swarm_limits", "swarm_mounts", "swarm_links"]
    assert list(options) == ["profile", "speedup", "inventory", *swarm]
    assert {name: owner.name for name, (_, owner) in options.items()} == {
        "profile": "emulated", "speedup": "emulated", "inventory": "inventory",
        **{name: "swarm" for name in swarm}}
    with pytest.raises(ConfigError, match="--speedup fast: give a factor"):
        options["speedup"][0].parse("fast")
    with pytest.raises(ConfigError, match="--swarm-mtu 100: give the overlay's MTU"):
        options["swarm_mtu"][0].parse("100")
    with pytest.raises(ConfigError, match="--swarm-mounts venv: give absolute paths"):
        options["swarm_mounts"][0].parse("venv")


def test_node_scope_round_trips_and_reads_an_older_state_file():
    scope = NodeScope(interfaces=("eth0",), netns="edgeprof-n0", cgroup_version=1,
                      cgroup_cpu="/a", cgroup_cpu_quota="/b", cgroup_memory="/c",
                      board_cores=4)
    assert NodeScope.from_dict(json.loads(json.dumps(scope.to_dict()))) == scope
    # /run/edgeprof/cluster.json of a cluster brought up before the scope was typed.
    older = {"netns": "edgeprof-n0", "interfaces": "eth0", "board_cores": "4",
             "cgroup_version": "1", "cgroup_cpu": "/a", "cgroup_cpu_quota": "/b",
             "cgroup_memory": "/c"}
    assert NodeScope.from_dict(older) == scope
    assert NodeScope.from_dict({}) == NodeScope()


def test_remote_exec_on_a_node_imports_no_provider_dependencies():
    """``python -m profiler.cluster.remote_exec`` wraps every process on a real node: the
    registry it imports with its package must not pull in YAML or the engines."""
    code = ("import sys; import profiler.cluster.remote_exec; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('yaml', 'numpy', 'click', 'psutil') or m.startswith('profiler.engines')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
