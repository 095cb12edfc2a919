"""Zhang's task assigner and his three ways of surviving end devices that fail
(section 4.9, Table 5): a thread in end device 0 that hands the test set's batches to
the end devices (``--recovery none|reassign|monitor``; ``--fail K``).

Every end device asks it for its next batch (``next``, saying which one it finished)
over a connection it keeps open. Batch t is first assigned to device t mod N (Zhang's
sequential order); a device gets its own batches in order. Failing devices (the last K)
stop after half their own batches: the process ends and its connection closes. When a
device has none of its own left, by the method:

- ``none``: nothing is reassigned. The batches of a failed device are never answered, so
  the job cannot finish: the devices wait, device 0 says so in one line, and the cell
  stops at its time limit (Zhang's "never").
- ``reassign``: the unfinished batches (those of devices that stopped) are sent round
  all the devices in order, whatever their state: a turn on a failed device costs the
  transfer's timeout (``TRANSFER_TIMEOUT_S``, his 0.5 s) and passes to the next; a turn
  on another live device queues the batch there; the asker's own turn gives it to it.
  The assigner does not track who is alive: a failed transfer is how it learns, every
  time. (A closed connection stands for the failed transfer; its timeout is slept.)
- ``monitor``: the assigner keeps the list of live devices (a closed connection drops
  one) and hands a failed device's batches to whoever asks, with no timeout.
"""

from __future__ import annotations

import collections
import socketserver
import sys
import threading
import time

from . import wire

RECOVERIES = ("none", "reassign", "monitor")
TRANSFER_TIMEOUT_S = 0.5  # Zhang's timeout of transferring data to another device
WAIT_S = 0.05  # an idle device asks again after this


def own_batches(rank: int, devices: int, batches: int) -> list[int]:
    """The batches first assigned to ``rank``: t with t mod N = rank, in order."""
    return list(range(rank, batches, devices))


class Assigner:
    """The batches' state, shared by the connections' threads (a lock)."""

    def __init__(self, devices: int, batches: int, recovery: str):
        self.devices, self.batches, self.recovery = devices, batches, recovery
        self.queues = [collections.deque(own_batches(r, devices, batches))
                       for r in range(devices)]
        self.done: set[int] = set()
        self.gone: set[int] = set()  # devices whose connection closed before the end
        self.inflight: dict[int, int] = {}  # rank -> the batch it was given, not yet done
        self.told: set[int] = set()  # devices told the job is finished
        self.cursor = 0
        self.said_stuck = False
        self.lock = threading.Lock()

    def next(self, rank: int, finished: int | None) -> dict:
        """The asker's next batch (``{"task": t, "moved": bool, "timeouts_s": s}``),
        ``{"wait": s}`` or ``{"finished": True}``."""
        slept = 0.0
        while True:
            with self.lock:
                if finished is not None:
                    self.done.add(finished)
                    self.inflight.pop(rank, None)
                    finished = None
                if self.queues[rank]:
                    task = self.queues[rank].popleft()
                    return self._give(rank, task, task % self.devices != rank, slept)
                if len(self.done) >= self.batches:
                    self.told.add(rank)
                    return {"finished": True}
                stranded = [r for r in sorted(self.gone) if self.queues[r]]
                if not stranded:
                    return {"wait": WAIT_S, "timeouts_s": slept}
                if self.recovery == "none":
                    self._say_stuck(stranded)
                    return {"wait": WAIT_S, "timeouts_s": slept}
                if self.recovery == "monitor":
                    return self._give(rank, self.queues[stranded[0]].pop(), True, slept)
                # reassign: the next stranded batch goes round every device in order
                turn = self.cursor
                self.cursor = (self.cursor + 1) % self.devices
                if turn == rank:
                    return self._give(rank, self.queues[stranded[0]].pop(), True, slept)
                if turn not in self.gone:
                    self.queues[turn].append(self.queues[stranded[0]].pop())
                    continue
            time.sleep(TRANSFER_TIMEOUT_S)  # a failed device's turn: the transfer times out
            slept += TRANSFER_TIMEOUT_S

    def wait_told(self, timeout_s: float) -> None:
        """Until every device has been told the job is finished or has left (device 0's
        process, which holds the assigner, must not end before): at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.told | self.gone) >= self.devices:
                    return
            time.sleep(WAIT_S)

    def _give(self, rank: int, task: int, moved: bool, slept: float) -> dict:
        self.inflight[rank] = task
        return {"task": task, "moved": moved, "timeouts_s": slept}

    def leave(self, rank: int) -> None:
        """``rank``'s connection closed: before the end, it failed; the batch it held
        goes back to the front of its queue (stranded there with the rest)."""
        with self.lock:
            if len(self.done) < self.batches:
                self.gone.add(rank)
                task = self.inflight.pop(rank, None)
                if task is not None and task not in self.done:
                    self.queues[rank].appendleft(task)

    def _say_stuck(self, stranded: list[int]) -> None:
        if not self.said_stuck:
            self.said_stuck = True
            left = sum(len(self.queues[r]) for r in stranded)
            print(f"error: the job cannot finish: {left} batches were assigned to end "
                  f"devices that failed ({', '.join(map(str, stranded))}) and --recovery "
                  "none reassigns nothing (Zhang's never): the cell stops at its time "
                  "limit", file=sys.stderr, flush=True)


def serve(assigner: Assigner, host: str, port: int) -> socketserver.ThreadingTCPServer:
    """Serve ``assigner`` on ``host:port`` in a daemon thread; the server."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            rank = None
            try:
                while True:
                    header, _, _ = wire.recv(self.request)
                    if header.get("op") == "ping":
                        wire.send(self.request, {})
                        continue
                    rank = header["rank"]
                    wire.send(self.request, assigner.next(rank, header.get("finished")))
            except (ConnectionError, OSError):
                if rank is not None:
                    assigner.leave(rank)

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
