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

``--horovod-ops mpi`` (a setting of the engine's own, a grid dimension: one sweep
compares it with ``gloo``) runs Horovod's MPI controller and CPU operations over Open
MPI instead, launched the way MPI jobs are: ``mpirun`` as the cell's one decisive
process, the ``launcher`` on node 0, started through the cluster like any other. Open
MPI starts an ``orted`` on every node through its rsh agent, which is
``workloads.mpi rsh``: it enters each node the way the cluster says
(``Cluster.entry``: the emulated node's network namespace and cgroups; the local
cluster's plain exec; another inventory node through the controller's own SSH
connection to it, ``profiler.cluster.inventory.mpi_relay``; another Swarm node through
an entry service there, ``profiler.cluster.swarm.mpi_entry``), so each rank runs in its
node's network and cgroup (or container), as a Gloo worker does. ``workloads.mpi`` says how its
output, events and failures come back and why nothing outlives the cell;
docs/horovod.md says why this shape.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from ..cell import CellConfig
from ..cluster.base import Node
from ..errors import ClusterError
from ..option_lists import parse_choice_list
from ..ports import free_port
from .base import Engine, EngineOption, Package, ProcessSpec, TrainOptions, gloo_interface
from .mxnet import MXNET_ENGINE, mxnet_engine_columns

# Gloo's default 30 s rendezvous timeout is too short when a Pi-class node needs longer
# than its peers to import MXNet; a stuck cell is still ended by the runner's timeout.
GLOO_TIMEOUT_S = 300

BUILD_HINT = ("build it with HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 "
              "HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 pip install "
              "--no-build-isolation --no-cache-dir horovod==0.28.1 (see docs/horovod.md)")
# Horovod's controller and collective operations, the engine's own setting.
OPS = ("gloo", "mpi")
MPIRUN = "mpirun"
# Open MPI refuses root without them; the emulated cluster runs as root.
MPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def _ops(text: str) -> list[str]:
    return parse_choice_list(text, "--horovod-ops", OPS)


