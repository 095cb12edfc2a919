"""A record of a time-dilated cell read back in the board's time.

On the emulated cluster ``--speedup`` runs a cell k times faster than the board it
stands for (quotas and links x k; the record's ``speedup``). Its times are then k times
too short and its rates (``*_per_s``) k times too high; CPU % (a share of the quota),
memory and totals are what the board would show. The report's figures, its study
tables and its ratios all read dilated cells through here.
"""

from __future__ import annotations

TIME_COLUMNS = ("train_s", "elapsed_s", "steady_s_per_sample", "robust_s_per_sample",
                "steady_step_ms", "step_ms_mean")
# The step breakdown's ms per step (profiler.timeline.steps): per phase, and per worker.
STEP_SUFFIXES = ("_ms_mean", "_ms_p50", "_ms_p95")
# Lists of times: a pipeline's per-stage compute and per-layer profile.
LIST_TIME_COLUMNS = ("stage_compute_ms", "pipe_layer_ms")
BY_WORKER_SUFFIX = "_ms_by_worker"


def is_time(column: str) -> bool:
    """Whether a numeric column holds a time (k times too short when dilated)."""
    return column in TIME_COLUMNS or column.endswith(STEP_SUFFIXES)


def speedup(r: dict) -> float:
    """The cell's time dilation k (1 when undilated, and on every other cluster)."""
    return float(r.get("speedup") or 1.0)


def value(r: dict | None, column: str) -> float | None:
    """One numeric column in the board's time (None when the record has no value)."""
    raw = (r or {}).get(column)
    if not isinstance(raw, (int, float)):
        return None
    if is_time(column):
        return float(raw) * speedup(r)
    if column.endswith("_per_s"):
        return float(raw) / speedup(r)
    return float(raw)


def record(r: dict) -> dict:
    """A copy of the record with every time and rate in the board's time."""
    k = speedup(r)
    if k == 1:
        return r
    by_worker = {column: {rank: ms * k for rank, ms in r[column].items()
                          if isinstance(ms, (int, float))}
                 for column in r
                 if column.endswith(BY_WORKER_SUFFIX) and isinstance(r[column], dict)}
    lists = {column: [t * k for t in r[column]] for column in LIST_TIME_COLUMNS
             if isinstance(r.get(column), list)}
    return {**r, **by_worker, **lists, **{column: value(r, column) for column in r
                                 if (is_time(column) or column.endswith("_per_s"))
                                 and isinstance(r[column], (int, float))}}
