"""The owner of a cell's results record: every column, in results.csv's order.

Each column (``profiler.column.Column``) says its name, type, unit, one-line meaning,
the module that fills it and its group; from this one list come results.csv's order
(``csv_columns``), each filler's names (``columns_of("energy")``), docs/columns.md
(``python -m profiler.sweep.columns_doc > docs/columns.md``, the engines' own columns
in; tests/unit/test_results_schema.py fails when it is stale), the report's column help
(``help_of``) and the types of the InfluxDB fields of a cell's point
(``Column.field_value``).

The configuration's columns are ``CellConfig``'s fields in their order, described here.
An engine's own are added at run time (``csv_columns(extra=...)``): its settings after
the configuration's, its other columns after the record's. A few columns stay in
results.jsonl only (``csv=False``): per-worker detail and the runner's clock stamps. A
script's ``--param NAME=VALUE`` pairs become columns ``param_NAME`` of their own
(``profiler.cell.param_columns``), after all of these.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Iterable, Sequence

from .cell import PARAM_COLUMN_PREFIX, CellConfig
from .column import Column

# The groups only a sweep with agents (``--interval`` > 0) has in results.csv.
MONITORED_GROUPS = ("summary", "energy")


def _group(group: str, filled_by: str, rows: Iterable[tuple]) -> list[Column]:
    """``rows``: (name, kind, unit, description[, csv]) of one group."""
    return [Column(name, kind, unit, description, filled_by, group, *csv)
            for name, kind, unit, description, *csv in rows]


_ID = _group("id", "profiler.sweep.record", [
    ("sweep_id", "str", "", "the sweep's id, its start time (runs/<sweep_id> unless --out)"),
    ("cell_id", "str", "", "12 hex digits of SHA-256 over the cell's configuration"),
    ("cluster", "str", "", "the node provider the cell ran on: local, emulated, inventory"),
    ("attempt", "int", "", "which run of the cell this is: 1, then 2, ... on --resume"),
])

# CellConfig's fields, described: the configuration's columns take its order.
_CONFIG = {
    "engine": ("", "the engine that ran the cell: mxnet, horovod, torch, ..."),
    "model": ("", "the model trained: a registered name, or a user's PATH.py:FACTORY"),
    "layers": ("", "the model's depth (ResNet 6n+2), empty for a fixed-depth model"),
    "batch": ("samples", "samples per step on each worker"),
    "devices": ("", "nodes that train (workers, or a pipeline's stages x replicas)"),
    "sync": ("", "how gradients travel: sync or async"),
    "epochs": ("", "passes over the training set asked for"),
    "lr": ("", "the learning rate asked for (the model's default when not given)"),
    "momentum": ("", "SGD's momentum"),
    "wd": ("", "SGD's weight decay"),
    "lr_scaling": ("", "none, or linear: lr x devices for sync cells"),
    "max_samples": ("samples", "the cap on the training set before it is split (--max-samples)"),
    "dataset": ("", "the data trained on: synthetic, mnist, cifar10, a user's PATH, ..."),
    "placement": ("", "where servers sit: master (a node of their own) or colocated"),
    "data_partition": ("", "shard (a 1/N share per worker) or replicate (the whole set each)"),
    "straggler": ("", "the node slowed: none, F (its CPU x F) or F@T (from T s after launch)"),
    "model_digest": ("", "sha256 of a user's model file or script, as staged"),
    "data_digest": ("", "sha256 of a user's dataset, as staged"),
    "script_args": ("", "--script-args, its {placeholders} unfilled"),
    "params": ("", "--param NAME=VALUE pairs (each also a column param_NAME)"),
    "repeat": ("", "the run of the same configuration, 0-based (a study's --repeats)"),
    "max_speedup": ("x", "the most time dilation this cell may get (emulated, --speedup)"),
}


def _config_kind(annotation: str) -> str:
    """A CellConfig field's column kind, from its annotation (a string here)."""
    for prefix, kind in (("int", "int"), ("float", "float"), ("bool", "bool"),
                         ("tuple", "list"), ("list", "list")):
        if str(annotation).startswith(prefix):
            return kind
    return "str"


def _config_columns() -> list[Column]:
    # A field not described here still gets a column (results.csv must show it);
    # tests/unit/test_results_schema.py fails until it is described.
    # engine_params is no column: each engine's setting is one of its own (the engine's
    # columns, group config: after these).
    return [Column(f.name, _config_kind(f.type), *_CONFIG.get(f.name, ("", "(undescribed)")),
                   "profiler.cell", "config") for f in fields(CellConfig)
            if f.name != "engine_params"]


