"""A study planned again after its profile check re-calibrated (``plan.replanned``).

The first plan is made from the quotas in the profile file; the check then finds them
off on this host and writes new ones. On a slower host the new quotas are larger, fewer
cells fit a time dilation, and the first plan would overrun its ``--budget``: the
study is planned again on the quotas the check wrote. The check's measurement itself
needs the emulated cluster (tests/e2e); here its outcome is written the way it writes
it (``write_user_profile``) to a profiles file of the test's own.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiler.cluster.profiles import MAX_NODE_CORES, PACKAGED_PROFILES, load_catalog
from profiler.calibrate.profiles_file import write_user_profile
from profiler.study import STUDIES
from profiler.study.budget import CHECK_S
from profiler.study.estimate import grid_s
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
    _checked(first, "none")
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
