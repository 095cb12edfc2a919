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
  step in how many is timed (at most; one an epoch in epochs of fewer steps).

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

from .events import well_formed

FLUSH_EVERY = 4096
# The numbers of a worker's and of a server's line (module doc): numbers where present.
NUMBER_FIELDS = ("t", "epoch", "step", "data_s", "compute_s", "exchange_s", "step_s",
                 "drain_s", "every", "round", "recv_s", "update_s", "send_s", "worker")
# MXNet: time one step in SAMPLE_EVERY, the first of them in the middle of an epoch of
# fewer steps (one timed step an epoch: far from the run's first step and its one-off
# costs). Draining the engine before a timed step stops it overlapping that step with
# its neighbours, and the loss grew with the number of timed steps: on LeNet-MLP's 1 ms
# loopback steps, 8 timed steps in an epoch of 200 cost MXNet 7% and Horovod 9% of their
# samples/s, one timed step an epoch nothing measurable.
SAMPLE_EVERY = 100
BREAKDOWNS = ("on", "off")


def steps_path(events_dir: str | Path, role: str, rank: int) -> Path:
    return Path(events_dir) / f"steps-{role}-{rank}.jsonl"


def first_sampled(steps_per_epoch: int) -> int:
    """The first step an asynchronous engine times in an epoch (0-based)."""
    return min(SAMPLE_EVERY // 2, steps_per_epoch // 2)


def sampled(step: int, steps_per_epoch: int) -> bool:
    """Whether an asynchronous engine times ``step`` (0-based in its epoch): the same
    steps on every worker of a cell, so that their timed steps are the same rounds."""
    first = first_sampled(steps_per_epoch)
    return step >= first and (step - first) % SAMPLE_EVERY == 0


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
        except (ValueError, RecursionError):
            continue
        # A line whose times are not numbers was not written by ``StepLog``: skipped.
        if well_formed(record, NUMBER_FIELDS):
            # A null time is an absent one: readers take their default (``get(k, 0.0)``),
            # not None.
            out.append({k: v for k, v in record.items()
                        if v is not None or k not in NUMBER_FIELDS})
    return out
