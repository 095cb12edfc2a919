"""Horovod engine: ring allreduce over Gloo, one worker per node, sync only.

How it launches, and why not ``horovodrun`` as one process: ``horovodrun --gloo`` is a
driver that (1) starts a Gloo rendezvous server, (2) assigns ranks to host slots and
(3) starts every worker with the ``HOROVOD_*`` environment, over SSH for any host that is
not this machine. Step 3 does not fit edgeprof's nodes: an emulated node is a network
namespace (no SSH), and the cell runner must start each worker *on its node* through
``Cluster.start`` so it gets that node's network and cgroup, its own log and its PID for
the metrics agent. So this engine uses Horovod's launcher pieces for steps 1 and 2 and
lets the cluster do step 3:

- one ``launcher`` process on node 0 (``python -m workloads.hvd``) runs Horovod's own
  ``RendezvousHTTPServer`` with the slot plan from ``get_host_assignments``; it is not
  decisive: the runner stops it once the workers are done;
- one ``worker`` per node runs ``workloads.train --comm allreduce`` with the variables
  Horovod's ``gloo_run`` gives each slot (``create_slot_env_vars`` and
  ``create_run_env_vars``, called here, not copied).

The same plan serves the local, emulated and inventory clusters. Each edgeprof node is
one Horovod host with one slot, so on the local cluster too every worker is its own
"host" (local size 1), as on a Pi cluster.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from ..cell import CellConfig
from ..cluster.base import Node
from ..errors import ClusterError
from ..ports import free_port
from .base import Engine, Package, ProcessSpec, TrainOptions, gloo_interface
from .mxnet import MXNET_ENGINE, mxnet_engine_columns

# Gloo's default 30 s rendezvous timeout is too short when a Pi-class node needs longer
# than its peers to import MXNet; a stuck cell is still ended by the runner's timeout.
GLOO_TIMEOUT_S = 300

BUILD_HINT = ("build it with HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 "
              "HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 pip install "
              "--no-build-isolation horovod==0.28.1 (see docs/horovod.md)")


class HorovodEngine(Engine):
    name = "horovod"
    description = "Horovod ring allreduce over Gloo, through MXNet (sync only)"
    framework = "mxnet"
    sync_modes = ("sync",)
    packages = (Package("mxnet", "mxnet"), Package("horovod", "horovod.mxnet"))
    install_hint = BUILD_HINT
    plans_with_packages = True
    columns = (MXNET_ENGINE,)  # its workers are MXNet's

    def summarize(self, workers: dict[int, list[dict]], starts: dict[int, dict]) -> dict:
        return mxnet_engine_columns(starts)

    # The rendezvous is tiny and shares node 0 with worker 0 (horovodrun does the same):
    # nodes_needed is the base's, one node a device.

    def comm(self, cell: CellConfig) -> str:
        return "allreduce"

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        needed = self.nodes_needed(cell)
        slot_env, run_env = _horovod_env_builders()

        worker_nodes = nodes[:needed]
        hosts = ",".join(f"{node.name}:1" for node in worker_nodes)
        rendezvous_node = worker_nodes[0]
        # Picked on the host: free there, and (almost surely) inside an emulated node.
        port = free_port()
        launcher = ProcessSpec(
            "launcher", 0, rendezvous_node,
            [sys.executable, "-m", "workloads.hvd", "--hosts", hosts, "--port", str(port)],
            {}, decisive=False)

        argv = self.train_argv(cell, cell_dir, options)
        specs = [launcher]
        for slot in slot_plan(hosts):
            node = worker_nodes[slot.rank]
            env = {**run_env(rendezvous_node.address, [gloo_interface(node)], port),
                   **slot_env(slot),
                   "HOROVOD_GLOO_TIMEOUT_SECONDS": str(GLOO_TIMEOUT_S),
                   "OMP_NUM_THREADS": str(options.threads_per_process),
                   # gloo_run sets it too: worker output reaches the log as it happens.
                   "PYTHONUNBUFFERED": "1"}
            specs.append(ProcessSpec("worker", slot.rank, node, argv,
                                     {key: str(value) for key, value in env.items()}))
        return specs

    def check_installed(self) -> None:
        """Horovod with its MXNet extension, found without loading MXNet (planning a
        cell needs Horovod's runner on the controller whatever the cluster)."""
        _import_horovod_runner()

    def probe_host(self) -> dict:
        answer = super().probe_host()
        if answer["ok"]:
            import horovod.mxnet as hvd

            if not hvd.gloo_built():
                return {"ok": False, "problem": "horovod.mxnet was built without Gloo "
                                                "(HOROVOD_WITH_GLOO=1)"}
        return answer


def slot_plan(hosts: str) -> list:
    """Horovod's own rank assignment (``SlotInfo`` list) for ``name:slots,...``."""
    _import_horovod_runner()
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    return get_host_assignments(parse_hosts(hosts), 1)


def _horovod_env_builders():
    _import_horovod_runner()
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars

    return create_slot_env_vars, create_run_env_vars


def _import_horovod_runner() -> None:
    """Raise ``ClusterError`` unless Horovod with its MXNet extension is installed.

    Looks for the extension file instead of importing ``horovod.mxnet``, which would load
    MXNet into the controller just to plan a cell.
    """
    try:
        import horovod.runner  # noqa: F401
        from horovod.common.util import get_extension_full_path
        spec = importlib.util.find_spec("horovod.mxnet")
    except ImportError:
        raise ClusterError(f"Horovod is not installed in {sys.executable}: "
                           f"{BUILD_HINT}") from None
    if spec is None or not os.path.exists(get_extension_full_path(spec.origin, "mpi_lib")):
        raise ClusterError(f"Horovod in {sys.executable} was built without MXNet: "
                           f"{BUILD_HINT}")