_OUTCOME = _group("outcome", "profiler.sweep.judge", [
    ("status", "str", "", "ok, oom, timeout or failed"),
    ("reason", "str", "", "why, when not plainly ok; what could not be measured"),
])
_EVENTS = _group("events", "profiler.sweep.events", [
    ("elapsed_s", "float", "s", "the cell's launch to its last worker's end"),
    ("train_s", "float", "s", "first worker start to last worker end"),
    ("first_step_s", "float", "s", "launch to the first completed step"),
    ("epoch_s", "list", "s", "rank 0's time of each epoch"),
    ("val_accuracy", "float", "", "validation accuracy after the last epoch (0 to 1)"),
    ("val_accuracy_per_epoch", "list", "", "validation accuracy after each epoch"),
    ("accuracy_reported", "bool", "", "false when a user's script never reported epochs"),
])
_DIVERGENCE = _group("events", "profiler.sweep.divergence", [
    ("diverged", "bool", "", "training blew up or learned nothing in its first epoch"),
    ("train_loss_per_epoch", "list", "", "the workers' mean training loss of each epoch"),
])
_RATES = _group("events", "profiler.sweep.events", [
    ("lr_applied", "float", "", "the learning rate the optimizer got (after --lr-scaling)"),
    ("samples_per_s", "float", "samples/s", "the workers' training rates, summed"),
    ("syncs_per_worker", "float", "",
     "KVStore push/pull rounds, or allreduce steps, per worker (mean)"),
    ("train_samples", "int", "samples",
     "the training set's size before it is split among workers (not the samples trained)"),
    ("samples_trained", "int", "samples",
     "samples the workers trained, summed over workers and epochs (j_per_sample's divisor)"),
    ("steady_s_per_sample", "float", "s/sample",
     "the first epoch's time per training-set sample, its first step out"),
])
_RATE = _group("rate", "profiler.timeline.rate", [
    ("robust_s_per_sample", "float", "s/sample",
     "time per training-set sample over the run, first step and slow moments out"),
    ("robust_from", "str", "", "what the robust rate was taken from: steps or epochs"),
    ("robust_slow_blocks", "int", "", "blocks of steps left out of the robust rate as slow"),
])
_RUNNER = _group("runner", "profiler.sweep.record", [
    ("speedup", "float", "x", "the time dilation the cell ran at (emulated --speedup), else 1"),
    ("launched_at", "float", "s", "Unix time of the cell's launch", False),
    ("reaped_at", "float", "s", "Unix time its processes were reaped", False),
    ("timeout_s", "float", "s", "the cell's time limit (empty or 0: none)", False),
])
_PARAMETERS = _group("events", "profiler.sweep.events", [
    ("parameters", "int", "",
     "the model's trainable parameters, counted by a worker (a pipeline's stages summed)"),
])
_STRAGGLERS = _group("stragglers", "profiler.sweep.stragglers", [
    ("straggler_node", "str", "", "the node --straggler slowed"),
    ("straggler_factor", "float", "", "its CPU's factor (0 < F <= 1)"),
    ("straggler_after_s", "float", "s", "when it was to be slowed, after the launch"),
    ("straggler_started_s", "float", "s", "when it was slowed, after the launch"),
    ("node_profiles", "map", "", "each node's profile, e.g. {\"n1\": \"pi4\"}"),
])
_BREAKDOWN = _group("breakdown", "profiler.timeline.steps", [
    ("breakdown", "str", "", "which steps were timed: every step, 1 in K steps, or empty"),
    ("step_ms_mean", "float", "ms", "the mean timed step"),
    ("steady_step_ms", "float", "ms", "the workers' mean step from their epoch times"),
    ("breakdown_vs_step", "float", "",
     "(data + compute + comm + wait) over steady_step_ms: about 1"),
    ("data_ms_mean", "float", "ms", "mean time a step waited for its data"),
    *((f"{phase}_ms_{stat}", "float", "ms", f"{what} per step, {said}")
      for phase, what in (("compute", "compute (forward and backward)"),
                          ("comm", "gradient exchange"),
                          ("wait", "waiting for the other workers"))
      for stat, said in (("mean", "mean"), ("p50", "median"), ("p95", "95th percentile"))),
    ("slowest_worker", "str", "", "the node of the worker the others waited for most"),
    ("wait_ms_by_worker", "map", "ms", "mean wait per step, by worker rank"),
    *((f"server_{phase}_ms_mean", "float", "ms",
       f"torch parameter servers: mean time to {what} per round")
      for phase, what in (("recv", "receive"), ("update", "update"), ("send", "send"))),
    ("breakdown_steps", "int", "", "step lines the breakdown measured", False),
    ("compute_ms_by_worker", "map", "ms", "mean compute per step, by worker rank", False),
    ("step_ms_by_worker", "map", "ms", "mean step, by worker rank", False),
    ("worker_nodes", "map", "", "the node of each worker rank", False),
    ("slowest_rank", "int", "", "the rank of slowest_worker", False),
])
_TRACE = _group("trace", "profiler.timeline.record", [
    ("trace_file", "str", "", "the cell's trace (chrome://tracing, Perfetto), in the sweep"),
    ("clock_offsets_s", "map", "s", "each node's clock minus the controller's", False),
])
_COST = _group("cost", "profiler.sweep.cost", [
    ("cost_usd", "float", "USD", "what the cell's nodes cost at --price, electricity in"),
    ("cost_per_epoch_usd", "float", "USD", "one epoch's share of it, start-up out"),
    ("price_source", "str", "", "what was charged, or why there is no cost"),
])
_SUMMARY = _group("summary", "profiler.metrics.summary", [
    ("cpu_percent_mean", "float", "%", "node CPU in the training window: mean, from its "
     "CPU-time counter at the window's ends (the samples' mean where it has none)"),
    ("cpu_percent_peak", "float", "%", "node CPU in the training window: highest sample"),
    ("mem_used_mb_mean", "float", "MB", "node memory used: mean of the samples"),
    ("mem_used_mb_peak", "float", "MB", "node memory used: highest sample"),
    ("node_mem_peak_mb", "float", "MB", "the node's cgroup's own peak usage, page cache "
     "included (memory.max_usage_in_bytes / memory.peak); empty without a cgroup"),
    ("rss_mb_mean", "float", "MB", "summed RSS of the node's worker processes: mean of "
     "the samples"),
    ("rss_mb_peak", "float", "MB", "summed RSS of the node's worker processes: peak, the "
     "largest of the highest sample, their kernel high-water marks (VmHWM, summed) and "
     "their own reported VmHWM (the last two upper bounds)"),
    ("net_sent_kb", "float", "KB", "sent through the counted interfaces in the window"),
    ("net_recv_kb", "float", "KB", "received through the counted interfaces in the window"),
    ("net_sent_packets", "int", "packets", "packets sent in the window (on the emulated "
     "cluster, frames of 9000 bytes: docs/emulated.md)"),
    ("net_recv_packets", "int", "packets", "packets received in the window"),
    ("net_sent_kb_per_s", "float", "KB/s", "net_sent_kb over the window's length"),
    ("net_recv_kb_per_s", "float", "KB/s", "net_recv_kb over the window's length"),
    ("net_sent_packets_per_s", "float", "packets/s", "net_sent_packets over the window"),
    ("net_recv_packets_per_s", "float", "packets/s", "net_recv_packets over the window"),
    ("node_cores", "float", "cores", "the cores that CPU % is a share of"),
    ("throttled_nodes", "list", "", "nodes whose Pi firmware throttled in the window"),
    ("throttle_flags_by_node", "map", "", "which throttle conditions each such node showed"),
    ("cpu_mhz_min", "float", "MHz", "the lowest CPU frequency sampled on any node"),
    ("cpu_mhz_min_by_node", "map", "MHz", "the lowest CPU frequency, by node"),
    ("metrics_nodes", "int", "", "worker nodes that had metrics"),
    ("samples_in_window", "int", "samples", "the fewest agent ticks a worker node's "
     "sampled figures rest on (CPU peak, memory means and sampled peaks)"),
    ("sampled_figures_thin", "bool", "", "samples_in_window < 3: the sampled figures are "
     "rough (marked ~ in the table; remedy: a shorter --interval)"),
])
_ENERGY = _group("energy", "profiler.metrics.energy", [
    ("energy_j", "float", "J", "every node of the cell over the window, measured or modelled"),
    ("energy_j_by_node", "map", "J", "energy_j by node"),
    ("energy_j_by_role", "map", "J", "energy_j by role, shared by the processes' CPU"),
    ("avg_power_w", "float", "W", "energy_j over the window's length: the mean watts"),
    ("j_per_sample", "float", "J/sample", "energy_j over samples_trained"),
    ("energy_to_accuracy_j", "float", "J",
     "joules until rank 0 first reached the final accuracy"),
    ("energy_source", "str", "", "measured, modelled, mixed, or empty: no energy"),
])

