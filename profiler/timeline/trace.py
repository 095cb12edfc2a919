"""A cell's timeline in the Trace Event Format: opens in chrome://tracing and ui.perfetto.dev.

One process (``pid``) per node, named after it; in it one track (``tid``) per worker
rank and per parameter server. On a worker's track each timed step is a span with its
phases as child spans, in the order they happened: ``data``, ``compute``, then the
exchange: ``wait`` first (a sync worker waits for the slowest one before its round's
transfer can end), then ``comm``. Epochs are spans on a track of their own per worker
(``epochs``: an epoch event's ``t`` is its end, ``epoch_s`` its length), the cell's
events (start, first step, end, error) are instant markers on the worker's track. A
server's rounds are spans with ``recv``, ``update`` and ``send`` inside. A pipeline
stage has a track of its micro-batches too: ``F3``/``B3``, micro-batch 3's forward
and backward on that stage, so the fill, the steady state and the drain (the bubble)
show stage by stage.

Times are microseconds from the cell's earliest stamp, on the controller's clock (the
step lines are already aligned, ``profiler.timeline.steps``); ``args`` carry the
numbers in ms. ``check_trace`` validates a document against the format's rules that
viewers rely on; the tests run it on every trace they make.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..fsutil import atomic_write_text

# Track ids: + the rank.
WORKER_TID, EPOCH_TID, SERVER_TID, MICRO_TID = 1000, 1500, 2000, 2500
MARKERS = ("start", "first_step", "end", "error")


def build_trace(steps, events, label: str) -> dict:
    """The trace of one cell attempt from its ``CellSteps`` and ``CellEvents``."""
    trace = _Trace(_origin(steps, events))
    nodes = sorted({*steps.worker_nodes.values(), *steps.server_nodes.values()})
    trace.pids.update((node, i + 1) for i, node in enumerate(nodes))
    for node, pid in trace.pids.items():
        trace.meta(pid, None, node, pid)
    for rank in sorted(set(steps.workers) | set(events.by_rank)):
        _worker_tracks(trace, rank, steps.workers.get(rank, []), events.by_rank.get(rank, []),
                       steps.worker_nodes.get(rank))
    for rank, lines in sorted(steps.servers.items()):
        _server_track(trace, rank, lines, steps.server_nodes.get(rank))
    return {"traceEvents": trace.out, "displayTimeUnit": "ms",
            "otherData": {"cell": label, "origin_unix_s": trace.origin,
                          "breakdown": (f"1 in {steps.sample_every} steps" if steps.sampled
                                        else "every step")}}


def _origin(steps, events) -> float:
    """The cell's earliest stamp: a step line's or an event's (an epoch's start)."""
    stamps = [line["t"] for lines in (*steps.workers.values(), *steps.servers.values())
              for line in lines]
    stamps += [e["t"] - (e.get("epoch_s") or 0.0) for evs in events.by_rank.values()
               for e in evs if isinstance(e.get("t"), (int, float))]
    return min(stamps, default=0.0)


class _Trace:
    """The events of a trace being built, in microseconds from ``origin``, and each
    node's process id."""

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self.pids: dict[str, int] = {}
        self.out: list[dict] = []

    def us(self, t: float) -> float:
        return round((t - self.origin) * 1e6, 1)

    def meta(self, pid: int, tid: int | None, value: str, sort: int) -> None:
        """Names a node's process (``tid`` None) or a track, and its place."""
        what = "process" if tid is None else "thread"
        self.out.append({"ph": "M", "name": f"{what}_name", "pid": pid, "tid": tid or 0,
                         "args": {"name": value}})
        self.out.append({"ph": "M", "name": f"{what}_sort_index", "pid": pid,
                         "tid": tid or 0, "args": {"sort_index": sort}})

    def span(self, name: str, pid: int, tid: int, start: float, dur_s: float, **args) -> None:
        self.out.append({"ph": "X", "name": name, "cat": "step", "pid": pid, "tid": tid,
                         "ts": self.us(start), "dur": round(max(0.0, dur_s) * 1e6, 1),
                         **({"args": args} if args else {})})

    def pid(self, node: str | None, key: str, name: str) -> int:
        """The process of ``node``; one of its own (``key``, named ``name``) for a
        process whose node is not known."""
        pid = self.pids.get(node, 0)
        if pid == 0:
            pid = self.pids.setdefault(key, len(self.pids) + 1)
            self.meta(pid, None, name, pid)
        return pid


