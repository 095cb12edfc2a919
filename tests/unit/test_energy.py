"""A cell's energy from spools written here: modelled from CPU use, measured from meters,
over the cell's own window, per node and per role; and the boards' power models.

The spools are written by the agent's own ``SpoolWriter`` with the points a real agent
writes (``cpu``, ``proc``, ``power_*``), at 1 s ticks from t = 100 s.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from profiler.agent import lineproto
from profiler.agent.spool import SpoolWriter
from profiler.cluster.base import Node, NodeScope
from profiler.cluster.profiles import PACKAGED_PROFILES, PowerModel, load_catalog
from profiler.errors import ConfigError
from profiler.metrics.energy import CellWork, NodePower, cell_work, integrate_j
from profiler.metrics.summary import SUMMARY_COLUMNS, summarize_cell
from profiler.sweep.events import CellEvents
from profiler.sweep.monitoring import node_power

PI3B = PowerModel(1.4, 3.7, "PiDramble")


def _spool(cell, node, cpu_by_second, *, role="worker", procs=None, meter=None):
    """One node's spool: ``cpu`` each second, ``procs`` {proc: (role, cpu %)} each
    second, ``meter`` (measurement, field, watts by second)."""
    # The sweep tags every agent with the controller's host name, whatever its node.
    writer = SpoolWriter(cell / "metrics" / node, {"node": node, "host": "controller"})
    for second, cpu in enumerate(cpu_by_second):
        t_ms = 100_000 + second * 1000
        lines = [lineproto.encode("cpu", {"role": role}, {"cpu_percent": float(cpu)}, t_ms)]
        for proc, (proc_role, proc_cpu) in (procs or {}).items():
            lines.append(lineproto.encode("proc", {"role": proc_role, "proc": proc},
                                          {"cpu_percent": float(proc_cpu), "rss_mb": 50.0},
                                          t_ms))
        if meter is not None:
            measurement, name, watts = meter
            lines.append(lineproto.encode(measurement, {"role": role},
                                          {name: float(watts[second])}, t_ms))
        writer.append(lines)
    writer.close()


def test_a_node_at_half_its_cpu_is_charged_half_way_between_idle_and_full(tmp_path):
    cell = tmp_path / "cell"
    _spool(cell, "n1", [50] * 11)  # 50% of the board's cores from 100 s to 110 s
    row = summarize_cell(cell, ["n1"], 102.0, 106.0, power={"n1": NodePower(PI3B)})
    half_way_w = (1.4 + 3.7) / 2
    assert row["energy_j"] == pytest.approx(half_way_w * 4.0)
    assert row["avg_power_w"] == pytest.approx(half_way_w)
    assert row["energy_source"] == "modelled"
    assert row["energy_j_by_node"] == {"n1": pytest.approx(10.2)}
    assert row["energy_j_by_role"] == {"worker": pytest.approx(10.2)}
    assert list(row) == SUMMARY_COLUMNS


def test_energy_integrates_over_the_cells_own_window_not_the_sweeps(tmp_path):
    # Idle before the cell, busy during it (102-106 s), idle after: the sweep's other
    # cells and its pauses are not this cell's.
    cell = tmp_path / "cell"
    _spool(cell, "n1", [0, 0, 0, 100, 100, 100, 100, 0, 0, 0, 0])
    row = summarize_cell(cell, ["n1"], 102.0, 106.0, power={"n1": NodePower(PI3B)})
    assert row["energy_j"] == pytest.approx(3.7 * 4.0)
    # Inside a tick: the sample that ends it covers it (100% from 102 to 103 s).
    assert summarize_cell(cell, ["n1"], 102.25, 102.75,
                          power={"n1": NodePower(PI3B)})["energy_j"] == pytest.approx(3.7 / 2)
    # A window over the whole spool: idle 2 s + 4 s full + idle 4 s (the tick at 100 s
    # holds back to the window's start).
    whole = summarize_cell(cell, ["n1"], 100.0, 110.0, power={"n1": NodePower(PI3B)})
    assert whole["energy_j"] == pytest.approx(1.4 * 6 + 3.7 * 4)


def test_a_step_series_integrates_exactly():
    series = [(1000, 2.0), (2000, 4.0), (3000, 6.0)]
    assert integrate_j(series, 0, 1000) == 2.0  # before the first sample: its value
    assert integrate_j(series, 1500, 2500) == pytest.approx(0.5 * 4 + 0.5 * 6)
    assert integrate_j(series, 3000, 5000) == 12.0  # after the last: its value


def test_measured_power_wins_and_a_shared_hosts_meter_is_counted_once(tmp_path):
    cell = tmp_path / "cell"
    # Two local slots on one x86 host with RAPL at 30 W: the host once, 15 W each.
    rapl = ("power_rapl", "power_w", [30.0] * 11)
    _spool(cell, "local0", [90] * 11, meter=rapl)
    _spool(cell, "local1", [90] * 11, meter=rapl)
    local = Node("local0"), Node("local1")
    row = summarize_cell(cell, ["local0", "local1"], 101.0, 105.0, power=node_power(local))
    assert row["energy_j"] == pytest.approx(30.0 * 4) and row["avg_power_w"] == 30.0
    assert row["energy_j_by_node"] == {"local0": 60.0, "local1": 60.0}
    assert row["energy_source"] == "measured"
    # Two real boards, each with its own meter (the agents' host tags are the
    # controller's): each its own.
    boards = (Node("pi-a", "10.0.0.2", scope=NodeScope(ssh_host="pi-a")),
              Node("pi-b", "10.0.0.3", scope=NodeScope(ssh_host="pi-b")))
    cell = tmp_path / "boards"
    for board in boards:
        _spool(cell, board.name, [90] * 11, meter=("power_hwmon", "power_w", [5.0] * 11))
    row = summarize_cell(cell, ["pi-a", "pi-b"], 101.0, 105.0, power=node_power(boards))
    assert row["energy_j_by_node"] == {"pi-a": 20.0, "pi-b": 20.0}
    # A Pi 5 with its PMIC beside a modelled Pi 3B: mixed; the model is not used there.
    cell = tmp_path / "mixed"
    _spool(cell, "pi5", [10] * 11, meter=("power_pmic", "board_w", [6.0] * 11))
    _spool(cell, "pi3b", [0] * 11)
    row = summarize_cell(cell, ["pi5", "pi3b"], 101.0, 103.0,
                         power={"pi5": NodePower(PowerModel(2.8, 9.7, "x")),
                                "pi3b": NodePower(PI3B)})
    assert row["energy_j_by_node"] == {"pi5": 12.0, "pi3b": pytest.approx(2.8)}
    assert row["energy_source"] == "mixed"


def test_an_emulated_nodes_host_meters_are_not_its_board(tmp_path):
    cell = tmp_path / "cell"
    _spool(cell, "n0", [50] * 6, meter=("power_rapl", "power_w", [80.0] * 6))
    row = summarize_cell(cell, ["n0"], 101.0, 103.0,
                         power={"n0": NodePower(PI3B, own_meters=False)})
    assert row["energy_source"] == "modelled" and row["energy_j"] == pytest.approx(5.1)
    emulated = Node("n0", profile="pi3b-park2019", scope=NodeScope(netns="edgeprof-n0"))
    local = Node("local0")
    powers = node_power([emulated, local])
    assert powers["n0"].model.full_w == 3.7 and not powers["n0"].own_meters
    assert powers["local0"] == NodePower(None, True, "127.0.0.1")


def test_no_meter_and_no_model_is_unknown_not_zero(tmp_path):
    cell = tmp_path / "cell"
    _spool(cell, "local0", [50] * 6)
    _spool(cell, "n1", [50] * 6)
    row = summarize_cell(cell, ["local0"], 101.0, 103.0)
    assert row["energy_j"] is None and row["energy_source"] is None
    assert row["energy_j_by_node"] == {"local0": None, "n1": None}
    # One node known, one not: no total (it would pass for the cell's), the node's kept.
    row = summarize_cell(cell, ["local0"], 101.0, 103.0, power={"n1": NodePower(PI3B)})
    assert row["energy_j"] is None and row["energy_j_by_node"]["n1"] == pytest.approx(5.1)
    assert row["energy_source"] == "modelled"


def test_energy_goes_to_roles_by_cpu_share_and_per_sample_and_to_accuracy(tmp_path):
    cell = tmp_path / "cell"
    # A node with a server (3x the CPU) and a worker; another with one worker.
    _spool(cell, "n0", [100] * 11, role="server+worker",
           procs={"server-0": ("server", 75.0), "worker-0": ("worker", 25.0)})
    _spool(cell, "n1", [100] * 11, procs={"worker-1": ("worker", 100.0)})
    power = {"n0": NodePower(PI3B), "n1": NodePower(PI3B)}
    work = CellWork(samples=740, accuracy_t=103.0, speedup=1.0)
    row = summarize_cell(cell, ["n0", "n1"], 101.0, 105.0, power=power, work=work)
    assert row["energy_j"] == pytest.approx(2 * 3.7 * 4)
    assert row["energy_j_by_role"] == {"server": pytest.approx(11.1),
                                       "worker": pytest.approx(3.7 + 14.8)}
    assert row["j_per_sample"] == pytest.approx(29.6 / 740)
    # A window inside one tick: the sample that covers it says whose the joules are.
    short = summarize_cell(cell, ["n0", "n1"], 101.2, 101.6, power=power)
    assert short["energy_j_by_role"] == {"server": pytest.approx(3.7 * 0.4 * 0.75),
                                         "worker": pytest.approx(3.7 * 0.4 * 1.25)}
    assert row["energy_to_accuracy_j"] == pytest.approx(2 * 3.7 * 2)
    # Dilated 4x: the boards would have run 4 x as long at that use.
    dilated = summarize_cell(cell, ["n0", "n1"], 101.0, 105.0, power=power,
                             work=CellWork(samples=740, speedup=4.0))
    assert dilated["energy_j"] == pytest.approx(4 * 29.6)
    assert dilated["avg_power_w"] == pytest.approx(7.4)


def test_cell_work_from_events():
    events = CellEvents(by_rank={
        0: [{"event": "epoch", "epoch": 1, "t": 10.0, "val_accuracy": 0.9},
            {"event": "epoch", "epoch": 2, "t": 20.0, "val_accuracy": 0.95},
            {"event": "epoch", "epoch": 3, "t": 30.0, "val_accuracy": 0.93},
            {"event": "end", "samples": 300}],
        1: [{"event": "end", "samples": 300}]})
    # Final accuracy 0.93, first reached at epoch 2.
    assert cell_work(events, 2.0) == CellWork(600, 20.0, 2.0)
    assert cell_work(CellEvents(), None) == CellWork(None, None, 1.0)


def test_packaged_boards_have_power_models_and_the_study_profiles_share_them():
    profiles = load_catalog([PACKAGED_PROFILES]).profiles
    assert (profiles["pi3b"].power.idle_w, profiles["pi3b"].power.full_w) == (1.4, 3.7)
    assert (profiles["pi4"].power.idle_w, profiles["pi4"].power.full_w) == (2.7, 6.4)
    assert profiles["pi5"].power.full_w > profiles["pi4"].power.full_w
    assert profiles["pi3b-park2019"].power == profiles["pi3b"].power
    assert profiles["pi4-park2019"].power == profiles["pi4"].power
    assert all(p.power.source for p in profiles.values())
    assert PI3B.watts(0.5) == pytest.approx(2.55) and PI3B.watts(1.7) == 3.7


def test_a_users_board_model_reaches_the_profiles_that_share_it(tmp_path):
    user = tmp_path / "mine.yaml"
    user.write_text("profiles:\n  pi3b: {link_mbit: 100, memory_mb: 1024, cpu_cores: 0.3, "
                    "power: {idle_w: 1.9, full_w: 5.1, source: my INA219}}\n")
    profiles = load_catalog([PACKAGED_PROFILES, user]).profiles
    assert profiles["pi3b-park2019"].power == PowerModel(1.9, 5.1, "my INA219")
    # A profile written back (calibration) keeps its model.
    assert profiles["pi3b-park2019"].as_spec()["power"]["full_w"] == 5.1
    # A board replaced without a model: none for the profiles that share it (unknown
    # energy unless measured), not an error in a file the user did not write.
    user.write_text("profiles:\n  pi3b: {link_mbit: 100, memory_mb: 1024, cpu_cores: 0.3}\n")
    assert load_catalog([PACKAGED_PROFILES, user]).profiles["pi3b-park2019"].power is None


@pytest.mark.parametrize("power, message", [
    ("{idle_w: 1.4, source: x}", "power lacks full_w: give power: {idle_w: W"),
    ("{idle_w: 1.4, full_w: 3.7}", "power lacks source"),
    ("{idle_w: low, full_w: 3.7, source: x}", "must be numbers"),
    ("{idle_w: 4, full_w: 3.7, source: x}", "0 <= idle_w <= full_w"),
    ("pi9", "power: pi9 names no profile with a power model"),
    ("[1, 2]", "power must be a mapping or a profile's name"),
])
def test_a_bad_power_model_is_one_line_and_exit_2(tmp_path, monkeypatch, power, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"profiles:\n  x: {{link_mbit: 100, memory_mb: 1024, cpu_cores: 0.3, "
                   f"power: {power}}}\n")
    with pytest.raises(ConfigError, match=message.replace("{", r"\{")):
        load_catalog([PACKAGED_PROFILES, bad])
    from profiler.cli import cli

    monkeypatch.setenv("EDGEPROF_PROFILES", str(bad))
    result = CliRunner().invoke(cli, ["cluster", "profiles"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert message.split(":")[0] in result.output and len(result.output.strip().splitlines()) == 1


def _ticks(cell, node, ticks):
    """``ticks``: (t_ms, [(measurement, tags, fields)]) written as one agent would."""
    writer = SpoolWriter(cell / "metrics" / node, {"node": node, "host": "controller"})
    for t_ms, points in ticks:
        writer.append([lineproto.encode(name, {"role": "worker", **tags}, fields, t_ms)
                       for name, tags, fields in points])
    writer.close()


def test_modelled_energy_rests_on_the_cpu_time_counter_not_the_samples(tmp_path):
    # A 1.5 s cell between two ticks: the one sample in it says 10%, the node's busy
    # seconds (4 cores) say 90% of the window: 0.9 x 4 x 1.5 = 5.4 s.
    cell = tmp_path / "cell"
    _ticks(cell, "n1", [(100_000, [("cpu", {}, {"cpu_percent": 10.0, "busy_s": 20.0,
                                                "cores": 4})]),
                        (102_000, [("cpu", {}, {"cpu_percent": 10.0, "busy_s": 27.2,
                                                "cores": 4})])])
    # busy_s rises 7.2 s over 2 s: interpolated, 0.25 s in is 20.9, 1.75 s in 26.3.
    row = summarize_cell(cell, ["n1"], 100.25, 101.75, power={"n1": NodePower(PI3B)})
    counted_j = (1.4 + (3.7 - 1.4) * 0.9) * 1.5
    assert row["energy_j"] == pytest.approx(counted_j)
    sampled_j = (1.4 + (3.7 - 1.4) * 0.1) * 1.5  # what the samples alone gave
    assert abs(row["energy_j"] - sampled_j) > 2.0
    assert row["energy_source"] == "modelled"
    assert row["cpu_percent_mean"] == pytest.approx(90.0)  # the same counter, the same share


def test_a_cgroup_nodes_counter_is_a_share_of_its_quota_and_reaches_accuracy(tmp_path):
    # 0.3 s a second of a 0.6-core quota: half of it, whatever the samples said (100%).
    cell = tmp_path / "cell"
    _ticks(cell, "n1", [(100_000 + 1000 * k,
                         [("cpu", {}, {"cpu_percent": 100.0, "busy_s": 0.3 * k,
                                       "quota_cores": 0.6, "cores": 4})])
                        for k in range(6)])
    row = summarize_cell(cell, ["n1"], 100.0, 104.0, power={"n1": NodePower(PI3B)},
                         work=CellWork(accuracy_t=102.0, speedup=2.0))
    half_way_w = (1.4 + 3.7) / 2
    assert row["energy_j"] == pytest.approx(half_way_w * 4 * 2)  # dilated 2x
    assert row["energy_to_accuracy_j"] == pytest.approx(half_way_w * 2 * 2)


def test_without_a_counter_around_the_window_the_samples_are_modelled(tmp_path):
    # The counter's first reading is after the window's start: not bracketed.
    cell = tmp_path / "cell"
    _ticks(cell, "n1", [(101_000 + 1000 * k,
                         [("cpu", {}, {"cpu_percent": 50.0, "busy_s": 4.0 * k, "cores": 4})])
                        for k in range(4)])
    row = summarize_cell(cell, ["n1"], 100.5, 103.0, power={"n1": NodePower(PI3B)})
    assert row["energy_j"] == pytest.approx((1.4 + 3.7) / 2 * 2.5)


def test_roles_share_a_node_by_their_process_trees_cpu_time_counters(tmp_path):
    # Samples say server 75% / worker 25%; the trees' CPU seconds in the window (100.5
    # to 102.5 s) say server 1 s, worker 2.75 s (its tree was first read at 101 s, after
    # the window's start: its counter counts from 0).
    cell = tmp_path / "cell"
    ticks = []
    for k in range(4):
        t_ms = 100_000 + 1000 * k
        points = [("cpu", {"role": "server+worker"},
                   {"cpu_percent": 100.0, "busy_s": 4.0 * k, "cores": 4}),
                  ("proc", {"role": "server", "proc": "server-0"},
                   {"cpu_percent": 75.0, "rss_mb": 10.0, "cpu_s": 5.0 + 0.5 * k})]
        if k >= 1:
            points.append(("proc", {"role": "worker", "proc": "worker-0"},
                           {"cpu_percent": 25.0, "rss_mb": 10.0,
                            "cpu_s": 0.5 + 1.5 * (k - 1)}))
        ticks.append((t_ms, points))
    _ticks(cell, "n0", ticks)
    row = summarize_cell(cell, ["n0"], 100.5, 102.5, power={"n0": NodePower(PI3B)})
    total = row["energy_j"]
    assert total == pytest.approx(3.7 * 2)
    assert row["energy_j_by_role"] == {"server": pytest.approx(total * 1 / 3.75, abs=1e-3),
                                       "worker": pytest.approx(total * 2.75 / 3.75, abs=1e-3)}