COLUMNS: tuple[Column, ...] = (
    *_ID, *_config_columns(), *_OUTCOME, *_EVENTS, *_DIVERGENCE, *_RATES, *_RATE, *_RUNNER,
    *_PARAMETERS, *_STRAGGLERS, *_BREAKDOWN, *_TRACE, *_COST, *_SUMMARY,
    *_ENERGY)
_BY_NAME = {c.name: c for c in COLUMNS}


def with_extra(extra: Sequence[Column] = ()) -> tuple[Column, ...]:
    """The record's columns with those of ``extra`` (the engines' own) whose names are
    not taken: an engine's settings (group ``config``) after the configuration's, its
    other columns after all of the record's."""
    new = list({c.name: c for c in extra if c.name not in _BY_NAME}.values())
    settings = tuple(c for c in new if c.group == "config")
    last = max(i for i, c in enumerate(COLUMNS) if c.group == "config") + 1
    return (COLUMNS[:last] + settings + COLUMNS[last:]
            + tuple(c for c in new if c.group != "config"))


def columns_of(*groups: str, kind: str | None = None) -> tuple[str, ...]:
    """The names of the columns of ``groups`` (of ``kind``, when given): group by group
    in the order given, each in the record's order."""
    unknown = set(groups) - {c.group for c in COLUMNS}
    if unknown:
        raise KeyError(f"no column group {', '.join(sorted(unknown))}")
    return tuple(c.name for group in groups for c in COLUMNS
                 if c.group == group and (kind is None or c.kind == kind))


