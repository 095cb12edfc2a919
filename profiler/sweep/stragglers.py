"""Unequal nodes in a cell: a straggler (one node slowed by a factor) and each node's profile.

A cell's ``straggler`` setting is ``none``, ``F`` (one node's CPU x F from the start,
0 < F <= 1) or ``F@T`` (from T seconds after the cell's launch). In synchronous training
every worker waits for the slowest, so one slow board paces the whole cluster; in
asynchronous training the others should not wait. The node slowed is the node of the
plan's last worker (``straggler_node``): deterministic, a worker's node whatever the
engine and placement (with one device, the single node).

The cluster does the slowing (``Cluster.slow_node(node, factor, ...)`` /
``restore_node(node, ...)``, where ``Cluster.can_slow_node``): the emulated cluster multiplies
the node's CFS quota, real nodes with cgroup v2 put the cell's processes on the node in a
cgroup with ``cpu.max``. ``Straggler`` applies it after the cell's processes are
launched (at once, or from a timer thread T s after the launch) and restores the node
in the runner's ``finally``, whatever happened to the cell: the next cell must get its
profile's quota. The emulated cluster's ``prepare`` also reads each node's quota back
before every cell, so even a controller killed while a node was slowed leaves no slow
node behind.

A cell that ends before T is recorded with ``straggler_started_s`` None (it never ran
slowed); a slowing that fails at T (a node that went away) fails the cell, since its
times would not say what its setting claims.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..cluster import slowing_clusters
from ..cluster.base import Node
from ..errors import ClusterError, ConfigError
from ..status import Status

log = logging.getLogger(__name__)

NONE = "none"
_EXAMPLE = "give e.g. --straggler none,0.5,0.5@30"


@dataclass(frozen=True)
class StragglerSpec:
    """One node's CPU x ``factor``, from ``after_s`` seconds after the cell's launch."""

    factor: float
    after_s: float = 0.0

    @property
    def text(self) -> str:
        """The canonical setting: ``0.5``, ``0.5@30``."""
        return f"{self.factor:.10g}" + (f"@{self.after_s:.10g}" if self.after_s else "")


def parse(text: str, option: str = "--straggler") -> StragglerSpec | None:
    """``none`` -> None, ``0.5`` / ``0.5@30`` -> a spec; ``ConfigError`` (one line naming
    the problem and the fix) otherwise."""
    raw = str(text).strip()
    if raw.lower() == NONE:
        return None
    factor_text, at, after_text = raw.partition("@")
    try:
        factor = float(factor_text)
        after_s = float(after_text) if at else 0.0
    except ValueError:
        raise ConfigError(f"{option} {raw!r} is not none, F or F@T (a node's CPU x F, from "
                          f"T s after the cell's launch): {_EXAMPLE}") from None
    # ``not (...)`` so that nan, which fails every comparison, is refused too.
    if not 0 < factor <= 1:
        raise ConfigError(f"{option} {raw}: the factor must be in (0, 1] (the slowed node's "
                          f"speed, 0.5 for half): {_EXAMPLE}")
    if not (0 <= after_s < math.inf):
        raise ConfigError(f"{option} {raw}: T must be 0 or more seconds after the cell's "
                          f"launch: {_EXAMPLE}")
    return StragglerSpec(factor, after_s)


def canonical(text: str, option: str = "--straggler") -> str:
    """The cell's form of a setting (``0.50@0`` -> ``0.5``), so equal settings are one cell."""
    spec = parse(text, option)
    return NONE if spec is None else spec.text


def parse_list(text: str, option: str = "--straggler") -> list[str]:
    """``"none,0.5,0.5@30"`` -> canonical settings, each checked, without duplicates."""
    items = [part.strip() for part in str(text).split(",") if part.strip()]
    if not items:
        raise ConfigError(f"{option} {text!r} is an empty list: {_EXAMPLE}")
    return list(dict.fromkeys(canonical(item, option) for item in items))


def straggler_node(specs: Sequence) -> Node | None:
    """The node slowed: the node of the plan's last worker (None if the plan has none)."""
    workers = [spec for spec in specs if spec.role == "worker"]
    return workers[-1].node if workers else None


