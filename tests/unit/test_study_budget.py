"""``edgeprof study NAME --budget``: the scale per part chosen from the estimate
(profiler/study/budget.py), and the command's plan."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from profiler.cli import cli
from profiler.errors import ConfigError
from profiler.study.budget import SCALES, choose, parse_duration_s

# A fake estimate: each part's seconds at scale 1, linear in the scale, plus a fixed
# minimum (start-up, the floor of steps).
FULL_S = {"cheap": 600.0, "dear": 6000.0, "huge": 60000.0}


def _part_s(part, scale):
    return 30.0 + FULL_S[part] * scale


def test_durations_read_as_seconds_and_bad_ones_are_refused():
    assert parse_duration_s("30m") == 1800
    assert parse_duration_s("1h") == 3600
    assert parse_duration_s("1h30m") == 5400
    assert parse_duration_s("90s") == 90
    assert parse_duration_s("45") == 45
    for bad in ("", "soon", "30x", "0", "1h30", "-5m"):
        with pytest.raises(ConfigError, match="--budget"):
            parse_duration_s(bad)


def test_a_budget_that_fits_everything_runs_every_part_at_scale_1():
    choice = choose(["cheap", "dear"], _part_s, budget_s=7200)
    assert choice.scale() == {"cheap": 1.0, "dear": 1.0} and not choice.left_out


def test_a_smaller_budget_stops_the_dear_part_and_lets_the_cheap_one_climb_on():
    choice = choose(["cheap", "dear"], _part_s, budget_s=1800)
    # Round robin: both to 0.2 (150 + 1230 s); dear to 0.5 would not fit (3030 s), cheap
    # to 0.5 does (330 s), to 1 it would not (630 + 1230 > 1800).
    assert choice.scale() == {"cheap": 0.5, "dear": 0.2}
    assert sum(p.estimate_s for p in choice.kept) <= 1800
    assert "cheap 0.5 (6 min), dear 0.2 (20 min)" in choice.notes()[0]


def test_a_part_that_cannot_fit_at_its_minimum_is_left_out_and_said():
    def part_s(part, scale):  # "huge" needs 2 h at its minimum steps
        return 7200.0 + FULL_S[part] * scale if part == "huge" else _part_s(part, scale)

    choice = choose(["huge", "cheap"], part_s, budget_s=1800, reserved_s=240)
    assert [p.part for p in choice.left_out] == ["huge"]
    assert choice.scale() == {"cheap": 1.0}
    assert choice.recorded() == {"budget_s": 1800, "budget_left_out": ["huge"]}
    notes = choice.notes()
    assert "4 min of it kept for the profile check" in notes[0]
    assert notes[1] == "left out to fit: huge (at least 2 h 00 min)"


def test_a_rung_without_data_stops_that_part():
    choice = choose(["cheap"], lambda p, s: None if s > 0.05 else _part_s(p, s), 7200)
    assert choice.scale() == {"cheap": 0.05}


def test_a_budget_too_small_for_anything_is_one_line():
    with pytest.raises(ConfigError) as raised:
        choose(["cheap", "dear"], _part_s, budget_s=20)
    assert "\n" not in str(raised.value) and "give at least 30 s" in str(raised.value)
    assert SCALES[-1] < 0.001  # the floor: below every cell's minimum steps


def test_the_command_prints_the_chosen_scales_and_refuses_bad_budgets():
    """``--estimate`` on the local cluster runs nothing (and needs no root)."""
    runner = CliRunner()
    result = runner.invoke(cli, ["study", "park2019", "--budget", "30m", "--estimate",
                                 "--cluster", "local", "--devices", "1,2"])
    assert result.exit_code == 0, result.output
    assert "--budget 30 min: chosen from the estimate, table1 " in result.output
    for args, says in ((["--budget", "30m", "--scale", "0.01"], "not both"),
                       (["--budget", "soon"], "give a duration"),
                       (["--budget", "5s"], "give at least")):
        result = runner.invoke(cli, ["study", "park2019", "--estimate", "--cluster", "local",
                                     *args])
        assert result.exit_code == 2 and says in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1


def test_the_spread_benchmarks_rule_gives_the_fewest_steps_that_hold_from_there_on():
    """benchmarks/bench_ratio_spread.py: a coefficient of variation within a tenth of the
    band's width (0.045 for 1.25), from the fewest steps on."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_ratio_spread.py"
    spec = importlib.util.spec_from_file_location("bench_ratio_spread", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def record(per_sample_s, steps):
        return {"robust_s_per_sample": per_sample_s, "syncs_per_worker": steps,
                "epoch_s": [1.0], "status": "ok"}

    def row(steps, n_device_s):
        pairs = [(record(s, steps), record(1.0, steps)) for s in n_device_s]
        return bench.spread_row("lenet-mlp", 0.01, pairs)

    rows = [row(4, [2.0, 2.5, 3.0]), row(9, [2.0, 2.1, 2.3]), row(18, [2.0, 2.05, 2.1]),
            row(36, [2.0, 2.02, 2.04])]
    assert [r["well_inside"] for r in rows] == [False, False, True, True]
    assert 0.045 < rows[1]["cv"] < 0.075 and rows[2]["cv"] < 0.045  # 0.072, 0.024
    assert rows[2]["median"] == 2.05 and abs(rows[2]["spread"] - 0.1 / 2.05) < 1e-9
    assert bench.fewest_steps(rows) == 18
    assert bench.fewest_steps(rows[:2]) is None


def test_the_reports_environment_names_the_scale_of_every_part(tmp_path):
    from types import SimpleNamespace

    from profiler.report.build import environment

    sweep = SimpleNamespace(
        identity={"cluster": "emulated"}, records=[], sweep_id="s", path=tmp_path,
        settings={"versions": {}, "extra": {
            "study": "park2019", "scale": {"table1": 0.1, "figure6": 0.02},
            "method": "scripts", "budget_s": 1800.0, "budget_left_out": ["figure5"]}})
    assert environment(sweep)["study"] == (
        "park2019 at scale table1 0.1, figure6 0.02 of its data, chosen for --budget "
        "1800 s, method scripts")


def test_a_study_without_parts_gets_one_scale():
    from profiler.cell import CellConfig
    from profiler.study import Grid, Study, StudySettings, plan

    class Whole(Study):
        name = "whole"

        def grid(self, scale, options, engine, available):
            assert isinstance(scale, float)
            samples = max(192, round(60000 * scale))
            return Grid([CellConfig(model="lenet-mlp", layers=None, batch=64, devices=d,
                                    max_samples=samples, dataset="synthetic")
                         for d in (1, 2)], val_samples=200)

    small = plan(Whole(), StudySettings(cluster="local", budget_s=60))
    big = plan(Whole(), StudySettings(cluster="local", budget_s=3600))
    assert small.sweep.extra["scale"] < big.sweep.extra["scale"] == 1.0
    assert small.estimate_s <= 60 and small.sweep.extra["budget_left_out"] == []
    assert "chosen from the estimate, scale " in small.describe()


def test_the_keeper_starts_a_cell_only_when_it_ends_within_the_budget_at_the_runs_pace():
    from profiler.study.budget import Keeper

    now = [0.0]
    keeper = Keeper(100.0, lambda cell: 20.0, clock=lambda: now[0])
    assert keeper("a") is None  # 20 s of 100 left
    now[0] = 40.0  # it took twice its estimate
    keeper.observe({})
    assert keeper.pace == 2.0
    # 60 s left, the next needs 20 x 2 = 40: it starts, and takes 50 s.
    assert keeper("b") is None
    now[0] = 90.0
    keeper.observe({})
    assert keeper.pace == 90.0 / 40.0
    why = keeper("c")  # 10 s left for 20 x 2.25
    assert why == "the budget is spent (10 s left, a cell needs about 45 s)"
    keeper.observe({})  # nothing was running: the pace stays
    assert keeper.pace == 90.0 / 40.0
