"""The calibration's quota search (profiler.calibrate._search), on a made-up rate curve:
how it moves through noisy measurements, and how it gives up."""

from __future__ import annotations

import pytest

from profiler.calibrate import Measurement, NotSettled, _next_quota, _search


def test_interpolates_between_the_latest_measurements_on_either_side():
    # Measured on this machine (LeNet-CNN at twice its board rate, 111.2 samples/s): a
    # lucky 104.5 at 0.0403 cores, then 96.5 three times at 0.0420. Interpolating
    # towards the lucky one returned 0.0420 every time; the latest below moves on.
    steps = [Measurement(0.0464, 128.2, 1), Measurement(0.0403, 104.5, 1),
             Measurement(0.0420, 96.5, 1)]
    quota = _next_quota(steps, 111.2)
    assert 0.0425 < quota < 0.0464


def test_scales_the_quota_until_the_target_is_bracketed():
    assert _next_quota([Measurement(0.1, 50.0, 1)], 100.0) == pytest.approx(0.2)


def test_settles_on_a_noisy_curve_and_reports_each_step():
    noise = iter([1.08, 0.93, 1.0, 1.0, 1.0])
    lines = []

    def measure(workload, quota, target):
        return Measurement(quota, 1000 * quota * next(noise), 1)

    class Workload:
        label = "w"

    steps = _search(measure, Workload(), 100.0, 0.2, 0.05, lines.append)
    assert abs(steps[-1].samples_per_s / 100 - 1) <= 0.05
    assert len(lines) == len(steps) >= 2


def test_gives_up_after_the_steps_allowed():
    flip = iter([2.0, 0.5] * 10)

    def measure(workload, quota, target):
        return Measurement(quota, target * next(flip), 1)

    class Workload:
        label = "w"

    with pytest.raises(NotSettled, match="did not settle"):
        _search(measure, Workload(), 100.0, 0.2, 0.05, lambda line: None)


def test_a_workload_names_the_engine_the_board_was_measured_with():
    from profiler.calibrate import Workload
    from profiler.errors import ConfigError

    torch_cnn = Workload.parse("lenet-cnn", 64, "torch")
    assert torch_cnn.cell(640).engine == "torch" and torch_cnn.cell(640).devices == 1
    assert torch_cnn.label == "lenet-cnn batch 64 (torch)"
    assert Workload.parse("mobilenetv2", 32, "torch-ddp").model == "mobilenetv2"
    assert Workload.parse("resnet-32", 32).label == "resnet-32 batch 32"  # MXNet by default
    with pytest.raises(ConfigError, match="unknown workload 'mobilenetv2' for --engine mxnet"):
        Workload.parse("mobilenetv2", 32)


class _Table:
    """A fake measurer: the rates of a table, one a call, with the quotas asked for
    (the search logic only; the real measurement is tests/integration/test_calibrate.py)."""

    label = "w"

    def __init__(self, rates: list[float]):
        self.rates, self.quotas = iter(rates), []

    def __call__(self, workload, quota, target):
        self.quotas.append(quota)
        return Measurement(quota, next(self.rates), 2.5)


def test_a_larger_quota_measured_slower_is_measured_again_and_its_median_kept():
    # Issue 47's re-calibration: 0.0458 cores at 0.81 x the target, then the larger
    # quota at 0.66 x (23% slower). Measured again (0.94 x), the quota's rate is the
    # median, 0.80 x, and the next quota is chosen from it.
    table, lines = _Table([81.0, 66.0, 94.0, 101.0]), []
    steps = _search(table, table, 100.0, 0.0458, 0.05, lines.append)
    scaled = 0.0458 * 100 / 81
    assert table.quotas[:3] == [0.0458, pytest.approx(scaled), pytest.approx(scaled)]
    assert [s.samples_per_s for s in steps] == [81.0, 80.0, 101.0]
    assert steps[1].train_s == 5.0  # both repeats' training
    assert table.quotas[3] == pytest.approx(scaled * 100 / 80)  # from the median
    assert len(lines) == 4 and "66.00 samples/s at" in lines[1]
    assert "94.00 samples/s again at" in lines[2]


