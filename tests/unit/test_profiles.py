"""Node profiles: the packaged file, user overrides, mixes, CPU scaling, cgroup detection."""

from __future__ import annotations

import pytest
import yaml

from profiler.cluster import cgroups
from profiler.cluster.profiles import (PACKAGED_PROFILES, cpu_scale, load_catalog,
                                       profile_files, quota_cores)
from profiler.errors import ClusterError, ConfigError


def test_packaged_profiles_describe_the_study_device():
    catalog = load_catalog([PACKAGED_PROFILES])
    pi3b = catalog.profiles["pi3b"]
    assert (pi3b.link_mbit, pi3b.memory_mb) == (100, 1024)
    assert {"pi3b", "pi4", "pi5", "mix-2pi4-8pi3b"} <= set(catalog.names())


def test_a_mix_lists_its_nodes_in_order_and_can_be_cut_short():
    catalog = load_catalog([PACKAGED_PROFILES])
    names = [p.name for p in catalog.node_profiles("mix-2pi4-8pi3b", 10)]
    assert names == ["pi4"] * 2 + ["pi3b"] * 8
    assert [p.name for p in catalog.node_profiles("mix-2pi4-8pi3b", 3)] == ["pi4", "pi4", "pi3b"]
    with pytest.raises(ConfigError, match="has 10 nodes, 11 asked"):
        catalog.node_profiles("mix-2pi4-8pi3b", 11)


def test_a_user_file_overrides_and_extends(tmp_path, monkeypatch):
    user = tmp_path / "mine.yaml"
    user.write_text("profiles:\n  pi3b: {link_mbit: 10, memory_mb: 512, cpu_cores: 0.2}\n"
                    "  zero: {link_mbit: 54, memory_mb: 512, cpu_cores: 0.05}\n"
                    "mixes:\n  mix-z:\n    nodes: [{profile: zero, count: 3}, {profile: pi5}]\n")
    monkeypatch.setenv("EDGEPROF_PROFILES", str(user))
    assert profile_files()[-1] == user
    catalog = load_catalog()
    assert catalog.profiles["pi3b"].link_mbit == 10
    assert catalog.profiles["pi4"].link_mbit == 1000  # packaged ones stay
    assert [p.name for p in catalog.node_profiles("mix-z", 4)] == ["zero"] * 3 + ["pi5"]


@pytest.mark.parametrize("text, message", [
    ("profiles:\n  x: {link_mbit: 100, memory_mb: 1024}\n", "lacks cpu_cores"),
    ("profiles:\n  x: {link_mbit: fast, memory_mb: 1, cpu_cores: 1}\n", "must be numbers"),
    ("profiles:\n  x: {link_mbit: 0, memory_mb: 1024, cpu_cores: 1}\n", "link_mbit > 0"),
    ("mixes:\n  m:\n    nodes: [{profile: nope}]\n", "unknown profile"),
    ("profiles: [\n", "not valid YAML"),
])
def test_bad_profile_files_name_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_catalog([PACKAGED_PROFILES, path])


def test_unknown_profile_and_missing_env_file(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="unknown profile 'pi9'.*pi3b"):
        load_catalog([PACKAGED_PROFILES]).node_profiles("pi9", 2)
    monkeypatch.setenv("EDGEPROF_PROFILES", str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigError, match="is not a file"):
        profile_files()


def test_cpu_quota_scales_all_nodes_alike_only_when_the_host_is_short():
    assert quota_cores([0.3] * 4, host_cores=2) == [0.3] * 4
    # 2 x pi4 + 8 x pi3b ask 3.8 cores of a 2-core host: everyone gets 2/3.8 of theirs.
    quotas = quota_cores([0.7] * 2 + [0.3] * 8, host_cores=2)
    assert sum(quotas) == pytest.approx(2, abs=0.01)
    assert quotas[0] / quotas[2] == pytest.approx(0.7 / 0.3, rel=0.01)
    assert cpu_scale([0.7] * 2 + [0.3] * 8, 2) == pytest.approx(2 / 3.8)


