"""``edgeprof study NAME``: any registered study's experiments in one command, then its
report. The options every study takes are here; a study's own (``Study.options``) are
added to its command from the registry, so a new study needs no line in this file."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..cell import DEFAULT_ENGINE
from ..cli_errors import RegistryChoice, UsageFailure, reports_errors
from ..cluster import providers_help
from ..cluster.cli_options import provider_params
from ..cluster.prices import PRICE_HELP, price_spec
from ..engines import ENGINES


def _common_options(study) -> list[click.Option]:
    profile = f" [default: {study.profile}, calibrated to the study]" if study.profile else ""
    return [
        click.Option(["--scale"], default=1.0, show_default=True, type=float,
                     help="Fraction of the study's data each cell trains on (its time "
                          "scales with it); every cell keeps at least 3 steps per worker."),
        click.Option(["--budget"], default=None, metavar="DURATION",
                     help="A time for the whole study (30m, 1h, 90s, 45 = seconds) instead "
                          "of --scale: the scale of each part (and, on the emulated "
                          "cluster, time dilation unless --speedup is given) chosen from "
                          "the estimate; the plan says what was left out to fit."),
        click.Option(["--cluster", "cluster_name"], default="emulated", show_default=True,
                     help=providers_help() + "."),
        # Each provider's own options (ProviderOption), from the registry.
        *provider_params({"profile": "Emulated node profile" + profile + "."}),
        click.Option(["--engine"], default=DEFAULT_ENGINE, show_default=True,
                     type=RegistryChoice(ENGINES, ENGINES.problem),
                     help="The study's engine, or another (an engine without async runs "
                          "the sync cells only)."),
        click.Option(["--profile-check"], default="recalibrate", show_default=True,
                     type=click.Choice(["off", "refuse", "recalibrate"]),
                     help="Emulated cluster: first measure the profile's quotas against its "
                          "board rates on this host; when off by more than "
                          "--profile-tolerance, re-calibrate them (written to "
                          "~/.config/edgeprof/profiles.yaml) or refuse."),
        # calibrate.check.CHECK_TOLERANCE (tests/unit/test_profile_check.py holds them
        # equal): under half the tables' x/÷1.25 band, not the whole of it (issue 47).
        click.Option(["--profile-tolerance"], default=0.10, show_default=True,
                     type=click.FloatRange(0, 1, min_open=True, max_open=True),
                     help="How far the host's rate may be from the board's: within "
                          "x/÷(1 + this). The tables' band is x/÷1.25; a one-device "
                          "cell off by this moves every N/1 ratio by as much."),
        click.Option(["--data-dir"], default=None, type=click.Path(path_type=Path),
                     help="Folder with the study's datasets (`edgeprof data fetch`)."),
        click.Option(["--timeout"], default=None, type=float,
                     help="Seconds per cell [default: derived from the cell's work]."),
        click.Option(["--out"], default=None, type=click.Path(path_type=Path),
                     help="Sweep folder [default: runs/<sweep_id>]."),
        click.Option(["--price"], default=None, help=PRICE_HELP),
        click.Option(["--repeats"], default=None, type=click.IntRange(min=1),
                     help="Run every cell this many times, interleaved; each ratio shows "
                          "its median and range and is judged on the median [default: 1, "
                          "or with --resume the sweep's own]."),
        click.Option(["--resume"], is_flag=True, help="Continue the study in --out."),
        click.Option(["--estimate", "estimate_only"], is_flag=True,
                     help="Print the cells, data and estimated time, and run nothing."),
    ]


def _own_options(study) -> list[click.Option]:
    return [click.Option([o.flag, o.name], default=o.default, show_default=True,
                         type=click.Choice(list(o.choices)) if o.choices else o.type,
                         help=o.help) for o in study.options]


def _command(study) -> click.Command:
    examples = "".join(f"\n    {line}" for line in study.examples)
    help_text = (f"{study.description}\n\nPrints the grid and an estimate of its time before "
                 "it starts; the sweep is resumable like any other (--resume --out DIR). "
                 "The report (OUT/report.html) sets every ratio the cells allow beside the "
                 "study's, each inside or outside a stated band (docs/study.md)."
                 + (f"\n\nExample:\n\n\b{examples}" if examples else ""))

    @reports_errors
    def callback(**given) -> None:
        own = {o.name: given.pop(o.name) for o in study.options}
        _run(study, own, **given)

    return click.Command(study.name, callback=callback, help=help_text,
                         short_help=study.description,
                         params=_own_options(study) + _common_options(study))


class _Studies(click.Group):
    """The study group's commands, one per entry of ``STUDIES``, read when asked (a
    study registered after this module loaded is listed too)."""

    def list_commands(self, ctx) -> list[str]:
        from . import STUDIES
        return sorted(STUDIES)

    def get_command(self, ctx, name):
        from . import STUDIES
        if name not in STUDIES and STUDIES.problem(name) is not None:
            raise UsageFailure(STUDIES.problem(name))  # an installed plugin that failed
        return _command(STUDIES[name]) if name in STUDIES else None


@click.group(cls=_Studies)
def study() -> None:
    """Published studies as preset sweeps, with their numbers beside ours.

    Example:

    \b
        sudo edgeprof study park2019 --scale 0.02 --estimate
    """


def _run(study, own: dict, *, scale, cluster_name, engine, profile_check, profile_tolerance,
         data_dir, timeout, out, price, resume, estimate_only, repeats=None, budget=None,
         **cluster_options) -> None:
    from ..errors import ConfigError
    from .budget import parse_duration_s

    given = _given_on_command_line()
    if budget is not None and "scale" in given:
        raise ConfigError("--budget chooses the scale: give --budget or --scale, not both")
    if budget is not None and "speedup" not in given:
        cluster_options.pop("speedup", None)  # --budget chooses it (plan.py)
    from ..sweep.preflight import preflight
    from .plan import StudySettings, plan, run

    if timeout is not None and not 0 <= timeout < float("inf"):
        raise ConfigError(f"--timeout {timeout} must be a number of seconds, or 0 for none")
    if data_dir is not None and not data_dir.is_dir():
        raise ConfigError(f"--data-dir {data_dir} is not a folder: create it with "
                          "`edgeprof data fetch --data-dir DIR`")
    settings = StudySettings(
        scale=scale, options=own, cluster=cluster_name, cluster_options=cluster_options,
        engine=engine, profile_check=profile_check, profile_tolerance=profile_tolerance,
        data_dir=data_dir, out_dir=out, resume=resume,
        timeout_s=timeout, price=price_spec(price) if price is not None else None,
        repeats=repeats,
        budget_s=parse_duration_s(budget) if budget is not None else None)
    study_plan = plan(study, settings)
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
    _said(study, outcome)
    click.echo(f"report: {report_path}")


def _given_on_command_line() -> set[str]:
    """The parameters typed (not defaulted): --budget takes --scale and --speedup only
    from the user, never their defaults."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return set()
    return {name for name in ctx.params
            if ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT,
                                                      None)}


def _said(study, outcome) -> None:
    """The cells' statuses and how many of the study's ratios fell within their band."""
    from ..cluster.profiles import load_catalog
    from ..report.ratios import summary
    from ..report.sweep_data import load_sweep
    from ..sweep.table import status_counts
    from .pace import denominator_note, one_device_paces
    section = study.section(load_sweep(outcome.sweep_dir).records)
    counts = summary(section.ratios if section else [])
    statuses = status_counts(outcome.records)
    click.echo(f"cells: {', '.join(f'{n} {s}' for s, n in statuses.items())}")
    if note := denominator_note(one_device_paces(outcome.records, load_catalog())):
        click.echo(note)
    click.echo(f"the study's ratios: {counts['within']} within their band, "
               f"{counts['outside']} outside, {counts['too_few_steps']} too few steps, "
               f"{counts['not_comparable']} not comparable (other data); "
               f"{counts['missing']} without a finished cell")
