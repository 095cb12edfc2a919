"""The chaos soak, 3 minutes of it: sweeps of every engine under seeded random faults.

Real: ``benchmarks/soak.py`` as a user runs it (root, the emulated cluster, a real
InfluxDB 1.6 on loopback, tmpfs spools), seed 7: sweeps of mxnet and torch (both sync
modes), torch-ddp and horovod, with a fault every ~8 s drawn from every kind the driver
has. It must exit 0, i.e. every check of ``soak_checks`` held: one final record per
planned cell, each record as its faults say, ``--resume`` completing every grid, every
spooled point in InfluxDB exactly once, the controller's memory bounded, nothing left.
The unit half checks the checks: what each fault makes a record say.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, need_binary, need_root

sys.path.insert(0, str(ROOT / "benchmarks"))

import soak_checks


@pytest.mark.parametrize("kinds, status", [
    ([], "ok"), (["kill_agent", "link_down"], "ok"), (["enospc"], "ok"),
    (["kill_worker"], "failed"), (["kill_scheduler"], "failed"),
    (["sigstop_worker"], "timeout"), (["sigterm_controller"], "failed"),
    (["kill_controller"], None)])
def test_what_each_fault_makes_a_record_say(kinds, status):
    assert soak_checks.expected(kinds)[0] == status


def test_a_record_that_disagrees_with_its_faults_fails_the_check(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    recs = [{"cell_id": "a", "attempt": 1, "status": "ok", "reason": "", "engine": "mxnet",
             "sync": "sync"},
            {"cell_id": "b", "attempt": 1, "status": "failed", "engine": "mxnet",
             "sync": "sync", "reason": "server-0 was killed by SIGKILL: ..."}]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    sweep = {"name": "s", "out": str(out), "planned": 2, "runs": 1, "exit": 0}
    faults = [{"kind": "kill_worker", "sweep": "s", "cell_id": "b", "attempt": 1, "wall": 1.0}]
    checks = {c.name: c for c in soak_checks.check_records([sweep], faults)}
    agree = checks["status and reason agree with the faults"]
    assert not agree.ok and "kill_worker" in agree.problems[0]
    assert checks["one final record per planned cell"].ok
    faults[0]["kind"] = "kill_server"
    checks = {c.name: c for c in soak_checks.check_records([sweep], faults)}
    assert all(c.ok for c in checks.values()), checks


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_three_minutes_of_sweeps_under_random_faults_lose_and_leave_nothing(tmp_path):
    need_root()
    for binary in ("influxd", "ip", "tc", "ethtool", "nsenter", "mount"):
        need_binary(binary)
    workdir = tmp_path / "soak"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"),
                           "--minutes", "3", "--seed", "7", "--mean-gap-s", "8",
                           "--batches", "64", "--workdir", str(workdir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=540, check=False)
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = json.loads((workdir / "summary.json").read_text())
    assert sum(summary["faults"].values()) >= 6, summary
    assert len(summary["faults"]) >= 4, summary  # many kinds, not one over and over
    assert summary["points"]["delivered"] > 1000, summary


class _Server:
    """Takes every batch (what ``ship._drain`` asks of a writer)."""

    def __init__(self):
        self.lines: list[str] = []

    def write(self, lines):
        self.lines += lines


def test_a_shipper_killed_while_saving_its_position_leaves_no_temp_file(tmp_path):
    """Found by the soak: a controller killed (SIGKILL) while its live shipper replaced
    ``ship-<target>.json`` left ``.ship-<target>.json.XXXX.tmp`` in the spool for good.
    The next drain of that spool (under the shipping lock, so no writer is alive)
    removes it, and ships from the saved position as before."""
    from profiler.agent import lineproto
    from profiler.agent.spool import SpoolWriter
    from profiler.agent.shipping.ship import _state_path, drain_spool
    from profiler.agent.shipping.targets import InfluxTarget

    spool = tmp_path / "spool"
    writer = SpoolWriter(spool, {"node": "n1"})
    writer.append([lineproto.encode("cpu", {}, {"cpu_percent": 1.0}, 1000 + i)
                   for i in range(5)])
    writer.close()
    target = InfluxTarget(url="http://127.0.0.1:9", db="edgeprof")
    stale = _state_path(spool, target).with_name(
        f".{_state_path(spool, target).name}.k1ll3d.tmp")
    stale.write_text('{"segment": 1, "off')  # torn mid-write
    server = _Server()
    assert drain_spool(spool, target, server) == 5
    assert not stale.exists()
    assert [p.name for p in spool.iterdir() if p.name.endswith(".tmp")] == []
    assert drain_spool(spool, target, server) == 0 and len(server.lines) == 5
