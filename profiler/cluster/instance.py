"""Which emulated cluster on this host a process means: ``EDGEPROF_CLUSTER_INSTANCE``.

One host can hold several emulated clusters side by side (two users, or the test suite's
workers, each with a cluster of its own). Instance ``k`` (0 to ``MAX_INSTANCE``; 0, the
default, is the cluster every earlier release made) owns its own names, so that nothing
of one is seen, shaped, killed or removed by another:

| | instance 0 | instance k |
|---|---|---|
| namespaces, links, bridge, cgroup parent | ``edgeprof-...`` | ``edgeprof<k>-...`` |
| subnet (the bridge's host end at .254) | ``10.213.0.0/24`` | ``10.213.<k>.0/24`` |
| state and lock (unless ``EDGEPROF_RUN_DIR``) | ``/run/edgeprof`` | ``/run/edgeprof<k>`` |

Read once, at import: every process of a sweep (the CLI, its agents and shippers) gets
the variable from its parent's environment. A value that is not such a number leaves
the names at instance 0's and ``check()`` refuses it in one line before the host is
touched.
"""

from __future__ import annotations

import os

from ..errors import ClusterError

ENV = "EDGEPROF_CLUSTER_INSTANCE"
# Interface names hold at most 15 bytes: a bridge port is "<name>-n<index>h", and
# "edgeprof9-n249h" (the 250th node of instance 9) is 15.
MAX_INSTANCE = 9
BASE_NAME = "edgeprof"
SUBNET_BASE = "10.213"


def _number(text: str) -> int | None:
    """The instance ``text`` names, or None if it names none."""
    text = text.strip()
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_INSTANCE:  # not "²"
        return None
    return int(text)


_GIVEN = os.environ.get(ENV, "")
NUMBER = _number(_GIVEN) or 0
NAME = BASE_NAME if NUMBER == 0 else f"{BASE_NAME}{NUMBER}"
SUBNET_PREFIX = f"{SUBNET_BASE}.{NUMBER}"
RUN_DIR = os.environ.get("EDGEPROF_RUN_DIR") or f"/run/{NAME}"


def check() -> None:
    """Refuse an ``EDGEPROF_CLUSTER_INSTANCE`` that names no instance, in one line."""
    if _number(_GIVEN) is None:
        raise ClusterError(f"{ENV}={_GIVEN!r} is not an instance number: give a whole "
                           f"number from 0 to {MAX_INSTANCE}, or unset it")
