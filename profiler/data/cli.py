"""``edgeprof data``: commands for the datasets workers train on (the lead registers it)."""

from __future__ import annotations

import urllib.parse
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


def _mirror_url(ctx, param, value: str) -> str:
    # requests speaks HTTP(S) only; a typo here would otherwise surface as a failed
    # download after the data folder has been created.
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(f"{value!r} is not an http(s) URL: give the base URL of a "
                                 f"mirror, e.g. {param.default}")
    return value


@click.group()
def data() -> None:
    """Datasets: download MNIST and CIFAR-10 for real (non-synthetic) runs.

    Example:

    \b
        edgeprof data fetch --data-dir ~/edgeprof-data
        edgeprof sweep --model lenet-mlp --data-dir ~/edgeprof-data
    """


@data.command("fetch")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder to fill (DIR/mnist, DIR/cifar10); pass it to sweeps as --data-dir.")
@click.option("--dataset", "datasets", default=",".join(fetching.DATASETS),
              callback=_dataset_list, show_default=True,
              help="Comma-separated datasets to fetch.")
@click.option("--mnist-mirror", default=fetching.MNIST_MIRROR, show_default=True,
              callback=_mirror_url, help="Base URL serving the four MNIST .gz files.")
@click.option("--cifar-mirror", default=fetching.CIFAR_MIRROR, show_default=True,
              callback=_mirror_url, help="Base URL serving cifar-10-binary.tar.gz.")
@reports_errors
def fetch_command(data_dir: Path, datasets: list[str], mnist_mirror: str,
                  cifar_mirror: str) -> None:
    """Download and verify (MD5) MNIST and CIFAR-10; files already valid are kept.

    Example:

    \b
        edgeprof data fetch --data-dir ~/edgeprof-data --dataset mnist
    """
    outcome = fetching.fetch(data_dir, datasets,
                             mirrors={"mnist": mnist_mirror, "cifar10": cifar_mirror},
                             show_progress=True)
    for name, state in outcome.items():
        click.echo(f"{state:10} {name}")
    click.echo(f"data ready in {data_dir}")


@data.command("list")
@click.option("--data-dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="A data folder to look in as well (as sweeps do with --data-dir).")
@reports_errors
def list_command(data_dir: Path | None) -> None:
    """Show every dataset, whether this machine has it and where, and what auto picks.

    Example:

    \b
        edgeprof data list
        edgeprof data list --data-dir ~/edgeprof-data
    """
    from workloads.datasets import resolver
    from workloads.datasets.catalog import SPECS

    from ..errors import DataError

    if data_dir is not None and not data_dir.is_dir():
        raise DataError(f"--data-dir {data_dir} is not a folder: give a data folder, or "
                        "fill one with `edgeprof data fetch --data-dir DIR`")
    for name, spec in SPECS.items():
        try:
            source = resolver.verify(name, data_dir)
            state, where = "yes", "built in" if source.path is None else str(source.path)
        except DataError as exc:
            state, where = "no", f"{exc}"
        click.echo(f"{name:14} {state:4} {spec.train_samples:>6}/{spec.test_samples:<6} {where}")
    for model, kind in (("lenet-mlp", "LeNet"), ("resnet", "ResNet")):
        try:
            picked = resolver.check(model, data_dir)
        except DataError as exc:
            picked = f"none, a sweep would stop: {exc}"
        click.echo(f"--dataset auto for {kind}: {picked}")
