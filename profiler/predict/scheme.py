"""How each exchange scheme moves a step's bytes: the terms of the step model.

A cell's engine names its scheme (``Engine.comm``: ``ps-sync``, ``ps-async``,
``allreduce``, ``pipeline``, ``local``), so nothing here decides by an engine's name.
For a model of ``B`` bytes (its parameters x 4, float32) on ``N`` workers:

- **parameter server, servers on a master node** (``--placement master``): each worker
  pushes B and pulls B; the master's link carries N x B each way every round, the
  busiest link. Terms: a fixed cost per round (``round_ms``: the round's messages and the
  framework's handling, fitted), the master's CPU work on each further worker's push and
  pull (``peer_ms`` x (N-1)) and the wire time of N x B on the link (``wire``: its
  coefficient is the seconds the link really took per second of ideal wire). On one link
  the wire's N x B and the per-peer cost grow alike and the fit cannot tell them apart:
  the wire is held at its ideal time and the rest is the boards' CPU (``fit.py``): fitted
  on ``pi4-park2019`` at 1 Gbit, the step grew 5, 32, 72 ms at 2-4 devices where the
  ideal wire is 7-14 ms, and taken as the link's it predicted the 100 Mbit Pi 3B's steps
  35-70% too slow.
- **parameter server, a server beside every worker** (``colocated``): every node pushes
  and serves (N-1)/N of the model each way, 2B(N-1)/N per direction per node; a worker
  talks to N-1 other servers each round. Terms: a cost per peer (``peer_ms``) x (N-1)
  and the wire time of 2B(N-1)/N.
- **ring allreduce** (DDP, Horovod): 2(N-1) steps each sending B/N, 2B(N-1)/N each way
  (Thakur, Rabenseifner & Gropp 2005); the latency term 2(N-1) alpha. Terms: ``peer_ms``
  x (N-1) and the wire time of 2B(N-1)/N.

Synchronous schemes add the wait for the slowest of N workers (``model.py``);
asynchronous workers go at their own pace: no wait term. An asynchronous master's server
applies every push alone (a synchronous one sums N and updates once), so a worker queues
behind the N-1 others' updates: its terms are ``peer_ms`` x (N-1) and the wire time of
N x B on the master's link.
- **pipeline** (``torch-pipe``): activations, not parameters, cross its links; its
  terms come from its stages at each stage count (``pipeline.py``): a cost per step
  (``round_ms``) and the boundaries' wire time along the schedule's critical path.
"""

from __future__ import annotations

from dataclasses import dataclass

TERMS = ("round_ms", "peer_ms", "wire")
# A link moves no byte faster than its rate: the wire's coefficient is at least 1 (fitted
# on a fast link, where the wire's share hides in the noise, it stays at the physics).
FLOORS = (0.0, 0.0, 1.0)
SCHEMES = ("ps-sync", "ps-async", "allreduce", "pipeline")


@dataclass(frozen=True)
class Scheme:
    """One cell's exchange: ``comm`` as its engine names it, and its placement."""

    comm: str
    placement: str = "master"

    @property
    def sync(self) -> bool:
        return self.comm != "ps-async"

    @property
    def pipeline(self) -> bool:
        """Its terms depend on the stages' cut (``pipeline.py``), not on B and N alone."""
        return self.comm == "pipeline"

    @property
    def through_master(self) -> bool:
        return self.comm.startswith("ps-") and self.placement == "master"

    def busiest_link_bytes(self, n: int, model_bytes: float) -> float:
        """Bytes one direction of the busiest link carries per step."""
        if n <= 1:
            return 0.0
        if self.through_master:
            return n * model_bytes
        return 2 * model_bytes * (n - 1) / n

    def worker_bytes(self, n: int, model_bytes: float) -> float:
        """Bytes a worker's node sends and receives per step, the scheme's floor."""
        if n <= 1:
            return 0.0
        if self.through_master:
            return 2 * model_bytes
        return 4 * model_bytes * (n - 1) / n

    def features(self, n: int, model_bytes: float, link_mbit: float) -> list[float]:
        """The values of ``TERMS`` at ``n`` workers (all 0 on one device: no exchange)."""
        if n <= 1:
            return [0.0, 0.0, 0.0]
        wire_ms = self.busiest_link_bytes(n, model_bytes) * 8 / (link_mbit * 1e6) * 1e3
        if self.through_master and self.sync:
            return [1.0, float(n - 1), wire_ms]
        # A ring's or a colocated server's next peer; an asynchronous server's next push,
        # which it applies alone and a worker queues behind.
        return [0.0, float(n - 1), wire_ms]
