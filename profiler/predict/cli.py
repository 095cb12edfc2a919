"""``edgeprof predict``: parse, call ``run.run_predict``, print the table."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..cli_errors import reports_errors
from ..errors import ConfigError


@click.command()
@click.argument("sweep_dir", type=click.Path(path_type=Path))
@click.option("--devices", required=True,
              help="Worker counts to predict, comma-separated, e.g. 16,32,64,100.")
@click.option("--profile", "profiles", default=None,
              help="Board(s) to predict for: node profiles or mixes (pi3b, pi4, pi5, "
                   "mix-2pi4-8pi3b, ...), comma-separated [default: the sweep's own].")
@click.option("--link", "links", default=None,
              help="Link rate(s), e.g. 100mbit,1gbit [default: each board's own].")
@click.option("--engine", "engines", default=None,
              help="Only these engines' configurations (comma-separated).")
@click.option("--sync", "syncs", default=None, help="Only sync, async or sync,async.")
@click.option("--price", default=None,
              help="What each node costs per hour (as edgeprof sweep --price takes it) "
                   "[default: the packaged price of each board].")
@click.option("--samples", type=int, default=None,
              help="The training set an epoch passes over (before a sharded one is split "
                   "among workers) [default: the sweep's].")
@click.option("--compare", "compare", default=None,
              help="Which cluster: boards to set side by side (pi3b,pi4,pi5, "
                   "cloud-c6g-xlarge), each at every --devices count: samples/s, J per "
                   "sample, USD per epoch, and where adding a board stops paying.")
@click.option("--rates-from", "rates_from", multiple=True,
              type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="A sweep whose one-device cells ran on a --profile board (repeatable): "
                   "that board's compute is scaled by its measured step, not by "
                   "calibrated rates or cores.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@reports_errors
def predict(sweep_dir: Path, devices: str, profiles: str | None, links: str | None,
            engines: str | None, syncs: str | None, price: str | None,
            samples: int | None, compare: str | None, rates_from: tuple[Path, ...],
            as_json: bool) -> None:
    """Predict step, epoch, samples/s, bytes, energy and cost at device counts, boards
    and links a finished sweep did not measure, from a step model fitted on its cells
    (one device and at least two more device counts; docs/predict.md).

    Example:

    \b
        edgeprof predict runs/20261128-101500 --devices 16,32,64,100
        edgeprof predict runs/S --devices 20,50 --profile pi4,mix-2pi4-8pi3b --link 1gbit
        edgeprof predict runs/S --compare pi3b,pi4,pi5,cloud-c6g-xlarge --devices 4,8,16,32
    """
    from . import table
    from .run import PredictSettings, run_predict

    if compare is not None:
        if profiles is not None:
            raise ConfigError("--compare names the boards itself: give --compare "
                              "pi3b,pi4,pi5 or --profile, not both")
        from . import which
        found = which.run_which(PredictSettings(
            sweep_dir, devices, compare, links, engines, syncs, price, samples))
        click.echo(json.dumps(which.as_json(*found), indent=1) if as_json
                   else which.text(*found))
        return
    predictions, models, skipped = run_predict(PredictSettings(
        sweep_dir, devices, profiles, links, engines, syncs, price, samples, rates_from))
    show = table.as_json if as_json else table.text
    click.echo(show(predictions, models, skipped))
