"""``edgeprof cluster status --inventory``: each host, reachable or not, and what it runs."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...errors import ClusterError
from .hosts import Host, plain_env, read_inventory
from .probe import CHECK_TIMEOUT_S, probe

AGENT_SERVICE = "edgeprof-agent"


def status(path: Path) -> list[dict]:
    """Each host: reachable, CPUs, memory, edgeprof version, whether the agent service runs."""
    hosts = read_inventory(path)

    def one(host: Host) -> dict:
        row: dict = {"name": host.name, "address": host.address}
        try:
            info = probe(host)
        except ClusterError as exc:
            return {**row, "reachable": False, "problem": str(exc)}
        row.update(reachable=True, cpus=info.get("cpus"), memory_mb=info.get("memory_mb"),
                   edgeprof=info.get("version"), engines=info.get("engines") or {},
                   agent=_agent_state(host))
        return row

    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return list(pool.map(one, hosts))


def _agent_state(host: Host) -> str:
    """``active``/``inactive``/... from systemd, ``unknown`` where systemd does not run."""
    command = ["sh", "-c", f"if [ -d /run/systemd/system ]; then systemctl is-active "
               f"{AGENT_SERVICE}; else echo unknown; fi"]
    try:
        done = subprocess.run(host.ssh(command), capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env=plain_env())
    except subprocess.TimeoutExpired:
        return "unknown"
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"
