"""``edgeprof compare``: two sweeps' shared cells side by side.

``edgeprof report`` is in ``profiler/study/report_cli.py``: it asks the study registry
for the section of the study that made the sweep, which this package must not import.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..cli_errors import reports_errors


@click.command()
@click.argument("sweep_a", type=click.Path(path_type=Path))
@click.argument("sweep_b", type=click.Path(path_type=Path))
@click.option("--csv", "csv_path", default=None, type=click.Path(path_type=Path),
              help="Also write the values and ratios as CSV.")
@click.option("--ignore", default="",
              help="Cell settings to leave out of the match, comma-separated (e.g. engine).")
@reports_errors
def compare(sweep_a: Path, sweep_b: Path, csv_path: Path | None, ignore: str) -> None:
    """Ratios B / A of each measure for the cells two sweeps share.

    Cells match by configuration; two clusters or two dates of one grid match as they
    are, two engines with --ignore engine.

    Example:

    \b
        edgeprof compare runs/emulated-sweep runs/pi-sweep --csv ratios.csv
        edgeprof compare runs/mxnet runs/horovod --ignore engine
    """
    from ..errors import ConfigError
    from .compare import compare as match, table, to_csv
    from .sweep_data import load_sweep

    rows = match(load_sweep(sweep_a), load_sweep(sweep_b),
                 tuple(f.strip() for f in ignore.split(",") if f.strip()))
    click.echo(f"B / A, B = {sweep_b}, A = {sweep_a}; {len(rows)} cell(s) in common")
    click.echo(table(rows))
    if csv_path is not None:
        try:
            csv_path.write_text(to_csv(rows))
        except OSError as exc:
            raise ConfigError(f"cannot write {csv_path} ({exc.strerror}): give --csv in a "
                              "writable folder") from None
