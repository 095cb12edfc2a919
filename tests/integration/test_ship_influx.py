"""Shipping to real servers on loopback, queried back point by point.

Debian's InfluxDB 1.6.7 stands for the v1 ``/write`` API; VictoriaMetrics for the v2
write API (InfluxDB 2.x is not packaged here): it stores each field as the metric
``<measurement>_<field>``, so the expected count there is points × fields.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler.agent import lineproto
from profiler.agent.shipping.cli import ship
from tests.support.servers import LocalServer, influx_query, vm_export
from profiler.agent.shipping.ship import LiveShipper, ship_sweep
from profiler.agent.spool import SpoolWriter
from profiler.agent.spool_reader import find_spools, read_points
from profiler.agent.shipping.targets import InfluxTarget
from tests.conftest import need_binary

pytestmark = pytest.mark.integration


@pytest.fixture
def influxdb(tmp_path):
    need_binary("influxd")
    with LocalServer("influxdb1", tmp_path / "influxdb") as server:
        yield server


@pytest.fixture
def victoria(tmp_path):
    need_binary("victoria-metrics")
    with LocalServer("victoria-metrics", tmp_path / "vm") as server:
        yield server


def _v1(server) -> InfluxTarget:
    return InfluxTarget(url=server.url, db="edgeprof")


def _v2(server) -> InfluxTarget:
    return InfluxTarget(url=server.url, org="lab", bucket="edgeprof")


def _expected(sweep_dir: Path) -> tuple[Counter, Counter]:
    """Points per measurement and samples per VictoriaMetrics metric in the spools."""
    points, samples = Counter(), Counter()
    for spool in find_spools(sweep_dir):
        for _, point in read_points(spool):
            points[point.measurement] += 1
            for name in point.fields:
                samples[f"{point.measurement}_{name}"] += 1
    return points, samples


def _influx_counts(server, sweep_id: str) -> Counter:
    counts = Counter()
    for series in influx_query(server.url, "edgeprof",
                               f"SELECT * FROM /.*/ WHERE sweep = '{sweep_id}'"):
        counts[series["name"]] += len(series["values"])
    return counts


def _influx_missing(server, sweep_dir: Path) -> list[str]:
    """The spooled points InfluxDB does not hold (measurement, node, time), for a failure's
    message: which tick went missing says where it was lost."""
    stored = set()
    for series in influx_query(server.url, "edgeprof",
                               "SELECT * FROM /.*/ WHERE sweep = 'outage' GROUP BY node"):
        for row in series["values"]:
            stored.add((series["name"], series["tags"]["node"], row[0]))
    missing, seen = [], set()
    for spool in find_spools(sweep_dir):
        for base, point in read_points(spool):
            key = (point.measurement, base.get("node", point.tags.get("node")), point.time_ms)
            if key not in stored:
                missing.append(f"{key} not stored")
            elif key in seen and point.measurement != "cpu_core":
                missing.append(f"{key} spooled twice")  # one series, one time: one point
            seen.add(key)
    return missing


def _vm_counts(server, sweep_id: str, expected: Counter, timeout_s: float = 60.0) -> Counter:
    deadline = time.monotonic() + timeout_s
    while True:
        counts = Counter()
        for series in vm_export(server.url, f'{{sweep="{sweep_id}"}}'):
            counts[series["metric"]["__name__"]] += len(series["values"])
        if counts == expected or time.monotonic() > deadline:
            return counts
        time.sleep(0.5)  # VictoriaMetrics makes fresh samples searchable within ~1 s


# Recent: VictoriaMetrics drops samples older than its retention (1 month by default).
T0_MS = (int(time.time()) - 3600) * 1000


def _synthetic_sweep(sweep_dir: Path, ticks: int = 400) -> None:
    for node in ("n1", "n2"):
        writer = SpoolWriter(sweep_dir / "cells" / "c1" / "metrics" / node,
                             {"sweep": "syn", "node": node, "host": "h"},
                             segment_max_bytes=20_000)
        for i in range(ticks):
            t_ms = T0_MS + i * 100
            writer.append([
                lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": i / 4}, t_ms),
                lineproto.encode("net", {"interface": "lo", "role": "worker"},
                                 {"sent_bytes": 1000 * i, "ok": True}, t_ms)])
        writer.close()


def test_ship_v1_exact_values_and_resume(tmp_path, influxdb):
    _synthetic_sweep(tmp_path / "sweep")
    assert ship_sweep(tmp_path / "sweep", _v1(influxdb), batch_points=300) == 1600
    assert ship_sweep(tmp_path / "sweep", _v1(influxdb)) == 0  # already delivered
    series = influx_query(influxdb.url, "edgeprof",
                          "SELECT cpu_percent FROM cpu WHERE node = 'n2'")
    values = series[0]["values"]
    assert [v[1] for v in values] == [i / 4 for i in range(400)]
    assert values[7][0] == T0_MS + 700
    assert _influx_counts(influxdb, "syn") == Counter(cpu=800, net=800)


def test_ship_v2_cli_exact_counts(tmp_path, victoria):
    _synthetic_sweep(tmp_path / "sweep")
    result = CliRunner().invoke(ship, [str(tmp_path / "sweep"), "--influx-url", victoria.url,
                                       "--influx-org", "lab", "--influx-bucket", "edgeprof"])
    assert result.exit_code == 0, result.output
    assert "shipped 1600 points" in result.output
    _, samples = _expected(tmp_path / "sweep")
    assert _vm_counts(victoria, "syn", samples) == samples
    export = vm_export(victoria.url, '{__name__="cpu_cpu_percent", node="n1"}')
    assert export[0]["values"] == [i / 4 for i in range(400)]


def test_ship_to_absent_server_is_one_clear_error(tmp_path):
    _synthetic_sweep(tmp_path / "sweep", ticks=3)
    result = CliRunner().invoke(ship, [str(tmp_path / "sweep"), "--influx-url",
                                       "http://127.0.0.1:9", "--influx-db", "x"])
    assert result.exit_code == 2 and "health check" in result.output


OUTAGE_POINTS = 300  # about two seconds of two agents at --interval 0.1


def _wait_until(done, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``done()`` until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def _agent(sweep_dir: Path, node: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "profiler.agent", "--node", node, "--interval", "0.1",
         "--spool", str(sweep_dir / "cells" / "c1" / "metrics" / node),
         "--interfaces", "lo", "--tag", "sweep=outage"],
        stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.parametrize("kind", ["influxdb1", "victoria-metrics"])
def test_outage_mid_run_every_point_exactly_once(tmp_path, kind):
    need_binary("influxd" if kind == "influxdb1" else "victoria-metrics")
    server = LocalServer(kind, tmp_path / kind).start()
    target = _v1(server) if kind == "influxdb1" else _v2(server)
    sweep = tmp_path / "sweep"
    agents = [_agent(sweep, node, tmp_path / f"agent-{node}.log") for node in ("n1", "n2")]
    shipper = LiveShipper(sweep, target, interval_s=0.2).start()
    shipper.watch(sweep / "cells" / "c1")  # as the sweep does for a running cell
    def spooled() -> int:
        return sum(_expected(sweep)[0].values())

    try:
        _wait_until(lambda: shipper.points_sent > 0, "the shipper delivers before the outage")
        server.stop()  # the outage: agents keep sampling, the shipper keeps retrying
        at_outage = spooled()
        _wait_until(lambda: spooled() >= at_outage + OUTAGE_POINTS,
                    f"{OUTAGE_POINTS} points spooled during the outage")
        server.start()  # same port, same data
        at_restart = spooled()
        _wait_until(lambda: shipper.points_sent >= at_restart,
                    "the shipper catches up after the outage")
        for agent in agents:
            os.killpg(agent.pid, signal.SIGTERM)
            assert agent.wait(timeout=5) == 0
        shipper.finish(sweep / "cells" / "c1")
        shipper.stop()
        points, samples = _expected(sweep)
        assert sum(points.values()) >= at_restart >= at_outage + OUTAGE_POINTS
        if kind == "influxdb1":
            assert _influx_counts(server, "outage") == points, _influx_missing(server, sweep)
        else:
            assert _vm_counts(server, "outage", samples) == samples
        assert shipper.points_sent == sum(points.values())
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
        server.stop()


@pytest.mark.parametrize("kind", ["influxdb1", "victoria-metrics"])
def test_real_sweep_ships_every_point_live(tmp_path, kind):
    """``edgeprof sweep`` with the influx options: a real 2-worker MXNet cell."""
    need_binary("influxd" if kind == "influxdb1" else "victoria-metrics")
    server = LocalServer(kind, tmp_path / kind).start()
    influx = (["--influx-db", "edgeprof"] if kind == "influxdb1"
              else ["--influx-org", "lab", "--influx-bucket", "edgeprof"])
    out = tmp_path / "sweep"
    try:
        run = subprocess.run(
            [sys.executable, "-m", "profiler.cli", "sweep", "--model", "lenet-mlp",
             "--batch", "32", "--devices", "2", "--sync", "sync", "--max-samples", "300",
             "--epochs", "1", "--out", str(out), "--interval", "0.2",
             "--influx-url", server.url, *influx],
            capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-2000:]
        import csv
        row = next(csv.DictReader(open(out / "results.csv")))
        assert row["status"] == "ok"
        for column in ("cpu_percent_mean", "mem_used_mb_mean", "rss_mb_peak", "net_sent_kb"):
            assert float(row[column]) > 0, column
        sweep_id = row["sweep_id"]
        points, samples = _expected(out)
        assert sum(points.values()) > 50
        assert {"cpu", "mem", "net", "proc"} <= set(points)
        if kind == "influxdb1":
            assert _influx_counts(server, sweep_id) == points
        else:
            assert _vm_counts(server, sweep_id, samples) == samples
    finally:
        server.stop()


def test_rejected_lines_are_quarantined_and_the_rest_stored_exactly_once(tmp_path, influxdb):
    """InfluxDB 1.6.7 answers 400 "partial write" for a batch with a field type conflict
    (it stores the good points); the shipper bisects, so every good point is stored
    once and only the bad lines end in the quarantine file."""
    spool = tmp_path / "sweep" / "cells" / "c1" / "metrics" / "n1"
    writer = SpoolWriter(spool, {"sweep": "q", "node": "n1", "host": "h"})
    good, bad = [], []
    for i in range(1000):
        line = lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": i / 4},
                                T0_MS + i * 10)
        if i in (10, 517):  # an integer where the field is a float: a type conflict
            line = lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": i},
                                    T0_MS + i * 10)
            bad.append(line)
        elif i == 700:  # a line the server cannot parse
            line = "garbage line here"
            bad.append(line)
        else:
            good.append(i)
        writer.append([line])
    writer.close()
    target = _v1(influxdb)
    assert ship_sweep(tmp_path / "sweep", target, batch_points=300) == len(good)
    series = influx_query(influxdb.url, "edgeprof", "SELECT cpu_percent FROM cpu")
    times = [v[0] for v in series[0]["values"]]
    assert times == [T0_MS + i * 10 for i in good]  # each good point once, in order
    assert [v[1] for v in series[0]["values"]] == [i / 4 for i in good]
    from profiler.agent.shipping.ship import quarantine_path
    quarantined = quarantine_path(spool, target).read_text().splitlines()
    kept = [line for line in quarantined if not line.startswith("#")]
    assert len(kept) == 3 and kept[0].startswith("cpu,") and "node=n1" in kept[0]
    assert "cpu_percent=10i" in kept[0] and "cpu_percent=517i" in kept[1]
    assert kept[2].startswith("garbage")
    assert all("HTTP 400" in line for line in quarantined if line.startswith("#"))
    state_file = spool / f"ship-{target.key}.json"
    state = json.loads(state_file.read_text())
    assert state["points"] == len(good) and state["quarantined"] == 3
    # Resolved batches are not sent or quarantined again.
    assert ship_sweep(tmp_path / "sweep", target) == 0
    assert quarantine_path(spool, target).read_text().splitlines() == quarantined
    assert json.loads(state_file.read_text())["points"] == len(good)


def _finished_cell(sweep: Path, cell: str, ticks: int = 20) -> Path:
    cell_dir = sweep / "cells" / cell / "attempt-1"
    writer = SpoolWriter(cell_dir / "metrics" / "n1",
                         {"sweep": "live", "cell": cell, "node": "n1", "host": "h"})
    for i in range(ticks):
        writer.append([lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": 1.0},
                                        T0_MS + i * 100)])
    writer.close()
    return cell_dir


def test_live_shipper_leaves_finished_cells_alone(tmp_path, influxdb, monkeypatch):
    """A sweep-like layout with many finished cells: once drained, they cost nothing
    per round, and points appended later to a finished spool are not shipped live."""
    from profiler.agent import spool_reader as spool_mod

    sweep = tmp_path / "sweep"
    cells = [_finished_cell(sweep, f"c{i:02d}") for i in range(40)]
    shipper = LiveShipper(sweep, _v1(influxdb), interval_s=0.05).start()
    try:
        for cell_dir in cells:
            shipper.watch(cell_dir)
            shipper.finish(cell_dir)
        deadline = time.monotonic() + 30
        while shipper.points_sent < 40 * 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shipper.points_sent == 40 * 20
        time.sleep(0.3)  # let the round that delivered the last point end

        calls = []
        for name in ("find_spools", "read_batch", "segments"):
            real = getattr(spool_mod, name)
            monkeypatch.setattr(spool_mod, name, lambda *a, _real=real, _name=name, **k: (
                calls.append((_name, Path(a[0]))), _real(*a, **k))[1])
        with open(cells[0] / "metrics" / "n1" / "seg-000001.lp", "a") as handle:
            handle.write(lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": 2.0},
                                          T0_MS + 99_000) + "\n")
        time.sleep(1.0)  # about 20 rounds
        assert calls == []  # no walk of the sweep, no finished spool opened

        running = _finished_cell(sweep, "c99", ticks=5)
        shipper.watch(running)
        deadline = time.monotonic() + 10
        while shipper.points_sent < 40 * 20 + 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shipper.points_sent == 40 * 20 + 5
        assert calls and all(path.is_relative_to(running) for _, path in calls)
    finally:
        assert shipper.stop(timeout_s=10) == 40 * 20 + 5
    assert _influx_counts(influxdb, "live") == Counter(cpu=40 * 20 + 5)
    records = (sweep / "shipper-traffic.jsonl").read_text().splitlines()
    assert sum(__import__("json").loads(r)["requests"] for r in records) >= 41


def test_live_shipper_stop_is_bounded_when_the_server_does_not_answer(tmp_path, caplog):
    """A server that accepts connections and never answers must not hold the sweep:
    ``stop`` returns within its budget and says the points stay in the spools."""
    import logging
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # never accepted, never answered: requests wait for their timeout
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        cell = _finished_cell(tmp_path / "sweep", "c1")
        shipper = LiveShipper(tmp_path / "sweep", InfluxTarget(url=url, db="edgeprof"),
                              interval_s=0.1).start()
        shipper.watch(cell)
        time.sleep(0.5)
        with caplog.at_level(logging.WARNING):
            started = time.monotonic()
            assert shipper.stop(timeout_s=2.0) == 0
            took_s = time.monotonic() - started
        assert took_s < 4.0, took_s
        assert any("run edgeprof ship" in r.getMessage() for r in caplog.records)
        assert len(list(read_points(cell / "metrics" / "n1"))) == 20  # still spooled
    finally:
        silent.close()
