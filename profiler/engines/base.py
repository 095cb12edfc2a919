"""What an engine is: a plugin that turns a cell into the processes (roles) to start.

The cell runner (``profiler.sweep.runner``) starts each ``ProcessSpec`` through the
cluster, watches them, and reaps them; engines only plan. Every worker runs
``workloads.train`` with the engine's ``framework`` and ``comm`` mode (or the engine's
own launcher around it) and writes its JSON-lines events into the cell's ``events/``.

An engine declares, as data, what the rest of edgeprof derives from it: the sync modes
it trains in, the models it trains (by default every model registered in
``workloads.models`` with a builder in its ``framework``), the Python packages it needs (their
versions are recorded with each sweep), how it is checked on this machine before a
sweep (``check_installed``) and on a real node (``probe_host`` runs there;
``host_problem`` judges the answer on the controller). Engines register in one place,
``profiler.engines.ENGINES``; the CLI choices, grid rules, preflight, the inventory host
check, the recorded versions and the report read them from there.

An engine also owns everything that is its alone (a pipeline's settings, columns, label,
report section): its settings (``options``, carried by a cell as ``engine_params``), the
results columns it fills (``columns``, from ``summarize``), how it names a cell's engine
in tables and progress (``label``), which of its columns ``compare`` sets side by side
(``compare_measures``), its section of the report (``report_sections``) and its
worker's entry point (``worker``). Nothing outside the engine names them: the results
store, the table, ``compare`` and the report ask the registry.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from workloads import models as model_registry
from workloads import user_model

from ..cluster.base import Node
from ..cell import CellConfig
from ..column import Column
from ..errors import ClusterError
from ..figure import Figure
from ..inputs import UserFile, staged_path


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a cell: its role, where it runs and what it runs."""

    role: str  # scheduler | server | worker | launcher
    rank: int
    node: Node
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Workers decide the cell's outcome; scheduler/servers are stopped once workers end.
    decisive: bool = True
    # What the process is in its engine's terms, for people (a pipeline's "stage 1").
    part: str = ""
    # Nodes this process starts the cell's workers on itself (an MPI launcher): the
    # runner hands it how to enter each one (``Cluster.entry``, a file named by
    # ``workloads.mpi.NODE_ENTRIES_ENV``).
    launches_on: tuple[Node, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.role}-{self.rank}"

    @property
    def title(self) -> str:
        """``worker-1``, or ``worker-1 (stage 1)``: how a result's reason names it."""
        return f"{self.name} ({self.part})" if self.part else self.name


@dataclass(frozen=True)
class TrainOptions:
    """Per-sweep settings every worker gets besides its cell."""

    data_dir: Path | None = None
    threads_per_process: int = 1
    seed: int = 42
    val_samples: int | None = None
    breakdown: bool = True  # time each step's phases (workloads.steps)
    # <sweep>/inputs: the user's staged files (profiler.inputs), None when none.
    inputs_dir: Path | None = None
    # What a process on one node dials to reach a port on another, ``(source, target,
    # port) -> (address, port)``: the cluster's ``link_address`` where it has one (a
    # delaying relay between tiers), set by the launcher for the cell; None: the
    # target's own address. Only an engine whose processes talk across tiers asks.
    link_address: Callable[[Node, Node, int], tuple[str, int]] | None = None