def _mounts(tmp_path, lines: list[str]):
    path = tmp_path / "mounts"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cgroup_v1_detection_with_separate_and_comounted_cpuacct(tmp_path):
    separate = cgroups.detect_layout(_mounts(tmp_path, [
        "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0",
        "cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0",
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0",
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0"]))
    assert separate.version == 1 and str(separate.cpuacct_root) == "/sys/fs/cgroup/cpuacct"
    comounted = cgroups.detect_layout(_mounts(tmp_path, [
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0",
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0"]))
    assert comounted.cpu_root == comounted.cpuacct_root
    assert len(comounted.roots()) == 2


def test_cgroup_v2_detection_needs_cpu_and_memory_offered(tmp_path):
    unified = tmp_path / "cg2"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    layout = cgroups.detect_layout(_mounts(tmp_path, [f"cgroup2 {unified} cgroup2 rw 0 0"]))
    assert layout.version == 2 and layout.roots() == [unified]
    (unified / "cgroup.controllers").write_text("pids\n")
    with pytest.raises(ClusterError, match="no usable cgroup"):
        cgroups.detect_layout(_mounts(tmp_path, [f"cgroup2 {unified} cgroup2 rw 0 0"]))


def test_v2_limits_and_oom_count_use_the_v2_files(tmp_path):
    """A directory with v2's file names stands in for a v2 host, which this one is not."""
    group = cgroups.NodeCgroup(2, tmp_path, tmp_path, tmp_path)
    (tmp_path / "memory.swap.max").write_text("max\n")
    group.set_limits(cpu_cores=0.3, memory_mb=1024)
    assert (tmp_path / "cpu.max").read_text() == "1000 3334"  # 0.3 cores: 1 ms every 3.3 ms
    assert (tmp_path / "memory.max").read_text() == str(1024 ** 3)
    assert (tmp_path / "memory.swap.max").read_text() == "0"
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n")
    assert group.oom_kills() == 2
    (tmp_path / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    assert group.cpu_usage_s() == 1.5


def test_a_model_family_can_have_its_own_quota(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("profiles:\n  board: {link_mbit: 100, memory_mb: 1024, cpu_cores: 0.04,\n"
                    "    board_cores: 4, cpu_cores_by_model: {lenet-cnn: 0.009, resnet: 0.02}}\n")
    board = load_catalog([PACKAGED_PROFILES, path]).profiles["board"]
    assert board.cpu_cores_for("lenet-cnn") == 0.009
    assert board.cpu_cores_for("resnet") == 0.02
    assert board.cpu_cores_for("lenet-mlp") == 0.04  # no quota of its own
    assert board.board_cores == 4


@pytest.mark.parametrize("by_model, message", [
    ("{vgg: 0.1}", "cpu_cores_by_model must map"),
    ("{resnet: 0.0001}", "each of cpu_cores_by_model"),
    ("{resnet: fast}", "must be numbers"),
])
def test_bad_model_quotas_name_the_problem(tmp_path, by_model, message):
    path = tmp_path / "bad.yaml"
    path.write_text("profiles:\n  x: {link_mbit: 100, memory_mb: 1024, cpu_cores: 0.1, "
                    f"cpu_cores_by_model: {by_model}}}\n")
    with pytest.raises(ConfigError, match=message):
        load_catalog([PACKAGED_PROFILES, path])


def test_a_model_family_can_have_its_own_environment(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("profiles:\n  board: {link_mbit: 100, memory_mb: 1024, cpu_cores: 0.04,\n"
                    "    env_by_model: {lenet-mlp: {MXNET_ENGINE_TYPE: ThreadedEngine}}}\n")
    board = load_catalog([PACKAGED_PROFILES, path]).profiles["board"]
    assert board.env_by_model == {"lenet-mlp": {"MXNET_ENGINE_TYPE": "ThreadedEngine"}}
    # Written back as it was read (a re-calibrated profile keeps it).
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump({"profiles": {"board": board.as_spec()}}))
    assert load_catalog([PACKAGED_PROFILES, again]).profiles["board"] == board
    assert load_catalog([again]).profiles["board"].env_by_model == board.env_by_model


@pytest.mark.parametrize("env", [
    "{vgg: {A: b}}", "{lenet-mlp: ThreadedEngine}", "{lenet-mlp: {A: 1}}",
    "{lenet-mlp: {'A B': c}}"])
def test_a_bad_model_environment_names_the_problem(tmp_path, env):
    path = tmp_path / "bad.yaml"
    path.write_text("profiles:\n  x: {link_mbit: 100, memory_mb: 1024, cpu_cores: 0.1, "
                    f"env_by_model: {env}}}\n")
    with pytest.raises(ConfigError, match=r"env_by_model must map .* \(quote numbers\)$"):
        load_catalog([PACKAGED_PROFILES, path])


def test_the_cfs_period_gives_one_millisecond_a_period():
    assert cgroups.cfs_period_us(0.05) == 20_000  # 1 ms every 20 ms
    assert cgroups.cfs_period_us(0.3) == 3334  # every 3.3 ms
    assert cgroups.cfs_period_us(2.0) == 1000  # the kernel's shortest period: 2 ms a ms
    assert cgroups.cfs_period_us(0.0005) == 1_000_000  # the kernel's longest period


def test_the_calibrated_study_profile_gives_each_model_family_a_quota():
    park = load_catalog([PACKAGED_PROFILES]).profiles["pi3b-park2019"]
    assert set(park.cpu_cores_by_model) == {"lenet-cnn", "lenet-example", "resnet"}
    # What the quotas were calibrated to, for the host check (profiler.calibrate.check).
    assert {m: (r.batch, r.samples_per_s) for m, r in park.board_rates.items()} == {
        "lenet-mlp": (64, 571.4), "lenet-cnn": (64, 55.6), "lenet-example": (64, 55.6),
        "resnet": (32, 2.5)}
    assert park.board_rates["resnet"].workload == "resnet-32"
    assert load_catalog([PACKAGED_PROFILES]).profiles["pi3b"].board_rates == {}
    # The study's boards trained LeNet-CNN ten times slower than LeNet-MLP; MXNet 1.9.1
    # on x86 only about five: the CNN must get a smaller quota than the MLP.
    assert park.cpu_cores_for("lenet-cnn") < park.cpu_cores_for("lenet-mlp")
    assert park.board_cores == 4


def test_a_recalibrated_quota_is_written_whole_and_reads_back(tmp_path):
    from profiler.calibrate.check import with_quota, write_user_profile

    park = load_catalog([PACKAGED_PROFILES]).profiles["pi3b-park2019"]
    changed = with_quota(with_quota(park, "lenet-mlp", 4, 0.1), "resnet", 1, 0.02)
    path = write_user_profile(changed, tmp_path / "profiles.yaml")
    back = load_catalog([path]).profiles["pi3b-park2019"]
    assert back.cpu_cores_for("lenet-mlp", 4) == 0.1 and back.cpu_cores_for("resnet") == 0.02
    # Everything else as it was: the other quotas, dilations and board rates.
    assert back.cpu_cores_for("lenet-mlp", 8) == park.cpu_cores_for("lenet-mlp", 8)
    assert back.cpu_cores_for("lenet-example") == park.cpu_cores_for("lenet-example")
    assert back.board_rates == park.board_rates and back.link_mbit == park.link_mbit


def test_the_nodes_parent_group_outweighs_a_busy_hosts_processes(tmp_path):
    """v1: the parent's cpu.shares (1024, one host process's weight, by default) raised,
    so a loaded host still gives each node its quota; a host without the file is left."""
    roots = {name: tmp_path / name for name in ("cpu", "cpuacct", "memory")}
    (roots["cpu"] / cgroups.BASE_NAME).mkdir(parents=True)
    shares = roots["cpu"] / cgroups.BASE_NAME / "cpu.shares"
    shares.write_text("1024")
    layout = cgroups.CgroupLayout(1, roots["cpu"], roots["cpuacct"], roots["memory"])
    group = cgroups.create_node_cgroup(layout, "n0", 0.1, 64)
    assert shares.read_text() == str(cgroups.PARENT_CPU_SHARES) == "16384"
    assert (group.cpu_dir / "cpu.cfs_quota_us").read_text() == "1000"
    shares.unlink()
    cgroups.create_node_cgroup(layout, "n1", 0.1, 64)
    assert not shares.exists()


def test_an_empty_profiles_key_takes_a_profile_and_a_list_is_refused(tmp_path):
    """``profiles:`` with nothing under it is a file with no profile yet (it crashed with
    a TypeError); profiles that are not a mapping are one line."""
    from profiler.calibrate.check import write_user_profile
    from profiler.errors import ConfigError

    park = load_catalog([PACKAGED_PROFILES]).profiles["pi3b-park2019"]
    path = tmp_path / "profiles.yaml"
    path.write_text("profiles:\n")
    write_user_profile(park, path)
    assert "pi3b-park2019" in load_catalog([path]).profiles
    path.write_text("profiles:\n  - pi3b\n")
    with pytest.raises(ConfigError, match="profiles are not a mapping"):
        write_user_profile(park, path)
