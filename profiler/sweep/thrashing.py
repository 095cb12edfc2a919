"""Out of memory in effect: a node thrashing at its memory limit ends its cell as ``oom``.

A cell that needs a little more than its node's memory does not always die at once. The
kernel first reclaims the node's page cache, which holds the code of the libraries the
processes run (MXNet's is hundreds of MB), and reads those pages back from disk on the
next call, over and over: the node sits at its limit taking major page faults and
training all but stops. The OOM killer comes only when reclaim fails outright, which for
ResNet-110 x 128 on a 1 GB ``pi3b-park2019`` node took seven minutes at time dilation 16
(it would take hours at the board's own speed). A board in that state is as good as out
of memory, and the study reports it so.

The watcher samples each node's memory charge and major page faults (its cgroup's
``memory.stat``, through ``cluster.memory_pressure``; providers without node limits do
not have it and are not watched) and calls a node thrashing once it has stayed at
``NEAR_LIMIT`` of its limit or above while faulting more than ``FAULTS_PER_S`` pages a second
for ``THRASH_S`` seconds in a row. Measured on ``pi3b-park2019`` at dilation 16
(docs/emulated.md): ResNet-110 x 128 thrashing sat at 1,023.8-1,024.0 of its 1,024 MB
with 29-141 major faults/s; ResNet-80 x 128, which trains, peaked at 968-997 MB (at most
97%) with next to no faults. (Whether a node thrashes or is killed at once depends on
whose page cache holds the libraries: the same cell was killed in 10 s when another
process had read MXNet's library first.)
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from ..cluster.base import MemoryPressure

NEAR_LIMIT = 0.99  # of the node's memory limit
FAULTS_PER_S = 10.0  # major page faults a second (pages read back from disk)
THRASH_S = 20.0
SAMPLE_EVERY_S = 1.0


class ThrashWatch:
    """Says which node (if any) has been thrashing for ``thrash_s``; call ``check()`` often
    (it reads the nodes every ``every_s`` at most).

    ``read(node)`` returns the node's ``MemoryPressure`` or ``None`` (not watchable); it
    is never called without nodes. ``clock`` is ``time.monotonic`` except in tests.
    """

    def __init__(self, nodes: Sequence,
                 read: Callable[[object], MemoryPressure | None] | None, *,
                 thrash_s: float = THRASH_S, faults_per_s: float = FAULTS_PER_S,
                 near_limit: float = NEAR_LIMIT, every_s: float = SAMPLE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.nodes, self.read, self.clock = list(nodes), read, clock
        self.thrash_s, self.faults_per_s = thrash_s, faults_per_s
        self.near_limit, self.every_s = near_limit, every_s
        self._last: dict[str, tuple[float, MemoryPressure]] = {}
        self._since: dict[str, float] = {}  # node -> when its thrashing began
        self._next_s = 0.0
        self.reason: str | None = None  # set once a node was found thrashing

    def check(self) -> str | None:
        """The reason a cell is out of memory in effect, or ``None``."""
        now = self.clock()
        if now < self._next_s:
            return None
        self._next_s = now + self.every_s
        for node in self.nodes:
            reading = self.read(node)
            if reading is None:
                continue
            last = self._last.get(node.name)
            self._last[node.name] = (now, reading)
            if last is None or now <= last[0]:
                continue
            rate = (reading.major_faults - last[1].major_faults) / (now - last[0])
            thrashing = (reading.limit_mb > 0 and rate > self.faults_per_s and
                         reading.used_mb >= self.near_limit * reading.limit_mb)
            if not thrashing:
                self._since.pop(node.name, None)
                continue
            began = self._since.setdefault(node.name, last[0])
            if now - began >= self.thrash_s:
                self.reason = (f"{node.name} thrashed at its {reading.limit_mb:.0f} MB memory "
                               f"limit for {now - began:.0f} s ({rate:.0f} major page "
                               "faults/s): out of memory in effect, stopped before the "
                               "kernel's OOM killer")
                return self.reason
        return None
