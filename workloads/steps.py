"""Where each step's time goes: per-step phase times of a worker or a parameter server.

Every training process of a cell writes ``EVENTS_DIR/steps-<role>-<rank>.jsonl``
(``worker`` ranks are the workers' 0..N-1, ``server`` ranks the torch parameter
servers' 0..S-1), one JSON object a line, beside its ``worker-<rank>.jsonl`` events.
Times are seconds; ``t`` is a ``time.time()`` stamp (the node's clock: the controller
aligns nodes with the offsets it measured when the cell started).

A worker's line, one per measured step::

    {"epoch": 1, "step": 5, "t": 1764000000.1, "data_s": 0.0004, "compute_s": 0.031,
     "exchange_s": 0.012, "step_s": 0.0436}

- ``step`` counts from 0 in each epoch; ``t`` is when the step began (its batch was
  being prepared).
- ``data_s``: the batch's preparation (indexing, normalizing, conversion).
- ``compute_s``: forward and backward, and the optimizer step where it runs locally.
- ``exchange_s``: time blocked in communication after the compute (push and pull, an
  allreduce, DDP's allreduce still running when backward's compute has ended). The
  controller splits it into communicating and waiting (``profiler.timeline.steps``):
  the wait for the slowest worker comes from the workers' arrival times at the same
  step, the wait for the server from the server's own lines.
- ``step_s``: the whole step, its first to its last instant.
- ``drain_s`` and ``every`` (sampled steps of an asynchronous engine only): the time to
  finish the previous steps' pending work before this step was timed alone, and one
  step in how many is timed.

A torch parameter server's line, one per round (sync: a push from every worker and one
update; async: one push)::

    {"round": 12, "t": 1764000000.2, "recv_s": 0.020, "update_s": 0.002, "send_s": 0.006,
     "worker": 3}

``recv_s`` is the time from being ready to receive to the last push of the round
(waiting for the slowest worker included), ``update_s`` the optimizer step, ``send_s``
answering the workers; ``worker`` (async only) is the rank that pushed.

Cost: lines are kept in memory as they are (no formatting in the hot loop) and written
at the end of each epoch, outside its timing, or every ``FLUSH_EVERY`` lines within a
long one (a killed worker loses at most its current epoch's last lines; its events are
written at once, ``workloads.events``). MXNet's engine runs asynchronously, so its
steps are timed on a sample (``SAMPLE_EVERY``, ``workloads.mxnet_worker``); a torch
process on a CPU is synchronous and every step is timed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

FLUSH_EVERY = 4096
# MXNet: time one step in SAMPLE_EVERY of an epoch, starting at its second (the first
# step of a run pays one-off costs): draining the engine before a timed step stops it
# overlapping that step with the previous one's communication (measured on LeNet-MLP's
# 1 ms loopback steps: one in ten cost MXNet 5% of its samples/s, one in 25 0.5%).
# Epochs shorter than SHORT_EPOCH steps (test-sized cells) time one in SHORT_EVERY, so
# that they have two or more timed steps; long ones about SAMPLES_PER_EPOCH steps each.
SAMPLE_EVERY = 25
SHORT_EPOCH, SHORT_EVERY = 100, 10
SAMPLES_PER_EPOCH = 20
BREAKDOWNS = ("on", "off")


def steps_path(events_dir: str | Path, role: str, rank: int) -> Path:
    return Path(events_dir) / f"steps-{role}-{rank}.jsonl"


def sample_every(steps_per_epoch: int) -> int:
    """One step in how many an asynchronous engine times (the same on every worker of
    a cell, so that their timed steps are the same rounds)."""
    if steps_per_epoch < SHORT_EPOCH:
        return SHORT_EVERY
    return max(SAMPLE_EVERY, steps_per_epoch // SAMPLES_PER_EPOCH)


def sampled(step: int, every: int = SAMPLE_EVERY) -> bool:
    """Whether an asynchronous engine times ``step`` (0-based in its epoch)."""
    return step % every == 1


class StepLog:
    """Buffered writer of one process's step lines; a disabled log writes nothing."""

    def __init__(self, events_dir: str | Path | None, role: str, rank: int,
                 enabled: bool = True):
        self.enabled = enabled and events_dir is not None
        self.path = steps_path(events_dir, role, rank) if self.enabled else None
        self._lines: list[dict] = []
        # Durations come from perf_counter (monotonic); one anchor turns its instants
        # into wall-clock stamps comparable with the events' ``t``.
        self._wall_minus_perf = time.time() - time.perf_counter()

    def wall(self, perf_t: float) -> float:
        """The ``time.time()`` stamp of a ``time.perf_counter()`` instant."""
        return self._wall_minus_perf + perf_t

    def add(self, **fields) -> None:
        if not self.enabled:
            return
        self._lines.append(fields)
        if len(self._lines) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if not self._lines or self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps({k: (round(v, 7) if isinstance(v, float) else v)
                                   for k, v in fields.items()}) + "\n"
                       for fields in self._lines)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(text)
        self._lines.clear()


def read_steps(path: str | Path) -> list[dict]:
    """Every complete line of a steps file; a torn last line is skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
