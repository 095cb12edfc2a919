"""``edgeprof study park2019``: the study's experiments in one command, then the report."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..cli_errors import reports_errors
from ..cluster import providers_help
from ..cluster.prices import PRICE_HELP, price_spec
from ..engines import ENGINES


def _int_list(text: str, option: str) -> tuple[int, ...]:
    from ..sweep.grid import parse_int_list
    return tuple(parse_int_list(text, option))


@click.group()
def study() -> None:
    """Published studies as preset sweeps, with their numbers beside ours.

    Example:

    \b
        sudo edgeprof study park2019 --scale 0.02 --estimate
    """


@study.command()
@click.option("--scale", default=1.0, show_default=True, type=float,
              help="Fraction of the study's data each cell trains on (its time scales "
                   "with it); every cell keeps at least 3 steps per worker.")
@click.option("--parts", default="all", show_default=True,
              help="Which tables and figures: table1, table2, figure3, figure5, figure6, "
                   "figure7, table4 (comma-separated) or all.")
@click.option("--devices", default="1,2,3,4,5,6,7,8,9,10", show_default=True,
              help="Device counts of the device sweeps (1 is always run: the baseline).")
@click.option("--cluster", "cluster_name", default="emulated", show_default=True,
              help=providers_help() + ".")
@click.option("--profile", default=None,
              help="Emulated node profile [default: pi3b-park2019, calibrated to the study].")
@click.option("--speedup", default=1.0, show_default=True, type=float,
              help="Emulated cluster: CPU quotas and links x this factor (time dilation).")
@click.option("--engine", default="mxnet", show_default=True,
              type=click.Choice(list(ENGINES)),
              help="The study's MXNet KVStore, or another engine (an engine without "
                   "async runs the sync cells only).")
@click.option("--method", default="scripts", show_default=True,
              type=click.Choice(["scripts", "sharded"]),
              help="scripts: as MXNet 0.9.5's example scripts ran the study (LeNet: every "
                   "worker the whole set, MXNet's example LeNet, lr 0.05; ResNet sharded; "
                   "a server beside every worker); sharded: every worker a 1/N shard, "
                   "LeNet-5, one master server (docs/study.md).")
@click.option("--profile-check", default="recalibrate", show_default=True,
              type=click.Choice(["off", "refuse", "recalibrate"]),
              help="Emulated cluster: first measure the profile's quotas against its "
                   "board rates on this host; when off by more than --profile-tolerance, "
                   "re-calibrate them (written to ~/.config/edgeprof/profiles.yaml) or "
                   "refuse.")
@click.option("--profile-tolerance", default=0.25, show_default=True, type=float,
              help="How far the host's rate may be from the board's: within x/÷(1 + this).")
@click.option("--data-dir", default=None, type=click.Path(path_type=Path),
              help="Folder with the study's MNIST and CIFAR-10 (`edgeprof data fetch`).")
@click.option("--inventory", default=None, type=click.Path(path_type=Path),
              help="Ansible inventory of --cluster inventory.")
@click.option("--timeout", default=None, type=float,
              help="Seconds per cell [default: derived from the cell's work].")
@click.option("--out", default=None, type=click.Path(path_type=Path),
              help="Sweep folder [default: runs/<sweep_id>].")
@click.option("--price", default=None, help=PRICE_HELP)
@click.option("--resume", is_flag=True, help="Continue the study in --out.")
@click.option("--estimate", "estimate_only", is_flag=True,
              help="Print the cells, data and estimated time, and run nothing.")
@reports_errors
def park2019(scale, parts, devices, cluster_name, profile, speedup, engine, method,
             profile_check, profile_tolerance, data_dir, inventory, timeout, out, price,
             resume, estimate_only) -> None:
    """Park, Lee & Kim (2019): Tables 1-4 and Figures 3-7 as one sweep, then its report.

    Prints the grid and an estimate of its time before it starts; the sweep is
    resumable like any other (--resume --out DIR). The report (OUT/report.html) sets
    every ratio the cells allow (time, accuracy, CPU, memory, network against devices,
    depth, batch, sync mode and epochs) beside the study's, each inside or outside a
    stated band (docs/study.md).

    Example:

    \b
        sudo edgeprof study park2019 --scale 0.02 --speedup 4 --out runs/park2019
        sudo edgeprof study park2019 --parts table1,table2 --devices 1,2,4,8 --estimate
    """
    from . import StudySettings, plan, run
    from ..errors import ConfigError
    from ..sweep.preflight import preflight
    from .park2019 import PARTS

    chosen = PARTS if parts.strip() == "all" else tuple(
        p.strip() for p in parts.split(",") if p.strip())
    if timeout is not None and not 0 <= timeout < float("inf"):
        raise ConfigError(f"--timeout {timeout} must be a number of seconds, or 0 for none")
    if data_dir is not None and not data_dir.is_dir():
        raise ConfigError(f"--data-dir {data_dir} is not a folder: create it with "
                          "`edgeprof data fetch --data-dir DIR`")
    settings = StudySettings(
        scale=scale, parts=chosen, devices=_int_list(devices, "--devices"),
        cluster=cluster_name, profile=profile, speedup=speedup, engine=engine,
        method=method, profile_check=profile_check, profile_tolerance=profile_tolerance,
        data_dir=data_dir, inventory=inventory, out_dir=out, resume=resume,
        timeout_s=timeout, price=price_spec(price) if price is not None else None)
    study_plan = plan(settings)
    preflight(study_plan.sweep)
    click.echo(study_plan.describe(), err=True)
    if estimate_only:
        return

    def started(sweep_dir: Path) -> None:
        click.echo(f"edgeprof: results in {sweep_dir}", err=True)

    try:
        outcome, report_path = run(study_plan, on_start=started)
    except KeyboardInterrupt as exc:
        where = f" --out {out}" if out else " --out DIR"
        click.echo(f"edgeprof: {exc or 'interrupted'}; finished cells are kept, rerun with "
                   f"--resume{where} to continue", err=True)
        sys.exit(getattr(exc, "exit_status", 130))
    from ..report.ratios import reproduce, summary
    from ..report.sweep_data import load_sweep
    from ..sweep.table import status_counts
    counts = summary(reproduce(load_sweep(outcome.sweep_dir).records))
    statuses = status_counts(outcome.records)
    click.echo(f"cells: {', '.join(f'{n} {s}' for s, n in statuses.items())}")
    click.echo(f"the study's ratios: {counts['within']} of {counts['judged']} judged within "
               f"their band ({counts['not_comparable']} not comparable: other data; "
               f"{counts['missing']} without a finished cell)")
    click.echo(f"report: {report_path}")