def test_a_larger_quota_slower_within_the_noise_is_not_measured_again():
    table = _Table([90.0, 88.0, 99.0])  # 0.0556 cores 2% slower than 0.05: noise
    steps = _search(table, table, 100.0, 0.05, 0.05, lambda line: None)
    assert len(table.quotas) == len(steps) == 3


def test_a_search_that_does_not_settle_names_the_inversion_and_the_repeats_noise():
    # 0.0500 cores at 80; 0.0625 at 60 then 66 (median 63, 10% apart), still slower
    # than 0.05 beyond the 5%; then above and below the target, never within 5%.
    table = _Table([80.0, 60.0, 66.0, 112.0, 89.0, 115.0, 120.0])
    with pytest.raises(NotSettled) as raised:
        _search(table, table, 100.0, 0.05, 0.05, lambda line: None)
    message = str(raised.value)
    assert "did not settle within 5% of 100 in 5 quotas (6 measurements)" in message
    assert ("not monotonic in the quota (0.0625 cores trained 63.00 samples/s, 0.0500 "
            "cores 80.00)") in message
    assert "repeats at one quota differed by up to 10%" in message
    assert len(raised.value.steps) == 5  # one per quota, the repeated one its median
    assert raised.value.steps[1].samples_per_s == 63.0


def test_a_search_swinging_across_the_target_names_the_repeats_noise():
    # 2 x, then 0.5 x, ...: each swing is too steep for a pace (x 4 for a quota x 2),
    # so the farther of the two is measured again, and the repeats differ wildly.
    flip = iter([2.0, 0.5] * 10)

    def measure(workload, quota, target):
        return Measurement(quota, target * next(flip), 1)

    with pytest.raises(NotSettled) as raised:
        _search(measure, _Table([]), 100.0, 0.2, 0.05, lambda line: None)
    assert "not monotonic" not in str(raised.value)
    assert "repeats at one quota differed by up to 300%" in str(raised.value)


def test_a_rate_jumping_beyond_its_quota_is_measured_again():
    # The profile check of 2026-11-29 on a quiet host: 1.61 x the board at 0.0949 cores,
    # then 0.71 x at 0.0590 and 0.86 x at 0.0706: from 0.0706 to 0.0949 the rate would
    # grow 1.87 x for 1.34 x the quota (log-log slope 2.1), which no pace does. The
    # farther from the target, 0.0949, is measured twice more (1.02, 0.98 x), the median
    # of the three taken (1.02 x: within 5%), and the search has settled there.
    table = _Table([70.7, 86.3, 102.0, 98.0])
    lines: list[str] = []
    steps = _search(table, table, 100.0, 0.0949, 0.05, lines.append,
                    first=Measurement(0.0949, 161.0, 2.5))
    assert table.quotas[2:] == [pytest.approx(0.0949)] * 2  # the ones measured again
    assert "102.00 samples/s again at 0.0949 cores" in lines[3]
    pooled = next(m for m in steps if m.quota_cores == pytest.approx(0.0949))
    assert pooled.samples_per_s == 102.0 and pooled.repeats == 3
    assert steps[-1] is pooled  # the latest step, within 5%: settled on the quota checked
    # Rates a few % apart at nearby quotas are noise, not a jump: not measured again.
    table = _Table([96.0])
    _search(table, table, 100.0, 0.05, 0.05, lambda line: None,
            first=Measurement(0.05, 90.0, 2.5))
    assert len(table.quotas) == 1


