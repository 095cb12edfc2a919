"""Delayed links between tiers on the Swarm (``--swarm-links``): the links relay
(``relay.py``) run inside the target's task, beside the process it serves.

Why inside the target's task: a cell's overlay is internal and made at the cell's first
process, so nothing outside the cell's tasks (the controller, a process on the node's
own network) can reach it or be reached from it; ``link_address`` is not told the cell
either. The target's task can: its alias (the node's name, that of the first process the
cell starts there) is what the engines dial. So the first task a cell starts on a node
runs the relay in the background, listening on every address of the task on one port per
route (``RELAY_FIRST_PORT`` up, fixed by the controller here), forwarding to ``port``
at the task's own alias (its overlay address: engines bind that, not 127.0.0.1; the
hier engine's servers do), and ``link_address`` answers ``(target alias, relay port)``. The
bytes cross the overlay once, then the relay holds them for the link's delay (and paces
them at its rate), in each direction, on the target's node, inside the task's CPU
quota (it is the network, but a container has one cgroup).

The routes are fixed when the target's task starts: ask ``link_address`` before the
cell starts its process on the target (the engines do, in their plan); a route asked
later is served from the next cell on. The relay is stdlib only (``relay.py``), run
with the image's Python.
"""

from __future__ import annotations

import json
import threading
from typing import Sequence

from ...errors import ConfigError
from ..base import TierLink
from ..link_spec import parse_links
from ..relay import route_arg

# The relay's ports in a task: above Linux's ephemeral range's usual start (32768) is
# where engines pick free ports; this range is rarely handed out (ip_local_port_range
# ends at 60999).
RELAY_FIRST_PORT = 61000
RELAY_MAX_ROUTES = 500
LISTEN_ADDRESS = "0.0.0.0"
FIX = ('give a JSON mapping, e.g. --swarm-links \'{"end-edge": {"delay_ms": 250}, '
       '"end-cloud": {"delay_ms": 500, "mbit": 20}}\' (mbit optional)')


def parse_swarm_links(text: str) -> dict[str, dict]:
    """``--swarm-links`` text (JSON) as ``{link_key: TierLink.as_spec()}``, checked as a
    mix's ``links:`` are (``link_spec``)."""
    try:
        value = json.loads(text) if text.strip() else None
    except ValueError:
        raise ConfigError(f"--swarm-links {text}: not JSON: {FIX}") from None
    links = parse_links(value, f"--swarm-links {text}", FIX)
    return {key: link.as_spec() for key, link in sorted(links.items())}


def tier_links(spec: dict[str, dict]) -> dict[str, TierLink]:
    """``parse_swarm_links``'s value as ``TierLink``s."""
    return {key: TierLink(float(s["delay_ms"]), s.get("mbit")) for key, s in spec.items()}


class TaskRelays:
    """The routes asked so far, per target node: (port, link) -> the relay's port."""

    def __init__(self) -> None:
        self._routes: dict[str, dict[tuple[int, TierLink], int]] = {}
        self._lock = threading.Lock()

    def port(self, target: str, port: int, link: TierLink) -> int:
        """The relay port on ``target`` that reaches its ``port`` over ``link``."""
        with self._lock:
            routes = self._routes.setdefault(target, {})
            if (port, link) not in routes:
                if len(routes) >= RELAY_MAX_ROUTES:
                    raise ConfigError(f"node {target}: more than {RELAY_MAX_ROUTES} delayed "
                                      "routes in one sweep: use fewer ports per cell")
                routes[(port, link)] = RELAY_FIRST_PORT + len(routes)
            return routes[(port, link)]

    def wrap(self, target: str, python: str, argv: Sequence[str],
             log_path: str) -> list[str]:
        """``argv`` run after the relay of ``target``'s routes (``target``: the node's
        name, the task's alias) was started in the
        background (its output to ``log_path``); ``argv`` itself when it has none."""
        with self._lock:
            routes = dict(self._routes.get(target, {}))
        if not routes:
            return list(argv)
        relay = [python, "-m", "profiler.cluster.relay", "--host", LISTEN_ADDRESS,
                 *(a for (port, link), listen in sorted(routes.items(), key=lambda r: r[1])
                   for a in ("--route", route_arg(listen, (target, port),
                                                  link.delay_ms, link.mbit)))]
        # The relay is the container's to end: it stops with the container.
        script = 'log=$0; relay=$1; shift; sh -c "$relay" >>"$log" 2>&1 & exec "$@"'
        return ["sh", "-c", script, log_path, _shell_join(relay), *argv]


def _shell_join(argv: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in argv)
