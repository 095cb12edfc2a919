"""A study planned again after its profile check (``plan.replanned``).

The first plan is made from the quotas in the profile file; the check then finds them
off on this host and writes new ones. On a slower host the new quotas are larger, fewer
cells fit a time dilation, and the first plan would overrun its ``--budget``: the
study is planned again on the quotas the check wrote. And whatever it measured, the
study is planned again at the pace measured (``study/pace.py``): the window and the
budget's estimate train each node at it. The check's measurement itself needs the
emulated cluster (tests/e2e); here its outcome is written the way it writes it
(``write_user_profile``, ``Check.as_record``) to a profiles file of the test's own.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiler.cluster.profiles import MAX_NODE_CORES, PACKAGED_PROFILES, load_catalog
from profiler.calibrate.profiles_file import write_user_profile
from profiler.study import STUDIES
from profiler.study.budget import CHECK_S
from profiler.study.estimate import grid_s
from profiler.study.pace import measured
from profiler.study.plan import StudySettings, plan, replanned

PARK = STUDIES["park2019"]
PROFILE = "pi3b-park2019"
BUDGET_S = 1800.0


def _slower(factor: float):
    """The packaged profile as a re-calibration on a host ``factor`` times slower
    writes it: every quota times ``factor`` (up to a node's most)."""
    packaged = load_catalog([PACKAGED_PROFILES]).profiles[PROFILE]
    return replace(
        packaged, cpu_cores=packaged.cpu_cores * factor,
        cpu_cores_by_model={m: q * factor for m, q in packaged.cpu_cores_by_model.items()},
        cpu_cores_dilated={m: {k: min(q * factor, MAX_NODE_CORES) for k, q in by_k.items()}
                           for m, by_k in packaged.cpu_cores_dilated.items()})


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """A profiles file of the test's own, holding the packaged profile to begin with."""
    path = tmp_path / "profiles.yaml"
    write_user_profile(_slower(1.0), path)
    monkeypatch.setenv("EDGEPROF_PROFILES", str(path))
    return path


def _checked(study_plan, action: str) -> None:
    study_plan.sweep.extra["profile_check"] = [
        {"profile": PROFILE, "model": "lenet-mlp", "speedup": 1.0, "action": action}]


def test_a_recalibration_plans_the_budget_again_on_the_new_quotas(profiles):
    settings = StudySettings(budget_s=BUDGET_S, repeats=3)
    first = plan(PARK, settings)
    assert first.estimate_s <= BUDGET_S - CHECK_S
    assert "first the profile pi3b-park2019 is checked" in first.describe()

    write_user_profile(_slower(3.0), profiles)  # what the check wrote
    _checked(first, "recalibrated")
    again = replanned(first, check_spent_s=300.0)

    # The first plan's cells on the new quotas: past the budget (fewer dilate).
    catalog, cluster = load_catalog(), first.sweep.cluster
    overrun_s = grid_s(PARK, first.sweep.cells, cluster.speed, PROFILE, catalog,
                       first.grid.val_samples, cluster.max_speedup)
    assert overrun_s > BUDGET_S - 300.0
    # Planned again: within what the check left of the budget, the checks kept, and
    # the check no longer announced (it ran).
    assert again.estimate_s <= BUDGET_S - 300.0
    assert again.sweep.extra["profile_check"] == first.sweep.extra["profile_check"]
    assert "first the profile" not in again.describe()
    assert again.sweep.extra["repeats"] == 3
    assert len(again.sweep.cells) < len(first.sweep.cells) or \
        again.sweep.extra["scale"] != first.sweep.extra["scale"]


def test_a_check_that_changed_nothing_keeps_the_plan(profiles):
    first = plan(PARK, StudySettings(budget_s=BUDGET_S))
    assert replanned(first, check_spent_s=60.0) is None  # no check recorded
    _checked(first, "none")  # nor any rate measured
    assert replanned(first, check_spent_s=60.0) is None


def test_a_check_that_leaves_no_room_is_refused_in_one_line(profiles):
    from profiler.errors import ConfigError

    first = plan(PARK, StudySettings(budget_s=600.0, options=PARK.parse(
        {"parts": ("table1",)})))
    write_user_profile(_slower(3.0), profiles)
    _checked(first, "recalibrated")
    # The 590 s the check took are what the budget kept for it (shown rounded).
    with pytest.raises(ConfigError, match=r"^--budget 10 min: .* \(plus 10 min for the "
                                          r"profile check\): give at least "):
        replanned(first, check_spent_s=590.0)


def _measured(study_plan, pace: float) -> None:
    """The check's records as it keeps them (``Check.as_record``), every model family
    of the profile at every dilation measured at ``pace`` times its board's rate,
    within the tolerance or not: nothing re-calibrated."""
    profile = load_catalog().profiles[PROFILE]
    study_plan.sweep.extra["profile_check"] = [
        {"profile": PROFILE, "model": model, "workload": f"{model} batch {rate.batch}",
         "speedup": k, "quota_cores": profile.cpu_cores_for(model, k),
         "board_samples_per_s": rate.samples_per_s,
         "samples_per_s": pace * rate.samples_per_s * k, "tolerance": 0.25,
         "action": "none", "new_quota_cores": None, "new_samples_per_s": None,
         "ratio": pace, "within": pace <= 1.25}
        for model, rate in profile.board_rates.items() for k in profile.speedups(model)]


def test_a_measured_pace_plans_the_window_again(profiles):
    options = PARK.parse({"parts": ("table1",), "devices": (1, 10)})
    first = plan(PARK, StudySettings(scale=0.01, options=options,
                                     cluster_options={"speedup": 2.0}))
    _measured(first, 2.0)
    again = replanned(first, check_spent_s=60.0)
    assert again is not None and again.settings.measured_paces[("lenet-mlp", 2.0)] == 2.0
    # The ten-device cell, raised to the window on the board's rate, trains twice the
    # samples at twice the pace (the one-device cell is at its dataset's cap here).
    ten = [next(c for c in p.sweep.cells if c.devices == 10) for p in (first, again)]
    assert ten[0].max_samples > 600  # raised in the first plan too
    assert ten[1].max_samples == pytest.approx(2 * ten[0].max_samples, abs=2)
    assert "the window and the estimate sized from the pace measured on this host: " \
        "lenet-cnn 2.00 x the board, " in again.describe()
    assert "lenet-mlp 2.00 x the board at speedup 2" in again.describe()
    assert "sized from the pace" not in first.describe()
    assert again.sweep.extra["profile_check"] == first.sweep.extra["profile_check"]


def test_a_recalibrated_check_paces_at_its_last_measurement():
    record = {"model": "lenet-mlp", "speedup": 4.0, "board_samples_per_s": 500.0,
              "samples_per_s": 4000.0, "action": "recalibrated",
              "new_samples_per_s": 2100.0}
    assert measured([record]) == {("lenet-mlp", 4.0): pytest.approx(1.05)}
    # Recorded before the rate at the new quota was: the board's, as re-calibrated.
    assert measured([{**record, "new_samples_per_s": None}]) == {}
    assert measured([{**record, "action": "none"}]) == {("lenet-mlp", 4.0): 2.0}


def test_the_budget_is_planned_again_at_the_pace_measured(profiles):
    first = plan(PARK, StudySettings(budget_s=BUDGET_S))
    _measured(first, 0.5)  # within nothing: nodes at half the board's rate
    again = replanned(first, check_spent_s=300.0)
    paces = again.settings.measured_paces
    # The first plan's cells at the pace measured: past what the check left of the
    # budget; planned again, within it.
    catalog, cluster = load_catalog(), first.sweep.cluster
    overrun_s = grid_s(PARK, first.sweep.cells, cluster.speed, PROFILE, catalog,
                       first.grid.val_samples, cluster.max_speedup, paces)
    assert overrun_s > BUDGET_S - 300.0
    assert again.estimate_s <= BUDGET_S - 300.0
    assert again.estimate_s == pytest.approx(grid_s(
        PARK, again.sweep.cells, cluster.speed, PROFILE, catalog, again.grid.val_samples,
        cluster.max_speedup, paces))


def test_the_families_a_new_plan_takes_in_are_checked_in_turn():
    """``plan._check_unchecked``: the first round checks every family; after a new plan
    took in ResNet (Table 4), only ResNet is checked, the records kept in order."""
    from types import SimpleNamespace

    from profiler.cell import CellConfig
    from profiler.study.plan import _check_unchecked
    from profiler.sweep.sweep import SweepSettings

    asked = []

    def check_sweep(sweep, mode, tolerance, report=None):
        models = sorted({c.model for c in sweep.cells})
        asked.append(models)
        sweep.extra["profile_check"] = [{"model": m, "speedup": 1.0} for m in models]

    lenet = CellConfig(model="lenet-mlp", layers=None, batch=64, devices=1)
    resnet = CellConfig(model="resnet", layers=32, batch=32, devices=10)
    first = SimpleNamespace(sweep=SweepSettings(cells=[lenet], extra={"study": "x"}),
                            profile_check="recalibrate", profile_tolerance=0.1)
    assert _check_unchecked(first, check_sweep, None)
    assert first.sweep.extra == {"study": "x", "profile_check": [
        {"model": "lenet-mlp", "speedup": 1.0}]}
    again = SimpleNamespace(sweep=SweepSettings(
        cells=[lenet, resnet], extra={"profile_check": first.sweep.extra["profile_check"]}),
        profile_check="recalibrate", profile_tolerance=0.1)
    assert _check_unchecked(again, check_sweep, None)
    assert asked == [["lenet-mlp"], ["resnet"]]
    assert [c["model"] for c in again.sweep.extra["profile_check"]] == ["lenet-mlp", "resnet"]
    assert not _check_unchecked(again, check_sweep, None)  # nothing left: no round
    assert len(asked) == 2


def test_a_check_that_measured_nothing_leaves_the_sweeps_record_as_it_was():
    from types import SimpleNamespace

    from profiler.cell import CellConfig
    from profiler.study.plan import _check_unchecked
    from profiler.sweep.sweep import SweepSettings

    plan = SimpleNamespace(sweep=SweepSettings(
        cells=[CellConfig(model="lenet-mlp", layers=None, batch=64, devices=1)],
        extra={"study": "x"}), profile_check="off", profile_tolerance=0.1)
    assert not _check_unchecked(plan, lambda sweep, *a, **k: None, None)
    assert plan.sweep.extra == {"study": "x"}  # no empty profile_check (sweep.json)