def get(name: str, extra: Sequence[Column] = ()) -> Column | None:
    """The column ``name`` (a ``param_NAME`` is a string column of its own), or None."""
    found = _BY_NAME.get(name) or next((c for c in extra if c.name == name), None)
    if found is None and name.startswith(PARAM_COLUMN_PREFIX):
        param = name.removeprefix(PARAM_COLUMN_PREFIX)
        return Column(name, "str", "", f"the cell's --param {param}", "profiler.cell", "config")
    return found


def csv_columns(*, monitored: bool = True, extra: Sequence[Column] = ()) -> list[str]:
    """results.csv's header (before a script's ``param_NAME`` columns): the record's
    columns in order, the agents' groups only when ``monitored``, then ``extra``'s."""
    return [c.name for c in with_extra(extra)
            if c.csv and (monitored or c.group not in MONITORED_GROUPS)]


def help_of(name: str) -> str:
    """A column's meaning and unit, as the report's column help shows it ("" if none)."""
    column = get(name)
    return column.help if column else ""


_KIND_TEXT = {"list": "list (`a;b` in the CSV)", "map": "map (JSON in the CSV)"}


def markdown(extra: Sequence[Column] = ()) -> str:
    """docs/columns.md: every column, in results.csv's order."""
    lines = [
        "# The columns of a cell's record",
        "",
        "<!-- Generated by `python -m profiler.sweep.columns_doc > docs/columns.md` from "
        "profiler/results_schema.py and each engine's own columns; do not edit. -->",
        "",
        "One row per column of `results.jsonl`'s records, in `results.csv`'s order. "
        "Columns marked *jsonl* are in `results.jsonl` alone. The `summary` and `energy` "
        "groups are in `results.csv` when the sweep ran agents (not with `--no-agent`). "
        "A script's `--param NAME=VALUE` adds a column `param_NAME` after all of these. "
        "How each is measured: [metrics.md](metrics.md), [timeline.md](timeline.md), "
        "[energy.md](energy.md), [pipeline.md](pipeline.md).",
        "",
        "| column | type | unit | meaning | group | filled by |",
        "|---|---|---|---|---|---|",
    ]
    for c in with_extra(extra):
        kind = _KIND_TEXT.get(c.kind, c.kind) + ("" if c.csv else ", *jsonl*")
        lines.append(f"| `{c.name}` | {kind} | {c.unit} | {c.description.replace('|', '/')} "
                     f"| {c.group} | `{c.filled_by}` |")
    return "\n".join(lines) + "\n"

