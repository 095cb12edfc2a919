"""Running a build's long steps (mmdebstrap, pip) so that Ctrl-C leaves nothing behind.

Each step runs in its own session: a Ctrl-C at the terminal reaches only edgeprof, which
then asks the step to stop (SIGTERM) and waits for it, so mmdebstrap undoes its own
mounts and temporary root before the build's work folder is removed. ``remove_tree``
unmounts anything still mounted under that folder first: ``rmtree`` must never walk
into a ``/proc`` or ``/dev`` a killed step left mounted.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from ..errors import EdgeprofError

STOP_WAIT_S = 120  # mmdebstrap's own clean-up after SIGTERM (unmounting, removing)


class ImageError(EdgeprofError):
    """A build that cannot go on (a tool missing, a step failed, no daemon): one line."""


def run_step(argv: list[str], log: Path, what: str, env: dict | None = None) -> None:
    """Run ``argv``, its output in ``log``; raise ``ImageError`` naming the last lines."""
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            status = process.wait()
        except BaseException:
            _stop(process)
            raise
    if status != 0:
        raise ImageError(f"{what} failed (exit {status}): {last_lines(log)} "
                         f"(full output: run it again with the work folder kept, "
                         f"--keep-work)")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def last_lines(log: Path, count: int = 2, width: int = 400) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return " | ".join(lines[-count:])[-width:]


def mounted_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first (from /proc/self/mountinfo)."""
    prefix = str(root.resolve())
    points = [line.split()[4].encode().decode("unicode_escape")
              for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    inside = [p for p in points if p == prefix or p.startswith(prefix + "/")]
    return sorted(inside, key=len, reverse=True)


def remove_tree(root: Path) -> None:
    """Remove a work folder, unmounting (lazily) what a stopped step left mounted in it."""
    for point in mounted_under(root):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    if mounted_under(root):
        raise ImageError(f"{root} still has mounts: unmount them and remove it by hand")
    shutil.rmtree(root, ignore_errors=True)
