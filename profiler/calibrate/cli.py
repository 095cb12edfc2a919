"""``edgeprof cluster calibrate``: a profile whose CPU quota trains like a real board.

Registered on the ``cluster`` group by ``profiler.cli`` (not by ``profiler.cluster.cli``:
calibration runs sweeps, and the cluster package must not import the sweep package).
"""

from __future__ import annotations

from pathlib import Path

import click

from ..cli_errors import reports_errors
from ..engines import ENGINES


@click.command()
@click.option("--profile", "profile", required=True,
              help="Name of the profile to write, e.g. pi3b-mine.")
@click.option("--base", default="pi3b", show_default=True,
              help="Profile whose link rate and memory the new one keeps.")
@click.option("--workload", required=True,
              help="What the board was measured training: lenet-mlp, lenet-cnn, resnet-N.")
@click.option("--samples-per-s", "samples_per_s", required=True, type=float,
              help="The board's training rate on that workload (samples per second).")
@click.option("--batch", default=64, show_default=True, type=int,
              help="Batch size of that measurement.")
@click.option("--engine", default="mxnet", show_default=True,
              type=click.Choice(list(ENGINES)),
              help="The engine the board was measured with (its one-device training).")
@click.option("--check-workload", default=None,
              help="A second workload to check the quota with (e.g. lenet-cnn).")
@click.option("--check-samples-per-s", "check_samples_per_s", default=None, type=float,
              help="The board's rate on the second workload.")
@click.option("--check-batch", default=None, type=int,
              help="Batch of the second workload (default: --batch).")
@click.option("--model-quota", is_flag=True,
              help="Calibrate a quota for the workload's model family only, added to the "
                   "existing --profile (one quota cannot fit every model).")
@click.option("--dilations", default="",
              help="Speedups k (e.g. 2,4,8,16) for which the quota of k times the rate is "
                   "found too, for --speedup (time dilation).")
@click.option("--tolerance", default=0.05, show_default=True, type=float,
              help="How close to the rate the quota must bring the node (fraction).")
@click.option("--measure-s", "measure_s", default=None, type=float,
              help="Seconds of training per measurement at the rate expected (default 8): "
                   "longer is steadier on a busy host, shorter is quicker.")
@click.option("--to", "to_file", default=None, type=click.Path(path_type=Path),
              help="Profiles file to write (default ~/.config/edgeprof/profiles.yaml).")
@reports_errors
def calibrate(profile, base, workload, samples_per_s, batch, engine, check_workload,
              check_samples_per_s, check_batch, model_quota, dilations, tolerance,
              measure_s, to_file) -> None:
    """Find the CPU quota at which one emulated node trains like a real board (root).

    Measure the board first: `edgeprof run` (or a one-device sweep) on it gives
    samples_per_s. Each step trains a real one-device cell on a one-node emulated
    cluster and scales the quota by target / measured; the profile is written when the
    rate is within --tolerance, with the second workload's rate beside its reference.
    When a model lands far from its reference at that quota, give it its own with
    --model-quota. --dilations finds, for each speedup k, the quota at which the model
    trains k times the rate (what `--speedup` gives a cell): not k times the quota,
    since a process trains more per CPU-second at larger quotas.

    Example:

    \b
        sudo edgeprof cluster calibrate --profile pi3b-mine --workload lenet-mlp \\
            --samples-per-s 571 --check-workload lenet-cnn --check-samples-per-s 55.6
        sudo edgeprof cluster calibrate --profile pi3b-mine --model-quota \\
            --workload lenet-cnn --samples-per-s 55.6 --dilations 2,4,8,16,32
        sudo edgeprof cluster calibrate --profile pi4-torch --engine torch \\
            --workload lenet-mlp --samples-per-s 2400
    """
    from . import MEASURE_TRAIN_S, Workload, calibrate as run_calibration
    from .profiles_file import write_profile
    from ..errors import ConfigError

    if (check_workload is None) != (check_samples_per_s is None):
        raise ConfigError("--check-workload and --check-samples-per-s go together: give "
                          "both, or neither")
    if batch < 1 or (check_batch is not None and check_batch < 1):
        raise ConfigError("--batch and --check-batch must be at least 1")
    if not 0 < tolerance < 0.5:
        raise ConfigError(f"--tolerance {tolerance}: give a fraction such as 0.05")
    main = Workload.parse(workload, batch, engine)
    check = None
    if check_workload is not None:
        check = (Workload.parse(check_workload, check_batch or batch, engine),
                 check_samples_per_s)
    from ..sweep.grid import parse_float_list
    speedups = tuple(parse_float_list(dilations, "--dilations")) if dilations.strip() else ()
    result = run_calibration(profile, base, main, samples_per_s, check=check,
                             tolerance=tolerance, model_quota=model_quota, to_file=to_file,
                             dilations=speedups,
                             measure_s=MEASURE_TRAIN_S if measure_s is None else measure_s,
                             report=lambda line: click.echo(line, err=True))
    path = write_profile(result, to_file)
    what = f"cpu_cores_by_model.{main.model}" if model_quota else "cpu_cores"
    if result.dilations:
        click.echo("dilated (speedup: cores): " + ", ".join(
            f"{k:g}: {m.quota_cores:.4f}" for k, m in sorted(result.dilations.items())),
            err=True)
    click.echo(f"{profile}: {what} {result.quota_cores:.4f} ({main.label} "
               f"{result.samples_per_s:.1f} samples/s, {result.ratio:.3f} x {samples_per_s:g})"
               + (f"; {check[0].label} {result.check_ratio:.3f} x its reference"
                  if check else "") + f" -> {path}")
    if check and abs(result.check_ratio - 1) > max(tolerance, 0.1) and \
            check[0].model != main.model:
        click.echo(f"{check[0].label} trains at {result.check_ratio:.2f} x its reference "
                   f"at this quota: give its model a quota of its own with `edgeprof cluster "
                   f"calibrate --profile {profile} --model-quota --workload "
                   f"{check_workload} --batch {check[0].batch} --samples-per-s "
                   f"{check_samples_per_s:g}" + (f" --to {to_file}" if to_file else "")
                   + "`", err=True)
