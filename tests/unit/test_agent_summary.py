"""Cell summaries from spools: window, means over worker nodes, shipper traffic taken out."""

import json

from profiler.agent import lineproto
from profiler.agent.spool import SpoolWriter
from profiler.metrics.summary import SUMMARY_COLUMNS, summarize_cell


def _spool(cell_dir, node, interface, cpu_by_second, net_bytes_per_s):
    writer = SpoolWriter(cell_dir / "metrics" / node, {"node": node})
    for second, cpu in enumerate(cpu_by_second):
        t_ms = 100_000 + second * 1000
        writer.append([
            lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": float(cpu)}, t_ms),
            lineproto.encode("mem", {"role": "worker"}, {"used_mb": 100.0 + second}, t_ms),
            lineproto.encode("proc", {"role": "worker", "proc": "worker-0"},
                             {"rss_mb": 50.0}, t_ms),
            lineproto.encode("proc", {"role": "worker", "proc": "worker-1"},
                             {"rss_mb": 10.0 * second}, t_ms),
            lineproto.encode("proc", {"role": "server", "proc": "server-0"},
                             {"rss_mb": 999.0}, t_ms),
            lineproto.encode("net", {"interface": interface}, {
                "sent_bytes": net_bytes_per_s * second, "recv_bytes": 2 * net_bytes_per_s * second,
                "sent_packets": 10 * second, "recv_packets": 20 * second}, t_ms),
        ])
    writer.close()


def test_summary_over_worker_nodes_and_window(tmp_path):
    cell = tmp_path / "sweep" / "cells" / "c1"
    _spool(cell, "n1", "eth0", [0, 50, 50, 50, 0], 1024)
    _spool(cell, "n2", "eth0", [0, 70, 70, 70, 0], 2048)
    _spool(cell, "master", "eth0", [0, 99, 99, 99, 0], 9999)  # not a worker node
    row = summarize_cell(cell, ["n1", "n2", "missing"], 101.0, 103.0)
    assert list(row) == SUMMARY_COLUMNS
    assert row["metrics_nodes"] == 2
    assert row["cpu_percent_mean"] == 60.0 and row["cpu_percent_peak"] == 60.0
    assert row["mem_used_mb_mean"] == 102.0 and row["mem_used_mb_peak"] == 103.0
    # Worker RSS per node: 50 + 10*s for s in 1..3 → mean 70, peak 80; servers excluded.
    assert row["rss_mb_mean"] == 70.0 and row["rss_mb_peak"] == 80.0
    # 2 s of traffic: n1 2 KB, n2 4 KB sent → mean 3 KB; packets 20/40 → 20 and 40.
    assert row["net_sent_kb"] == 3.0 and row["net_recv_kb"] == 6.0
    assert row["net_sent_packets"] == 20 and row["net_recv_packets"] == 40
    # Rates over the 2 s window: what the study's Ganglia reports as "KB".
    assert row["net_sent_kb_per_s"] == 1.5 and row["net_recv_kb_per_s"] == 3.0
    assert row["net_sent_packets_per_s"] == 10.0 and row["net_recv_packets_per_s"] == 20.0


def test_counters_interpolate_inside_a_tick(tmp_path):
    cell = tmp_path / "sweep" / "cells" / "c1"
    _spool(cell, "n1", "eth0", [0, 10, 10], 1024)
    row = summarize_cell(cell, ["n1"], 100.25, 101.75)
    assert row["net_sent_kb"] == 1.5


def test_short_window_uses_the_sample_that_covers_it(tmp_path):
    cell = tmp_path / "sweep" / "cells" / "c1"
    _spool(cell, "n1", "eth0", [0, 40, 80], 1024)
    row = summarize_cell(cell, ["n1"], 100.2, 100.4)
    assert row["cpu_percent_mean"] == 40.0


def test_loopback_shipper_traffic_is_not_training_traffic(tmp_path):
    sweep = tmp_path / "sweep"
    cell = sweep / "cells" / "c1"
    _spool(cell, "local0", "lo", [0, 1, 1, 1, 1], 10 * 1024)
    records = [{"t_ms": 102_000, "sent_bytes": 3 * 1024, "recv_bytes": 1024, "requests": 2,
                "loopback": True},
               {"t_ms": 102_500, "sent_bytes": 99_999, "recv_bytes": 0, "requests": 1,
                "loopback": False},
               {"t_ms": 109_000, "sent_bytes": 99_999, "recv_bytes": 0, "requests": 1,
                "loopback": True}]
    (sweep / "shipper-traffic.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # The layout of the sweep folder is the caller's business: the file is passed in.
    assert summarize_cell(cell, ["local0"], 101.0, 104.0)["net_sent_kb"] == 30.0
    row = summarize_cell(cell, ["local0"], 101.0, 104.0,
                         traffic_file=sweep / "shipper-traffic.jsonl")
    # 30 KB sent on lo in the window, minus the 4 KB the shipper put on lo (both ways).
    assert row["net_sent_kb"] == 26.0 and row["net_recv_kb"] == 56.0
    assert row["net_sent_packets"] == 30 - 8


def test_no_metrics_gives_empty_columns(tmp_path):
    row = summarize_cell(tmp_path / "cell", ["n1"], 0.0, 1.0)
    assert row["metrics_nodes"] == 0 and row["cpu_percent_mean"] is None


def test_the_window_first_cpu_sample_holds_start_up_and_is_skipped(tmp_path):
    # The sample at 101 s covers 100-101 s: the processes' start-up before training
    # (unthrottled on the emulated cluster), not training.
    cell = tmp_path / "sweep" / "cells" / "c1"
    _spool(cell, "n1", "eth0", [0, 300, 50, 60, 70], 1024)
    row = summarize_cell(cell, ["n1"], 101.0, 104.0)
    assert row["cpu_percent_peak"] == 70.0 and row["cpu_percent_mean"] == 60.0


def test_workers_gone_before_the_next_sample_keep_their_last_memory(tmp_path):
    # A cell shorter than the interval: its workers were sampled once while loading,
    # then ended before the next tick. mem_MB (rss) must not be empty.
    cell = tmp_path / "sweep" / "cells" / "c1"
    writer = SpoolWriter(cell / "metrics" / "n1", {"node": "n1"})
    writer.append([lineproto.encode("mem", {"role": "worker"}, {"used_mb": 900.0}, 100_000),
                   lineproto.encode("proc", {"role": "worker", "proc": "worker-0"},
                                    {"rss_mb": 210.0}, 100_000),
                   lineproto.encode("mem", {"role": "none"}, {"used_mb": 700.0}, 101_000)])
    writer.close()
    row = summarize_cell(cell, ["n1"], 100.2, 100.8)
    assert row["rss_mb_mean"] == 210.0 and row["rss_mb_peak"] == 210.0
    assert row["mem_used_mb_mean"] == 700.0
