"""``edgeprof agent``: the thin Click command over the sampler.

The ``edgeprof`` group loads it lazily; ``python -m profiler.agent`` runs it alone (how
the cell runner and the systemd unit start one per node). Importing it loads the agent
package, Click and psutil only (tests/unit/test_agent_imports.py): an agent given
``--influx-url`` imports the shipper (``shipping.targets``, ``shipping.ship``, with
influxdb-client and requests) when it starts, an agent that only spools never does.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click

from ..cli_errors import reports_errors
from ..errors import ConfigError
from .logs import configure_logging
from .options import interval_option
from .sampler import AgentConfig, run_agent
from .shipping.options import influx_options

MB = 1024 * 1024


def _parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    tags = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--tag {item!r} is not key=value: write e.g. --tag sweep=s1")
        tags[key.strip()] = value.strip()
    return tags


@click.command()
@click.option("--node", required=True, help="This node's name (tag node).")
@click.option("--spool", "spool_dir", type=click.Path(path_type=Path, file_okay=False),
              required=True, help="Spool directory (created if missing).")
@interval_option
@click.option("--tag", "tag_items", multiple=True, metavar="KEY=VALUE",
              help="A tag for every point (repeatable), e.g. --tag sweep=s1.")
@click.option("--pids-file", type=click.Path(path_type=Path, dir_okay=False),
              help='JSON {"worker": [pid, ...], ...}: processes to follow by role.')
@click.option("--interfaces", default="", help="Comma-separated interfaces to count "
              "(default: all but lo).")
@click.option("--cgroup-cpu", help="cgroup directory: take the node's CPU from it.")
@click.option("--cgroup-memory", help="cgroup directory: take the node's memory from it.")
@click.option("--cpu-cores", type=float, help="The node's CPU quota in cores.")
@click.option("--board-cores", type=click.IntRange(1), default=None,
              help="Cores of the board an emulated node stands for (cpu.cores).")
@click.option("--memory-mb", type=float, help="The node's memory limit in MB.")
@click.option("--containers", "containers_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Folder naming the cell's containers on this node, one JSON file each "
                   "{role, id, pid} (the Swarm provider's): sample their cgroups, network "
                   "and processes instead of the node's and --pids-file's.")
@click.option("--proc-root", default="/proc", show_default=True,
              help="Where the node's /proc is mounted here (an agent in a container: "
                   "/host/proc), for --containers and --pids-file's processes.")
@click.option("--cgroup-root", default="/sys/fs/cgroup", show_default=True,
              help="Where the node's cgroup tree is mounted here, for --containers.")
@click.option("--spool-max-mb", type=click.IntRange(8), default=256, show_default=True,
              help="Bound on the spool's size; the oldest segments go first.")
@influx_options
@reports_errors
def agent(node, spool_dir, interval, tag_items, pids_file, interfaces, cgroup_cpu,
          cgroup_memory, cpu_cores, board_cores, memory_mb, containers_dir, proc_root,
          cgroup_root, spool_max_mb, **influx):
    """Sample this node's CPU, memory, network, disk, temperature and training processes
    into an on-disk spool until stopped (SIGTERM/SIGINT), shipping it live if
    --influx-url is given.

    Example:

    \b
        INFLUX_TOKEN=... edgeprof agent --node pi1 --spool /var/lib/edgeprof/spool \\
            --interval 1 --tag site=lab --influx-url http://monitor:8086 \\
            --influx-org lab --influx-bucket edgeprof
    """
    configure_logging()
    config = AgentConfig(
        node=node, spool_dir=spool_dir, interval_s=interval,
        tags=_parse_tags(tag_items), pids_file=pids_file,
        interfaces=[name.strip() for name in interfaces.split(",") if name.strip()],
        cgroup_cpu=cgroup_cpu, cgroup_memory=cgroup_memory, cpu_cores=cpu_cores,
        board_cores=board_cores,
        memory_mb=memory_mb, spool_max_bytes=spool_max_mb * MB,
        containers=containers_dir, proc_root=proc_root, cgroup_root=cgroup_root)
    shipper = None
    if any(influx.values()):
        # Only an agent that ships loads the shipper (influxdb-client, requests).
        from .shipping.ship import LiveShipper
        from .shipping.targets import check_server, target_from_options
        target = target_from_options(**influx)
        check_server(target)  # TLS and credentials refused: one line, exit 2
        shipper = LiveShipper(spool_dir, target)
    stop = threading.Event()
    # Signal handlers run in the main thread and only set the event: the loop wakes
    # at once, closes the spool and exits well within the runner's 2 s grace.
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    run_agent(config, shipper, stop=stop)
