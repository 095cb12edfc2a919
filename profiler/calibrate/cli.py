"""``edgeprof cluster calibrate``: a profile whose CPU quota trains like a real board.

Registered on the ``cluster`` group by ``profiler.cli`` (not by ``profiler.cluster.cli``:
calibration runs sweeps, and the cluster package must not import the sweep package).
"""

from __future__ import annotations

from pathlib import Path

import click

from ..cell import DEFAULT_ENGINE
from ..cli_errors import RegistryChoice, reports_errors
from ..engines import ENGINES


@click.command()
@click.option("--profile", "profile", required=True,
              help="Name of the profile to write, e.g. pi3b-mine.")
@click.option("--base", default="pi3b", show_default=True,
              help="Profile whose link rate and memory the new one keeps.")
@click.option("--workload", default=None,
              help="What the board was measured training: lenet-mlp, lenet-cnn, resnet-N "
                   "(required, unless --power-from).")
@click.option("--samples-per-s", "samples_per_s", default=None, type=float,
              help="The board's training rate on that workload (samples per second; "
                   "required, unless --power-from).")
@click.option("--batch", default=64, show_default=True, type=int,
              help="Batch size of that measurement.")
@click.option("--engine", default=DEFAULT_ENGINE, show_default=True,
              # A board measured training a model: not the script engine's own scripts.
              type=RegistryChoice([n for n, e in ENGINES.items() if not e.takes_script],
                                  ENGINES.problem),
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
@click.option("--power-from", "power_from", default=None, type=click.Path(path_type=Path),
              help="Instead of a CPU quota: fit --profile's power model (idle and full "
                   "watts, least squares on power against CPU use) from a sweep or cell "
                   "folder measured on the board with a power meter.")
@click.option("--power-node", "power_nodes", multiple=True,
              help="With --power-from: the node(s) whose spools to fit (default: all with "
                   "a meter).")
@reports_errors
def calibrate(profile, base, workload, samples_per_s, batch, engine, check_workload,
              check_samples_per_s, check_batch, model_quota, dilations, tolerance,
              measure_s, to_file, power_from, power_nodes) -> None:
    """Find the CPU quota at which one emulated node trains like a real board (root).

    Measure the board first: `edgeprof run` (or a one-device sweep) on it gives
    samples_per_s. Each step trains a real one-device cell on a one-node emulated
    cluster and scales the quota by target / measured; the profile is written when the
    rate is within --tolerance, with the second workload's rate beside its reference.
    When a model lands far from its reference at that quota, give it its own with
    --model-quota. --dilations finds, for each speedup k, the quota at which the model
    trains k times the rate (what `--speedup` gives a cell): not k times the quota,
    since a process trains more per CPU-second at larger quotas. --power-from fits the
    board's power model instead (nothing runs; no root needed).

    Example:

    \b
        sudo edgeprof cluster calibrate --profile pi3b-mine --workload lenet-mlp \\
            --samples-per-s 571 --check-workload lenet-cnn --check-samples-per-s 55.6
        sudo edgeprof cluster calibrate --profile pi3b-mine --model-quota \\
            --workload lenet-cnn --samples-per-s 55.6 --dilations 2,4,8,16,32
        sudo edgeprof cluster calibrate --profile pi4-torch --engine torch \\
            --workload lenet-mlp --samples-per-s 2400
        edgeprof cluster calibrate --profile pi5 --power-from runs/pi5-sweep
    """
    from . import MEASURE_TRAIN_S, Workload, calibrate as run_calibration
    from .profiles_file import write_profile
    from ..errors import ConfigError

    if power_from is not None:
        _calibrate_power(profile, power_from, tuple(power_nodes), to_file)
        return
    if workload is None or samples_per_s is None:
        raise ConfigError("--workload and --samples-per-s are needed to calibrate a CPU "
                          "quota (or --power-from RUN to fit a power model)")
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
    from ..option_lists import parse_float_list
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


def _calibrate_power(profile: str, run: Path, nodes: tuple[str, ...],
                     to_file: Path | None) -> None:
    from ..cluster.profiles import USER_PROFILES
    from .power import fit_from_run, write_power

    fit = fit_from_run(run, nodes)
    path = write_power(profile, fit.model, to_file or USER_PROFILES)
    low, high = fit.utilisation_range
    click.echo(f"{profile}: power idle {fit.model.idle_w:.2f} W, full {fit.model.full_w:.2f} W "
               f"({fit.samples} ticks, CPU {low:.0%}-{high:.0%}, r2 {fit.r2:.2f}) -> {path}")
