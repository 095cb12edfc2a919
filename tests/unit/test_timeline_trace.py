"""A cell's trace (profiler.timeline.trace) from step and event files written as the
workers write them: tracks per node and rank, phases nested in their steps, and a format
check that finds what viewers would draw wrongly."""

from __future__ import annotations

import json

from profiler.sweep.events import read_cell_events
from profiler.timeline.steps import load_cell_steps
from profiler.timeline.trace import EPOCH_TID, SERVER_TID, WORKER_TID, build_trace, check_trace
from workloads.steps import steps_path


def _cell(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    for rank, node, compute in ((0, "n1", 0.010), (1, "n2", 0.030)):
        lines = [{"epoch": 1, "step": s, "t": 100.0 + s * 0.05, "data_s": 0.001,
                  "compute_s": compute, "exchange_s": 0.045 - compute,
                  "step_s": 0.046} for s in range(3)]
        steps_path(events, "worker", rank).write_text(
            "".join(json.dumps(line) + "\n" for line in lines))
        (events / f"worker-{rank}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (
            {"event": "start", "t": 99.9, "rank": rank, "node": node},
            {"event": "epoch", "t": 100.15, "rank": rank, "epoch": 1, "epoch_s": 0.15},
            {"event": "end", "t": 100.2, "rank": rank})))
    steps_path(events, "server", 0).write_text("".join(json.dumps(
        {"round": r, "t": 100.0 + r * 0.05, "recv_s": 0.03, "update_s": 0.002,
         "send_s": 0.003}) + "\n" for r in range(3)))
    steps = load_cell_steps(events, sync=True, worker_nodes={0: "n1", 1: "n2"},
                            server_nodes={0: "n0"})
    return build_trace(steps, read_cell_events(events), "lenet-mlp b32 d2 sync torch")


def test_tracks_per_node_and_rank_with_phases_nested_in_steps(tmp_path):
    doc = _cell(tmp_path)
    assert check_trace(doc) == []
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"n0", "n1", "n2"}
    tracks = {(e["tid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert {(WORKER_TID, "worker 0"), (WORKER_TID + 1, "worker 1"),
            (EPOCH_TID, "worker 0 epochs"), (SERVER_TID, "server 0")} <= tracks
    slow = [e for e in events if e["ph"] == "X" and e["tid"] == WORKER_TID + 1]
    step = next(e for e in slow if e["name"] == "step 1.1")
    phases = [e for e in slow if e["name"] in ("data", "compute", "wait", "comm")
              and step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
    assert [e["name"] for e in phases] == ["data", "compute", "wait", "comm"]
    assert phases[1]["dur"] == 30000.0  # 30 ms of compute, in microseconds
    assert step["args"]["compute_ms"] == 30.0
    # Worker 0 reached the exchange 20 ms before worker 1: its wait (+ no server wait
    # beyond the 2 ms update) is on its track.
    fast_wait = next(e for e in events if e["tid"] == WORKER_TID and e["name"] == "wait"
                     and e["ts"] > 40000)
    assert fast_wait["dur"] == 22000.0
    markers = {e["name"] for e in events if e["ph"] == "i"}
    assert markers == {"start", "end"}
    epochs = [e for e in events if e["tid"] == EPOCH_TID and e["ph"] == "X"]
    assert [(e["name"], e["dur"]) for e in epochs] == [("epoch 1", 150000.0)]
    rounds = [e["name"] for e in events if e["tid"] == SERVER_TID and e["ph"] == "X"]
    assert rounds[:4] == ["round 0", "recv", "update", "send"]
    assert min(e["ts"] for e in events if "ts" in e) == 0.0
    json.dumps(doc)


def test_check_finds_what_viewers_draw_wrongly(tmp_path):
    doc = _cell(tmp_path)
    x = next(e for e in doc["traceEvents"] if e["ph"] == "X")

    def broken(change) -> list[str]:
        copy = json.loads(json.dumps(doc))
        change(copy["traceEvents"])
        return check_trace(copy)

    assert broken(lambda evs: evs.append({**x, "dur": None})), "dur not a number"
    assert broken(lambda evs: evs.append({k: v for k, v in x.items() if k != "dur"}))
    assert broken(lambda evs: evs.append({**x, "ts": -5.0}))
    assert broken(lambda evs: evs.append({**x, "pid": "n1"}))
    # A span that starts inside a step and ends after it: neither nested nor apart.
    assert broken(lambda evs: evs.append({**x, "name": "bad", "ts": x["ts"] + x["dur"] / 2,
                                          "dur": x["dur"]}))
    assert broken(lambda evs: evs.append({"ph": "M", "name": "colour", "pid": 1,
                                          "args": {}}))
    assert check_trace({"events": []}) == ["not an object with a traceEvents list"]