@dataclass(frozen=True)
class EngineOption:
    """A setting of an engine's own (``--microbatches``): a CLI option of ``sweep`` and
    ``run``, a grid dimension for that engine's cells only, carried by the cell as one
    of its ``engine_params`` and a results column of the same name (empty on the other
    engines' cells)."""

    name: str  # the option without dashes (``_`` for ``-``), engine_params key and column
    default: str  # as typed on the command line
    parse: Callable[[str], list]  # the typed text -> its list of values (ConfigError)
    help: str
    kind: str = "str"  # its column's type (profiler.column.KINDS)
    description: str = ""  # its column's meaning, one line (default: help's first sentence)
    # A setting added after cells of its engine had ids: at its default it stays out of
    # the cell's engine_params (its cell_id, record and label), so those cells keep their
    # ids and a resumed sweep finds them done, as ``cell.OPTIONAL_FIELDS`` does for the
    # cell's own later fields. Its column is then empty, which reads as the default.
    omit_default: bool = False

    def default_value(self):
        """The default as a cell holds it (the typed default, parsed)."""
        return self.parse(self.default)[0]

    @property
    def flag(self) -> str:
        """``--horovod-ops``: the option as typed (``_`` in the name typed as ``-``)."""
        return "--" + self.name.replace("_", "-")


@dataclass
class ReportSection:
    """An engine's section of the report: a table of its cells and a figure. A row is a
    cell's record (the page names the cell) and its values, as the page prints numbers
    (a list, one value per stage or worker, joined by " / "); the engine reads dilated
    cells in the board's time itself."""

    key: str  # the section's HTML id
    title: str
    note: str  # what the columns mean (HTML allowed)
    headings: list[str]
    rows: list[tuple[dict, list]]
    figure: Figure | None = None
    # The results column behind each heading, for its help (the schema's or the
    # engine's own description); empty: no help.
    columns: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Package:
    """A Python package an engine needs: its distribution name (for versions) and the
    module whose presence shows it is installed."""

    distribution: str
    module: str


