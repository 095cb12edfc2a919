"""PyTorch engines over ``torch.distributed`` with Gloo: a parameter server and DDP.

- ``torch`` (``--sync sync|async``): a parameter server over Gloo point-to-point
  (``workloads.torch_ps``). Servers hold the parameters as one flat fp32 buffer and run
  the optimizer (SGD with momentum and weight decay), as MXNet's ``update_on_kvstore``
  does; workers push gradients and pull parameters. Sync: each server waits for all N
  pushes, averages, steps and answers everyone; async: it steps on each push as it
  arrives and answers that worker alone. Placement as MXNet's: ``master`` puts one
  server on a node of its own (N + 1 nodes), ``colocated`` one server beside every
  worker, each owning a contiguous slice of the parameters (N nodes). One device trains
  alone (no server), the same training whatever the sync mode.
- ``torch-ddp``: ``DistributedDataParallel`` (ring allreduce over Gloo, sync only),
  gradients only on the wire (``workloads.torch_ddp``).

Why plain ``torch.distributed`` and not ``torch.distributed.rpc``: RPC and TensorPipe
are in maintenance mode, and TensorPipe's shared-memory channel can bypass the emulated
links; Gloo's point-to-point always goes over TCP. Why not ``reduce``/``broadcast`` for
the parameter server: Gloo runs them as a ring and a tree, and the traffic would no
longer be a parameter server's.

Every process gets the rendezvous (``MASTER_ADDR``/``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``) and ``GLOO_SOCKET_IFNAME`` (the node's interface: a stock Pi OS
resolves its hostname to 127.0.1.1, where peers cannot reach it).
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

from ..cell import CellConfig
from ..cluster.base import Node
from ..ports import free_port
from .base import (Engine, Package, ProcessSpec, TrainOptions, gloo_interface,
                   parameter_server_nodes)

INSTALL_HINT = ("run ./scripts/setup.sh (it installs the CPU build torch==2.13.0+cpu; "
                "README: PyTorch on other machines)")
# What the inventory check runs in a child process: a wheel built for newer cores dies
# with SIGILL on the Pi 3B/4's ARMv8.0 cores (torch 2.10 on aarch64), which must be one
# line naming the host, not a crash of the check.
_TORCH_SMOKE = ("import torch, torch.distributed as dist\n"
                "assert dist.is_available() and dist.is_gloo_available(), "
                "'built without Gloo'\n"
                "a = torch.ones(64, 64)\n"
                "print(torch.__version__, float((a @ a).sum()))\n")
SMOKE_TIMEOUT_S = 120  # importing torch under a slow SD card takes a while
SIGNAL_NAMES = {4: "SIGILL (illegal instruction)", 7: "SIGBUS", 11: "SIGSEGV"}


def _rendezvous(master: Node, world_size: int, options: TrainOptions) -> dict[str, str]:
    return {"MASTER_ADDR": master.address,
            # Picked on the host: free there, and (almost surely) inside an emulated node.
            "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(world_size),
            "OMP_NUM_THREADS": str(options.threads_per_process),
            "PYTHONUNBUFFERED": "1"}


def _process_env(common: dict[str, str], rank: int, node: Node) -> dict[str, str]:
    return {**common, "RANK": str(rank), "GLOO_SOCKET_IFNAME": gloo_interface(node)}


class _TorchEngine(Engine):
    framework = "torch"
    packages = (Package("torch", "torch"),)
    install_hint = INSTALL_HINT

    def probe_host(self) -> dict:
        """Import torch, check Gloo and multiply two matrices, in a child process."""
        try:
            from importlib import metadata
            version = metadata.version("torch")
        except Exception:  # noqa: BLE001 - not installed is an answer
            return {"ok": False, "problem": "torch is not installed: provision the node with "
                                            "ansible/site.yml (edgeprof_engines: torch)"}
        try:
            done = subprocess.run([sys.executable, "-c", _TORCH_SMOKE], capture_output=True,
                                  text=True, timeout=SMOKE_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {"ok": False, "problem": f"torch {version} did not import and multiply "
                                            f"within {SMOKE_TIMEOUT_S} s"}
        if done.returncode < 0 or done.returncode > 128:
            sig = -done.returncode if done.returncode < 0 else done.returncode - 128
            what = SIGNAL_NAMES.get(sig, f"signal {sig}")
            return {"ok": False, "torch": version,
                    "problem": f"torch {version} dies with {what} on this CPU "
                               f"({platform.machine()}): its wheel needs instructions this "
                               "core lacks; install torch==2.9.1, the last PyPI CPU wheel "
                               "that runs on the Pi 3B/4 (docs/raspberry-pi.md)"}
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            return {"ok": False, "torch": version,
                    "problem": f"torch {version} does not work: "
                               f"{lines[-1] if lines else 'exit ' + str(done.returncode)}"}
        return {"ok": True, "torch": version}


class TorchPSEngine(_TorchEngine):
    name = "torch"
    description = ("PyTorch parameter server over Gloo point-to-point (sync, async; "
                   "alone on one device)")

    def nodes_needed(self, cell: CellConfig) -> int:
        return parameter_server_nodes(cell)

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        worker_argv = self.train_argv(cell, cell_dir, options)
        if cell.devices == 1:
            return [ProcessSpec("worker", 0, nodes[0], worker_argv)]
        needed = self.nodes_needed(cell)
        if cell.placement == "master":
            server_nodes, worker_nodes = [nodes[0]], nodes[1:needed]
        else:
            server_nodes = worker_nodes = nodes[:needed]
        # Servers take ranks 0..S-1 (server 0 hosts the rendezvous), workers S..S+N-1.
        common = {**_rendezvous(server_nodes[0], len(server_nodes) + cell.devices, options),
                  "EDGEPROF_PS_SERVERS": str(len(server_nodes))}
        server_argv = self.train_argv(cell, cell_dir, options, role="server")
        specs = [ProcessSpec("server", i, node, server_argv, _process_env(common, i, node),
                             decisive=False) for i, node in enumerate(server_nodes)]
        specs += [ProcessSpec("worker", i, node, worker_argv,
                              _process_env(common, len(server_nodes) + i, node))
                  for i, node in enumerate(worker_nodes)]
        return specs


class TorchDDPEngine(_TorchEngine):
    name = "torch-ddp"
    description = "PyTorch DistributedDataParallel, ring allreduce over Gloo (sync only)"
    sync_modes = ("sync",)

    def comm(self, cell: CellConfig) -> str:
        return "local" if cell.devices == 1 else "allreduce"

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        argv = self.train_argv(cell, cell_dir, options)
        worker_nodes = nodes[:self.nodes_needed(cell)]
        if cell.devices == 1:
            return [ProcessSpec("worker", 0, worker_nodes[0], argv)]
        common = _rendezvous(worker_nodes[0], cell.devices, options)
        return [ProcessSpec("worker", i, node, argv, _process_env(common, i, node))
                for i, node in enumerate(worker_nodes)]
