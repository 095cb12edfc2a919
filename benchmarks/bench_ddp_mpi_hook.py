"""torch's DistributedDataParallel with its gradients allreduced over Open MPI (mpi4py in
a DDP communication hook) against DDP over Gloo, on PyPI's torch wheel.

PyPI's torch wheels are built without the ``mpi`` process-group backend (it needs torch
built from source against an MPI). A DDP communication hook decides how each gradient
bucket is reduced, so a hook that hands the bucket to ``MPI_Allreduce`` (mpi4py) moves
the gradient traffic onto Open MPI without a torch build. DDP itself still needs a
``torch.distributed`` process group (it broadcasts rank 0's weights at construction and
checks the model on every rank), so Gloo stays for that; only the per-step traffic moves.

Two processes under ``mpirun`` train the same model on the same synthetic batches with
three DDP wrappers of identical copies of it; ``--cluster local``: both on this machine,
Open MPI's ``tcp`` transport on loopback (``btl self,tcp``: both backends over TCP, as
between Pis); ``--cluster emulated``: one on each of two emulated nodes (``--profile``'s
link and CPU quota, root), launched as ``--engine horovod --horovod-ops mpi`` launches a
cell (``bench_allreduce.run_backend``: ``mpirun`` on node 0, ``orted`` in each node's
namespace and cgroup). The three:

- ``gloo``: DDP's own allreduce over the Gloo process group;
- ``mpi``: a hook calling ``MPI_Allreduce`` in place on the bucket (blocking: backward
  waits for each bucket's allreduce before it goes on);
- ``mpi-async``: a hook starting ``MPI_Iallreduce`` and returning a future that a helper
  thread completes (backward goes on while the bucket travels, as DDP's Gloo does).

They take turns (round-robin, ``--rounds`` rounds of ``--steps`` steps after a warm-up
each), so host load hits them alike; printed per model and mode: samples/s per process
(mean and 95% interval over the rounds) and the ratio to ``gloo``, also as the mean of
each round's ratio (paired: a shared host's load drifts between rounds). Before timing, one
step's averaged gradients of the three are compared (they must match).

mpi4py is not an edgeprof dependency: run this with a Python that has it, e.g. a copy
of the venv (``cp -a .venv /tmp/venv-mpi && /tmp/venv-mpi/bin/python -m pip install
mpi4py``; PyPI's wheel loads the system's ``libmpi``, Debian's ``libopenmpi3``):

    /tmp/venv-mpi/bin/python benchmarks/bench_ddp_mpi_hook.py
    sudo /tmp/venv-mpi/bin/python benchmarks/bench_ddp_mpi_hook.py --cluster emulated \\
        --models lenet-mlp --rounds 6 --steps 40 [--mpi-yield]
    /tmp/venv-mpi/bin/python benchmarks/bench_ddp_mpi_hook.py --models lenet-mlp \\
        --rounds 3 --steps 50
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_allreduce import interval  # noqa: E402 - the same 95% interval (Student's t)

MODES = ("gloo", "mpi", "mpi-async")
RUN_TIMEOUT_S = 1800


def fail(message: str) -> None:
    """Bad input or a missing piece: one line, exit status 2."""
    print(f"bench_ddp_mpi_hook: {message}", file=sys.stderr)
    sys.exit(2)


# --- the hooks ---------------------------------------------------------------------------

def mpi_allreduce_hook(comm, bucket):
    """Average the bucket over ``comm`` in place, blocking; a completed future."""
    import torch
    from mpi4py import MPI

    buf = bucket.buffer()
    comm.Allreduce(MPI.IN_PLACE, buf.detach().numpy(), op=MPI.SUM)
    buf.div_(comm.Get_size())
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


class AsyncMPIHook:
    """Start ``MPI_Iallreduce`` and return; one helper thread waits for the requests in
    the order they were started (every rank starts DDP's buckets in the same order)."""

    def __init__(self, comm):
        from concurrent.futures import ThreadPoolExecutor

        self.comm = comm
        self.waiter = ThreadPoolExecutor(max_workers=1)

    def start(self, bucket):
        import torch
        from mpi4py import MPI

        buf = bucket.buffer()
        request = self.comm.Iallreduce(MPI.IN_PLACE, buf.detach().numpy(), op=MPI.SUM)
        fut = torch.futures.Future()

        def finish():
            try:
                request.Wait()
                buf.div_(self.comm.Get_size())
                fut.set_result(buf)
            except Exception as exc:  # noqa: BLE001 - handed to DDP, which raises it
                fut.set_exception(exc)
        self.waiter.submit(finish)
        return fut


def async_mpi_hook(state: AsyncMPIHook, bucket):
    """DDP wants a function (it reads the hook's ``__name__``); the state does the work."""
    return state.start(bucket)


# --- in each rank (under mpirun) ---------------------------------------------------------

def rank_main(models: list[str], batch: int, steps: int, rounds: int,
              out: Path | None) -> None:
    import copy
    import warnings

    import torch
    import torch.distributed as dist
    from mpi4py import MPI
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workloads import torch_models
    from workloads.models import input_shape

    # torch 2.13 deprecates broadcast_buffers; False is what torch-ddp's workers use.
    warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
    from workloads.node_limits import join_cpu_limit

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    address = "127.0.0.1"
    if Path("/sys/class/net/eth0").exists():  # an emulated node: Gloo on its link too
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
        address = _ipv4_of("eth0")
    rendezvous = None
    if rank == 0:
        with socket.socket() as probe:  # a free port for Gloo's rendezvous, told over MPI
            probe.bind((address, 0))
            rendezvous = f"tcp://{address}:{probe.getsockname()[1]}"
    rendezvous = comm.bcast(rendezvous, root=0)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=size)
    join_cpu_limit()  # an emulated node's CPU quota from here on, as a worker's
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(text)
        print(text, flush=True)
    torch.manual_seed(0)
    if rank == 0:
        say(f"# torch {torch.__version__}, {MPI.Get_library_version().splitlines()[0]}, "
            f"MPI thread level {MPI.Query_thread()} (MULTIPLE = {MPI.THREAD_MULTIPLE}), "
            f"{size} ranks, batch {batch}, {torch.get_num_threads()} threads")
    for model in models:
        name, _, layers = model.partition("-") if model.startswith("resnet") else (model, "", "")
        base = torch_models.build(name, int(layers) if layers else None)
        nets = {}
        for mode in MODES:
            net = DDP(copy.deepcopy(base), gradient_as_bucket_view=True,
                      broadcast_buffers=False)
            if mode == "mpi":
                net.register_comm_hook(comm, mpi_allreduce_hook)
            elif mode == "mpi-async":
                net.register_comm_hook(AsyncMPIHook(comm), async_mpi_hook)
            nets[mode] = (net, torch.optim.SGD(net.parameters(), lr=0.01))
        x = torch.randn(batch, *input_shape(name), generator=torch.Generator().manual_seed(rank))
        y = torch.randint(0, 10, (batch,), generator=torch.Generator().manual_seed(rank))
        loss_fn = torch.nn.CrossEntropyLoss()

        def step(mode: str, apply: bool = True) -> None:
            net, opt = nets[mode]
            opt.zero_grad(set_to_none=False)
            loss_fn(net(x), y).backward()
            if apply:
                opt.step()

        # The same averaged gradients from the three (same weights, same batches).
        for mode in MODES:
            step(mode, apply=False)
        grads = {m: torch.cat([p.grad.flatten() for p in nets[m][0].parameters()])
                 for m in MODES}
        match = all(torch.allclose(grads["gloo"], grads[m], rtol=1e-5, atol=1e-7)
                    for m in MODES)
        n_params = sum(p.numel() for p in base.parameters())
        rates: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(rounds):
            for mode in MODES:
                for _ in range(3):  # warm-up: caches, DDP's bucket rebuild
                    step(mode)
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(steps):
                    step(mode)
                elapsed = time.perf_counter() - t0
                rates[mode].append(comm.allreduce(steps * batch / elapsed, op=MPI.MIN))
        if rank == 0:
            gloo_mean = statistics.fmean(rates["gloo"])
            say(f"{model}: {n_params:,} parameters ({n_params * 4 / 1024:.0f} KB of "
                f"gradients a step), gradients match: {'yes' if match else 'NO'}")
            for mode in MODES:
                mean, half = interval(rates[mode])
                # Paired by round (the load of a shared host drifts between rounds more
                # than between the turns of one round).
                ratio, ratio_half = interval([r / g for r, g in zip(rates[mode],
                                                                    rates["gloo"])])
                say(f"  {mode:>9}: {mean:8.1f} ± {half:6.1f} samples/s per process, "
                    f"{mean / gloo_mean:.2f} x gloo (per round: {ratio:.2f} ± "
                    f"{ratio_half:.2f})")
    if rank == 0 and out:
        out.write_text(json.dumps({"nodes": size, "lines": lines}))
    dist.destroy_process_group()