class Engine:
    """Base class of the engines; subclasses set the class attributes and ``plan``."""

    name: str = ""
    description: str = ""  # one line, for --help and docs
    # The worker's training loop: workloads.train's --framework (mxnet or torch), which
    # picks the Worker class (workloads.train.worker_class).
    framework: str = ""
    sync_modes: tuple[str, ...] = ("sync", "async")
    packages: tuple[Package, ...] = ()
    install_hint: str = "run ./scripts/setup.sh"
    # Whether planning a cell needs the packages on the controller (Horovod's runner
    # assigns the ranks), so that an inventory sweep checks them here too.
    plans_with_packages: bool = False
    # Whether the engine runs the user's script (``--script``) instead of a model of the
    # registry: the grid then neither looks its cells' model up nor needs their lr.
    takes_script: bool = False
    # A cell's time limit when --timeout is not given; None: derived from the model's
    # board rate (profiler.sweep.timeouts).
    default_timeout_s: float | None = None

    # Settings of the engine's own, grid dimensions of its cells (``EngineOption``).
    options: tuple[EngineOption, ...] = ()
    # The fewest devices a cell can have (a pipeline: two stages); a grid of several
    # engines leaves this one's smaller cells out.
    min_devices: int = 1

    # The results columns the engine fills (``summarize``), after everyone's
    # (``profiler.column.Column``: name, type, unit, meaning, filler, group).
    columns: tuple[Column, ...] = ()
    # The measures ``edgeprof compare`` sets side by side when both cells have them
    # (``measure`` reads them), each with its short heading: ``(name, heading)``.
    compare_measures: tuple[tuple[str, str], ...] = ()
    # The worker's entry point, ``module:Class`` (a ``workloads.train.Worker``);
    # empty: the framework's worker for the cell's ``comm``.
    worker: str = ""

    def variants(self, cell: CellConfig, values: dict) -> list[CellConfig]:
        """``cell`` once for every combination of the engine's own settings (``values``:
        option name -> parsed list; a missing one takes its default), leaving out those
        ``keep`` refuses where the grid has another choice."""
        if not self.options:
            return [cell]
        combos = itertools.product(*(values.get(option.name) or [option.default_value()]
                                     for option in self.options))
        cells = [dataclasses.replace(cell, engine_params=tuple(
                    (option.name, value) for option, value in zip(self.options, combo)
                    if not (option.omit_default and value == option.default_value())))
                 for combo in combos]
        return [c for c in cells if self.keep(c, values)]

    def user_files(self, cell: CellConfig) -> tuple[UserFile, ...]:
        """The user's files ``cell``'s settings name (a pipeline's checkpoint), for the
        sweep to stage beside the user's model and dataset (``profiler.inputs``)."""
        return ()

    def setting_column(self, option: EngineOption) -> Column:
        """The results column of one of the engine's settings (after the cell's own)."""
        meaning = option.description or option.help.split(". ")[0].rstrip(".")
        return Column(option.name, option.kind, "", meaning, type(self).__module__, "config")

    def keep(self, cell: CellConfig, values: dict) -> bool:
        """Whether a combination of settings stays in the grid (``values``: as given)."""
        return True

    def label(self, rec: dict, *, stages: bool = True) -> str:
        """How a cell's engine reads in tables and progress (a record's or a cell's
        fields): the name, then each of its own settings the record has. ``stages``
        False: leave out what follows the device count (a series over it)."""
        own = [f"{o.name}={rec[o.name]}" for o in self.options if rec.get(o.name) is not None]
        return " ".join([self.name, *own])

    def task(self, rec: dict) -> str:
        """What a record's cell did: ``train``, or another task of the engine's own (a
        pipeline's ``infer``); cells of different tasks are never set side by side."""
        return "train"

    def measure(self, rec: dict, name: str):
        """A measure of one of the engine's records (a column, or one derived from them)."""
        return rec.get(name)

    def summarize(self, workers: dict[int, list[dict]], starts: dict[int, dict]) -> dict:
        """The engine's ``columns`` of a finished cell, from its workers' step lines
        (rank -> lines, the run's first step in) and start events (rank -> event)."""
        return {}

    def report_sections(self, records: list[dict]) -> list[ReportSection]:
        """The engine's sections of a sweep's report (none without cells of its own)."""
        return []

    def check_cell(self, cell: CellConfig) -> None:
        """Refuse (``ConfigError``, one line) a cell this engine cannot run."""

    def check_nodes(self, cell: CellConfig, nodes: Sequence[Node]) -> None:
        """Refuse (``ConfigError``, one line) a cell its nodes cannot hold (a network
        bigger than a node's memory): the sweep asks once its cluster is open, before
        its first cell, and stops with that line (exit 2)."""

    @property
    def models(self) -> tuple[str, ...]:
        """The models this engine trains: those with a builder in its framework (a
        subclass may name fewer with a class attribute)."""
        return model_registry.names(self.framework)

    def nodes_needed(self, cell: CellConfig) -> int:
        """How many nodes the cell occupies (e.g. devices + 1 with a master node)."""
        return cell.devices

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        """The processes to start for ``cell`` on ``nodes`` (``nodes_needed`` of them,
        checked by the cell runner)."""
        raise NotImplementedError

    def comm(self, cell: CellConfig) -> str:
        """How the cell's gradients travel, as ``workloads.train --comm`` names it:
        ``local`` (one device), ``ps-sync``, ``ps-async`` or ``allreduce``."""
        if cell.devices == 1:
            return "local"
        return "ps-sync" if cell.sync == "sync" else "ps-async"

    def train_argv(self, cell: CellConfig, cell_dir: Path, options: TrainOptions,
                   role: str = "worker") -> list[str]:
        """The ``workloads.train`` command line of one process of ``cell``."""
        return train_argv(cell, cell_dir, options, self.framework, self.comm(cell), role,
                          self.worker)

    def check_cells(self, cells: Sequence[CellConfig]) -> None:
        """Raise ``ClusterError`` (one line) unless this machine can run what ``cells``
        (the engine's cells of a grid) ask beyond ``check_installed``: a setting of the
        engine's own that needs more (Horovod over MPI: an MPI build and ``mpirun``)."""

    def check_installed(self) -> None:
        """Raise ``ClusterError`` (one line, naming the fix) unless this machine's Python
        can run the engine's processes. Looks for modules without importing them: the
        controller must not load a framework just to plan."""
        for package in self.packages:
            if importlib.util.find_spec(package.module.split(".")[0]) is None:
                raise ClusterError(f"--engine {self.name} needs {package.distribution}, "
                                   f"which is not installed in {sys.executable}: "
                                   f"{self.install_hint}")

    def probe_host(self) -> dict:
        """Runs on a node (the inventory check): ``{"ok": bool, "problem": str, ...}``.

        The default imports every package's module in this process.
        """
        for package in self.packages:
            try:
                importlib.import_module(package.module)
            except Exception as exc:  # noqa: BLE001 - a broken install is an answer
                return {"ok": False,
                        "problem": f"{package.module} does not import "
                                   f"({type(exc).__name__}: {str(exc)[:160]})"}
        return {"ok": True}

    def host_problem(self, answer: dict, cells: Sequence[CellConfig]) -> str | None:
        """On the controller: what keeps a host whose probe said ``answer`` from running
        this engine's ``cells`` (None: nothing)."""
        if not answer.get("ok"):
            return answer.get("problem") or "no answer"
        return None


