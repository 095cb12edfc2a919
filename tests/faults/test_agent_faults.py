"""The spool's disk fills up: a real tmpfs as the spool, a real agent process.

The documented policy (profiler/agent/spool.py, docs/metrics.md): a tick that cannot be
written is dropped and counted, a WARNING is logged, the agent keeps sampling, a torn
tick closes its segment, and writing resumes by itself when space returns.
"""

import logging
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from profiler.agent import lineproto
from profiler.agent.spool import SpoolWriter, segments
from profiler.agent.spool_reader import Position, read_batch, read_points
from tests.conftest import need, need_root

pytestmark = pytest.mark.integration


@contextmanager
def tmpfs(path: Path, size: str):
    """A tiny filesystem of its own at ``path`` (unmounted afterwards)."""
    need_root()
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(path)], capture_output=True, text=True)
    need(f"mount -t tmpfs ({mounted.stderr.strip()})", mounted.returncode == 0)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(path: Path) -> None:
    """Take every free byte of ``path``'s filesystem."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"x" * 512) == 512:
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _tick(i: int) -> list[str]:
    # About 1.4 KB a tick, like a 2-core node: ticks straddle page boundaries.
    return [lineproto.encode("cpu_core", {"core": str(core), "role": "worker"},
                             {"cpu_percent": i + core / 10, "user_percent": 1.5,
                              "system_percent": 2.5, "iowait_percent": 0.0}, 1000 + i)
            for core in range(12)]


def test_writer_counts_every_point_as_kept_or_dropped_on_a_full_disk(tmp_path, caplog):
    with tmpfs(tmp_path / "fs", "64k") as fs:
        (fs / "filler").write_bytes(b"x" * 16 * 1024)  # to give back later
        writer = SpoolWriter(fs / "spool", {"node": "n1"})
        appended = 0
        with caplog.at_level(logging.WARNING):
            for i in range(80):  # ~110 KB into 48 KB: must not raise
                writer.append(_tick(i))
                appended += 12
        assert writer.points_dropped > 0
        # The disk filled mid-tick: a short write left a torn line at the segment's end.
        assert not segments(fs / "spool")[-1][1].read_bytes().endswith(b"\n")
        assert writer.points_written + writer.points_dropped == appended
        warnings = [r.getMessage() for r in caplog.records if "cannot be written" in
                    r.getMessage()]
        assert len(warnings) == 1  # the first time; then at most once a minute

        # Every point counted as written reads back whole, in order; torn ones are gone.
        points = [p for _, p in read_points(fs / "spool")]
        assert len(points) == writer.points_written
        times = [p.time_ms for p in points]
        assert times == sorted(times)
        assert all(p.fields["user_percent"] == 1.5 for p in points)
        lines, position, lost = read_batch(fs / "spool", Position(), 10_000)
        assert len(lines) == writer.points_written and lost == 0

        # Space returns: the next tick goes into a new segment, never after torn bytes.
        written_before, last_segment = writer.points_written, segments(fs / "spool")[-1][0]
        dropped_before = writer.points_dropped
        (fs / "filler").unlink()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            writer.append(_tick(100))
        writer.close()
        assert writer.points_written == written_before + 12
        assert writer.points_dropped == dropped_before
        assert any("writable again" in r.getMessage() for r in caplog.records)
        last = [p for _, p in read_points(fs / "spool")][-12:]
        assert [p.time_ms for p in last] == [1100] * 12
        assert segments(fs / "spool")[-1][0] == last_segment + 1  # a new segment
        assert len([p for _, p in read_points(fs / "spool")]) == writer.points_written


def test_open_of_a_new_segment_on_a_full_disk_is_retried(tmp_path):
    with tmpfs(tmp_path / "fs", "64k") as fs:
        (fs / "spool").mkdir()
        _fill(fs / "filler")
        writer = SpoolWriter(fs / "spool", {"node": "n1"})  # no room even for a header
        writer.append(_tick(1))
        assert writer.points_dropped == 12 and segments(fs / "spool") == []
        assert not [p for p in (fs / "spool").iterdir()]  # no half-made segment left
        (fs / "filler").unlink()
        writer.append(_tick(2))
        writer.close()
        assert [p.time_ms for _, p in read_points(fs / "spool")] == [1002] * 12


def _agent_points(spool: Path) -> list:
    return [p for _, p in read_points(spool)]


def test_agent_keeps_sampling_through_a_full_spool_disk(tmp_path):
    with tmpfs(tmp_path / "fs", "64k") as fs:
        filler = fs / "filler"
        with open(filler, "wb") as handle:
            handle.write(b"x" * 40 * 1024)
        log_path = tmp_path / "agent.log"  # not on the full disk
        agent = subprocess.Popen(
            [sys.executable, "-m", "profiler.agent", "--node", "n1", "--spool",
             str(fs / "spool"), "--interval", "0.1", "--interfaces", "lo",
             "--tag", "sweep=full"],
            stdout=open(log_path, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while "cannot be written" not in log_path.read_text():
                assert agent.poll() is None, log_path.read_text()[-2000:]
                assert time.monotonic() < deadline, "the disk never filled"
                time.sleep(0.2)
            assert "WARNING" in log_path.read_text()
            time.sleep(1.0)  # ~10 ticks on a full disk
            assert agent.poll() is None, log_path.read_text()[-2000:]
            full_count = len(_agent_points(fs / "spool"))

            filler.unlink()  # space returns: sampling shows up in the spool again
            deadline = time.monotonic() + 30
            while len(_agent_points(fs / "spool")) < full_count + 50:
                assert agent.poll() is None, log_path.read_text()[-2000:]
                assert time.monotonic() < deadline, "writing never resumed"
                time.sleep(0.2)
            assert "writable again" in log_path.read_text()

            os.killpg(agent.pid, signal.SIGTERM)
            assert agent.wait(timeout=10) == 0
            points = _agent_points(fs / "spool")
            dropped = [p.fields["points_dropped"] for p in points if p.measurement == "agent"]
            assert dropped[-1] > 0  # the loss is visible in the data itself
            assert "Traceback" not in log_path.read_text()
        finally:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
