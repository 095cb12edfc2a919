"""Stopping a sweep on request: Ctrl-C (SIGINT), ``kill`` (SIGTERM), a closed terminal (SIGHUP).

The handlers only record the request; the sweep looks at it where stopping is safe (the
cell runner's polling loop, between the starts of a cell's processes, between cells).
No exception can therefore arrive half-way through starting a process or appending a
result, which is how a Ctrl-C used to leave processes that no list knew of. A second
signal asks for haste: the reaping skips the grace it gives processes to exit cleanly.

Every process of a cell runs in a session of its own, so the terminal's signals reach
only the controller; the controller stops the cells, and a controller killed outright
takes its processes with it through the parent-death signal (``cluster.base``).
"""

from __future__ import annotations

import signal
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SweepInterrupted(KeyboardInterrupt):
    """The sweep stopped because a signal asked it to; finished cells are kept.

    A ``KeyboardInterrupt`` so that callers of the Python API that catch Ctrl-C keep
    working; ``exit_status`` is the shell's convention, 128 + the signal's number
    (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP).
    """

    def __init__(self, signum: int):
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        self.exit_status = 128 + signum
        super().__init__(f"interrupted by {self.signal_name}")


class StopRequest:
    """Records stop signals while active (``with StopRequest() as stop:``).

    Outside the main thread signal handlers cannot be installed: the request then only
    turns true through ``request()`` (a caller's own handler or a test).
    """

    def __init__(self):
        self.signum: int | None = None
        self.count = 0
        # A plain flag, not a threading.Event: the handler runs in the main thread
        # between bytecodes, possibly while that thread holds the Event's lock.
        self._requested = False
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self._requested

    @property
    def hurry(self) -> bool:
        """A second signal: stop without waiting for processes to exit cleanly."""
        return self.count >= 2

    @property
    def reason(self) -> str:
        name = signal.Signals(self.signum).name if self.signum else "a stop request"
        return f"interrupted ({name}); --resume runs it again"

    def request(self, signum: int = signal.SIGINT) -> None:
        if self.signum is None:
            self.signum = signum
        self.count += 1
        self._requested = True

    def raise_if_requested(self) -> None:
        if self.requested:
            raise SweepInterrupted(self.signum or signal.SIGINT)

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - the signal module's signature
        self.request(signum)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        # After a stop the process is on its way out: a further Ctrl-C must not turn its
        # orderly exit into a traceback, so stop signals stay ignored (a caller of the
        # Python API that goes on restores its own handlers).
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self._requested else handler)
        self._previous.clear()
