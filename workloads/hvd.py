"""Horovod (allreduce over Gloo) for ``workloads.train``, and the cell's rendezvous server.

Two uses, both small:

- a worker: ``workloads.train --comm allreduce`` calls ``init()`` then ``trainer()``;
  rank and size come from the ``HOROVOD_*`` environment the engine
  (``profiler.engines.horovod``) sets, the way ``horovodrun --gloo`` sets it.
- the launcher: ``python -m workloads.hvd --hosts local0:1,local1:1 --port P`` runs
  Horovod's own Gloo rendezvous server (the one ``horovodrun --gloo`` starts in its
  driver) until it is stopped. It imports no MXNet, so it is up long before any worker
  has imported MXNet and asks for it.

Learning rate: none is rescaled here. Horovod's ``DistributedTrainer`` averages the
workers' gradients (``trainer.step(batch)`` then applies the global-batch mean), and
``workloads.train`` normalises MXNet ``dist_sync`` by the global batch (the server sums
N per-worker gradients, ``step(batch * N)``), so at the same ``--lr`` both engines apply
the same update for the same gradients: an engine-by-engine comparison compares
communication, not optimisation. (The usual Horovod recipe, ``lr * size``, would be the
right one against per-worker-normalised updates; it is not what dist_sync does here.)
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
import time

# Horovod's HTTP store retries a refused connection 3 times, 0.5 s apart: on a slow node
# the rendezvous process may still be starting, so workers wait for its port first.
RENDEZVOUS_WAIT_S = 60.0


def init() -> tuple[int, int]:
    """Join the Horovod job described by the environment; return ``(rank, size)``."""
    addr = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")
    port = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    if addr and port:
        wait_for_port(addr, int(port), RENDEZVOUS_WAIT_S)
    bind_hostname_to_gloo_iface()
    import horovod.mxnet as hvd

    hvd.init()
    return hvd.rank(), hvd.size()


def trainer(params, optimizer: str, optimizer_params: dict):
    """A ``hvd.DistributedTrainer`` over ``params``, after rank 0's values are broadcast.

    ``params`` must already be initialised with their real shapes; the learning rate is
    used as given (see the module docstring).
    """
    import horovod.mxnet as hvd

    broadcast_from_root(params)
    return hvd.DistributedTrainer(params, optimizer, optimizer_params)


def shutdown() -> None:
    """Leave the job once this worker's last step is done: wait for MXNet's engine to
    finish the allreduces it still holds, then stop Horovod's background thread (what
    Horovod's own ``atexit`` handler would do). The worker then skips the interpreter's
    teardown (``MXNetWorker.teardown``): nothing is left for the destructors there but
    MXNet's engine, whose threads they may find running. (The aborts once put down to
    that teardown were the start's broadcast: ``broadcast_from_root``.)"""
    import horovod.mxnet as hvd
    import mxnet as mx

    mx.nd.waitall()
    hvd.shutdown()


def broadcast_from_root(params) -> None:
    """Give every worker rank 0's parameter values: a sum over the workers of rank 0's
    values and everyone else's zeros, through Horovod's allreduce.

    Not ``hvd.broadcast_`` (nor ``hvd.broadcast_parameters``, which calls it): Horovod
    0.28.1's ``EnqueueTensorBroadcast`` logs the tensor's name *after* handing the
    tensor to its background thread, and that name lives in the MXNet operation's
    parameters, which the background thread frees once the broadcast is done. When the
    enqueuing engine thread is preempted in between (a loaded host), it reads freed
    memory: SIGSEGV, which MXNet's handler turns into ``exit(-1)``, whose destructors
    abort ("terminate called without an active exception"; a core dump of a Horovod
    test's worker in the suite showed exactly this stack). The allreduce path logs a
    copy of its names. Zeros plus rank 0's values are rank 0's values exactly.

    ``copy()`` yields a plain-layout array: MKL-DNN keeps a ResNet's convolution
    weights, initialised by a forward pass outside ``autograd.record()``, in a blocked
    layout Horovod cannot read ("We can't generate TBlob for MKLDNN data"); the result
    is copied back (MXNet converts the layout on that copy). Gradients are plain already.
    """
    import horovod.mxnet as hvd
    import mxnet as mx

    root = hvd.rank() == 0
    for name, param in sorted(params.items()):
        weights = param.data()
        plain = weights.copy() if root else mx.nd.zeros_like(weights)
        hvd.allreduce_(plain, op=hvd.Sum, name=f"init.{name}")
        plain.copyto(weights)
    mx.nd.waitall()


def bind_hostname_to_gloo_iface() -> None:
    """Make this process's hostname resolve to ``HOROVOD_GLOO_IFACE``'s address.

    Horovod 0.28.1 honours ``HOROVOD_GLOO_IFACE`` for its global, local and cross Gloo
    contexts but not for the process-set context that carries every allreduce
    (``GlooContext::InitializeForProcessSet`` reads its own, never-set ``gloo_iface_``).
    Gloo then binds to whatever the machine's hostname resolves to: 127.0.1.1 on a stock
    Raspberry Pi OS, the host's loopback inside an emulated node, and peers are told to
    connect there ("connect [127.0.0.1]:N: Connection refused"). Nothing to do when the
    hostname already resolves to the interface (a well-configured cluster) or on ``lo``;
    as root (the emulated cluster) this process gets its own UTS namespace whose hostname
    is the interface's IPv4 address, which resolves to itself. Otherwise: a clear error.
    """
    from profiler.errors import ClusterError

    iface = os.environ.get("HOROVOD_GLOO_IFACE")
    if not iface or iface == "lo":
        return
    import psutil

    addresses = sorted(a.address for a in psutil.net_if_addrs().get(iface, [])
                       if a.family == socket.AF_INET)
    if not addresses:
        return  # Gloo itself reports an interface without an address
    hostname = socket.gethostname()
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(hostname, None, socket.AF_INET)}
    except socket.gaierror:
        resolved = set()
    if resolved & set(addresses):
        return
    if os.geteuid() != 0:
        where = ", ".join(sorted(resolved)) or "nothing"
        raise ClusterError(f"hostname {hostname} resolves to {where}, not to {iface}'s "
                           f"{addresses[0]}: Horovod's Gloo would bind there; map {hostname} "
                           f"to {addresses[0]} in /etc/hosts on this node")
    import ctypes

    clone_newuts = 0x04000000
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(clone_newuts) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS) failed")
    socket.sethostname(addresses[0])


def wait_for_port(address: str, port: int, timeout_s: float) -> None:
    """Return once ``address:port`` accepts TCP connections; raise ``TimeoutError`` past
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((address, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Horovod rendezvous {address}:{port} did not answer "
                                   f"within {timeout_s:.0f} s") from None
            time.sleep(0.2)


def serve_rendezvous(hosts: str, port: int, stop: threading.Event) -> None:
    """Run Horovod's Gloo rendezvous for ``hosts`` (``name:slots,...``) until ``stop`` is set."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    slots = get_host_assignments(parse_hosts(hosts), 1)
    # RendezvousServer.start() picks a random port; the engine must know the port when it
    # plans the workers, so the same server class is bound to the planned port here.
    server = RendezvousHTTPServer(("0.0.0.0", port), RendezvousHandler, 0)
    server.init(slots)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Horovod Gloo rendezvous for one cell.")
    parser.add_argument("--hosts", required=True, help="name:slots,... in rank order")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"rendezvous for {args.hosts} on port {args.port}", flush=True)
    serve_rendezvous(args.hosts, args.port, stop)


if __name__ == "__main__":
    main()
