"""The entry point of every training process: ``python -m workloads.train --model ...``.

The engine builds the command line (``profiler.engines.base.train_argv``) and the
environment. ``--framework`` and ``--comm`` choose the worker (``worker_class``):
MXNet (``workloads.mxnet_worker``: KVStore local, dist_sync, dist_async, Horovod) or
PyTorch (``workloads.torch_worker`` alone on one device, ``workloads.torch_ps`` for the
parameter server, ``workloads.torch_ddp`` for allreduce), or the engine names its own
(``--worker module:Class``: the pipeline's ``workloads.torch_pipeline``, whose class
says which rendezvous variables it needs). ``--role server`` runs a
torch parameter server instead of a worker (MXNet's servers are ``workloads.serve``).
What every worker shares (data shard, epochs, events) is ``workloads.worker``; the
optimizer and how each engine scales the step is ``workloads.optim``.

Exit status: 0 ok, 2 data/config error, 3 out of memory, 1 anything else. On an error
the process leaves with ``os._exit``: a normal exit would run the KVStore's, Horovod's
or Gloo's shutdown, which wait forever for the workers still training. A torch process,
and a Horovod worker once it has shut Horovod down (``workloads.hvd.shutdown``), leave
that way after a clean end too (``Worker.teardown`` False): the interpreter's
teardown destroys DDP's reducer and Gloo's threads in no set order, and a joinable
``std::thread`` destroyed on the way aborted a worker that had finished training
(SIGABRT, "terminate called without an active exception": a CI run lost a cell so).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from profiler.errors import ConfigError, EdgeprofError

from . import optim, steps

FRAMEWORKS = ("mxnet", "torch")
COMMS = ("local", "ps-sync", "ps-async", "allreduce", "pipeline", "hier")
ROLES = ("worker", "server")
# What the engines put in the environment of a distributed process, by framework.
RENDEZVOUS_VARIABLES = {
    ("mxnet", "ps"): ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                      "DMLC_NUM_SERVER", "DMLC_NUM_WORKER"),
    ("torch", "ps"): ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                      "EDGEPROF_PS_SERVERS"),
    ("torch", "allreduce"): ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"),
}
EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_OOM = 0, 1, 2, 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from .datasets.resolver import PARTITIONS
    from .models import MODELS, get, with_depth
    from .user_model import FACTORY_OPTION, INPUT_OPTION, register_from_argv

    # A user's model is one more record, made before --model's choices are read.
    register_from_argv(argv)
    parser = argparse.ArgumentParser(prog="python -m workloads.train",
                                     description="Train one worker of an edgeprof cell.")
    parser.add_argument("--framework", choices=FRAMEWORKS, default="mxnet")
    parser.add_argument("--comm", choices=COMMS, default="local",
                        help="how gradients travel (local: one device)")
    parser.add_argument("--worker", default="",
                        help="the worker class, module:Class (an engine's own; default: "
                             "the framework's for --comm)")
    parser.add_argument("--role", choices=ROLES, default="worker",
                        help="server: a torch parameter server (--comm ps-*)")
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument(FACTORY_OPTION, default=None,
                        help="the model is a user's: PATH.py:FACTORY or "
                             "package.module:FACTORY (workloads.user_model)")
    parser.add_argument(INPUT_OPTION, default=None, help="a user model's input, CxHxW")
    rules = ", ".join(f"{name} {get(name).depth.rule}, default {get(name).default_layers}"
                      for name in with_depth())
    parser.add_argument("--layers", type=int, default=None,
                        help=f"depth, for a model with a depth rule ({rules}); ignored for "
                             "the others")
    parser.add_argument("--batch", type=int, default=32, help="samples per worker step")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: the model's, workloads.optim)")
    parser.add_argument("--momentum", type=float, default=optim.DEFAULT_MOMENTUM)
    parser.add_argument("--wd", type=float, default=optim.DEFAULT_WD, help="weight decay")
    parser.add_argument("--lr-scaling", choices=optim.LR_SCALINGS, default="none",
                        help="linear: lr x workers in sync modes (workloads.optim)")
    parser.add_argument("--events-dir", required=True)
    parser.add_argument("--threads", type=int, default=1, help="compute threads")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-samples", type=int, default=None,
                        help="cap the whole training set before sharding")
    parser.add_argument("--data-dir", default=None,
                        help="data folder (see workloads.datasets)")
    parser.add_argument("--dataset", default="auto",
                        help="auto, a name of workloads.datasets.catalog.NAMES, or the "
                             "staged .npz of the user's data (workloads.datasets.user)")
    parser.add_argument("--data-partition", choices=PARTITIONS, default="shard",
                        help="shard: this worker trains its 1/N of the training set; "
                             "replicate: all of it")
    parser.add_argument("--val-samples", type=int, default=None,
                        help="cap the test set used for validation accuracy")
    parser.add_argument("--checkpoint", default=None,
                        help="a torch state_dict of the whole model to start from instead "
                             "of the seed's weights (an engine's worker that reads it: "
                             "torch-pipe's --weights PATH, staged)")
    parser.add_argument("--breakdown", choices=steps.BREAKDOWNS, default="on",
                        help="time each step's phases into steps-*.jsonl "
                             "(workloads.steps)")
    args = parser.parse_args(argv)
    spec = get(args.model)
    # Checked in _validate (exit 2 with the rule); here only the default or None.
    args.layers = spec.default_layers if args.layers is None else args.layers
    if spec.depth is None:
        args.layers = None
    if args.lr is None:
        args.lr = spec.lr
    return args


def _validate(args: argparse.Namespace) -> None:
    from . import models

    models.get(args.model).blocks(args.layers)  # a ModelError: one line, exit 2
    for name in ("batch", "epochs", "threads", "max_samples", "val_samples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} {value} must be at least 1")
    if args.role == "server" and (args.framework, args.comm[:2]) != ("torch", "ps"):
        raise ConfigError("--role server is the torch parameter server: give it with "
                          "--framework torch --comm ps-sync or ps-async")
    kind = "ps" if args.comm.startswith("ps") else args.comm
    needed = RENDEZVOUS_VARIABLES.get((args.framework, kind), ())
    if args.worker:  # an engine's own worker says what it needs
        needed = getattr(worker_class(args.framework, args.comm, args.worker),
                         "rendezvous_variables", ())
    missing = [v for v in needed if not os.environ.get(v)]
    if missing:
        raise ConfigError(f"--comm {args.comm} needs {', '.join(missing)} in the "
                          f"environment: start workers through an edgeprof engine")


def worker_class(framework: str, comm: str, entry: str = ""):
    """The ``Worker`` subclass that trains ``framework`` with ``comm``, or the one
    ``entry`` names (``module:Class``)."""
    if entry:
        module, _, name = entry.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"--worker {entry}: no such worker class ({exc}): give "
                              "module:Class of an importable module") from None
    if framework == "mxnet":
        from .mxnet_worker import MXNetWorker
        return MXNetWorker
    if comm.startswith("ps"):
        from .torch_ps import PSWorker
        return PSWorker
    if comm == "allreduce":
        from .torch_ddp import DDPWorker
        return DDPWorker
    from .torch_worker import TorchWorker
    return TorchWorker


def _one_line(exc: BaseException) -> str:
    # MXNetError messages carry a C++ stack first and the reason on the last line.
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[-1] if lines else ""
    name = type(exc).__name__
    return reason if reason.startswith(name) else f"{name}: {reason}"


def _leave(events, kind: str, message: str, code: int, worker=None) -> None:
    if worker is not None:
        worker.step_log.flush()  # the steps timed before the error
    if events is not None:
        from .events import maxrss_mb
        events.emit("error", kind=kind, message=message, **maxrss_mb())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def process_age_s() -> float | None:
    """Seconds since this process was created (``/proc``; 10 ms ticks), else None."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # the name may hold spaces
        with open("/proc/uptime") as uptime:
            up_s = float(uptime.read().split()[0])
        return max(0.0, up_s - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    import time

    # The interpreter's own start and this module's imports, up to here.
    startup_s = {"python": process_age_s()}
    args = parse_args(argv)
    # OpenMP reads these once, when the framework's library loads: set them before any
    # import of it.
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(args.threads)
    from .events import EventWriter

    events = worker = None
    try:
        _validate(args)
        if args.role == "server":
            from .torch_ps import serve
            serve(args)
            _leave(None, "", "", EXIT_OK)  # skip Gloo's teardown (module doc)
        t_import = time.perf_counter()
        worker = worker_class(args.framework, args.comm, args.worker)(args)
        t_join = time.perf_counter()
        worker.join()
        worker.startup_s.update(startup_s, framework=t_join - t_import,
                                join=time.perf_counter() - t_join)
        events = EventWriter(args.events_dir, worker.rank)
        worker.prepare()
        worker.run(events)
    except EdgeprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        _leave(events, "data", str(exc), EXIT_CONFIG, worker)
    except Exception as exc:  # noqa: BLE001 - every failure must reach the events
        traceback.print_exc()
        oom = isinstance(exc, MemoryError) or (worker is not None and worker.is_oom(exc))
        kind, code = ("oom", EXIT_OOM) if oom else ("error", EXIT_ERROR)
        _leave(events, kind, _one_line(exc), code, worker)
    events.close()
    if not worker.teardown:
        _leave(None, "", "", EXIT_OK)  # every event is written: skip the teardown
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
