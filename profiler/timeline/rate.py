"""A cell's training rate that one slow moment cannot move: ``robust_s_per_sample``.

``steady_s_per_sample`` (``profiler.sweep.events``) is the first epoch's time per sample
without its first step: one interval. On the fastest cells (a one-device LeNet-MLP
epoch is 0.16 s) anything else the host does in that interval moves it: the same cell
measured 54,042 samples/s once (its first epoch 0.242 s, the second 0.164 s) and
74,996-75,075 in four more runs. This figure is taken over the whole run instead, with
the slow stretches left out:

- each worker's timed steps (``workloads.steps``; every step on the torch engines) are
  cut, epoch by epoch, into **blocks** of consecutive steps at least ``BLOCK_S`` long,
  or an eighth of the epoch where epochs are shorter than 8 x ``BLOCK_S`` (the run's
  first step, with its one-off set-up, left out). A step's time is from its start to
  the next step's start, so the loop's own overhead between steps counts;
- blocks whose time per step exceeds ``SLOW_FACTOR`` x the median block's are **left
  out**: a stall of the host (another process, a page-fault storm) lands in one or two
  blocks and leaves the rest alone;
- the worker's time per step is the kept blocks' time over their steps (a mean, not the
  median: exact when nothing is left out).

Why blocks and not a median over single steps: on the emulated cluster a node's CPU
quota is enforced in CFS periods (``profiler.cluster.cgroups``: 1 ms of CPU a period,
24 ms periods at 0.0415 cores), and a step shorter than a period either runs inside
its slice or pays a whole freeze: single steps' times are two clusters, and a median
picks one of them (several times the true rate when steps are short). A block of 50 ms
or more holds several periods; one freeze more or less moves it by under ``SLOW_FACTOR``,
so throttling is never taken for a slow moment.

Without timed steps on every step (``--no-breakdown``; MXNet and Horovod, which time
one step in 100) the blocks are the workers' epochs (epoch 1 without its first step),
with the same rule: with three epochs or more a slow one is left out; with two, nothing
can tell which one was disturbed and both count. ``robust_from`` says which was used.

The cell's time per sample counts the training set once, as ``steady_s_per_sample``
does: the workers' rates (``batch`` / time per step) add up, over ``parts`` (N when
sharded, 1 when every worker trains the whole set).
"""

from __future__ import annotations

import statistics

from workloads.datasets.resolver import parts as data_parts

from ..results_schema import columns_of

BLOCK_S = 0.05
# Short epochs (a fast host's 0.07 s LeNet-MLP epoch) still get blocks to compare: a
# node slow enough for its CPU quota's periods to matter has long epochs.
BLOCKS_PER_EPOCH = 8
SLOW_FACTOR = 1.5


def robust_columns(worker_steps: dict[int, list[dict]], epochs_by_rank: dict[int, list[dict]],
                   start0: dict, every_step_timed: bool) -> dict:
    """``robust_s_per_sample`` (s per training-set sample, None when nothing measured
    it), ``robust_from`` (``steps``, ``epochs`` or None) and ``robust_slow_blocks`` (how
    many blocks were left out)."""
    columns: dict = dict.fromkeys(columns_of("rate"))
    batch, steps_per_epoch = start0.get("batch") or 0, start0.get("steps_per_epoch") or 0
    if not batch:
        return columns
    blocks_by_rank, source = {}, None
    if every_step_timed:
        blocks_by_rank = {rank: step_blocks(lines) for rank, lines in worker_steps.items()}
        blocks_by_rank, source = {r: b for r, b in blocks_by_rank.items() if b}, "steps"
    if not blocks_by_rank:
        blocks_by_rank = {rank: epoch_blocks(epochs, steps_per_epoch)
                          for rank, epochs in epochs_by_rank.items()}
        blocks_by_rank, source = {r: b for r, b in blocks_by_rank.items() if b}, "epochs"
    if not blocks_by_rank:
        return columns
    samples_per_s, slow = 0.0, 0
    for blocks in blocks_by_rank.values():
        s_per_step, left_out = typical_s_per_step(blocks)
        samples_per_s += batch / s_per_step
        slow += left_out
    # Each worker's rate counted once per worker, over the parts of the set they share.
    parts = data_parts(start0.get("data_partition", "shard"),
                       # A pipeline's S stages train one shard: its start says how many.
                       start0.get("data_shards") or start0.get("num_workers") or 1)
    cell_rate = samples_per_s / len(blocks_by_rank) * parts
    # Six significant digits: a fast cell's 1.3e-5 s a sample keeps them all.
    columns.update(robust_s_per_sample=float(f"{1.0 / cell_rate:.6g}"), robust_from=source,
                   robust_slow_blocks=slow)
    return columns


