"""Commands live beside what they do; what a layer above adds to one reaches it through
its package's registry, loaded by the ``edgeprof`` group (``profiler.cli``'s plugins):
calibration's profile check joins ``edgeprof sweep``, the study registry's sections
``edgeprof report``."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner

from profiler.cli import cli
from profiler.errors import EdgeprofError
from profiler.sweep import checks


def _options(command: str) -> list[str]:
    group_ctx = click.Context(cli)
    sweep = cli.get_command(group_ctx, command)
    return [p.opts[0] for p in sweep.get_params(click.Context(sweep, parent=group_ctx))
            if isinstance(p, click.Option)]


def test_sweep_takes_the_profile_check_after_resume():
    names = _options("sweep")
    at = names.index("--resume")
    assert names[at + 1:at + 3] == ["--profile-check", "--profile-tolerance"]
    assert "--profile-check" not in _options("run")


def _one_line(done) -> str:
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert done.exit_code == 2 and len(lines) == 1, done.output
    return lines[0]


def test_the_profile_check_refuses_a_cluster_without_profiles(tmp_path):
    done = CliRunner().invoke(cli, ["sweep", "--model", "lenet-mlp", "--dataset",
                                    "synthetic", "--max-samples", "256", "--out",
                                    str(tmp_path / "out"), "--profile-check", "refuse"])
    assert "--profile-check refuse checks a node profile" in _one_line(done)
    assert not (tmp_path / "out").exists()


def test_a_registered_check_gets_its_options_and_the_built_settings(monkeypatch, tmp_path):
    def toy(settings, values, say):
        raise EdgeprofError(f"toy {values['toy_level']}: {len(settings.cells)} cell(s)")

    monkeypatch.setitem(checks.CHECKS, "toy", checks.SweepCheck(  # the one line
        "toy", (click.Option(["--toy-level"], default=1, type=int),), toy))
    assert "--toy-level" in _options("sweep")
    done = CliRunner().invoke(cli, ["sweep", "--model", "lenet-mlp", "--dataset",
                                    "synthetic", "--max-samples", "256", "--batch", "32,64",
                                    "--out", str(tmp_path / "out"), "--toy-level", "3"])
    assert _one_line(done) == "edgeprof: error: toy 3: 2 cell(s)"
    assert not (tmp_path / "out").exists()


def test_report_knows_the_registered_studies(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"extra": {}}))
    done = CliRunner().invoke(cli, ["report", str(tmp_path), "--study", "nosuch"])
    assert _one_line(done) == "edgeprof: error: unknown study 'nosuch': use park2019, zhang2018"
