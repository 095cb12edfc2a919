"""``edgeprof data``: commands for the datasets workers train on (the lead registers it)."""

from __future__ import annotations

from pathlib import Path

import click

from ..cli_errors import reports_errors
from . import fetch as fetching


def _dataset_list(ctx, param, value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in fetching.DATASETS]
    if not names or unknown:
        raise click.BadParameter(f"{value!r}: use a comma-separated list of "
                                 f"{', '.join(fetching.DATASETS)}")
    return names


@click.group()
def data() -> None:
    """Datasets: download MNIST and CIFAR-10 for real (non-synthetic) runs."""


@data.command("fetch")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder to fill (DIR/mnist, DIR/cifar10); pass it to sweeps as --data-dir.")
@click.option("--dataset", "datasets", default=",".join(fetching.DATASETS),
              callback=_dataset_list, show_default=True,
              help="Comma-separated datasets to fetch.")
@click.option("--mnist-mirror", default=fetching.MNIST_MIRROR, show_default=True,
              help="Base URL serving the four MNIST .gz files.")
@click.option("--cifar-mirror", default=fetching.CIFAR_MIRROR, show_default=True,
              help="Base URL serving cifar-10-binary.tar.gz.")
@reports_errors
def fetch_command(data_dir: Path, datasets: list[str], mnist_mirror: str,
                  cifar_mirror: str) -> None:
    """Download and verify (MD5) MNIST and CIFAR-10; files already valid are kept.

    Example:

        edgeprof data fetch --data-dir ~/edgeprof-data --dataset mnist
    """
    outcome = fetching.fetch(data_dir, datasets,
                             mirrors={"mnist": mnist_mirror, "cifar10": cifar_mirror},
                             show_progress=True)
    for name, state in outcome.items():
        click.echo(f"{state:10} {name}")
    click.echo(f"data ready in {data_dir}")