def typical_s_per_step(blocks: list[tuple[float, int]]) -> tuple[float, int]:
    """(seconds per step over the blocks no slower than ``SLOW_FACTOR`` x the median
    block, how many blocks were left out); ``blocks`` are (seconds, steps), steps > 0."""
    median = statistics.median(seconds / steps for seconds, steps in blocks)
    kept = [(seconds, steps) for seconds, steps in blocks
            if seconds / steps <= SLOW_FACTOR * median]
    return (sum(s for s, _ in kept) / sum(n for _, n in kept), len(blocks) - len(kept))


def step_blocks(lines: list[dict]) -> list[tuple[float, int]]:
    """One worker's step lines as blocks of at least ``BLOCK_S``: (seconds, steps)."""
    by_epoch: dict[int, list[dict]] = {}
    for line in lines:
        if isinstance(line.get("step"), int) and isinstance(line.get("step_s"), (int, float)):
            by_epoch.setdefault(line.get("epoch"), []).append(line)
    blocks: list[tuple[float, int]] = []
    for epoch, epoch_lines in by_epoch.items():
        epoch_lines.sort(key=lambda line: line["step"])
        spans = []
        for line, after in zip(epoch_lines, epoch_lines[1:] + [None]):
            if (epoch, line["step"]) == (1, 0):
                continue  # the run's first step: one-off set-up
            # Start to the next step's start: what the loop spends between steps counts.
            consecutive = after is not None and after["step"] == line["step"] + 1
            spans.append(after["t"] - line["t"] if consecutive else line["step_s"])
        blocks += _group(spans, min(BLOCK_S, sum(spans) / BLOCKS_PER_EPOCH))
    return blocks


def epoch_blocks(epochs: list[dict], steps_per_epoch: int) -> list[tuple[float, int]]:
    """One worker's epochs as blocks (epoch 1 without its first step)."""
    blocks = []
    for e in epochs:
        seconds, steps = e.get("epoch_s"), steps_per_epoch
        if not isinstance(seconds, (int, float)) or not steps:
            continue
        if e.get("epoch") == 1 and isinstance(e.get("first_step_s"), (int, float)):
            seconds, steps = seconds - e["first_step_s"], steps - 1
        if steps > 0 and seconds > 0:
            blocks.append((float(seconds), steps))
    return blocks


def _group(spans: list[float], block_s: float) -> list[tuple[float, int]]:
    """Consecutive spans summed into blocks of at least ``block_s``; a shorter rest joins
    the block before it (a block of a few steps would be noisier than the others)."""
    blocks: list[tuple[float, int]] = []
    seconds, steps = 0.0, 0
    for span in spans:
        seconds, steps = seconds + span, steps + 1
        if seconds >= block_s:
            blocks.append((seconds, steps))
            seconds, steps = 0.0, 0
    if steps:
        if blocks:
            last_s, last_n = blocks.pop()
            blocks.append((last_s + seconds, last_n + steps))
        else:
            blocks.append((seconds, steps))
    return [(s, n) for s, n in blocks if s > 0]
