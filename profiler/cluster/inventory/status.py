"""``edgeprof cluster status --inventory``: each host, reachable or not, and what it runs
(``status``), and the same for people (``lines``), with the hosts' tiers and the
inventory's links between them (``edgeprof_links``)."""

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
        row: dict = {"name": host.name, "address": host.address, "tier": host.tier,
                     # The inventory's (the same on every host, as Ansible gives it).
                     "links": {key: link.as_spec() for key, link in host.links}}
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


def lines(hosts: list[dict]) -> list[str]:
    """``status``'s answer for people: a line per host, a column per engine the hosts
    answered for (by name), then each engine's problem."""
    names = sorted({n for h in hosts for n in h.get("engines") or {}})
    # A column an engine, as wide as its name and a space (``torch-pipe``'s is 11).
    widths = {n: max(10, len(n) + 1) for n in names}
    out = [f"{'host':<12} {'address':<16} {'reachable':<9} {'cpus':>4} {'mem MB':>7} "
           f"{'edgeprof':<9} " + "".join(f"{n:<{widths[n]}}" for n in names) + "agent"]
    for h in hosts:
        if not h["reachable"]:
            out.append(f"{h['name']:<12} {h['address']:<16} {'no':<9} {h['problem']}")
            continue
        out.append(f"{h['name']:<12} {h['address']:<16} {'yes':<9} {h['cpus']:>4} "
                   f"{h['memory_mb']:>7} {h['edgeprof']:<9} "
                   + "".join(f"{_engine_state(h['engines'].get(n)):<{widths[n]}}"
                             for n in names)
                   + h["agent"])
    for h in hosts:
        for name, answer in (h.get("engines") or {}).items():
            if not answer.get("ok"):
                out.append(f"{h['name']}: {name}: {answer.get('problem')}")
    from ..link_spec import link_line

    tiers = [f"{h['name']}={h['tier']}" for h in hosts if h.get("tier")]
    if tiers:
        out.append(f"tiers: {' '.join(tiers)}")
    out += [link_line(key, spec, "through a relay on the target host, started by the sweep")
            for key, spec in sorted((hosts[0].get("links") or {}).items() if hosts else [])]
    return out


def _engine_state(answer: dict | None) -> str:
    """yes / no; MXNet without the parameter server (PyPI's aarch64 wheel): ``local``."""
    if not answer or not answer.get("ok"):
        return "no"
    return "local" if answer.get("dist_kvstore") is False else "yes"