def _worker_tracks(trace: _Trace, rank: int, lines: list[dict], events: list[dict],
                   node: str | None) -> None:
    """A worker's tracks: its steps with their phases, its epochs, its micro-batches
    (a pipeline stage) and its events as markers."""
    pid = trace.pid(node, f"rank {rank}", f"worker {rank}")
    trace.meta(pid, WORKER_TID + rank, f"worker {rank}", WORKER_TID + rank)
    trace.meta(pid, EPOCH_TID + rank, f"worker {rank} epochs", EPOCH_TID + rank)
    if any(line.get("spans") for line in lines):
        trace.meta(pid, MICRO_TID + rank, f"worker {rank} micro-batches", MICRO_TID + rank)
    for line in lines:
        _worker_step(trace.span, pid, WORKER_TID + rank, line)
        if line.get("spans"):  # a pipeline stage: its micro-batches' compute
            for kind, chunk, offset_s, dur_s in line["spans"]:
                trace.span(f"{'F' if kind == 'fwd' else 'B'}{chunk}", pid, MICRO_TID + rank,
                           line["t"] + offset_s, dur_s)
    for e in events:
        _worker_event(trace, pid, rank, e)


def _worker_event(trace: _Trace, pid: int, rank: int, e: dict) -> None:
    """An epoch as a span on the epochs track; a start, first step, end or error as a
    marker on the worker's track; nothing for other events."""
    kind = e.get("event")
    if kind == "epoch" and isinstance(e.get("epoch_s"), (int, float)):
        trace.span(f"epoch {e.get('epoch')}", pid, EPOCH_TID + rank, e["t"] - e["epoch_s"],
                   e["epoch_s"], epoch_s=e["epoch_s"], train_loss=e.get("train_loss"),
                   val_accuracy=e.get("val_accuracy"))
    elif kind in MARKERS:
        trace.out.append({"ph": "i", "s": "t", "name": kind, "cat": "event", "pid": pid,
                          "tid": WORKER_TID + rank, "ts": trace.us(e["t"]),
                          "args": {k: v for k, v in e.items()
                                   if k not in ("event", "t") and _plain(v)}})


def _server_track(trace: _Trace, rank: int, lines: list[dict], node: str | None) -> None:
    """A server's rounds, each with its recv, update and send inside."""
    pid = trace.pid(node, f"server {rank}", f"server {rank}")
    trace.meta(pid, SERVER_TID + rank, f"server {rank}", SERVER_TID + rank)
    for line in lines:
        at = line["t"]
        phases = [(p, line.get(f"{p}_s", 0.0)) for p in ("recv", "update", "send")]
        total = sum(d for _, d in phases)
        trace.span(f"round {line.get('round')}", pid, SERVER_TID + rank, at, total,
                   **{f"{p}_ms": round(d * 1e3, 3) for p, d in phases},
                   **({"worker": line["worker"]} if "worker" in line else {}))
        for phase, dur in phases:
            trace.span(phase, pid, SERVER_TID + rank, at, dur)
            at += dur


def _worker_step(span, pid: int, tid: int, line: dict) -> None:
    at = line["t"]
    phases = [(p, line.get(f"{p}_s", 0.0)) for p in ("data", "compute", "wait", "comm")]
    total = max(line.get("step_s", 0.0), sum(d for _, d in phases))
    span(f"step {line.get('epoch')}.{line.get('step')}", pid, tid, at, total,
         **{f"{p}_ms": round(d * 1e3, 3) for p, d in phases},
         **({"drain_ms": round(line["drain_s"] * 1e3, 3)} if "drain_s" in line else {}))
    for phase, dur in phases:
        span(phase, pid, tid, at, dur)
        at += max(0.0, dur)


