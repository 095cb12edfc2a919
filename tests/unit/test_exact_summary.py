"""Figures from the kernel's counters and high-water marks, and the marking of figures
that rest on few samples (issue 48): the reducers over real spools, the table, the
report's status table and the workers' events."""

from profiler.agent import lineproto
from profiler.agent.spool import SpoolWriter
from profiler.metrics.summary import summarize_cell
from profiler.report import html
from profiler.sweep.events import CellEvents
from profiler.sweep.table import THIN_NOTE, format_table


def _spool(cell_dir, node, ticks):
    """``ticks``: (t_ms, {measurement: fields}) written as one agent would."""
    writer = SpoolWriter(cell_dir / "metrics" / node, {"node": node})
    for t_ms, points in ticks:
        writer.append([lineproto.encode(name, {"role": "worker", **tags}, fields, t_ms)
                       for name, (tags, fields) in points.items()])
    writer.close()


def _cpu(percent, busy_s, **more):
    return ({}, {"cpu_percent": float(percent), "busy_s": float(busy_s), **more})


def test_cpu_mean_is_the_counter_interpolated_at_the_window_ends(tmp_path):
    cell = tmp_path / "c1"
    # 4 cores; busy seconds rise 0, 1, 3, 3.4 per 1 s tick. The samples' percents are
    # deliberately off (what a sampled mean would give) so that the counter shows.
    busy = [0.0, 1.0, 4.0, 7.4]
    _spool(cell, "n1", [(100_000 + 1000 * k, {"cpu": _cpu(99.0, b, cores=4)})
                        for k, b in enumerate(busy)])
    # Window 100.5 .. 102.25: counter 0.5 at the start, 4 + 0.25 x 3.4 = 4.85 at the end.
    row = summarize_cell(cell, ["n1"], 100.5, 102.25)
    expected = 100 * (4.85 - 0.5) / (1.75 * 4)
    assert abs(row["cpu_percent_mean"] - round(expected, 3)) < 1e-9
    assert row["cpu_percent_peak"] == 99.0  # the peak stays the samples'


def test_cpu_counter_of_a_cgroup_is_a_share_of_its_quota(tmp_path):
    cell = tmp_path / "c1"
    _spool(cell, "n1", [(100_000 + 1000 * k, {"cpu": _cpu(5.0, 0.15 * k, quota_cores=0.3,
                                                           cores=4)}) for k in range(4)])
    row = summarize_cell(cell, ["n1"], 100.0, 103.0)
    assert row["cpu_percent_mean"] == 50.0  # 0.15 s a second of a 0.3-core quota


def test_cpu_without_a_bracketing_counter_falls_back_to_the_samples(tmp_path):
    cell = tmp_path / "c1"
    # The agent's first tick is after the window's start: no counter value at the start.
    _spool(cell, "n1", [(101_000 + 1000 * k, {"cpu": _cpu(30.0, 9.0 * k, cores=4)})
                        for k in range(4)])
    row = summarize_cell(cell, ["n1"], 100.5, 103.0)
    assert row["cpu_percent_mean"] == 30.0


def _mem(used, peak=None):
    return ({}, {"used_mb": float(used), **({"peak_mb": float(peak)} if peak else {})})


def _proc(rss, hwm):
    return ({"proc": "worker-0"}, {"rss_mb": float(rss), "rss_hwm_mb": float(hwm)})


def test_rss_peak_takes_the_high_water_mark_and_the_reported_maxrss(tmp_path):
    cell = tmp_path / "c1"
    # One tick inside a 0.8 s window, taken before the framework loaded (33 MB); the
    # kernel's mark seen at the next tick, after the window, says 240 MB.
    _spool(cell, "n1", [(100_000, {"mem": _mem(500), "proc": _proc(20, 20)}),
                        (101_000, {"mem": _mem(520), "proc": _proc(33, 33)}),
                        (102_000, {"mem": _mem(700), "proc": _proc(150, 240)}),
                        (103_000, {"mem": _mem(700), "proc": _proc(150, 900)})])
    row = summarize_cell(cell, ["n1"], 100.5, 101.3)
    assert row["rss_mb_mean"] == 33.0
    assert row["rss_mb_peak"] == 240.0  # not the 900 of a tick after the first one after
    assert row["samples_in_window"] == 1 and row["sampled_figures_thin"] is True
    # What the workers reported (their own VmHWM) raises it further, per node.
    row = summarize_cell(cell, ["n1"], 100.5, 101.3, worker_maxrss_mb={"n1": 250.5})
    assert row["rss_mb_peak"] == 250.5


