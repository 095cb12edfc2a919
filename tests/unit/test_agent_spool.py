"""The spool: append-only segments, torn lines, the size bound, positions for shipping."""

import logging

from profiler.agent import lineproto
from profiler.agent.spool import SpoolWriter, segments
from profiler.agent.spool_reader import Position, find_spools, read_batch, read_points


def _tick(i: int, n: int = 3) -> list[str]:
    return [lineproto.encode("m", {"k": str(j)}, {"i": i}, 1000 + i) for j in range(n)]


def test_points_read_back_in_order_with_base_tags(tmp_path):
    writer = SpoolWriter(tmp_path, {"node": "n1"})
    for i in range(5):
        writer.append(_tick(i))
    writer.close()
    points = list(read_points(tmp_path))
    assert len(points) == 15 and writer.points_written == 15
    assert [p.fields["i"] for _, p in points] == [i for i in range(5) for _ in range(3)]
    assert all(base == {"node": "n1"} for base, _ in points)
    lines, position, lost = read_batch(tmp_path, Position(), 100)
    assert len(lines) == 15 and lost == 0 and lines[0].startswith("m,node=n1,k=0 ")
    assert read_batch(tmp_path, position, 100)[0] == []


def test_batches_resume_exactly_where_they_stopped(tmp_path):
    writer = SpoolWriter(tmp_path, {"node": "n1"}, segment_max_bytes=200)
    for i in range(20):
        writer.append(_tick(i))
    assert len(segments(tmp_path)) > 3  # rotation happened
    seen, position = [], Position()
    while True:
        lines, position, _ = read_batch(tmp_path, position, 7)
        if not lines:
            break
        seen += lines
    writer.append(_tick(99))  # appended after the reader caught up: read next time
    lines, position, _ = read_batch(tmp_path, position, 7)
    writer.close()
    assert len(seen) == 60 and len(set(seen)) == 60 and len(lines) == 3
    assert [lineproto.parse(line).fields["i"] for line in seen] == sorted(
        lineproto.parse(line).fields["i"] for line in seen)


def test_restart_opens_a_new_segment_and_skips_a_torn_line(tmp_path):
    first = SpoolWriter(tmp_path, {"node": "n1"})
    first.append(_tick(1))
    # A crash in the middle of a write leaves half a line at the end of the segment.
    with open(segments(tmp_path)[0][1], "a") as handle:
        handle.write("m,k=0 i=2")
    second = SpoolWriter(tmp_path, {"node": "n1"})  # the restarted agent
    second.append(_tick(3))
    second.close()
    assert [n for n, _ in segments(tmp_path)] == [1, 2]
    assert [p.fields["i"] for _, p in read_points(tmp_path)] == [1, 1, 1, 3, 3, 3]
    assert len(read_batch(tmp_path, Position(), 100)[0]) == 6
    assert find_spools(tmp_path) == [tmp_path]


def test_size_bound_drops_oldest_segments_loudly(tmp_path, caplog):
    writer = SpoolWriter(tmp_path, {"node": "n1"}, segment_max_bytes=1000, max_bytes=3000)
    reader_position = Position()
    _, reader_position, _ = read_batch(tmp_path, reader_position, 1)  # reads segment 1
    with caplog.at_level(logging.WARNING):
        for i in range(200):
            writer.append(_tick(i))
    writer.close()
    sizes = [path.stat().st_size for _, path in segments(tmp_path)]
    assert sum(sizes) <= 3000 + 1000
    assert writer.points_dropped > 0 and "oldest segment" in caplog.text
    kept = [p.fields["i"] for _, p in read_points(tmp_path)]
    assert kept[-1] == 199  # the newest data is kept
    assert writer.points_dropped + len(kept) == 600
    lines, _, lost = read_batch(tmp_path, reader_position, 10_000)
    assert lost > 0 and len(lines) == len(kept)
