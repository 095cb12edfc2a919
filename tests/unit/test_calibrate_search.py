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