class HorovodEngine(Engine):
    name = "horovod"
    description = "Horovod ring allreduce over Gloo or MPI, through MXNet (sync only)"
    framework = "mxnet"
    sync_modes = ("sync",)
    packages = (Package("mxnet", "mxnet"), Package("horovod", "horovod.mxnet"))
    install_hint = BUILD_HINT
    plans_with_packages = True
    columns = (MXNET_ENGINE,)  # its workers are MXNet's
    # Added after Horovod cells had ids: at gloo it stays out of the cell_id.
    options = (EngineOption(
        "horovod_ops", "gloo", _ops,
        "Horovod's controller and CPU operations (horovod): gloo (Horovod's own launcher, "
        "its rendezvous) or mpi (Open MPI, launched by mpirun); gloo,mpi compares them.",
        "str", "Horovod's controller and collective operations: gloo (empty) or mpi",
        omit_default=True),)

    def summarize(self, workers: dict[int, list[dict]], starts: dict[int, dict]) -> dict:
        return mxnet_engine_columns(starts)

    # The rendezvous is tiny and shares node 0 with worker 0 (horovodrun does the same):
    # nodes_needed is the base's, one node a device.

    def comm(self, cell: CellConfig) -> str:
        return "allreduce"

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        if cell.param("horovod_ops", "gloo") == "mpi":
            return [self._mpi_launcher(cell, nodes[:self.nodes_needed(cell)], cell_dir,
                                       options)]
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

    def _mpi_launcher(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
                      options: TrainOptions) -> ProcessSpec:
        """``mpirun`` on node 0 (through ``workloads.mpi launch``) starting one rank per
        node through ``workloads.mpi rsh``, on the nodes' training interface."""
        iface = gloo_interface(nodes[0])
        other = next((n for n in nodes if gloo_interface(n) != iface), None)
        if other is not None:  # Open MPI takes one list of interfaces for every node
            raise ClusterError(
                f"--horovod-ops mpi names one network interface for all of a cell's nodes, "
                f"and node {nodes[0].name} trains on {iface}, node {other.name} on "
                f"{gloo_interface(other)}: give them the same edgeprof_interface")
        rank_env = {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi",
                    "OMP_NUM_THREADS": str(options.threads_per_process),
                    "PYTHONUNBUFFERED": "1"}
        mpirun = [
            MPIRUN, "-np", str(len(nodes)),
            "--host", ",".join(f"{node.name}:1" for node in nodes),
            # Each node its own binding: Open MPI would pin every "host"'s rank to core 0.
            "--bind-to", "none",
            # (The rsh agent, ``workloads.mpi rsh``, is named by the launcher on node 0:
            # it is that node's Python.) Every orted from node 0's mpirun, not from
            # each other (tree spawn).
            "--mca", "plm_rsh_no_tree_spawn", "1",
            # Each orted stays its rsh agent's child instead of daemonizing: one that
            # failed after daemonizing left mpirun waiting for it until the time limit;
            # attached, its end is its agent's, which mpirun sees at once, and a stopped
            # agent takes its daemon along.
            "--mca", "orte_leave_session_attached", "1",
            # TCP on the node's training interface only: no shared memory between slots
            # of one host (the local cluster), no guessing among a namespace's interfaces.
            "--mca", "btl", "self,tcp",
            "--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface,
            *[arg for key, value in rank_env.items() for arg in ("-x", f"{key}={value}")],
            sys.executable, "-m", "workloads.mpi", "rank", str(cell_dir / "logs"), "--",
            *self.train_argv(cell, cell_dir, options)]
        argv = [sys.executable, "-m", "workloads.mpi", "launch",
                ",".join(node.name for node in nodes), "--", *mpirun]
        return ProcessSpec("launcher", 0, nodes[0], argv, dict(MPI_ROOT_ENV), part="mpirun",
                           launches_on=tuple(nodes))

    def check_cells(self, cells: Sequence[CellConfig]) -> None:
        """``--horovod-ops mpi``: Horovod built with MPI, and Open MPI's ``mpirun``."""
        if not any(cell.param("horovod_ops", "gloo") == "mpi" for cell in cells):
            return
        if shutil.which(MPIRUN) is None:
            raise ClusterError("--horovod-ops mpi needs Open MPI's mpirun, which is not on "
                               "PATH: apt-get install openmpi-bin libopenmpi-dev, then "
                               "rebuild Horovod (scripts/setup.sh)")
        if not mpi_built():
            raise ClusterError(f"--horovod-ops mpi: Horovod in {sys.executable} was built "
                               f"without MPI: re{BUILD_HINT}")

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
            # What --horovod-ops mpi needs on every node (host_problem judges it).
            answer["mpi"] = {"built": bool(hvd.mpi_built()),
                             "orted": shutil.which("orted") is not None}
        return answer

    def host_problem(self, answer: dict, cells: Sequence[CellConfig]) -> str | None:
        problem = super().host_problem(answer, cells)
        if problem or not any(c.param("horovod_ops", "gloo") == "mpi" for c in cells):
            return problem
        mpi = answer.get("mpi") or {}
        if not mpi.get("orted"):
            return ("--horovod-ops mpi needs Open MPI there (no orted on PATH): "
                    "apt-get install openmpi-bin libopenmpi-dev, then rebuild Horovod")
        if not mpi.get("built"):
            return f"--horovod-ops mpi: Horovod there was built without MPI: re{BUILD_HINT}"
        return None


@functools.cache
def mpi_built() -> bool:
    """Whether Horovod's MXNet extension was built with MPI, asked in a process of its
    own (the answer needs MXNet loaded, which the controller does not load to plan)."""
    _import_horovod_runner()
    probe = subprocess.run(
        [sys.executable, "-c", "import horovod.mxnet as h; print(bool(h.mpi_built()))"],
        capture_output=True, text=True, timeout=120)
    return probe.returncode == 0 and probe.stdout.strip().endswith("True")


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
