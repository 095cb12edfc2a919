"""What a study plugin is: a published study as a preset grid, with its numbers.

A study is one package (``profiler/study/park2019/``) whose ``Study`` subclass says
everything that is the study's own: its options (``StudyOption``: ``edgeprof study
NAME`` adds them to the options every study takes), its grid (``grid``: the cells, the
data each model trains on, the validation set), the node profile calibrated to it
(``profile``, kept in ``cluster/profiles.yaml`` where the cluster finds it), the rates
its boards trained at (``rate``, ``device_factor``: the estimate printed before a run)
and the report's section (``section``: its ratios with their bands, its numbers beside
matching cells). Register it with one line in ``study/__init__.py``'s ``STUDIES``; the
CLI, the plan, the run and the report read it from there. Everything optional has a
default here, so a small study writes only ``name``, ``description``, ``grid`` and
``section``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable

from ..cell import CellConfig

if TYPE_CHECKING:  # the report's pieces load when a report is written, not for a plan
    from ..report.study_section import StudySection


@dataclass(frozen=True)
class StudyOption:
    """One option of a study's own (``--parts``): the CLI makes it a Click option, and
    ``Study.parse`` turns the given text into what ``grid`` reads (``options[name]``)."""

    name: str  # the key in StudySettings.options, and --name-with-dashes on the CLI
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    type: type = str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass
class Grid:
    """A study's cells as ``grid`` builds them: ``samples`` and ``datasets`` feed the
    printed plan (training samples per (model, ...) key; model -> dataset), ``notes``
    its extra lines, ``label`` the plan's first line ("study park2019 (scripts)") and
    ``recorded`` what sweep.json keeps beside the study's name and scale."""

    cells: list[CellConfig]
    val_samples: int
    samples: dict[tuple, int] = field(default_factory=dict)
    datasets: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    label: str = ""
    recorded: dict = field(default_factory=dict)


class Study:
    """A published study (module doc). Subclasses set the class attributes and
    implement ``grid`` and ``section``."""

    name: str = ""
    description: str = ""  # the first line of `edgeprof study NAME --help`
    examples: tuple[str, ...] = ()  # command lines shown under Example:
    options: tuple[StudyOption, ...] = ()
    profile: str | None = None  # the node profile calibrated to the study's boards
    # Fewest steps per worker (an epoch) a ratio's cells must train to be judged; below
    # it a row is "too few steps" (report.ratios.per_repeat). 0: every row is judged.
    min_steps: int = 0
    # The study's own option that selects its parts (a tuple of names once parsed):
    # --budget chooses a scale per part (study/budget.py). None: one part, the whole.
    parts_option: str | None = None

    def parse(self, given: dict) -> dict:
        """The study's options as ``grid`` reads them, from the CLI's text; raise
        ``ConfigError`` on bad values."""
        return dict(given)

    def grid(self, scale: float, options: dict, engine: str, available: set[str]) -> Grid:
        """The cells at ``scale`` (the fraction of the study's data each cell trains
        on; with ``parts_option``, --budget gives one per part: ``{part: fraction}``) for
        ``engine``; ``available``: the datasets present on this machine."""
        raise NotImplementedError

    def section(self, records: list[dict]) -> "StudySection | None":
        """The report's section for a sweep's records (None: nothing to show)."""
        raise NotImplementedError

    # The estimate (profiler.study.estimate); the defaults read the model's record.
    def rate(self, cell: CellConfig) -> float:
        """The study's one-device training rate for the cell's model, samples/s."""
        from workloads.models import get
        return get(cell.model).board_rate(cell.layers)

    def device_factor(self, cell: CellConfig) -> float:
        """How the study's time for the same data changed from one device to the
        cell's devices (default: the work shared by the devices)."""
        return 1.0 / cell.devices

    def expected_oom(self, cell: CellConfig) -> bool:
        """Whether the study says the cell runs out of memory (it is estimated so)."""
        return False

    def dilation_group(self, cell: CellConfig) -> Hashable | None:
        """Cells of one group are dilated alike on the emulated cluster (the smallest
        speedup any of them gets: study/dilate.py): those one ratio compares, so that a
        speedup's calibrated quota, off by its own error, cancels in the ratio. None:
        the cell gets the largest speedup it can, alone."""
        return None

    def neutral_speedup(self, group: Hashable) -> float | None:
        """The largest time dilation shown not to move the ratios of ``group`` (a
        ``dilation_group``): the planner dilates that group no further (study/dilate.py).
        None: nothing was shown for it, and it dilates as far as the host lets it."""
        return None

    def datasets_wanted(self) -> tuple[str, ...]:
        """The datasets ``grid`` may choose from when present (checked once)."""
        return ()