def _ipv4_of(interface: str) -> str:
    """The interface's IPv4 address (SIOCGIFADDR)."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", interface.encode()))
    return socket.inet_ntoa(packed[20:24])


# --- on the controller -------------------------------------------------------------------

def run_emulated(args) -> None:
    """Two ranks on two emulated nodes, launched by bench_allreduce's Horovod-MPI launch."""
    import tempfile

    from bench_allreduce import run_backend

    from profiler.cluster import emulated
    from profiler.errors import ClusterError

    if os.geteuid() != 0:
        fail("--cluster emulated needs root: run it with sudo")
    if args.mpi_yield:
        os.environ["OMPI_MCA_mpi_yield_when_idle"] = "1"  # mpirun and the ranks inherit it
    program = [sys.executable, str(Path(__file__).resolve()), "--models", args.models,
               "--batch", str(args.batch), "--steps", str(args.steps),
               "--rounds", str(args.rounds)]
    print(f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    created = False
    try:
        cluster, created = emulated.ensure_cluster(2, args.profile)
        with tempfile.TemporaryDirectory(prefix="bench-ddp-mpi-") as tmp:
            result = run_backend(cluster, "mpi", 2, [], 0, Path(tmp), program=program)
        print("\n".join(result["lines"]))
    except ClusterError as exc:
        fail(str(exc))
    finally:
        if created:
            emulated.down()
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="lenet-mlp,resnet-20")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads a process")
    parser.add_argument("--cluster", choices=("local", "emulated"), default="local",
                        help="emulated: one rank per emulated node (root), mpirun as "
                             "--engine horovod --horovod-ops mpi launches it")
    parser.add_argument("--profile", default="pi3b", help="the emulated nodes' profile")
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--mpi-yield", action="store_true",
                        help="Open MPI yields the CPU while it waits (mpi_yield_when_idle "
                             "1) instead of polling")
    args = parser.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    known = ("lenet-mlp", "lenet-cnn") + tuple(f"resnet-{6 * n + 2}" for n in range(1, 19))
    bad = [m for m in models if m not in known]
    if bad or min(args.batch, args.steps, args.rounds, args.threads) < 1:
        fail(f"--models {args.models!r}: lenet-mlp, lenet-cnn or resnet-DEPTH (6n+2); "
             "--batch, --steps, --rounds and --threads at least 1")
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        rank_main(models, args.batch, args.steps, args.rounds,
                  Path(args.out) if args.out else None)
        return
    try:
        import mpi4py  # noqa: F401 - only whether it is there
    except ImportError:
        fail(f"mpi4py is not installed in {sys.executable}: run this with a copy of the "
             "venv that has it (`python -m pip install mpi4py`, see this file's docstring)")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        fail("mpirun is not on PATH: apt-get install openmpi-bin")
    if args.cluster == "emulated":
        run_emulated(args)
        return
    argv = [mpirun, "--allow-run-as-root", "-np", "2", "--host", "localhost:2",
            "--bind-to", "none", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include",
            "lo", "--mca", "oob_tcp_if_include", "lo",
            *(["--mca", "mpi_yield_when_idle", "1"] if args.mpi_yield else []),
            "-x", f"OMP_NUM_THREADS={args.threads}", "-x", "PYTHONPATH",
            sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    print(f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    # A group of its own: a timeout or Ctrl-C ends mpirun and the ranks it forked.
    launched = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        code = launched.wait(timeout=RUN_TIMEOUT_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        os.killpg(launched.pid, signal.SIGKILL)
        launched.wait()
        fail("interrupted: mpirun and its ranks stopped" if isinstance(exc, KeyboardInterrupt)
             else f"mpirun did not end within {RUN_TIMEOUT_S} s: stopped it and its ranks")
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