def train_argv(cell: CellConfig, cell_dir: Path, options: TrainOptions, framework: str,
               comm: str, role: str = "worker", worker: str = "") -> list[str]:
    """The ``workloads.train`` command line for one process of ``cell``."""
    argv = [sys.executable, "-m", "workloads.train", "--framework", framework,
            "--comm", comm, "--role", role, *(["--worker", worker] if worker else []),
            "--model", cell.model, "--batch", str(cell.batch), "--epochs", str(cell.epochs),
            "--lr", repr(cell.lr), "--momentum", repr(cell.momentum), "--wd", repr(cell.wd),
            "--lr-scaling", cell.lr_scaling, "--dataset", _dataset_arg(cell, options),
            "--data-partition", cell.data_partition,
            "--events-dir", str(cell_dir / "events"),
            "--threads", str(options.threads_per_process), "--seed", str(options.seed)]
    if cell.layers is not None:
        argv += ["--layers", str(cell.layers)]
    if cell.max_samples is not None:
        argv += ["--max-samples", str(cell.max_samples)]
    if options.data_dir is not None:
        argv += ["--data-dir", str(options.data_dir)]
    if options.val_samples is not None:
        argv += ["--val-samples", str(options.val_samples)]
    if not options.breakdown:
        argv += ["--breakdown", "off"]
    spec = model_registry.get(cell.model)
    if spec.factory is not None:  # a user's model: where the node finds its factory
        staged = (staged_path(options.inputs_dir, "model", cell.model_digest, ".py")
                  if user_model.is_file_ref(spec.factory) else None)
        argv += user_model.node_argv(spec.factory, spec.input_shape, staged)
    return argv


def _dataset_arg(cell: CellConfig, options: TrainOptions) -> str:
    """A worker's ``--dataset``: the set's name, or a user's dataset's staged file."""
    if not cell.data_digest:
        return cell.dataset
    return str(staged_path(options.inputs_dir, "dataset", cell.data_digest, ".npz"))


def parameter_server_nodes(cell: CellConfig) -> int:
    """Nodes of a parameter-server cell: one device trains alone; N devices take N + 1
    with ``--placement master`` (server(s) on a node of their own), N with
    ``colocated`` (a server beside every worker)."""
    if cell.devices == 1:
        return 1
    return cell.devices + 1 if cell.placement == "master" else cell.devices


def gloo_interface(node: Node) -> str:
    """The network interface Gloo binds on ``node`` (the first one the provider counts)."""
    if node.scope.interfaces:
        return node.scope.interfaces[0]
    if node.address.startswith("127."):
        return "lo"
    raise ClusterError(f"node {node.name} does not say which network interface carries "
                       "training traffic: give it NodeScope(interfaces=...) (e.g. eth0) in its "
                       "cluster provider")
