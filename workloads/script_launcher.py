"""Run a user's unchanged torchrun-style script on a node, observed through torch's hooks.

::

    python -m workloads.script_launcher --script PATH --events-dir DIR
        [--breakdown on|off] [--threads N] -- SCRIPT_ARG...

started once per rank with the environment torchrun gives a script (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``;
the controller adds ``GLOO_SOCKET_IFNAME``, ``OMP_NUM_THREADS``, ``EDGEPROF_NODE`` and
the grid's values as ``EDGEPROF_<NAME>``: all passed through untouched). One rank alone
has no ``MASTER_*`` and may never build a process group.

The script runs in this process as ``__main__`` (``runpy.run_path``) with
``sys.argv = [PATH, *SCRIPT_ARGS]`` and its own folder first on ``sys.path``, as
``python PATH ...`` would run it; ``edgeprof_hooks.log`` reaches this launcher. Before
it runs, ``workloads.script_hooks`` installs PyTorch's global hooks, which write
``steps-worker-<rank>.jsonl`` and the ``start``, ``first_step``, ``epoch`` and ``end``
events of ``worker-<rank>.jsonl`` as the built-in workers do (docs/workloads.md).

A script that raises, or exits with a non-zero status, leaves an ``error`` event with
the last line of its error (an exception's ``Name: message``, e.g. the module a
``ModuleNotFoundError`` names; for ``sys.exit(n)`` the last line the script wrote to
stderr, such as argparse's) and ``exit_status``, the script's own status. The launcher's
exit status is ``workloads.train``'s: 0 ok, 1 error (whatever status the script chose:
3 would read as out of memory), 3 out of memory (``MemoryError`` or torch's allocator
failing), 2 for the launcher's own bad arguments. It leaves with ``os._exit`` once the
events are written (``workloads.train``: Gloo's and DDP's teardown can hang or abort).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

from . import steps
from .train import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_OOM, _one_line, process_age_s


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.script_launcher",
        description="Run a torchrun-style training script under edgeprof's hooks.")
    parser.add_argument("--script", required=True, help="the user's Python script")
    parser.add_argument("--events-dir", required=True,
                        help="where worker-<rank>.jsonl and steps-worker-<rank>.jsonl go")
    parser.add_argument("--breakdown", choices=steps.BREAKDOWNS, default="on",
                        help="time each step's phases into steps-worker-<rank>.jsonl")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch's compute threads, set before the script runs "
                             "(default: the script's or OMP_NUM_THREADS)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER,
                        help="after --: the script's own arguments")
    args = parser.parse_args(argv)
    if args.script_args[:1] == ["--"]:
        args.script_args = args.script_args[1:]
    return args


def _check(args: argparse.Namespace) -> str | None:
    """The launcher's own bad input, as one line naming the fix; None if fine."""
    path = Path(args.script)
    if not path.is_file():
        return f"--script {args.script}: no such file: give the path of a Python script"
    if args.threads is not None and args.threads < 1:
        return f"--threads {args.threads} must be at least 1"
    for name in ("RANK", "WORLD_SIZE"):
        value = os.environ.get(name, "0" if name == "RANK" else "1")
        if not value.isdigit():
            return f"{name}={value!r} is not a number: start the script through edgeprof"
    return None


class StderrTail:
    """``sys.stderr`` as it was, remembering the last non-empty line written through it
    (what a script that ends with ``sys.exit(n)`` last said, e.g. argparse's error)."""

    def __init__(self, stream):
        self._stream = stream
        self.last_line = ""

    def write(self, text: str) -> int:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            self.last_line = lines[-1]
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _exit_status(code) -> int:
    """What the interpreter would exit with for ``SystemExit(code)``."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _leave(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    startup_s = {"python": process_age_s()}
    args = parse_args(argv)
    problem = _check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        _leave(EXIT_CONFIG)
    t_import = time.perf_counter()
    import torch  # noqa: F401 - the launcher's start-up, not the script's

    import edgeprof_hooks  # before sys.path[0] becomes the script's folder

    from .events import EventWriter
    from .node_limits import join_cpu_limit
    from .script_hooks import Hooks, StepRecorder
    from .worker import OOM_MARKERS

    if args.threads is not None:
        from .torch_worker import set_threads
        set_threads(args.threads)
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    events = EventWriter(args.events_dir, rank)
    step_log = steps.StepLog(args.events_dir, "worker", rank, enabled=args.breakdown == "on")
    script = Path(args.script)
    startup_s["launcher"] = time.perf_counter() - t_import  # torch's import, mostly
    recorder = StepRecorder(events, step_log, world_size=world_size,
                            breakdown=args.breakdown, script=script.name, startup_s=startup_s)
    Hooks(recorder, timed_comm=args.breakdown == "on")
    edgeprof_hooks._set_receiver(recorder.log)
    sys.argv = [str(script), *args.script_args]
    sys.path[0] = str(script.resolve().parent)
    sys.stderr = tail = StderrTail(sys.stderr)
    # The launcher's start-up (torch's import) is over: the node's CPU quota applies to
    # all the script does, its DataLoader's worker processes too (they are forked from
    # this process later; workloads.node_limits).
    join_cpu_limit()
    code = EXIT_OK
    try:
        runpy.run_path(str(script), run_name="__main__")
        recorder.finish()
    except SystemExit as exc:
        status = _exit_status(exc.code)
        if status == 0:
            recorder.finish()
        else:
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)  # what the interpreter would print
            recorder.error("error", tail.last_line or f"SystemExit: {status}", status)
            code = EXIT_ERROR
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the events
        traceback.print_exc()
        text = str(exc).lower()
        oom = isinstance(exc, MemoryError) or any(m in text for m in OOM_MARKERS)
        recorder.error("oom" if oom else "error", _one_line(exc), 1)
        code = EXIT_OOM if oom else EXIT_ERROR
    events.close()
    _leave(code)  # every event is written: skip Gloo's teardown (module docstring)


if __name__ == "__main__":
    main()
