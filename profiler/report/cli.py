"""``edgeprof report`` (a sweep folder as one page, with its study's section) and
``edgeprof compare`` (two sweeps' shared cells side by side).

The report imports no study: the study registry offers its studies' sections
(``study_section.offer_studies``), and the ``edgeprof`` group loads that registry
before this command (``profiler.cli``'s plugins). The study that made a sweep is the one
its sweep.json names (``extra.study``), or the one given with ``--study``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ..cli_errors import reports_errors
from ..errors import ConfigError
from .study_section import study_problem, study_sections


def recorded_study(sweep_dir: Path) -> str | None:
    """The study that made the sweep, as its sweep.json names it (None: a plain sweep)."""
    try:
        settings = json.loads((Path(sweep_dir) / "sweep.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None  # build_report says what is wrong with the folder
    extra = settings.get("extra") if isinstance(settings, dict) else None
    study = extra.get("study") if isinstance(extra, dict) else None
    return study if isinstance(study, str) else None


def report_of(sweep_dir: Path, out: Path | None = None, *, cloud=None,
              study: str | None = None) -> tuple[Path, str]:
    """Write the report of ``sweep_dir`` with the section of ``study`` (default: the
    one that made it); return its path and a note ("" or why no study section)."""
    from .build import build_report

    sections = study_sections()
    note = ""
    if study is not None:
        if study not in sections:
            raise ConfigError(f"unknown study {study!r}: use {', '.join(sorted(sections))}")
        section = sections[study]
    else:
        name = recorded_study(sweep_dir)
        section = sections.get(name) if name is not None else None
        if name is not None and section is None:
            note = (study_problem(name) or  # an installed plugin that failed
                    f"the sweep was made by study {name!r}, which this edgeprof does not "
                    f"have ({', '.join(sorted(sections))}): no study section")
    return build_report(sweep_dir, out, cloud=cloud, study_section=section), note


@click.command()
@click.argument("sweep_dir", type=click.Path(path_type=Path))
@click.option("--out", "out", default=None, type=click.Path(path_type=Path),
              help="HTML file to write (default SWEEP_DIR/report.html); the figures go "
                   "beside it as PNG, in <name>-figures/.")
@click.option("--study", "study_name", default=None,
              help="Set the sweep beside this study (default: the study that made it, "
                   "if any; a plain sweep has no study section). One of: "
                   "`edgeprof study --help`.")
@click.option("--cloud-vm", default=None,
              help="Set each cell's cost per epoch beside this cloud VM's (a price of "
                   "profiles.yaml: c6g.medium, c6g.large, c6g.xlarge, c6g.2xlarge, "
                   "p4d.24xlarge, or your own; docs/energy.md).")
@click.option("--cloud-vms", default=1, show_default=True, type=int,
              help="How many of --cloud-vm train together.")
@click.option("--cloud-epoch-s", default=None,
              help="Seconds one epoch takes on the VM(s), measured or given: one for "
                   "every model (30) or per model (lenet-cnn=12,resnet=300).")
@reports_errors
def report(sweep_dir: Path, out: Path | None, study_name: str | None, cloud_vm: str | None,
           cloud_vms: int, cloud_epoch_s: str | None) -> None:
    """Write one self-contained HTML report of a sweep (figures embedded, opens offline).

    Every cell with its status; time, accuracy and resources against devices, sync
    against async, depth x batch, accuracy over epochs as far as the cells allow; each
    cell's per-node series from its spools; for a study's sweep (or with --study), the
    study's ratios judged against its bands and its numbers beside matching cells.

    Example:

    \b
        edgeprof report runs/20261123-101500
        edgeprof report runs/20261123-101500 --out ~/reports/pi-sweep.html
        edgeprof report runs/20261123-101500 --study park2019
        edgeprof report runs/pi-sweep --cloud-vm c6g.2xlarge --cloud-vms 4 \\
            --cloud-epoch-s lenet-cnn=12,resnet=300
    """
    started = time.monotonic()
    cloud = None
    if cloud_vm is not None or cloud_epoch_s is not None:
        from ..cluster.prices import load_prices
        from .energy import cloud_vm as parse_cloud
        if cloud_vm is None or cloud_epoch_s is None:
            raise ConfigError("--cloud-vm and --cloud-epoch-s go together: give the VM and "
                              "the seconds an epoch takes on it, e.g. --cloud-vm c6g.2xlarge "
                              "--cloud-epoch-s 30")
        cloud = parse_cloud(cloud_vm, cloud_vms, cloud_epoch_s, load_prices())
    path, note = report_of(sweep_dir, out, cloud=cloud, study=study_name)
    if note:
        click.echo(f"edgeprof: {note}", err=True)
    click.echo(f"report: {path} ({path.stat().st_size / 1024:.0f} KB, "
               f"{time.monotonic() - started:.1f} s)")


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
