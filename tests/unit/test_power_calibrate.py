"""``edgeprof cluster calibrate --power-from``: a board's power model fitted from a run.

The run is a fake series written here in a real agent's spool format: a Pi 5 whose
PMIC's board watts follow 2.8 + 6.9 x utilisation (its packaged model) with a
deterministic +-0.2 W wobble, while its CPU goes from idle to busy and back.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from profiler.agent import lineproto
from profiler.agent.spool import SpoolWriter
from profiler.calibrate.power import fit_power, fit_from_run
from profiler.cli import cli
from profiler.cluster.profiles import PACKAGED_PROFILES, load_catalog
from profiler.errors import ConfigError


def _run(folder, utilisations, watts_of=lambda u, i: 2.8 + 6.9 * u + 0.2 * (-1) ** i):
    writer = SpoolWriter(folder / "cells" / "c1" / "attempt-1" / "metrics" / "pi5",
                         {"node": "pi5", "host": "pi5"})
    for i, u in enumerate(utilisations):
        t_ms = 100_000 + 1000 * i
        writer.append([
            lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": 100.0 * u}, t_ms),
            lineproto.encode("power_pmic", {"role": "worker"},
                             {"board_w": watts_of(u, i), "rails_w": 1.0}, t_ms)])
    writer.close()
    return folder


RAMP = [i / 20 for i in range(21)] + [1.0] * 10 + [0.0] * 10


def test_least_squares_recovers_idle_and_full_watts():
    idle_w, full_w, r2 = fit_power([(0.0, 1.0), (0.5, 2.0), (1.0, 3.0)])
    assert (idle_w, full_w, r2) == pytest.approx((1.0, 3.0, 1.0))


def test_a_measured_run_gives_the_boards_model(tmp_path):
    fit = fit_from_run(_run(tmp_path / "sweep", RAMP))
    assert fit.model.idle_w == pytest.approx(2.8, abs=0.1)
    assert fit.model.full_w == pytest.approx(9.7, abs=0.1)
    assert fit.samples == len(RAMP) and fit.r2 > 0.95
    assert "r2" in fit.model.source and "--power-from" in fit.model.source


def test_the_cli_writes_the_model_into_the_profile(tmp_path):
    run = _run(tmp_path / "sweep", RAMP)
    to = tmp_path / "profiles.yaml"
    result = CliRunner().invoke(cli, ["cluster", "calibrate", "--profile", "pi5",
                                      "--power-from", str(run), "--to", str(to)])
    assert result.exit_code == 0, result.output
    assert "pi5: power idle 2.8" in result.output
    pi5 = load_catalog([PACKAGED_PROFILES, to]).profiles["pi5"]
    assert pi5.power.full_w == pytest.approx(9.7, abs=0.1)
    assert (pi5.link_mbit, pi5.cpu_cores) == (1000, 1.5)  # the rest of the profile kept


@pytest.mark.parametrize("utilisations, message", [
    ([0.5] * 30, "spans only 50% to 50%"),
    (RAMP[:5], "5 ticks with both power and CPU"),
])
def test_a_run_that_cannot_give_a_model_is_one_line_and_exit_2(tmp_path, utilisations,
                                                                message):
    run = _run(tmp_path / "sweep", utilisations)
    with pytest.raises(ConfigError, match=message):
        fit_from_run(run)
    result = CliRunner().invoke(cli, ["cluster", "calibrate", "--profile", "pi5",
                                      "--power-from", str(run), "--to",
                                      str(tmp_path / "p.yaml")])
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_quota_calibration_still_needs_its_workload():
    result = CliRunner().invoke(cli, ["cluster", "calibrate", "--profile", "x"])
    assert result.exit_code == 2 and "--workload and --samples-per-s are needed" in result.output
