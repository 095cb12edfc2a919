"""Exponential backoff for the shippers: 0.5 s, doubling after each failure, up to 30 s.

One object per retry loop: ``delay_s`` is the wait the next failure brings (for the
WARNING that announces it), ``next_s()`` takes it and doubles the following one, and
``reset()`` starts over after a success.
"""

from __future__ import annotations

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 30.0


class Backoff:
    def __init__(self, start_s: float = BACKOFF_START_S, max_s: float = BACKOFF_MAX_S):
        self.start_s = start_s
        self.max_s = max_s
        self.delay_s = start_s

    def next_s(self) -> float:
        """The wait now due; the one after it is twice as long (at most ``max_s``)."""
        delay_s = self.delay_s
        self.delay_s = min(delay_s * 2, self.max_s)
        return delay_s

    def reset(self) -> None:
        self.delay_s = self.start_s
