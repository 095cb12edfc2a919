"""Reading the kernel's flat-keyed cgroup files (``cpu.stat``, ``memory.stat``).

Its own module, importing nothing of edgeprof: the cluster (controller side, which
creates the emulated nodes' cgroups) and the agent's collectors (device side, which
read them) share this one reader without the agent importing the cluster package.
"""

from __future__ import annotations

from pathlib import Path


def read_keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file (``key value`` per line) as ints.

    A missing file (the cgroup was just removed) reads as empty; lines that are not
    ``key int`` are left out.
    """
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return {}
    fields: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            fields[parts[0]] = int(parts[1])
    return fields