def test_a_recalibrated_check_records_the_rate_measured_at_its_new_quota(tmp_path):
    """The profile check's re-calibration (``check._check_one``) on a made-up curve: the
    record keeps the last search measurement's rate beside its quota, which a study
    plans on after the check (``study/pace.py``)."""
    from profiler.calibrate.check import _check_one
    from profiler.cluster.profiles import PACKAGED_PROFILES, load_catalog

    profile = load_catalog([PACKAGED_PROFILES]).profiles["pi3b-park2019"]
    board = profile.board_rates["lenet-mlp"].samples_per_s
    start = profile.cpu_cores_for("lenet-mlp", 1.0)
    measured: list[Measurement] = []

    def measure(workload, quota, target):
        # Twice the board's rate at the profile's quota, less than in proportion below.
        measured.append(Measurement(quota, 2 * board * (quota / start) ** 0.8, 1))
        return measured[-1]

    check, new = _check_one(profile, "lenet-mlp", 1.0, measure, "recalibrate", 0.25,
                            tmp_path / "profiles.yaml", lambda line: None)
    assert check.action == "recalibrated" and check.ratio == pytest.approx(2.0)
    assert len(measured) >= 2
    assert check.new_quota_cores == measured[-1].quota_cores
    assert check.new_samples_per_s == measured[-1].samples_per_s
    assert abs(check.new_samples_per_s / board - 1) <= 0.08  # RECALIBRATE_TOLERANCE
    assert check.as_record()["new_samples_per_s"] == check.new_samples_per_s
    assert new.cpu_cores_for("lenet-mlp") == pytest.approx(check.new_quota_cores, abs=1e-5)


def test_a_check_confirms_a_measurement_off_the_board_before_it_recalibrates(tmp_path):
    # One measurement 1.61 x the board, the next two at 1.02 and 0.97 x (a quiet host's
    # check, 2026-11-29): the median of three is within, and nothing is re-calibrated.
    from profiler.calibrate.check import CONFIRM_MEASUREMENTS, _check_one
    from profiler.cluster.profiles import PACKAGED_PROFILES, load_catalog

    profile = load_catalog([PACKAGED_PROFILES]).profiles["pi3b-park2019"]
    board = profile.board_rates["lenet-mlp"].samples_per_s
    quota = profile.cpu_cores_for("lenet-mlp", 1.0)
    rates = iter([1.61, 1.02, 0.97])
    quotas: list[float] = []

    def measure(workload, q, target):
        quotas.append(q)
        return Measurement(q, board * next(rates), 2.5)

    lines: list[str] = []
    check, same = _check_one(profile, "lenet-mlp", 1.0, measure, "recalibrate", 0.10,
                             tmp_path / "profiles.yaml", lines.append)
    assert quotas == [quota] * CONFIRM_MEASUREMENTS == [quota] * 3
    assert check.within and check.ratio == pytest.approx(1.02)
    assert check.action != "recalibrated" and same is profile
    assert not (tmp_path / "profiles.yaml").exists()
    assert any("measured 2 more times to confirm" in line for line in lines)
    # Confirmed off (all three): re-calibrated, from the median.
    rates = iter([1.61, 1.55, 1.58] + [1.0] * 10)
    quotas.clear()
    check, new = _check_one(profile, "lenet-mlp", 1.0, measure, "recalibrate", 0.10,
                            tmp_path / "profiles.yaml", lambda line: None)
    assert check.ratio == pytest.approx(1.58) and check.action == "recalibrated"


def test_a_recalibration_that_does_not_settle_takes_the_closest_within_twice_the_tolerance():
    from profiler.calibrate.check import _recalibrate

    def stepped(low: float, high: float):
        """A rate that jumps across the target at 0.06 cores: monotonic, never within
        5% (a host too busy for the search's tolerance)."""
        def measure(workload, quota, target):
            return Measurement(quota, low if quota < 0.06 else high, 2.5)
        return measure

    lines: list[str] = []
    found = _recalibrate(stepped(85.0, 118.0), _Table([]), 100.0, 0.05,
                         Measurement(0.05, 85.0, 2.5), 0.10, lines.append)
    assert found.samples_per_s == 85.0
    # The jump at 0.06 is measured again and holds (a pace that moves in steps): said.
    assert ("(0.0500 cores trained 0.85 x the target and 0.0692 cores 1.18 x, with no quota "
            "between them within: the host too busy for the search, or a pace that moves in "
            "steps); the closest, 0.0500 cores (0.85 x, outside the check's x/÷1.1), is "
            "taken") in lines[-1]
    # Off by more than twice the tolerance (the closest 0.75 x): refused.
    with pytest.raises(NotSettled):
        _recalibrate(stepped(75.0, 135.0), _Table([]), 100.0, 0.05,
                     Measurement(0.05, 75.0, 2.5), 0.10, lambda line: None)
