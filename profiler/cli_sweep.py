"""``edgeprof sweep``: the grid's options and run (``profiler.sweep.cli``) with the node
profile check of calibration (``profiler.calibrate.check``) before the sweep starts.

Wired here, at the CLI layer above both, because calibration runs sweeps: the sweep
package must not import it back.
"""

from __future__ import annotations

import click

from .calibrate.check import MODES, check_sweep
from .cli_errors import reports_errors
from .cluster.cli_options import ProviderCommand
from .cluster import profiled_provider
from .errors import EdgeprofError
from .sweep.cli import agent_options, grid_options, run_and_print, settings_from_options


@click.command(cls=ProviderCommand)
@grid_options
@click.option("--resume", is_flag=True,
              help="Continue the sweep in --out, skipping finished cells.")
@click.option("--profile-check", default="off", show_default=True,
              type=click.Choice(MODES),
              help="Emulated cluster, a profile with board rates (pi3b-park2019): first "
                   "measure its quotas on this host; when off by more than "
                   "--profile-tolerance, refuse or re-calibrate them.")
@click.option("--profile-tolerance", default=0.25, show_default=True,
              type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="How far the host's rate may be from the board's: x/÷(1 + this).")
@agent_options
@reports_errors
def sweep(**kw) -> None:
    """Run the cartesian sweep of real distributed training and keep every result.

    Lists are comma-separated; every combination is one cell. Results go to
    OUT/results.csv (one row per cell) as each cell ends; --resume --out OUT skips
    the cells already done. Options, dataset files and OUT are all checked before
    anything runs: bad input is one line and exit status 2.

    Example:

    \b
        edgeprof sweep --model resnet --layers 20,32 --batch 32,64 --devices 1,2 \\
            --sync sync,async --max-samples 2000
        edgeprof sweep --script examples/ddp_train.py --devices 1,2,4 \\
            --script-args "--epochs 2 --batch {batch}" --batch 32,64
    """
    resume, check, tolerance = kw.pop("resume"), kw.pop("profile_check"), \
        kw.pop("profile_tolerance")
    settings = settings_from_options(kw, resume)
    if check != "off" and settings.cluster.speed != "profile":
        raise EdgeprofError(f"--profile-check {check} checks a node profile: use it with "
                            f"--cluster {profiled_provider().name}, or leave it out")
    check_sweep(settings, check, tolerance,
                report=lambda line: click.echo(f"profile check: {line}", err=True))
    run_and_print(settings)
