"""Counters read at a window's two ends: the one place a spool's cumulative series
(CPU seconds, interface bytes, a process tree's CPU time) becomes a figure of a window.

A counter is sampled at the agent's ticks; its value at a moment between two ticks is
interpolated linearly between them (a constant rate over the tick, as a sampled share
is assumed constant over its tick), so a window's rise rests on the kernel's accounting
at its ends, not on how many samples fell inside it. ``metrics.reducers`` (the CPU mean,
the network totals) and ``metrics.energy`` (the modelled power's CPU time, the roles'
shares) read them through here.
"""

from __future__ import annotations

from bisect import bisect_left


def value_at(series: list[tuple[int, dict]], name: str, time_ms: int) -> float:
    """A counter at ``time_ms``, linear between the samples around it (clamped at ends).

    ``series``: (time_ms, fields) sorted by time, not empty."""
    times = [t for t, _ in series]
    index = bisect_left(times, time_ms)
    if index == 0:
        return float(series[0][1].get(name, 0))
    if index >= len(series):
        return float(series[-1][1].get(name, 0))
    (t0, f0), (t1, f1) = series[index - 1], series[index]
    v0, v1 = f0.get(name, 0), f1.get(name, 0)
    return v0 + (v1 - v0) * (time_ms - t0) / max(t1 - t0, 1)


def brackets(series: list[tuple[int, dict]], start_ms: int, end_ms: int) -> bool:
    """Whether ``series`` has a sample at or before ``start_ms`` and one at or after
    ``end_ms``: its rise between them is then interpolated, not extrapolated."""
    return bool(series) and series[0][0] <= start_ms and series[-1][0] >= end_ms


def busy_share(series: list[tuple[int, dict]], name: str, capacity: float,
               start_ms: int, end_ms: int) -> float | None:
    """A CPU-seconds counter's rise over [start_ms, end_ms] (interpolated at its ends)
    / (the window's seconds x ``capacity`` cores): the share of those cores busy, 0 to
    1 (more only if the counter's cores exceed ``capacity``). None unless the samples
    bracket the window and it has a length and ``capacity`` cores."""
    window_s = (end_ms - start_ms) / 1000
    if capacity <= 0 or window_s <= 0 or not brackets(series, start_ms, end_ms):
        return None
    used_s = value_at(series, name, end_ms) - value_at(series, name, start_ms)
    return max(0.0, used_s) / (window_s * capacity)
