"""Plugins from installed distributions (``profiler.plugins``): found, checked, refused.

Each test writes small distributions as pip installs them (``tests.support.plugin_dist``)
into a folder put on ``sys.path``, and reads them through a fresh copy of a real
registry (``Registry.fresh``: this process already loaded its plugins). A plugin that
cannot be used is left out with one line naming its distribution and the fix; the
built-ins and the other plugins stay; naming it is that line, exit 2 from the CLI.
tests/integration/test_plugin_distribution.py installs one with pip and sweeps with it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

import profiler.engines
import profiler.study
from profiler import plugins
from profiler.agent import collectors
from profiler.cli_errors import RegistryChoice, UsageFailure
from profiler.cluster import PROVIDERS
from profiler.engines import ENGINES
from profiler.errors import PluginError
from profiler.study import STUDIES
from tests.conftest import ROOT
from tests.support.plugin_dist import write_installed

GOOD_ENGINE = """
    from profiler.engines.pytorch import TorchDDPEngine

    class SoloEngine(TorchDDPEngine):
        name = "ddp-solo"
        description = "torch-ddp under another name"

    SOLO = SoloEngine()
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on ``sys.path`` to install into; the modules imported from it are
    forgotten after the test."""
    for registry in (ENGINES, PROVIDERS, STUDIES, collectors.PLUGINS):
        len(registry)  # loaded before: this process's registries do not see the folder
    before = set(sys.modules)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in set(sys.modules) - before:
        if getattr(sys.modules[name], "__file__", "") and \
                sys.modules[name].__file__.startswith(str(tmp_path)):
            del sys.modules[name]


def _engine_dist(site, module: str, text: str, point: str, value: str,
                 name: str = "edgeprof-bad") -> None:
    write_installed(site, name, {"edgeprof.engines": {point: value}}, {module: text})


def test_an_engine_plugin_loads_on_the_first_lookup_once(site, monkeypatch):
    write_installed(site, "edgeprof-solo", {"edgeprof.engines": {
        "ddp-solo": "edgeprof_solo:SoloEngine"}}, {"edgeprof_solo": GOOD_ENGINE})
    calls = []
    real = plugins.entry_points
    monkeypatch.setattr(plugins, "entry_points", lambda **kw: calls.append(kw) or real(**kw))
    registry = ENGINES.fresh()
    assert calls == []  # made, not looked up
    assert registry["ddp-solo"].name == "ddp-solo" and "mxnet" in registry
    assert list(registry)[:len(ENGINES)] == list(ENGINES)  # the built-ins first, in order
    assert registry.origin("ddp-solo") == "edgeprof-solo 0.1"
    assert registry.distribution("ddp-solo") == "edgeprof-solo"
    assert registry.origin("mxnet") is None and registry.broken() == {}
    assert calls == [{"group": "edgeprof.engines"}]  # once


def test_an_entry_point_may_name_an_instance(site):
    write_installed(site, "edgeprof-solo", {"edgeprof.engines": {
        "ddp-solo": "edgeprof_solo:SOLO"}}, {"edgeprof_solo": GOOD_ENGINE})
    registry = ENGINES.fresh()
    assert registry["ddp-solo"] is sys.modules["edgeprof_solo"].SOLO


BAD_ENGINES = {
    "does not import": ("import edgeprof_not_there\n", "bad", "edgeprof_bad:Bad",
                        ["does not load (edgeprof_bad:Bad: ModuleNotFoundError: No module "
                         "named 'edgeprof_not_there')", "pip uninstall edgeprof-bad"]),
    "raises on import": ("raise RuntimeError('no GPU here\\nsecond line')\n", "bad",
                         "edgeprof_bad:Bad", ["RuntimeError: no GPU here)"]),
    "names nothing": ("X = 1\n", "bad", "edgeprof_bad:Bad", ["AttributeError"]),
    "a function": ("def bad():\n    pass\n", "bad", "edgeprof_bad:bad",
                   ["names edgeprof_bad:bad, a function, not a "
                    "profiler.engines.base.Engine subclass or instance: point its entry "
                    "point at"]),
    "another class": ("class Bad:\n    name = 'bad'\n", "bad", "edgeprof_bad:Bad",
                      ["the class Bad, not a profiler.engines.base.Engine"]),
    "another name": (GOOD_ENGINE, "solo", "edgeprof_bad:SoloEngine",
                     ["names an engine called 'ddp-solo': give the entry point its engine's "
                      "name"]),
    "fails to build": ("from profiler.engines.base import Engine\n"
                       "class Bad(Engine):\n    name = 'bad'\n"
                       "    def __init__(self, size):\n        pass\n",
                       "bad", "edgeprof_bad:Bad",
                       ["does not build (edgeprof_bad:Bad(): TypeError", "no arguments, or name an "
                        "instance"]),
}


@pytest.mark.parametrize("case", BAD_ENGINES)
def test_a_plugin_that_cannot_be_used_is_one_line_and_leaves_the_rest(site, case, caplog):
    text, point, value, said = BAD_ENGINES[case]
    _engine_dist(site, "edgeprof_bad", text, point, value)
    write_installed(site, "edgeprof-solo", {"edgeprof.engines": {
        "ddp-solo": "edgeprof_solo:SoloEngine"}}, {"edgeprof_solo": GOOD_ENGINE})
    registry = ENGINES.fresh()
    with caplog.at_level(logging.WARNING, logger="profiler.plugins"):
        assert point not in registry
    problem = registry.problem(point)
    assert problem is not None and "\n" not in problem, problem
    assert problem.startswith(f"plugin engine {point!r} of edgeprof-bad 0.1 ")
    for part in said:
        assert part in problem
    assert caplog.messages == [problem]  # said once, when the registry loads
    assert set(ENGINES) | {"ddp-solo"} == set(registry)  # the others all load
    with pytest.raises(PluginError) as raised:
        registry.refuse_broken(["mxnet", point])
    assert str(raised.value) == problem
    registry.refuse_broken(["mxnet", "ddp-solo", "no-such-engine"])  # not plugins left out


def test_a_built_in_name_stays_the_built_in(site):
    _engine_dist(site, "edgeprof_bad", GOOD_ENGINE.replace('"ddp-solo"', '"mxnet"'),
                 "mxnet", "edgeprof_bad:SoloEngine")
    registry = ENGINES.fresh()
    assert registry["mxnet"] is ENGINES["mxnet"]
    assert registry.broken() == {"mxnet": (
        "plugin engine 'mxnet' of edgeprof-bad 0.1 has the name of a built-in engine: "
        "rename it (its entry point and its name), or pip uninstall edgeprof-bad")}
    registry.refuse_broken(["mxnet"])  # the built-in is what the user names


def test_two_distributions_with_one_name(site):
    write_installed(site, "edgeprof-solo", {"edgeprof.engines": {
        "ddp-solo": "edgeprof_solo:SoloEngine"}}, {"edgeprof_solo": GOOD_ENGINE})
    _engine_dist(site, "edgeprof_twin", GOOD_ENGINE, "ddp-solo", "edgeprof_twin:SoloEngine",
                 name="edgeprof-twin")
    registry = ENGINES.fresh()
    assert "ddp-solo" in registry
    first = registry.origin("ddp-solo")
    second = ({"edgeprof-solo 0.1", "edgeprof-twin 0.1"} - {first}).pop()
    assert registry.broken() == {"ddp-solo": (
        f"plugin engine 'ddp-solo' of {second} has the name of an engine of {first}: "
        "uninstall one of the two distributions, or rename one")}


def test_a_provider_plugin_is_its_settings_class(site):
    write_installed(site, "edgeprof-box", {"edgeprof.providers": {
        "box": "edgeprof_box:BoxSettings", "box-made": "edgeprof_box:MADE"}},
        {"edgeprof_box": """
            from profiler.cluster.local import LocalSettings

            class BoxSettings(LocalSettings):
                name = "box"
                help = "a box"

            MADE = BoxSettings()
        """})
    registry = PROVIDERS.fresh()
    assert registry["box"] is sys.modules["edgeprof_box"].BoxSettings
    assert "not a profiler.cluster.base.ClusterSettings subclass: point its entry point " \
           "at a profiler.cluster.base.ClusterSettings subclass" in registry.problem("box-made")
    assert registry.problem("box-made").startswith("plugin node provider 'box-made' of ")


def test_a_study_plugin_is_built_once(site):
    write_installed(site, "edgeprof-toy", {"edgeprof.studies": {
        "toy": "edgeprof_toy:Toy"}}, {"edgeprof_toy": """
            from profiler.study.base import Study

            class Toy(Study):
                name = "toy"
                description = "A study from a plugin."
        """})
    registry = STUDIES.fresh()
    assert registry["toy"] is registry["toy"] and registry["toy"].name == "toy"
    assert list(registry) == [*STUDIES, "toy"]


def test_collector_plugins_are_built_after_the_built_ins_and_must_not_reuse_their_fields(
        site, monkeypatch):
    builtin = collectors.REGISTRY[0].FIELDS[0]
    write_installed(site, "edgeprof-probes", {"edgeprof.collectors": {
        "uptime": "edgeprof_probes:Uptime", "clash": "edgeprof_probes:Clash",
        "silent": "edgeprof_probes:Silent"}}, {"edgeprof_probes": f"""
            from profiler.agent.collectors import Collector, Field

            class Uptime(Collector):
                FIELDS = (Field("uptime", "seconds", "s", "since boot"),)

                def collect(self):
                    return [("uptime", {{}}, {{"seconds": 1.0}})]

            class Clash(Collector):
                FIELDS = (Field({builtin.measurement!r}, {builtin.name!r}, "%", "mine"),)

            class Silent(Collector):
                pass
        """})
    registry = collectors.PLUGINS.fresh()
    assert list(registry) == ["uptime"]
    assert registry.problem("clash") == (
        f"plugin collector 'clash' of edgeprof-probes 0.1 writes {builtin.measurement}."
        f"{builtin.name}, a field of the built-in collector {collectors.REGISTRY[0].__name__}:"
        " give its points a measurement of their own")
    assert "says no FIELDS" in registry.problem("silent")
    # An agent builds the built-ins, then the plugins.
    monkeypatch.setattr(collectors.base, "REGISTRY", [])
    monkeypatch.setattr(collectors.base, "PLUGINS", registry)
    built = collectors.build(None, None)
    assert [type(c).__name__ for c in built] == ["Uptime"]


def test_a_named_broken_plugin_is_one_line_from_each_lookup(site, monkeypatch):
    _engine_dist(site, "edgeprof_bad", "import edgeprof_not_there\n", "bad", "edgeprof_bad:Bad")
    write_installed(site, "edgeprof-badstudy", {"edgeprof.studies": {
        "badstudy": "edgeprof_badstudy:Nope"}}, {"edgeprof_badstudy": ""})
    engines, studies = ENGINES.fresh(), STUDIES.fresh()
    monkeypatch.setattr(profiler.engines, "ENGINES", engines)
    monkeypatch.setattr(profiler.study, "STUDIES", studies)
    line = engines.problem("bad")
    with pytest.raises(PluginError, match="^plugin engine 'bad' of edgeprof-bad 0.1 does"):
        profiler.engines.get_engine("bad")
    with pytest.raises(PluginError, match="^plugin study 'badstudy' of edgeprof-badstudy"):
        profiler.study.get_study("badstudy")
    with pytest.raises(profiler.engines.ConfigError, match="unknown engine 'nope'"):
        profiler.engines.get_engine("nope")
    # A choice of the CLI (study's and calibration's --engine).
    choice = RegistryChoice(engines, engines.problem)
    assert "ddp-solo" not in choice.choices and "mxnet" in choice.choices
    with pytest.raises(UsageFailure, match="^plugin engine 'bad'"):
        choice.convert("bad", None, None)
    with pytest.raises(click.BadParameter):
        choice.convert("nope", None, None)
    # edgeprof run --engine bad: exit 2, the one line.
    from profiler.sweep import cli as sweep_cli  # the sweep command, loaded
    from profiler.cli import cli

    monkeypatch.setattr(sweep_cli, "ENGINES", engines)
    result = CliRunner().invoke(cli, ["run", "--engine", "bad", "--model", "lenet-mlp",
                                      "--no-agent"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == f"edgeprof: error: {line}"
    # edgeprof study badstudy: the same.
    result = CliRunner().invoke(cli, ["study", "badstudy", "--estimate"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"edgeprof: error: {studies.problem('badstudy')}")


def test_no_registry_loads_when_its_module_is_imported():
    """Importing the registries, the grid, the study and the report reads no entry
    point; the first lookup of one registry reads its group's only."""
    code = """
import importlib.metadata as metadata, json
calls = []
real = metadata.entry_points
metadata.entry_points = lambda **kw: calls.append(kw["group"]) or real(**kw)
import profiler.engines, profiler.cluster, profiler.study, profiler.agent.collectors
import profiler.sweep.grid, profiler.sweep.sweep, profiler.report.cli, profiler.report.build
before = list(calls)
profiler.engines.get_engine("mxnet")
print(json.dumps([before, calls]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert json.loads(out.splitlines()[-1]) == [[], ["edgeprof.engines"]]
