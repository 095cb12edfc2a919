"""``edgeprof cluster calibrate`` for real: one-device cells on a one-node emulated cluster.

The "board" here is this machine's own LeNet-MLP at a quota of 0.15 cores: the test
measures that rate once, then asks calibrate to find a quota that reproduces it from the
pi3b profile's 0.3 cores, and checks the profile it writes reads back and that the
quota found trains at the rate asked for (the training rate, not start-up).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from profiler.errors import ClusterError
from tests.conftest import ROOT, need_binary, need_root

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
# The search is what is tested, not this host's steadiness: in a whole-suite run one
# measurement to the next moved by up to 20% at the same quota (the search then went
# 1.172, 1.214 and failed at 15%), alone by a few %.
TOLERANCE = "0.25"
MEASURE_S = "3"


def _calibrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*EDGEPROF, "cluster", "calibrate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=500)


@pytest.fixture(scope="module")
def no_cluster():
    need_root()
    from profiler.cluster import emulated
    for binary in emulated.REQUIRED_BINARIES:
        need_binary(binary)
    try:
        emulated.attach()
    except ClusterError:  # none is up
        yield
        return
    emulated.down()  # an idle cluster another test left: calibration refuses to rebuild it
    yield


def test_calibrate_finds_the_quota_of_a_rate_and_writes_the_profile(no_cluster, tmp_path):
    from profiler.calibrate import Workload, _Measurer
    from profiler.cluster.profiles import load_catalog

    base = load_catalog().profiles["pi3b"]
    # 3 s measurements instead of the default 8 s (the test's 66 s -> ~35 s); the tolerance
    # above already allows for a busy host. The reference's expected rate is about what
    # LeNet-MLP trains at 0.15 cores here.
    reference = _Measurer(tmp_path / "ref", base, train_s=float(MEASURE_S))(
        Workload("lenet-mlp", None, 32), 0.15, 1200)
    print("reference at 0.15 cores:", reference)
    target = round(reference.samples_per_s)
    out = tmp_path / "profiles.yaml"
    done = _calibrate("--profile", "board-x", "--workload", "lenet-mlp", "--batch", "32",
                      "--samples-per-s", str(target), "--check-workload", "lenet-cnn",
                      "--check-samples-per-s", "500", "--tolerance", TOLERANCE,
                      "--measure-s", MEASURE_S, "--to", str(out))
    assert done.returncode == 0, done.stderr
    # One line a quota tried; a quota measured slower than a smaller one is measured
    # again (" again at"), which is not another quota.
    steps = [line for line in done.stderr.splitlines()
             if line.startswith("lenet-mlp") and " again at " not in line]
    assert 2 <= len(steps) <= 5, done.stderr
    assert "check lenet-cnn" in done.stderr and "board-x: cpu_cores" in done.stdout
    profile = yaml.safe_load(out.read_text())["profiles"]["board-x"]
    # Link and memory come from the base; the quota from the measurement. The rate is
    # not strictly proportional to the quota (CFS throttling), so only a range is sure.
    assert profile["link_mbit"] == base.link_mbit and profile["memory_mb"] == base.memory_mb
    assert 0.06 <= profile["cpu_cores"] <= 0.3, profile
    calibration = profile["calibration"]["cpu_cores"]
    assert abs(calibration["samples_per_s"] / target - 1) <= float(TOLERANCE)
    assert calibration["check_samples_per_s"] > 0
    # The file is a profiles file edgeprof reads.
    catalog = load_catalog([out])
    assert catalog.profiles["board-x"].cpu_cores == profile["cpu_cores"]

    # The CNN gets a quota of its own, and one for twice its rate (time dilation): the
    # profile keeps everything else.
    cnn_target = round(done_rate(done.stderr, "check lenet-cnn") * 0.6)
    model = _calibrate("--profile", "board-x", "--model-quota", "--workload", "lenet-cnn",
                       "--batch", "32", "--samples-per-s", str(cnn_target), "--dilations",
                       "2", "--tolerance", TOLERANCE, "--measure-s", MEASURE_S,
                       "--to", str(out))
    assert model.returncode == 0, model.stderr
    assert "board-x: cpu_cores_by_model.lenet-cnn" in model.stdout
    written = yaml.safe_load(out.read_text())["profiles"]["board-x"]
    assert written["cpu_cores"] == profile["cpu_cores"]  # untouched
    cnn = written["cpu_cores_by_model"]["lenet-cnn"]
    assert cnn < profile["cpu_cores"]  # 60% of the rate it had at cpu_cores
    doubled = written["cpu_cores_dilated"]["lenet-cnn"][2.0]
    assert cnn < doubled <= 2.2 * cnn, written  # about twice the quota, never much more
    board = load_catalog([out]).profiles["board-x"]
    assert board.cpu_cores_for("lenet-cnn") == cnn and board.cpu_cores_for("lenet-mlp") == \
        profile["cpu_cores"]
    assert board.cpu_cores_for("lenet-cnn", 2.0) == doubled and board.speedups("lenet-cnn") \
        == [1.0, 2.0]
    # What each quota was calibrated to, for the host check (profiler.calibrate.check).
    assert {m: (r.batch, r.samples_per_s) for m, r in board.board_rates.items()} == {
        "lenet-mlp": (32, target), "lenet-cnn": (32, cnn_target)}


def done_rate(stderr: str, prefix: str) -> float:
    """The samples/s of the report line starting with ``prefix``."""
    line = next(ln for ln in stderr.splitlines() if ln.startswith(prefix))
    return float(line.split(": ", 1)[1].split()[0])


@pytest.mark.parametrize("args, words", [
    (["--workload", "vgg-16", "--samples-per-s", "10"], ["unknown workload 'vgg-16'"]),
    (["--workload", "lenet-mlp", "--samples-per-s", "10", "--check-workload", "lenet-cnn"],
     ["go together"]),
    (["--workload", "lenet-mlp", "--samples-per-s", "0"], ["a number > 0"]),
    (["--workload", "lenet-mlp", "--samples-per-s", "10", "--base", "pi9"],
     ["unknown base profile 'pi9'"]),
    (["--workload", "lenet-cnn", "--samples-per-s", "10", "--model-quota"],
     ["--model-quota adds to an existing profile", "'x' is none"]),
    (["--workload", "lenet-mlp", "--samples-per-s", "10", "--dilations", "0.5"],
     ["--dilations 0.5", "above 1"]),
    (["--workload", "lenet-mlp", "--samples-per-s", "10", "--measure-s", "0.2"],
     ["--measure-s 0.2", "at least 1"]),
])
def test_bad_calibration_input_is_one_line(args, words, tmp_path):
    done = _calibrate("--profile", "x", "--to", str(tmp_path / "p.yaml"), *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not (tmp_path / "p.yaml").exists()
