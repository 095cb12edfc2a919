"""The hierarchical inference engine's processes (``--engine hier``): end devices that
stream their shard of the test set through their own network and send batches up to
edge and cloud nodes by a scheme, and the edge and cloud nodes that answer them.

- ``device``: an end device, a ``workloads.train`` worker (``--worker
  workloads.hier.device:EndDevice``), so its events and step lines are every worker's;
- ``serve``: an edge or cloud node, a server the cell runner stops once the devices end;
- ``assign``: Zhang's task assigner, in end device 0, and his ways of surviving end
  devices that fail (``--fail-devices``, ``--recovery``);
- ``schemes``: where batches go (Zhang's four schemes, his equations 4 and 5, DDNN's
  early exit); ``labels``: Fashion-MNIST's coarse labels; ``nets``: each tier's
  network, trained briefly and cached; ``wire``: messages over TCP and a link's delay.

Every process of a cell gets the same ``Plan`` (``EDGEPROF_HIER_PLAN``, JSON), which
``profiler.engines.hier`` writes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

PLAN_ENV = "EDGEPROF_HIER_PLAN"


@dataclass(frozen=True)
class Plan:
    """What every process of a hierarchical cell knows of it."""

    scheme: str
    counts: dict[str, int]  # tier -> nodes
    models: dict[str, str]  # tier -> model name
    # link ("end-edge", "end-cloud", "edge-cloud") -> each upper node's host:port as the
    # lower tier dials it (a relay's, on a cluster with delayed links)
    addresses: dict[str, list[str]] = field(default_factory=dict)
    delays: dict[str, float] = field(default_factory=dict)  # tier -> round trip held back, s
    threshold: float = 0.5  # early-exit's softmax entropy (nats) under which a sample exits
    privacy: bool = False
    # ``--privacy edge`` (Zhang's Table 4, second row): the end device sends its images to
    # an edge node, which runs the cloud network's first convolution and sends only its
    # features on to the cloud (the scheme's end-cloud, by way of the edge).
    privacy_edge: bool = False
    train_samples: int = 2000
    seed: int = 42
    # Failures (``assign``): the last ``fail`` end devices stop after half their batches;
    # ``recovery`` off: each device streams its own shard, no assigner; else end device
    # 0's assigner (``assigner``, host:port) hands the batches out by that method.
    # Mapping's N_map when given (``--map-devices``); 0: each device's eq. (4)
    n_map: int = 0
    fail: int = 0
    recovery: str = "off"
    assigner: str = ""

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> "Plan":
        return cls(**json.loads(text))
