"""``edgeprof report``: a sweep folder as one page, with the section of its study.

It lives here, above both the report and the study registry, because it wires them:
the report (``profiler.report``) knows no study, and this command asks ``STUDIES`` for
the study that made the sweep (sweep.json's ``extra.study``), or the one given with
``--study``, and hands its ``section`` to ``build_report``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ..cli_errors import reports_errors


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
    from ..report.build import build_report
    from . import STUDIES, get_study

    note = ""
    if study is not None:
        section = get_study(study).section
    else:
        name = recorded_study(sweep_dir)
        section = STUDIES[name].section if name in STUDIES else None
        if name is not None and section is None:
            note = (STUDIES.problem(name) or  # an installed plugin that failed
                    f"the sweep was made by study {name!r}, which this edgeprof does not "
                    f"have ({', '.join(sorted(STUDIES))}): no study section")
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
        from ..errors import ConfigError
        from ..report.energy import cloud_vm as parse_cloud
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


