"""The ``script`` engine: the user's own torchrun-style training script, unchanged.

``edgeprof sweep --script train.py`` makes cells of this engine (``profiler.sweep.
script_grid``). Each cell runs one ``workloads.script_launcher`` process per device, a
``worker`` like any engine's, with the environment ``torchrun`` gives a script of one
process per node: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` 0, ``LOCAL_WORLD_SIZE`` 1,
``GROUP_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` (the first worker's node, as the torch
engines' rendezvous), ``GLOO_SOCKET_IFNAME`` and ``OMP_NUM_THREADS``; and the grid's
values as ``EDGEPROF_BATCH``, ``EDGEPROF_DEVICES``, ``EDGEPROF_EPOCHS``, ``EDGEPROF_LR``
(when ``--lr`` is given) and ``EDGEPROF_<PARAM>`` for each ``--param``. The launcher
installs PyTorch's global hooks, runs the script and writes the same events and step
lines as the built-in engines (docs/your-own-training.md).

One device gets the rendezvous too (torchrun sets ``MASTER_*`` for one process as well),
so a script that always calls ``init_process_group`` runs at every size. The script
decides how it trains: the engine is sync only and trains no registry model
(``takes_script``); the staged script is the cell's ``model_digest``'s file.
"""

from __future__ import annotations

import shlex
import string
import sys
from pathlib import Path

from ..cell import CellConfig
from ..cluster.base import Node
from ..errors import ConfigError
from ..inputs import staged_path
from .base import ProcessSpec, TrainOptions
from .pytorch import _process_env, _rendezvous, _TorchEngine

LAUNCHER_MODULE = "workloads.script_launcher"
# The script has no board rate to derive a limit from (profiler.sweep.timeouts): a cell
# may take this long unless --timeout says otherwise.
SCRIPT_TIMEOUT_S = 30 * 60.0


# The grid's own dimensions a script sees; each --param adds its name.
GRID_PLACEHOLDERS = ("batch", "devices", "lr", "epochs")


def grid_values(cell: CellConfig) -> dict[str, object]:
    """The cell's values by placeholder name (``lr`` only when ``--lr`` was given)."""
    values: dict[str, object] = {"batch": cell.batch, "devices": cell.devices,
                                 "epochs": cell.epochs}
    if cell.lr is not None:
        values["lr"] = cell.lr
    values.update(dict(cell.params))
    return values


def grid_variables(cell: CellConfig) -> dict[str, str]:
    """The grid's values of ``cell`` as the script's ``EDGEPROF_*`` variables."""
    return {f"EDGEPROF_{name.upper()}": repr(value) if isinstance(value, float) else str(value)
            for name, value in grid_values(cell).items()}


def template_tokens(template: str) -> list[str]:
    """``--script-args`` split as a shell would (quotes keep spaces), not yet filled."""
    try:
        return shlex.split(template)
    except ValueError as exc:  # an unclosed quote
        raise ConfigError(f"--script-args {template!r} cannot be split ({exc}): close its "
                          "quotes") from None


def placeholders(token: str) -> list[str]:
    """The ``{names}`` one token of ``--script-args`` asks for (``{{`` is a brace)."""
    try:
        return [name for _, name, _, _ in string.Formatter().parse(token) if name is not None]
    except ValueError as exc:  # a lone { or }
        raise ConfigError(f"--script-args {token!r}: {exc}: write a literal brace as "
                          "{{ or }}") from None


def format_script_args(template: str, cell: CellConfig) -> list[str]:
    """The script's arguments of ``cell``: each token of ``template`` filled with its
    values, after splitting, so a value never splits into two arguments."""
    values = grid_values(cell)
    return [token.format_map(values) for token in template_tokens(template)]


class ScriptEngine(_TorchEngine):
    name = "script"
    description = ("your own torchrun-style PyTorch script (--script train.py; sync, "
                   "one process a device)")
    sync_modes = ("sync",)
    takes_script = True
    default_timeout_s = SCRIPT_TIMEOUT_S

    @property
    def models(self) -> tuple[str, ...]:
        return ()  # it trains the script, not a model of the registry

    def comm(self, cell: CellConfig) -> str:
        return "local" if cell.devices == 1 else "allreduce"

    def launcher_argv(self, cell: CellConfig, cell_dir: Path,
                      options: TrainOptions) -> list[str]:
        """``python -m workloads.script_launcher ... -- SCRIPT_ARG...`` of one worker."""
        script = staged_path(options.inputs_dir, "script", cell.model_digest, ".py")
        return [sys.executable, "-m", LAUNCHER_MODULE, "--script", str(script),
                "--events-dir", str(cell_dir / "events"),
                "--breakdown", "on" if options.breakdown else "off",
                "--threads", str(options.threads_per_process), "--",
                *format_script_args(cell.script_args, cell)]

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        argv = self.launcher_argv(cell, cell_dir, options)
        worker_nodes = nodes[:self.nodes_needed(cell)]
        common = {**_rendezvous(worker_nodes[0], cell.devices, options),
                  "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", **grid_variables(cell)}
        return [ProcessSpec("worker", rank, node, argv,
                            {**_process_env(common, rank, node), "GROUP_RANK": str(rank)})
                for rank, node in enumerate(worker_nodes)]
