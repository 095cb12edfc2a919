"""MXNet KVStore engine: ``local`` for one device, a parameter server for N devices.

N devices start one scheduler, parameter server(s) and N workers, wired by the ``DMLC_*``
environment that ps-lite reads. Placement decides where the scheduler and servers go:

- ``master`` (the study's layout): scheduler and one server on a dedicated node 0, workers on
  nodes 1..N, so N devices occupy N+1 nodes;
- ``colocated``: the scheduler on node 0 and one server on every worker node (N nodes), which
  spreads the parameter traffic over all links.

Its own column, ``mxnet_engine``, says which MXNet engine type its workers ran (Horovod
runs MXNet workers too and fills it the same way).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from ..cell import CellConfig
from ..cluster.base import Node
from ..ports import free_port
from ..column import Column
from .base import Engine, Package, ProcessSpec, TrainOptions, parameter_server_nodes

# MXNet's engine type as rank 0 ran it (workloads.mxnet_worker's start event).
MXNET_ENGINE = Column("mxnet_engine", "str", "", "MXNet's engine type rank 0 ran "
                      "(ThreadedEnginePerDevice, ThreadedEngine, ...)", __name__, "mxnet")


def mxnet_engine_columns(starts: dict[int, dict]) -> dict:
    """``mxnet_engine`` from rank 0's start event (None when it did not start)."""
    return {MXNET_ENGINE.name: (starts.get(0) or {}).get(MXNET_ENGINE.name)}


def kvstore(cell: CellConfig) -> str:
    """The MXNet KVStore type ``cell`` trains with."""
    if cell.devices == 1:
        return "local"
    return "dist_sync" if cell.sync == "sync" else "dist_async"

# What PyPI's aarch64 MXNet 1.9.1 wheel links against and does not ship (Arm Performance
# Libraries): on a stock 64-bit Raspberry Pi OS ``import mxnet`` fails with this name.
ARMPL_LIBRARY = "libarmpl"


class MXNetEngine(Engine):
    name = "mxnet"
    description = "MXNet KVStore parameter server (dist_sync, dist_async; local on one device)"
    framework = "mxnet"
    packages = (Package("mxnet", "mxnet"),)
    columns = (MXNET_ENGINE,)

    def summarize(self, workers: dict[int, list[dict]], starts: dict[int, dict]) -> dict:
        return mxnet_engine_columns(starts)

    def nodes_needed(self, cell: CellConfig) -> int:
        return parameter_server_nodes(cell)

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        needed = self.nodes_needed(cell)
        worker_argv = self.train_argv(cell, cell_dir, options)
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

    def probe_host(self) -> dict:
        answer = super().probe_host()
        if not answer["ok"]:
            if ARMPL_LIBRARY in answer["problem"]:
                answer["problem"] = (
                    "PyPI's aarch64 MXNet wheel needs Arm Performance Libraries "
                    f"({ARMPL_LIBRARY}_lp64_mp.so) that neither it nor the OS ships: build "
                    "MXNet from source (docs/raspberry-pi.md) or use --engine torch")
            return answer
        import mxnet as mx

        answer["dist_kvstore"] = bool(mx.runtime.Features().is_enabled("DIST_KVSTORE"))
        return answer

    def host_problem(self, answer: dict, cells: Sequence[CellConfig]) -> str | None:
        problem = super().host_problem(answer, cells)
        if problem is None and not answer.get("dist_kvstore") and any(
                cell.devices > 1 for cell in cells):
            return ("its MXNet has no distributed KVStore: set edgeprof_mxnet_wheel to a "
                    "build with USE_DIST_KVSTORE=1 (docs/raspberry-pi.md), or use --engine "
                    "torch")
        return problem


def _env(common: dict[str, str], role: str, node: Node) -> dict[str, str]:
    # DMLC_NODE_HOST tells ps-lite which address this process announces to the others.
    return {**common, "DMLC_ROLE": role, "DMLC_NODE_HOST": node.address}
