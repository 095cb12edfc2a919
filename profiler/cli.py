"""The ``edgeprof`` command: a thin Click group whose subcommands load when they run.

Each command parses options, calls one library function, and turns ``EdgeprofError``
(bad input) into one line and exit status 2, with no traceback (``cli_errors``).
Commands live beside their library (``sweep/cli.py``, ``agent/cli.py``, ...) and are
named here as ``module:attr``: ``edgeprof agent`` on a Pi imports what the agent needs
and nothing of the controller (``lazy_group``).
"""

from __future__ import annotations

import logging

import click

from .lazy_group import LazyGroup

_LAZY_COMMANDS = {
    "sweep": "profiler.sweep.cli:sweep",
    "run": "profiler.sweep.cli:run",
    "agent": "profiler.agent.cli:agent",
    "ship": "profiler.agent.shipping.cli:ship",
    "cluster": "profiler.cluster.cli:cluster",
    "data": "profiler.data.cli:data",
    "report": "profiler.report.cli:report",
    "compare": "profiler.report.cli:compare",
    "dashboards": "profiler.dashboards.cli:dashboards",
    "study": "profiler.study.cli:study",
    "image": "profiler.image.cli:image",
    "predict": "profiler.predict.cli:predict",
}
# Calibration runs sweeps: the cluster package must not import it, so it joins the
# cluster group here.
_LAZY_NESTED = {"cluster": {"calibrate": "profiler.calibrate.cli:calibrate"}}
# What a command's own package must not import (it sits a layer above), loaded before the
# command: calibration's profile check joins `sweep` (calibration runs sweeps), the study
# registry offers its studies' sections to `report` (a study judges a sweep with the
# report's pieces), and the step model its prediction's (predict reads sweeps with them).
_LAZY_PLUGINS = {"sweep": ("profiler.calibrate.sweep_check",),
                 "report": ("profiler.study", "profiler.predict.report_section")}


@click.group(cls=LazyGroup, lazy_subcommands=_LAZY_COMMANDS, lazy_nested=_LAZY_NESTED,
             lazy_plugins=_LAZY_PLUGINS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edgeprof")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def cli(verbose: bool) -> None:
    """Profile distributed deep-learning training on edge clusters.

    Example:

    \b
        edgeprof sweep --model resnet --layers 20,32 --batch 32,64 --devices 1,2
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main() -> None:
    cli(prog_name="edgeprof")


if __name__ == "__main__":
    main()