def node_profiles(nodes: Sequence[Node]) -> dict[str, str] | None:
    """``{node: profile}`` of the nodes a cell used, where the provider knows them (the
    emulated cluster always; real nodes with ``edgeprof_profile``); None where no node
    has one (local slots, real nodes without it: ``host``)."""
    known = {node.name: node.profile for node in nodes if node.profile != "host"}
    return known or None


class Straggler:
    """The straggler of one cell attempt: ``start`` after launching, ``stop`` in the
    runner's ``finally`` (restores the node), ``finish`` adds its columns to the record."""

    def __init__(self, cell, cluster):
        self.spec = parse(cell.straggler)
        self.cluster = cluster
        self.node: Node | None = None
        self.started_s: float | None = None  # launch to slowed, seconds
        self.problem: str | None = None  # the slowing failed: the cell says nothing
        self.restore_problem: str | None = None
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._applied = False
        self._restore_kw: dict = {}

    def start(self, specs: Sequence, t_launch_mono: float, *, cell_dir: Path,
              threads: int = 1) -> None:
        """Slow the straggler node now (``F``: raises if that fails, failing the cell) or
        from a timer at ``t_launch_mono + T`` (``F@T``)."""
        if self.spec is None:
            return
        self.node = straggler_node(specs)
        if self.node is None:
            return
        if not self.cluster.can_slow_node:
            raise ClusterError(f"--straggler {self.spec.text}: the {self.cluster.name} "
                               f"cluster cannot slow a node: use {slowing_clusters()}")
        on_node = [spec for spec in specs if spec.node.name == self.node.name]
        self._restore_kw = {"cell_dir": Path(cell_dir)}
        kw = {**self._restore_kw, "processes": len(on_node), "threads": threads}
        delay_s = t_launch_mono + self.spec.after_s - time.monotonic()
        if delay_s <= 0:
            self._apply(t_launch_mono, kw)
            return
        self._thread = threading.Thread(target=self._later, args=(delay_s, t_launch_mono, kw),
                                        name=f"straggler-{self.node.name}", daemon=True)
        self._thread.start()

    def _later(self, delay_s: float, t_launch_mono: float, kw: dict) -> None:
        if self._cancel.wait(delay_s):
            return  # the cell ended first
        try:
            self._apply(t_launch_mono, kw)
        except Exception as exc:  # noqa: BLE001 - reported in the record by finish()
            self.problem = f"could not slow {self.node.name}: {exc}"
            log.warning("straggler: %s", self.problem)

    def _apply(self, t_launch_mono: float, kw: dict) -> None:
        with self._lock:
            if self._cancel.is_set():
                return
            # Marked first: a slowing that failed half-way is restored too.
            self._applied = True
            self.cluster.slow_node(self.node, self.spec.factor, **kw)
            self.started_s = round(time.monotonic() - t_launch_mono, 3)

    def stop(self) -> None:
        """Cancel a pending slowing and restore the node; never raises (it runs in the
        runner's ``finally``): a failed restore is logged and named in the record."""
        self._cancel.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if not self._applied:
                return
            self._applied = False
            try:
                self.cluster.restore_node(self.node, **self._restore_kw)
            except Exception as exc:  # noqa: BLE001 - the cell's result must be kept
                # The cell ran as asked; the next cell's prepare() sets the node again.
                self.restore_problem = f"could not restore {self.node.name}: {exc}"
                log.warning("straggler: %s", self.restore_problem)

    def columns(self, nodes: Sequence[Node]) -> dict:
        spec = self.spec
        return {"straggler_node": self.node.name if spec and self.node else None,
                "straggler_factor": spec.factor if spec else None,
                "straggler_after_s": spec.after_s if spec else None,
                "straggler_started_s": self.started_s,
                "node_profiles": node_profiles(nodes)}

    def finish(self, record: dict, nodes: Sequence[Node]) -> None:
        """Add the columns to ``record``; a straggler that could not be applied makes an
        ``ok`` cell ``failed`` (its times would not be what its setting says), one that
        could not be restored is named in the reason."""
        record.update(self.columns(nodes))
        for problem in (self.problem, self.restore_problem):
            if problem:
                record["reason"] = "; ".join(r for r in (record.get("reason"),
                                                         f"straggler: {problem}") if r)
        if self.problem and record.get("status") == Status.OK:
            record["status"] = Status.FAILED
