"""Fuzz: agent spools from outside (a node's ``metrics/<node>/seg-*.lp``: line protocol
under a ``# tags {json}`` header), read by the cell summary (``summarize_cell``), by the
report's per-node series (``read_cell_series``) and by ``edgeprof ship`` (in-process,
CliRunner) into the real InfluxDB 1.6.7.

Property: a line the reader cannot use is skipped (summary, report) or quarantined by
the server with its reason (ship); no other exception escapes; summaries hold finite
numbers only; every complete line is delivered or quarantined, none twice; nothing is
written outside the sweep folder. ~8 s (+ ~2 s to start InfluxDB).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from profiler.agent import lineproto
from profiler.errors import EdgeprofError
from profiler.metrics.summary import summarize_cell
from profiler.report.sweep_data import read_cell_series
from tests.conftest import need_binary
from tests.fuzz.hostile import (
    DEEP_JSON,
    FUZZ,
    TRAVERSALS,
    corrupted_text,
    snapshot,
    writes_outside,
)

T0_MS = 1_000_000_000_000
HEADER = lineproto.header({"node": "n1", "sweep": "fuzz", "cell": "c1"}).rstrip("\n")
GOOD = [lineproto.encode("cpu", {"role": "worker"}, {"cpu_percent": 50.0, "cores": 4.0},
                         T0_MS + i * 1000) for i in range(3)] + [
        lineproto.encode("mem", {}, {"used_mb": 100.0}, T0_MS + 1000),
        lineproto.encode("proc", {"role": "worker", "proc": "w0"}, {"rss_mb": 10.0},
                         T0_MS + 1000),
        lineproto.encode("net", {"interface": "eth0"},
                         {"sent_bytes": 1, "recv_bytes": 2, "sent_packets": 3,
                          "recv_packets": 4}, T0_MS + 1000),
        lineproto.encode("throttle", {}, {"flags": 5}, T0_MS + 1000),
        lineproto.encode("cpu_freq", {}, {"freq_mhz": 600.0}, T0_MS + 1000)]
VALUES = ["nan", "NaN", "inf", "-inf", "1e999", "1" * 400 + "i", "-" + "9" * 30 + "i",
          '"text"', "t", "", "1.5i", "0x10", "1_0", "\u0661", "--1"]
TIMES = ["", "1.5", "9" * 40, "-1", "nan", "1e3", "abc"]
CASES = {"summary+report": 0, "ship": 0}


@st.composite
def hostile_line(draw) -> str:
    measurement = draw(st.sampled_from(["cpu", "mem", "proc", "net", "throttle", "cpu_freq",
                                        "x", "", "cpu\\", "cpu,"]))
    field = draw(st.sampled_from(["cpu_percent", "used_mb", "rss_mb", "sent_bytes", "flags",
                                  "freq_mhz", "cores", "", "=", "a b"]))
    tags = draw(st.sampled_from(["", ",role=worker", ",interface=eth0", ",role",
                                 ",=x", ",role=worker,role=server",
                                 *[f",interface={t}" for t in TRAVERSALS if t]]))
    value = draw(st.one_of(st.sampled_from(VALUES), st.floats().map(repr),
                           st.integers().map(lambda i: f"{i}i")))
    time_text = draw(st.one_of(st.sampled_from(TIMES),
                               st.integers(T0_MS - 5000, T0_MS + 5000).map(str)))
    return draw(st.sampled_from([f"{measurement}{tags} {field}={value} {time_text}",
                                 f"{measurement}{tags} {field}={value}",
                                 draw(st.text(max_size=30)).replace("\n", " ")]))


@st.composite
def spool_bytes(draw) -> bytes:
    header = draw(st.sampled_from([
        HEADER, "# tags [1, 2]", '# tags {"node": [1]}', '# tags {"node": {"a": 1}}',
        "# tags {", "# tags " + DEEP_JSON, '# tags {"node": null, "sweep": 1.5}', "# other"]))
    lines = draw(st.lists(st.one_of(st.sampled_from(GOOD), hostile_line()), max_size=12))
    return draw(corrupted_text([header, *lines]))


def _cell(root: Path, spool: bytes) -> Path:
    node = root / "sweep" / "cells" / "c1" / "attempt-1" / "metrics" / "n1"
    node.mkdir(parents=True)
    (node / "seg-000001.lp").write_bytes(spool)
    return node.parent.parent


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


NAN_LINE = (b"cpu,role=worker cpu_percent=nan 1000000000500\n")
HUGE_INT_LINE = (f"proc,role=worker rss_mb={'9' * 400}i 1000000000500\n".encode())


@settings(FUZZ, max_examples=80)
@given(spool_bytes())
@example(f"{HEADER}\n".encode() + b"cpu cpu_percent=\xff\xfe 1000000000500\n"
         ).via("a line that is not UTF-8")
@example(f"{HEADER}\n".encode() + b"garbage\n").via("a line without fields or time")
@example(f"{HEADER}\n".encode() + NAN_LINE).via("a NaN field, which the agent never writes")
@example(f"{HEADER}\n".encode() + HUGE_INT_LINE).via("an integer past int64")
@example(b"# tags [1, 2]\n" + GOOD[0].encode() + b"\n").via("a header that is a JSON list")
@example(b'# tags {"node": [1]}\n' + GOOD[0].encode() + b"\n").via("a header tag that is a list")
@example(("# tags " + DEEP_JSON + "\n").encode()).via("a header nested too deep")
def test_summary_and_report_skip_what_they_cannot_read(spool):
    CASES["summary+report"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cell_dir = _cell(root, spool)
        before = snapshot(root)
        try:
            row = summarize_cell(cell_dir, ["n1"], T0_MS / 1000, T0_MS / 1000 + 2)
            assert _finite(row), row
            series = read_cell_series(cell_dir / "metrics",
                                      {"launched_at": T0_MS / 1000, "reaped_at": T0_MS / 1000 + 2})
            assert _finite(series), series
            json.dumps(row, allow_nan=False)
        except EdgeprofError as exc:
            assert "\n" not in str(exc)
        assert writes_outside(before, snapshot(root), root / "sweep") == []


@pytest.fixture(scope="module")
def influx(tmp_path_factory):
    from tests.support.servers import LocalServer
    need_binary("influxd")
    server = LocalServer("influxdb1", tmp_path_factory.mktemp("influxdb")).start()
    yield server.url
    server.stop()


@settings(FUZZ, max_examples=50)
@given(spool=spool_bytes())
@example(spool=f"{HEADER}\n".encode() + b"cpu cpu_percent=\xff\xfe 1000000000500\n"
         ).via("ship: a line that is not UTF-8")
@example(spool=b"# tags {\n" + GOOD[0].encode() + b"\n").via("ship: a torn header")
@example(spool=f"{HEADER}\n".encode() + NAN_LINE + HUGE_INT_LINE
         ).via("ship: NaN and an integer past int64")
@example(spool=f"{HEADER}\n".encode() + GOOD[0].encode() + b"\n"
         + b",interface=x\x00y cpu_percent=1 1000000004521\n" + GOOD[1].encode() + b"\n"
         ).via("ship: a refused line with a NUL (was retried as an outage, forever)")
def test_ship_delivers_or_quarantines_every_line(influx, spool):
    CASES["ship"] += 1
    from profiler.cli import cli
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cell_dir = _cell(root, spool)
        before = snapshot(root)
        done = CliRunner().invoke(cli, ["ship", str(root / "sweep"), "--influx-url", influx,
                                        "--influx-db", "edgeprof"])
        assert isinstance(done.exception, (SystemExit, type(None))), done.exc_info
        assert done.exit_code in (0, 2), done.output
        assert writes_outside(before, snapshot(root), root / "sweep") == []
        if done.exit_code == 2:
            assert done.output.count("\n") == 1, done.output
            return
        # Every complete line after the header: delivered or quarantined, once.
        body = spool.split(b"\n", 1)[1] if b"\n" in spool else b""
        complete = [line for line in body.split(b"\n")[:-1]
                    if line.strip() and not line.startswith(b"#")]
        state = json.loads(next((cell_dir / "metrics" / "n1").glob("ship-*.json")).read_text()
                           ) if complete else {"points": 0, "quarantined": 0}
        assert state["points"] + state["quarantined"] == len(complete), (state, complete)


def teardown_module() -> None:
    print(f"\nfuzz cases: {json.dumps(CASES)}")
