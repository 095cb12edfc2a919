"""``edgeprof cluster up|down|status|profiles``: the emulated Pi cluster from the shell,
and ``status --inventory`` for the real hosts of an Ansible inventory.

A thin Click layer over ``profiler.cluster.emulated`` and ``.inventory.status``; library
errors (not root, a kernel feature missing, a cluster already up) become one line on
stderr and exit status 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..cli_errors import reports_errors
from ..engines import ENGINES


@click.group()
def cluster() -> None:
    """An emulated cluster of Pi-class nodes on this host (root; see docs/emulated.md),
    or the real hosts of an Ansible inventory (status only; see docs/cluster.md).

    Example:

    \b
        sudo edgeprof cluster up --nodes 4 --profile pi3b
        edgeprof cluster status --inventory inventory.ini
    """


@cluster.command()
@click.option("--nodes", default=4, show_default=True, type=int, help="How many nodes.")
@click.option("--profile", default="pi3b", show_default=True,
              help="Node profile or mix (see `edgeprof cluster profiles`).")
@reports_errors
def up(nodes: int, profile: str) -> None:
    """Bring up NODES network namespaces with shaped links and cgroup limits.

    Example:

    \b
        sudo edgeprof cluster up --nodes 10 --profile mix-2pi4-8pi3b
    """
    from .emulated import status, up as bring_up
    bring_up(nodes, profile)  # checks --nodes and the profile before touching the host
    _print_status(status())


@cluster.command()
@reports_errors
def down() -> None:
    """Remove every edgeprof namespace, link and cgroup (also after a crash).

    Example:

    \b
        sudo edgeprof cluster down
    """
    from .emulated import down as take_down
    removed = take_down()
    click.echo(f"removed {len(removed)} item(s)" if removed else "nothing to remove")
    for item in removed:
        click.echo(f"  {item}")


@cluster.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--inventory", default=None, type=click.Path(path_type=Path),
              help="Show the real nodes of this Ansible inventory instead (over SSH).")
@reports_errors
def status(as_json: bool, inventory: Path | None) -> None:
    """Show each node's limits, usage and interface counters.

    With --inventory: each host of the inventory, whether it is reachable over SSH, its
    CPUs, memory, edgeprof version, engines and whether its agent service runs.

    Example:

    \b
        sudo edgeprof cluster status --json
        edgeprof cluster status --inventory inventory.ini
    """
    if inventory is not None:
        from .inventory.status import status as host_status
        hosts = host_status(inventory)
        if as_json:
            click.echo(json.dumps(hosts, indent=2, sort_keys=True))
        else:
            _print_hosts(hosts)
        return
    from .emulated import status as get_status
    info = get_status()
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
    else:
        _print_status(info)


@cluster.command()
@reports_errors
def profiles() -> None:
    """List the node profiles and mixes (packaged, ~/.config/edgeprof, $EDGEPROF_PROFILES).

    Example:

    \b
        edgeprof cluster profiles
    """
    from .profiles import load_catalog, profile_files
    catalog = load_catalog()
    click.echo("files: " + ", ".join(str(p) for p in profile_files()))
    for profile in catalog.profiles.values():
        by_model = "".join(f", {m} {q:g}" for m, q in profile.cpu_cores_by_model.items())
        power = (f", {profile.power.idle_w:g}-{profile.power.full_w:g} W"
                 if profile.power else "")
        click.echo(f"{profile.name:<16} {profile.link_mbit:>6g} Mbit {profile.memory_mb:>6} MB "
                   f"{profile.cpu_cores:>5g} cores{by_model}{power}  {profile.description}")
    for name, members in catalog.mixes.items():
        click.echo(f"{name:<16} {len(members)} nodes: {', '.join(members)}")


def _print_hosts(hosts: list[dict]) -> None:
    names = list(ENGINES)
    # A column an engine, as wide as its name and a space (``torch-pipe``'s is 11).
    widths = {n: max(10, len(n) + 1) for n in names}
    click.echo(f"{'host':<12} {'address':<16} {'reachable':<9} {'cpus':>4} {'mem MB':>7} "
               f"{'edgeprof':<9} " + "".join(f"{n:<{widths[n]}}" for n in names) + "agent")
    for h in hosts:
        if not h["reachable"]:
            click.echo(f"{h['name']:<12} {h['address']:<16} {'no':<9} {h['problem']}")
            continue
        click.echo(f"{h['name']:<12} {h['address']:<16} {'yes':<9} {h['cpus']:>4} "
                   f"{h['memory_mb']:>7} {h['edgeprof']:<9} "
                   + "".join(f"{_engine_state(h['engines'].get(n)):<{widths[n]}}"
                             for n in names)
                   + h["agent"])
    for h in hosts:
        for name, answer in (h.get("engines") or {}).items():
            if not answer.get("ok"):
                click.echo(f"{h['name']}: {name}: {answer.get('problem')}")


def _engine_state(answer: dict | None) -> str:
    """yes / no; MXNet without the parameter server (PyPI's aarch64 wheel): ``local``."""
    if not answer or not answer.get("ok"):
        return "no"
    return "local" if answer.get("dist_kvstore") is False else "yes"


def _print_status(info: dict) -> None:
    if not info["up"]:
        click.echo(f"no cluster up ({info['reason']})")
        if info["leftovers"]:
            click.echo("leftovers (remove with `edgeprof cluster down`): "
                       + ", ".join(info["leftovers"]))
        return
    click.echo(f"emulated cluster: {len(info['nodes'])} x {info['profile']}, cgroup "
               f"v{info['cgroup_version']}, host {info['host_address']}, CPU quotas x"
               f"{info['cpu_scale']} of the profiles' ({info['host_cores']:g} host cores)")
    click.echo(f"{'node':<5} {'address':<12} {'profile':<8} {'Mbit':>6} {'cores':>6} "
               f"{'mem MB':>7} {'procs':>5} {'cpu s':>8} {'used MB':>8} {'oom':>4} "
               f"{'rx KB':>9} {'tx KB':>9}")
    for n in info["nodes"]:
        click.echo(f"{n['name']:<5} {n['address']:<12} {n['profile']:<8} {n['link_mbit']:>6g} "
                   f"{n['cpu_cores']:>6g} {n['memory_mb']:>7} {n['processes']:>5} "
                   f"{n['cpu_used_s']:>8.1f} {n['mem_used_mb']:>8.1f} {n['oom_kills']:>4} "
                   f"{n['rx_bytes'] / 1024:>9.1f} {n['tx_bytes'] / 1024:>9.1f}"
                   + (f"  straggler: x{n['straggler']['factor']:g}, "
                      f"{n['straggler']['cpu_cores']:g} cores" if n.get("straggler") else ""))