def test_node_mem_peak_is_the_cgroup_mark_at_the_window_end(tmp_path):
    cell = tmp_path / "c1"
    _spool(cell, "n1", [(100_000 + 1000 * k, {"mem": _mem(100 + k, peak)})
                        for k, peak in enumerate([120, 300, 310, 400, 500])])
    row = summarize_cell(cell, ["n1"], 100.5, 103.0)
    assert row["mem_used_mb_peak"] == 103.0  # sampled
    assert row["node_mem_peak_mb"] == 400.0  # the mark read at the window's end
    assert row["samples_in_window"] == 3 and row["sampled_figures_thin"] is False


def test_samples_in_window_is_the_fewest_over_worker_nodes(tmp_path):
    cell = tmp_path / "c1"
    _spool(cell, "n1", [(100_000 + 200 * k, {"mem": _mem(100)}) for k in range(20)])
    _spool(cell, "n2", [(100_000 + 1000 * k, {"mem": _mem(100)}) for k in range(4)])
    row = summarize_cell(cell, ["n1", "n2"], 100.1, 102.1)
    assert row["samples_in_window"] == 2 and row["sampled_figures_thin"] is True


def _record(**fields):
    base = {"model": "lenet-mlp", "batch": 64, "devices": 1, "sync": "sync",
            "engine": "mxnet", "status": "ok", "cpu_percent_mean": 40.0,
            "rss_mb_mean": 33.0, "rss_mb_peak": 244.0, "mem_used_mb_mean": 5000.0}
    return {**base, **fields}


def test_table_marks_thin_sampled_figures_and_gives_the_remedy():
    lines = format_table([_record(sampled_figures_thin=True),
                          _record(batch=32, sampled_figures_thin=False)]).splitlines()
    header = lines[0].split()
    thin, plain = (dict(zip(header, line.split())) for line in lines[2:4])
    assert (thin["cpu_%"], thin["mem_MB"], thin["node_mem_MB"]) == ("40.0~", "33~", "5000~")
    assert thin["mem_peak_MB"] == "244"  # the kernel's mark: not sampled, not marked
    assert (plain["cpu_%"], plain["mem_MB"]) == ("40.0", "33")
    assert lines[-1] == THIN_NOTE and "--interval 0.2" in THIN_NOTE
    assert THIN_NOTE not in format_table([_record(sampled_figures_thin=False)])


def test_report_status_table_marks_thin_cells():
    columns = html.STATUS_COLUMNS
    row = html._cell_row(_record(sampled_figures_thin=True, samples_in_window=1),
                         columns, lambda r: "cfg")
    values = {key: cell["value"] for (key, _), cell in zip(columns, row["cells"])}
    assert values["cpu_percent_mean"].endswith("~") and values["samples_in_window"] == "1"
    assert not values["rss_mb_peak"].endswith("~")


def test_maxrss_by_node_sums_each_nodes_workers():
    events = CellEvents({
        0: [{"event": "start", "node": "n1"}, {"event": "end", "maxrss_mb": 200.0}],
        1: [{"event": "start", "node": "n1"}, {"event": "error", "maxrss_mb": 50.0}],
        2: [{"event": "start", "node": "n2"}, {"event": "end"}],  # did not report
    })
    assert events.maxrss_by_node() == {"n1": 250.0}


def test_proc_cpu_s_counts_the_tree_and_its_reaped_children(tmp_path):
    import json
    import subprocess
    import sys
    import time

    from profiler.agent.collectors.processes import Processes

    # The launcher's child burns 0.3 s of CPU and is reaped: its time stays in the
    # tree's counter (its reaper's children_* times) after it is gone.
    done = tmp_path / "done"
    script = ("import subprocess, sys, time, pathlib\n"
              "subprocess.run([sys.executable, '-c', 'import time\\n"
              "t = time.process_time()\\nwhile time.process_time() - t < 0.3: pass'])\n"
              f"pathlib.Path({str(done)!r}).touch()\n"
              "time.sleep(60)\n")
    launcher = subprocess.Popen([sys.executable, "-c", script])
    try:
        pids = tmp_path / "pids.json"
        pids.write_text(json.dumps({"worker": [launcher.pid]}))
        collector = Processes(pids)
        first = collector.collect()[0][2]["cpu_s"]
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done.exists()
        (_, tags, fields), = collector.collect()
        assert tags == {"role": "worker", "proc": "worker-0"}
        assert fields["num_procs"] == 1  # the child is gone
        assert fields["cpu_s"] - first >= 0.28
    finally:
        launcher.kill()
        launcher.wait()
