"""The InfluxDB server is down for a whole live-shipping sweep.

The sweep must finish (every cell ``ok``, exit 0) without the shipper holding its exit;
``edgeprof ship`` afterwards, with the server back on the same port and data, delivers
every spooled point exactly once (points per measurement in the server equal points
per measurement in the spools), and a second ``ship`` sends nothing.
"""

import csv
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from profiler.agent.spool_reader import find_spools, read_points
from tests.support.servers import LocalServer, influx_query
from tests.conftest import need_binary

pytestmark = pytest.mark.integration

SWEEP_TIMEOUT_S = 240


def _spooled(sweep_dir: Path, attempt: str | None = None) -> Counter:
    """Points spooled under ``sweep_dir`` by measurement (only ``attempt``'s, if given)."""
    counts = Counter()
    for spool in find_spools(sweep_dir):
        if attempt is not None and attempt not in Path(spool).parts:
            continue
        for _, point in read_points(spool):
            counts[point.measurement] += 1
    return counts


def _stored(url: str, sweep_id: str) -> Counter:
    counts = Counter()
    for series in influx_query(url, "edgeprof",
                               f"SELECT * FROM /.*/ WHERE sweep = '{sweep_id}'"):
        counts[series["name"]] += len(series["values"])
    return counts


def _ship(sweep_dir: Path, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler.cli", "ship", str(sweep_dir),
                           "--influx-url", url, "--influx-db", "edgeprof"],
                          capture_output=True, text=True, timeout=120)


def test_server_down_for_the_whole_sweep_then_ship_delivers_exactly_once(tmp_path):
    need_binary("influxd")
    server = LocalServer("influxdb1", tmp_path / "influxdb").start()
    url = server.url
    server.stop()  # down before the sweep starts, for all of it
    out = tmp_path / "sweep"
    try:
        run = subprocess.run(
            [sys.executable, "-m", "profiler.cli", "sweep", "--model", "lenet-mlp",
             "--devices", "1,2", "--sync", "sync", "--batch", "32", "--max-samples", "512",
             "--val-samples", "128", "--interval", "0.5", "--out", str(out),
             "--influx-url", url, "--influx-db", "edgeprof"],
            capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S)
        exited_at = time.time()
        assert run.returncode == 0, run.stderr[-3000:]
        rows = list(csv.DictReader(open(out / "results.csv")))
        assert len(rows) == 2 and {row["status"] for row in rows} == {"ok"}, rows
        # The shipper's backoff and final drain do not hold the exit: a server that never
        # answered is tried once at the end, not for the shipper's 30 s stop budget (which
        # took the sweep to 35 s). From the last cell's end to the exit, not the whole
        # sweep, whose cells a busy host slows: ~1 s here, 30 s with the budget spent.
        last_reaped_at = max(json.loads(line)["reaped_at"]
                             for line in (out / "results.jsonl").read_text().splitlines())
        assert exited_at - last_reaped_at < 20, exited_at - last_reaped_at
        assert "health check" in run.stderr  # said once, at WARNING
        assert "it has not answered during this run, so it is not waited for" in run.stderr
        assert "did not finish within" not in run.stderr

        spooled = _spooled(out)
        # Every resource the agent samples, from both cells; how many points depends on
        # how fast the host trained, so no total is asked for (see the test below).
        assert {"cpu", "mem", "net", "proc"} <= set(spooled), spooled
        assert all(_spooled(cell)["cpu"] >= 1 for cell in (out / "cells").iterdir()), spooled

        server.start()  # same port, same (empty) data
        first = _ship(out, url)
        assert first.returncode == 0, first.stderr[-2000:]
        sent = int(re.search(r"shipped (\d+) points", first.stdout).group(1))
        assert sent == sum(spooled.values())
        assert _stored(url, rows[0]["sweep_id"]) == spooled
        second = _ship(out, url)
        assert second.returncode == 0 and "shipped 0 points" in second.stdout
        assert _stored(url, rows[0]["sweep_id"]) == spooled
    finally:
        server.stop()


def test_resume_delivers_what_a_killed_run_left_in_its_spools(tmp_path):
    """Found by the chaos soak (benchmarks/soak.py): a controller killed with SIGKILL
    leaves points its live shipper had not delivered (here: the server was down), and
    the resumed sweep's shipper watched only the cells it ran, so those points reached
    InfluxDB only if the user ran ``edgeprof ship``. Now ``--resume`` delivers them:
    after the resumed run, with no ``ship``, the server holds every spooled point."""
    need_binary("influxd")
    server = LocalServer("influxdb1", tmp_path / "influxdb").start()
    url = server.url
    server.stop()  # down while the first run spools
    out = tmp_path / "sweep"
    args = [sys.executable, "-m", "profiler.cli", "sweep", "--model", "lenet-mlp",
            "--devices", "1", "--batch", "64,8", "--max-samples", "4096",
            "--val-samples", "64", "--interval", "0.5", "--out", str(out),
            "--influx-url", url, "--influx-db", "edgeprof"]
    try:
        first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        # Killed as its second cell starts: the first cell is done and spooled, and the
        # second (512 steps) cannot end first on any host. (Killed 2 s later, a fast
        # host could have ended it, and the sweep with it, before the kill.)
        while time.monotonic() < deadline and not (
                (out / "results.jsonl").exists()
                and list(out.glob("cells/*/attempt-1/metrics/*/seg-*.lp"))
                and len(list(out.glob("cells/*/attempt-1"))) == 2):
            assert first.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.02)
        first.kill()
        first.wait()
        server.start()  # same port, same (empty) data
        resumed = subprocess.run([*args, "--resume"], capture_output=True, text=True,
                                 timeout=SWEEP_TIMEOUT_S)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        rows = list(csv.DictReader(open(out / "results.csv")))
        assert len(rows) == 2 and {row["status"] for row in rows} == {"ok"}, rows
        spooled = _spooled(out)
        # What the killed run left: its cells' first attempts (the resumed run reran the
        # interrupted cell as attempt 2). The first cell's agent sampled as it started
        # and as it stopped at least: each of the agent's resources is there, however
        # fast the host trained (the totals are not: a test once asked for more than
        # 100 points and a quick run spooled 94).
        left = _spooled(out, attempt="attempt-1")
        assert all(left[m] >= 1 for m in ("cpu", "mem", "net")), left
        assert _stored(url, rows[0]["sweep_id"]) == spooled
    finally:
        server.stop()
