"""``edgeprof cluster up|down|status|profiles``: the emulated Pi cluster from the shell,
and ``status`` for any provider that keeps nodes (``--inventory FILE``: the real hosts of
an Ansible inventory).

A thin Click layer over ``profiler.cluster.emulated`` and the providers' own ``status``
(their options come from the registry, ``cli_options``); library errors (not root, a
kernel feature missing, a cluster already up) become one line on stderr and exit
status 2.
"""

from __future__ import annotations

import json

import click

from ..cli_errors import reports_errors
from .cli_options import ProviderCommand, cluster_from_options


@click.group()
def cluster() -> None:
    """An emulated cluster of Pi-class nodes on this host (root; see docs/emulated.md),
    or the real hosts of an Ansible inventory (status only; see docs/cluster.md).

    Example:

    \b
        sudo edgeprof cluster up --nodes 4 --profile pi3b
        edgeprof cluster status --inventory inventory.ini
        edgeprof cluster status --cluster swarm --swarm-host ssh://pi@manager
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
    from .emulated import status, status_lines, up as bring_up
    bring_up(nodes, profile)  # checks --nodes and the profile before touching the host
    for line in status_lines(status()):
        click.echo(line)


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


@cluster.command(cls=ProviderCommand)
@click.option("--cluster", "cluster_name", default=None,
              help="Whose nodes to show [default: the provider whose option is given "
                   "(--inventory: the inventory's hosts), else the emulated cluster].")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@reports_errors
def status(cluster_name: str | None, as_json: bool, **options) -> None:
    """Show each node's limits, usage and interface counters.

    With --inventory: each host of the inventory, whether it is reachable over SSH, its
    CPUs, memory, edgeprof version, engines and whether its agent service runs. With
    --cluster swarm: each ready node of the Swarm, its role, profile and task limits.

    Example:

    \b
        sudo edgeprof cluster status --json
        edgeprof cluster status --inventory inventory.ini
        edgeprof cluster status --cluster swarm --swarm-host ssh://pi@manager
    """
    settings = cluster_from_options(cluster_name or _provider_given(options), options)
    info = settings.status()
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    for line in settings.status_lines(info):
        click.echo(line)


def _provider_given(options: dict) -> str:
    """The provider whose own option was given, else the one made of node profiles."""
    from . import declared_options, profiled_provider

    owners = {owner.name for name, (option, owner) in declared_options().items()
              if options.get(name, option.default) != option.default}
    return owners.pop() if len(owners) == 1 else profiled_provider().name


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
        tier = f", tier {profile.tier}" if profile.tier else ""
        click.echo(f"{profile.name:<16} {profile.link_mbit:>6g} Mbit {profile.memory_mb:>6} MB "
                   f"{profile.cpu_cores:>5g} cores{by_model}{power}{tier}  "
                   f"{profile.description}")
    for name, members in catalog.mixes.items():
        links = "".join(f"; {key} {link.delay_ms:g} ms" + (f" {link.mbit:g} Mbit"
                                                           if link.mbit else "")
                        for key, link in catalog.tier_links(name).items())
        click.echo(f"{name:<16} {len(members)} nodes: {', '.join(members)}{links}")