def _plain(value) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


def write_trace(path: Path, doc: dict) -> None:
    atomic_write_text(Path(path), json.dumps(doc, separators=(",", ":")))


REQUIRED = {"X": ("name", "ts", "dur", "pid", "tid"), "i": ("name", "ts", "pid", "tid"),
            "M": ("name", "pid", "args")}
METADATA = ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
SLACK_US = 1.0  # rounding to 0.1 us may push a child a hair past its parent


def check_trace(doc) -> list[str]:
    """Problems that keep ``doc`` from being a Trace Event Format document viewers read
    as meant: required keys per phase, numbers where numbers go, metadata names, and
    complete events on one track either nested or apart, never half-overlapping (the
    viewers draw such spans wrongly). An empty list: none found."""
    problems: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not an object with a traceEvents list"]
    try:
        json.dumps(doc)
    except (TypeError, ValueError) as exc:
        problems.append(f"not JSON-serializable: {exc}")
    tracks: dict[tuple, list[tuple[float, float, str]]] = {}
    for i, e in enumerate(doc["traceEvents"]):
        problems += _event_problems(i, e)
        if _drawn_span(e):
            tracks.setdefault((e["pid"], e["tid"]), []).append(
                (e["ts"], e["ts"] + e["dur"], e["name"]))
    for (pid, tid), spans in tracks.items():
        problems += _overlaps(pid, tid, spans)
    return problems


def _event_problems(i: int, e) -> list[str]:
    """What is wrong with event ``i`` on its own: its phase, its keys, its numbers."""
    ph = e.get("ph") if isinstance(e, dict) else None
    if ph not in REQUIRED:
        return [f"event {i}: phase {ph!r} is not one of {sorted(REQUIRED)}"]
    missing = [k for k in REQUIRED[ph] if k not in e]
    if missing:
        return [f"event {i} ({ph}): missing {', '.join(missing)}"]
    problems = []
    if not all(isinstance(e.get(k), int) for k in ("pid", "tid") if k in e):
        problems.append(f"event {i}: pid and tid must be integers")
    if ph == "M":
        if e["name"] not in METADATA:
            problems.append(f"event {i}: unknown metadata {e['name']!r}")
        return problems
    for key in ("ts", "dur") if ph == "X" else ("ts",):
        if not isinstance(e[key], (int, float)) or e[key] < 0:
            problems.append(f"event {i}: {key} must be a number >= 0, is {e[key]!r}")
    if ph == "i" and e.get("s", "t") not in ("g", "p", "t"):
        problems.append(f"event {i}: instant scope {e.get('s')!r}")
    return problems


def _drawn_span(e) -> bool:
    """A complete event with its keys and a start and length in numbers: what the
    nesting check looks at (only after ``_event_problems``, which refuses a phase that
    cannot be looked up)."""
    return (isinstance(e, dict) and e.get("ph") == "X"
            and all(k in e for k in REQUIRED["X"])
            and all(isinstance(e[k], (int, float)) for k in ("ts", "dur")))


def _overlaps(pid, tid, spans: list[tuple[float, float, str]]) -> list[str]:
    """The spans of one track that start inside another and end after it."""
    problems = []
    open_: list[tuple[float, float, str]] = []
    for start, end, name in sorted(spans, key=lambda s: (s[0], -s[1])):
        while open_ and open_[-1][1] <= start + SLACK_US:
            open_.pop()
        if open_ and end > open_[-1][1] + SLACK_US:
            problems.append(f"track {pid}/{tid}: {name!r} at {start} overlaps "
                            f"{open_[-1][2]!r} without nesting in it")
        open_.append((start, end, name))
    return problems
