"""A cell's step lines, split into computing, communicating and waiting, and summarized.

The workers time each step's data, compute and exchange (``workloads.steps``); what of
the exchange was waiting is only known across processes, so it is split here:

- **waiting for the slowest worker** (sync cells of 2+ workers): every worker's step k
  is the same round, so a worker that reached the exchange (its ``t + data_s +
  compute_s``, on the controller's clock) before the last one waited the difference;
- **waiting for the server** (torch's parameter server): the server's update of that
  round (its ``update_s``; the slowest server's where the parameters are sharded);
- **communicating**: the rest of the exchange: the bytes on the wire, the framework's
  own handling of them, the servers' receiving and sending.

Asynchronous cells wait for no worker: their exchange is communication, except the
server's update (async servers answer one push at a time, so a busy server's queue
shows up as communication: it is not measured apart). Nodes' clocks are aligned with the
offsets the runner measured (``offsets_s``: node clock minus controller clock); local
and emulated nodes share the host's clock.

The summary's step time to check the breakdown against comes from the epoch events
(``epoch_s`` per step, without the run's first step), not from the step lines; for a
user's script that never called ``edgeprof_hooks.log`` (no epoch events), from its
``end``: the run's ``train_s`` per step, without its ``first_step_s``
(``workloads.script_hooks``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from workloads.steps import read_steps

from ..results_schema import columns_of

PHASES = ("data", "compute", "comm", "wait")


@dataclass
class CellSteps:
    workers: dict[int, list[dict]] = field(default_factory=dict)
    servers: dict[int, list[dict]] = field(default_factory=dict)
    worker_nodes: dict[int, str] = field(default_factory=dict)
    server_nodes: dict[int, str] = field(default_factory=dict)
    sample_every: int = 1  # 1: every step timed; k: one step in k (MXNet, Horovod)

    @property
    def sampled(self) -> bool:
        return self.sample_every > 1

    def measured(self) -> list[dict]:
        """Every worker's lines but the run's first step (one-off set-up costs)."""
        return [line for lines in self.workers.values() for line in lines
                if (line.get("epoch"), line.get("step")) != (1, 0)]


def load_cell_steps(events_dir: Path, *, sync: bool, worker_nodes: dict[int, str],
                    server_nodes: dict[int, str],
                    offsets_s: dict[str, float] | None = None) -> CellSteps:
    """Read every ``steps-*.jsonl`` of a cell attempt and split the exchanges."""
    offsets_s = offsets_s or {}
    out = CellSteps(worker_nodes=dict(worker_nodes), server_nodes=dict(server_nodes))
    for path in sorted(Path(events_dir).glob("steps-*-*.jsonl")):
        _, role, rank = path.stem.split("-", 2)
        if not rank.isdigit() or role not in ("worker", "server"):
            continue
        nodes = out.worker_nodes if role == "worker" else out.server_nodes
        shift = offsets_s.get(nodes.get(int(rank), ""), 0.0)
        # What the breakdown computes with (read_steps has checked they are numbers).
        needed = ("t",) if role == "server" else ("t", "step", "step_s")
        lines = [line for line in read_steps(path) if all(line.get(k) is not None
                                                          for k in needed)]
        for line in lines:
            line["t"] -= shift
        (out.workers if role == "worker" else out.servers)[int(rank)] = lines
    out.sample_every = max((int(line.get("every", 1)) for lines in out.workers.values()
                            for line in lines), default=1)
    _split_exchange(out, sync)
    return out


def _split_exchange(steps: CellSteps, sync: bool) -> None:
    """Add ``wait_s`` and ``comm_s`` (summing to ``exchange_s``) to every worker line."""
    server_update = _server_update_by_round(steps.servers) if sync else {}
    async_update = 0.0 if sync else _mean_update(steps.servers)
    rounds: dict[tuple, list[dict]] = {}
    for lines in steps.workers.values():
        for line in lines:
            rounds.setdefault((line.get("epoch"), line.get("step")), []).append(line)
    steps_per_epoch = 1 + max((line.get("step", 0) for lines in steps.workers.values()
                               for line in lines), default=0)
    for (epoch, step), lines in rounds.items():
        whole = sync and len(lines) == len(steps.workers) > 1
        last = max(_arrival(line) for line in lines) if whole else None
        round_ = (epoch - 1) * steps_per_epoch + step if isinstance(epoch, int) else None
        for line in lines:
            exchange = max(0.0, line.get("exchange_s", 0.0))
            waited = last - _arrival(line) if last is not None else 0.0
            waited += server_update.get(round_, 0.0) + async_update
            waited = min(exchange, max(0.0, waited))
            line["wait_s"], line["comm_s"] = waited, exchange - waited


def _arrival(line: dict) -> float:
    """When the worker reached the exchange of its step (controller clock)."""
    return line["t"] + line.get("data_s", 0.0) + line.get("compute_s", 0.0)


def _server_update_by_round(servers: dict[int, list[dict]]) -> dict[int, float]:
    """Sync: each round's update time of the slowest server."""
    out: dict[int, float] = {}
    for lines in servers.values():
        for line in lines:
            r = line.get("round")
            out[r] = max(out.get(r, 0.0), line.get("update_s", 0.0))
    return out


def _mean_update(servers: dict[int, list[dict]]) -> float:
    """Async: the servers' mean update time per push (a push is not matched to its
    worker's step: pushes of different workers interleave)."""
    return _mean([line.get("update_s", 0.0) for lines in servers.values() for line in lines])


