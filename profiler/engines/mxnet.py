"""MXNet KVStore engine: ``local`` for one device, a parameter server for N devices.

N devices start one scheduler, parameter server(s) and N workers, wired by the ``DMLC_*``
environment that ps-lite reads. Placement decides where the scheduler and servers go:

- ``master`` (the study's layout): scheduler and one server on a dedicated node 0, workers on
  nodes 1..N, so N devices occupy N+1 nodes;
- ``colocated``: the scheduler on node 0 and one server on every worker node (N nodes), which
  spreads the parameter traffic over all links.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..cluster.base import Node
from ..cell import CellConfig
from ..ports import free_port
from .base import ProcessSpec, TrainOptions, train_argv


class MXNetEngine:
    name = "mxnet"

    def nodes_needed(self, cell: CellConfig) -> int:
        if cell.devices == 1:
            return 1
        return cell.devices + 1 if cell.placement == "master" else cell.devices

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        needed = self.nodes_needed(cell)
        worker_argv = train_argv(cell, cell_dir, options, cell.kvstore)
        if cell.devices == 1:
            return [ProcessSpec("worker", 0, nodes[0], worker_argv)]

        if cell.placement == "master":
            master, worker_nodes = nodes[0], nodes[1:needed]
            server_nodes = [master]
        else:
            master, worker_nodes = nodes[0], nodes[:needed]
            server_nodes = worker_nodes
        common = {
            "DMLC_PS_ROOT_URI": master.address,
            # Picked on the host: free there, and (almost surely) inside an emulated node.
            "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NUM_SERVER": str(len(server_nodes)),
            "DMLC_NUM_WORKER": str(cell.devices),
            "OMP_NUM_THREADS": str(options.threads_per_process),
            # ps-lite's default 100 ms heartbeat-less waits are fine; keep its logs quiet.
            "PS_VERBOSE": "0",
        }
        serve_argv = [sys.executable, "-m", "workloads.serve"]
        specs = [ProcessSpec("scheduler", 0, master, serve_argv,
                             _env(common, "scheduler", master), decisive=False)]
        specs += [ProcessSpec("server", i, node, serve_argv, _env(common, "server", node),
                              decisive=False) for i, node in enumerate(server_nodes)]
        specs += [ProcessSpec("worker", i, node, worker_argv, _env(common, "worker", node))
                  for i, node in enumerate(worker_nodes)]
        return specs


def _env(common: dict[str, str], role: str, node: Node) -> dict[str, str]:
    # DMLC_NODE_HOST tells ps-lite which address this process announces to the others.
    return {**common, "DMLC_ROLE": role, "DMLC_NODE_HOST": node.address}