def percentile(values: list[float], q: int) -> float:
    """The q-th percentile (1-99) by linear interpolation, as NumPy's default."""
    if len(values) < 2:
        return values[0]  # IndexError on none: callers summarize measured steps only
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def summarize(steps: CellSteps, epochs_by_rank: dict[int, list[dict]],
              steps_per_epoch: int | None, sync: bool, ends: list[dict] = ()) -> dict:
    """The breakdown's results columns (ms per step); all None when nothing was timed.

    ``ends``: the workers' ``end`` events (a script's that logged no epoch gives the
    steady step time)."""
    measured = steps.measured()
    columns: dict = dict.fromkeys(columns_of("breakdown"))
    if not measured:
        return columns
    columns.update(_phase_columns(steps, measured))
    steady = _steady_step_ms(epochs_by_rank, steps_per_epoch, ends)
    parts = sum(columns[f"{phase}_ms_mean"] for phase in PHASES)
    columns["steady_step_ms"] = _r(steady)
    columns["breakdown_vs_step"] = round(parts / steady, 3) if steady else None
    columns.update(_worker_columns(steps, sync))
    columns.update(_server_columns(steps))
    return columns


def _phase_columns(steps: CellSteps, measured: list[dict]) -> dict:
    """How the measured steps were sampled, and each phase's mean and percentiles."""
    ms = {phase: [1000.0 * line.get(f"{phase}_s", 0.0) for line in measured]
          for phase in PHASES}
    columns: dict = {
        "breakdown": (f"1 in {steps.sample_every} steps" if steps.sampled
                      else "every step"),
        "breakdown_steps": len(measured),
        "step_ms_mean": _r(_mean([1000.0 * line["step_s"] for line in measured]))}
    for phase in PHASES:
        columns[f"{phase}_ms_mean"] = _r(_mean(ms[phase]))
    for phase in ("compute", "comm", "wait"):
        columns[f"{phase}_ms_p50"] = _r(percentile(ms[phase], 50))
        columns[f"{phase}_ms_p95"] = _r(percentile(ms[phase], 95))
    return columns


def _worker_columns(steps: CellSteps, sync: bool) -> dict:
    """Each worker's mean wait, compute and step, its node, and the slowest worker."""
    by_worker = {rank: [line for line in lines if (line.get("epoch"), line.get("step")) != (1, 0)]
                 for rank, lines in sorted(steps.workers.items())}
    by_worker = {rank: lines for rank, lines in by_worker.items() if lines}
    columns: dict = {}
    for phase, key in (("wait", "wait_s"), ("compute", "compute_s"), ("step", "step_s")):
        columns[f"{phase}_ms_by_worker"] = {
            str(rank): _r(_mean([1000.0 * line.get(key, 0.0) for line in lines]))
            for rank, lines in by_worker.items()}
    columns["worker_nodes"] = {str(rank): node for rank, node in
                               sorted(steps.worker_nodes.items())} or None
    slowest = _slowest_rank(steps, by_worker, sync)
    if slowest is not None:
        columns["slowest_rank"] = slowest
        columns["slowest_worker"] = steps.worker_nodes.get(slowest, f"rank {slowest}")
    return columns


def _server_columns(steps: CellSteps) -> dict:
    """The servers' mean recv, update and send per round (none without servers)."""
    server_lines = [line for lines in steps.servers.values() for line in lines]
    if not server_lines:
        return {}
    return {f"server_{phase}_ms_mean": _r(
                _mean([1000.0 * line.get(f"{phase}_s", 0.0) for line in server_lines]))
            for phase in ("recv", "update", "send")}


def _slowest_rank(steps: CellSteps, by_worker: dict[int, list[dict]], sync: bool) -> int | None:
    """Sync: the worker that reached the exchange last in most rounds (the one the others
    waited for). Async (or alone): the worker of the longest mean step."""
    if not by_worker:
        return None
    if sync and len(by_worker) > 1:
        last: Counter = Counter()
        rounds: dict[tuple, list[tuple[float, int]]] = {}
        for rank, lines in by_worker.items():
            for line in lines:
                rounds.setdefault((line.get("epoch"), line.get("step")), []).append(
                    (_arrival(line), rank))
        for arrivals in rounds.values():
            if len(arrivals) == len(by_worker):
                last[max(arrivals)[1]] += 1
        if last:
            return last.most_common(1)[0][0]
    return max(by_worker, key=lambda rank: _mean([line["step_s"] for line in by_worker[rank]]))


def _steady_step_ms(epochs_by_rank: dict[int, list[dict]], steps_per_epoch: int | None,
                    ends: list[dict] = ()) -> float | None:
    """The workers' mean step time from their epoch events, the run's first step out;
    a script's run without epoch events (``epochs_logged`` 0) counts as one epoch of
    its ``end``'s ``steps``, ``train_s`` and ``first_step_s``."""
    times, steps = 0.0, 0
    for end in ends:
        if end.get("epochs_logged") == 0 and all(
                isinstance(end.get(k), (int, float)) for k in ("train_s", "first_step_s",
                                                                "steps")):
            if end["steps"] >= 2:
                times += end["train_s"] - end["first_step_s"]
                steps += end["steps"] - 1
    for epochs in epochs_by_rank.values() if steps_per_epoch else ():
        for e in epochs:
            if not isinstance(e.get("epoch_s"), (int, float)):
                continue
            if e.get("epoch") == 1 and "first_step_s" in e:
                if steps_per_epoch < 2:
                    continue
                times += e["epoch_s"] - e["first_step_s"]
                steps += steps_per_epoch - 1
            else:
                times += e["epoch_s"]
                steps += steps_per_epoch
    return 1000.0 * times / steps if steps and times > 0 else None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
