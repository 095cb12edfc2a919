"""Grafana dashboards of edgeprof as code: ``python -m dashboards.generate`` writes
``node-resources.json`` and ``sweep-overview.json`` into ``profiler/dashboards/``
(``BOARDS_DIR``), as package data: an installed ``edgeprof dashboards push`` finds them
there, and the Ansible ``monitor`` role copies them from there.

Built with grafana-foundation-sdk (Grafana's own typed builders, pinned to its 11.6 build:
the default 10.1 build cannot read its own JSON back). The SDK has no InfluxDB query
type, so ``InfluxQL`` below is one (a raw InfluxQL query, as Grafana's InfluxDB
datasource stores it). Queries are InfluxQL, which InfluxDB 1.x serves and 2.x serves
through its v1-compatible API with a DBRP mapping (docs/dashboards.md). Every panel
reads the datasource chosen in the ``datasource`` variable; ``sweep``, ``cell``,
``node`` and ``role`` are tag-value queries chained with WHERE, so each lists only
what the choice before it contains; each board takes them from a measurement it shows
(``_variables`` says why).

The measurements and tags are the agents' (README "Schema") plus ``train``, ``cell``
and ``node_energy`` (``profiler/sweep/train_points.py``): training progress, each cell's
outcome with its energy and cost, and each node's energy over a cell. Power per node is
the agents' measured ``power_pmic``, ``power_hwmon`` and ``power_rapl`` (docs/metrics.md)
while a cell runs, and each node's mean over a cell, measured or modelled, once it ends.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import barchart, dashboard, table, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (DashboardCursorSync, DataSourceRef,
                                                     VariableRefresh, VariableSort)

BOARDS_DIR = Path(__file__).resolve().parents[1] / "profiler" / "dashboards"
DATASOURCE = DataSourceRef(type_val="influxdb", uid="${datasource}")
WIDTH = 24


class InfluxQL(cogvariants.Dataquery, cogbuilder.Builder["InfluxQL"]):
    """A raw InfluxQL target of Grafana's InfluxDB datasource (the SDK has none)."""

    def __init__(self, query: str, ref_id: str = "A", result_format: str = "time_series",
                 alias: str | None = None):
        self.query, self.ref_id = query, ref_id
        self.result_format, self.alias = result_format, alias

    def build(self) -> "InfluxQL":
        return self

    def to_json(self) -> dict[str, object]:
        payload: dict[str, object] = {"refId": self.ref_id, "query": self.query,
                                      "rawQuery": True, "resultFormat": self.result_format,
                                      "datasource": DATASOURCE.to_json()}
        if self.alias:
            payload["alias"] = self.alias
        return payload


# --- shared pieces -------------------------------------------------------------------

def _match(*tags: str) -> str:
    """``"tag" =~ /^$tag$/`` for each tag: a multi-value variable renders as (a|b)."""
    return " AND ".join(f'"{tag}" =~ /^${tag}$/' for tag in tags)


def _tag_values(name: str, measurement: str, after: tuple[str, ...], label: str,
                *, multi: bool = True) -> dashboard.QueryVariable:
    where = f" WHERE {_match(*after)}" if after else ""
    variable = (dashboard.QueryVariable(name).label(label).datasource(DATASOURCE)
                .query(f'SHOW TAG VALUES FROM "{measurement}" WITH KEY = "{name}"{where}')
                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))
    if multi:
        variable = variable.multi(True).include_all(True).all_value(".*")
    else:
        variable = variable.sort(VariableSort.ALPHABETICAL_DESC)  # newest sweep id first
    return variable


def _variables(board: dashboard.Dashboard, *, node_level: bool) -> dashboard.Dashboard:
    # Each board lists the sweeps and cells of the measurements it shows. Node resources
    # shows the agents' points, there while a cell runs: its lists come from "cpu".
    # Sweep overview shows "cell" and "train", written when each cell ends whether or not
    # agents ran (--no-agent): from "cpu" it would list nothing for such a sweep.
    source = "cpu" if node_level else "cell"
    board = board.with_variable(
        dashboard.DatasourceVariable("datasource").label("Data source").type("influxdb"))
    board = board.with_variable(_tag_values("sweep", source, (), "Sweep", multi=False))
    board = board.with_variable(_tag_values("cell", source, ("sweep",), "Cell"))
    if node_level:
        board = board.with_variable(_tag_values("node", "cpu", ("sweep", "cell"), "Node"))
        board = board.with_variable(_tag_values("role", "proc", ("sweep", "cell", "node"),
                                                "Role"))
    return board


def _timeseries(title: str, unit: str, *targets: InfluxQL,
                width: int = 12, height: int = 8) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).datasource(DATASOURCE).unit(unit)
             .height(height).span(width).line_width(1).fill_opacity(5)
             .legend(common_builders.VizLegendOptions().show_legend(True)
                     .display_mode(common.LegendDisplayMode.TABLE)
                     .placement(common.LegendPlacement.BOTTOM).calcs(["mean", "max"])))
    for target in targets:
        panel = panel.with_target(target)
    return panel


def _series(measurement: str, field: str, where: str, by: str, ref: str = "A",
            alias: str | None = None, agg: str = "mean", negate: bool = False) -> InfluxQL:
    sign = "-" if negate else ""  # drawn below the axis (received, against sent)
    return InfluxQL(f'SELECT {sign}{agg}("{field}") FROM "{measurement}" WHERE {where} AND '
                    f"$timeFilter GROUP BY time($__interval), {by} fill(none)", ref, alias=alias)


def _sent_received(title: str, unit: str, counter: str, where: str) -> timeseries.Panel:
    """A node's ``sent_<counter>_per_s`` above the axis and ``recv_…`` below it."""
    return _timeseries(
        title, unit,
        _series("net", f"sent_{counter}_per_s", where, '"node"', "A", "$tag_node sent", "sum"),
        _series("net", f"recv_{counter}_per_s", where, '"node"', "B", "$tag_node received",
                "sum", negate=True))


# --- Node resources -------------------------------------------------------------------

def node_resources() -> dashboard.Dashboard:
    node = _match("sweep", "cell", "node")
    proc = _match("sweep", "cell", "node", "role")
    board = (dashboard.Dashboard("edgeprof: node resources").uid("edgeprof-node-resources")
             .tags(["edgeprof"]).refresh("10s").time("now-1h", "now")
             .tooltip(DashboardCursorSync.CROSSHAIR)
             .description("CPU, memory and network per node; CPU and memory per role. "
                          "Generated by dashboards/generate.py."))
    board = _variables(board, node_level=True)
    board = board.with_row(dashboard.Row("Nodes"))
    board = board.with_panel(_timeseries(
        "CPU (% of the node)", "percent", _series("cpu", "cpu_percent", node, '"node"',
                                                   alias="$tag_node")))
    board = board.with_panel(_timeseries(
        "Memory used", "decmbytes", _series("mem", "used_mb", node, '"node"',
                                             alias="$tag_node")))
    board = board.with_panel(_sent_received("Network bytes (sent +, received -)", "Bps",
                                             "bytes", node))
    board = board.with_panel(_sent_received("Network packets (sent +, received -)", "pps",
                                             "packets", node))
    board = board.with_row(dashboard.Row("Processes by role"))
    board = board.with_panel(_timeseries(
        "Process CPU (% of one core)", "percent",
        _series("proc", "cpu_percent", proc, '"node", "proc"', alias="$tag_node $tag_proc")))
    board = board.with_panel(_timeseries(
        "Process RSS", "decmbytes",
        _series("proc", "rss_mb", proc, '"node", "proc"', alias="$tag_node $tag_proc")))
    board = board.with_row(dashboard.Row("Power"))
    board = board.with_panel(_timeseries(
        "Power per node (measured: Pi 5 PMIC, power monitor, RAPL)", "watt",
        _series("power_pmic", "board_w", node, '"node"', "A", "$tag_node board"),
        _series("power_hwmon", "power_w", node, '"node", "monitor", "channel"', "B",
                "$tag_node $tag_monitor $tag_channel"),
        _series("power_rapl", "power_w", node, '"node", "domain"', "C",
                "$tag_node $tag_domain")))
    board = board.with_panel(
        table.Panel().title("Mean power and energy per node, each cell (measured or modelled)")
        .datasource(DATASOURCE).height(8).span(12).with_target(InfluxQL(
            'SELECT last("avg_power_w") AS "mean W", last("energy_j") AS "energy J" FROM '
            f'"node_energy" WHERE {node} AND $timeFilter GROUP BY "cell", "node", '
            '"energy_source"', result_format="table")))
    return board


# --- Sweep overview -------------------------------------------------------------------

def _by_devices(title: str, field: str, unit: str) -> barchart.Panel:
    """A measure of the finished cells against the device count (the study's Figs 4-7)."""
    query = (f'SELECT mean("{field}") AS "{field}" FROM "cell" WHERE {_match("sweep", "cell")}'
             ' AND "status" = \'ok\' AND $timeFilter GROUP BY "devices", "model", "sync"')
    return (barchart.Panel().title(title).datasource(DATASOURCE).unit(unit).height(8).span(8)
            .x_field("devices").with_target(InfluxQL(query, result_format="table")))


def sweep_overview() -> dashboard.Dashboard:
    cells = _match("sweep", "cell")
    board = (dashboard.Dashboard("edgeprof: sweep overview").uid("edgeprof-sweep-overview")
             .tags(["edgeprof"]).refresh("30s").time("now-6h", "now")
             .description("Every cell of a sweep with its status; resources, time and "
                          "accuracy against devices; training progress. Generated by "
                          "dashboards/generate.py."))
    board = _variables(board, node_level=False)
    board = board.with_row(dashboard.Row("Cells"))
    board = board.with_panel(
        table.Panel().title("Cells: configuration and status").datasource(DATASOURCE)
        .height(9).span(WIDTH).with_target(InfluxQL(
            'SELECT last("elapsed_s") AS "elapsed s", last("train_s") AS "train s", '
            'last("samples_per_s") AS "samples/s", last("val_accuracy") AS "val accuracy", '
            'last("cpu_percent_mean") AS "CPU %", last("mem_used_mb_mean") AS "memory MB", '
            'last("net_sent_kb_per_s") AS "sent KB/s", last("energy_j") AS "energy J", '
            'last("j_per_sample") AS "J/sample", last("cost_usd") AS "cost USD" FROM "cell" '
            'WHERE '
            f'{cells} AND $timeFilter GROUP BY "cell", "model", "layers", "batch", '
            '"devices", "sync", "engine", "status", "diverged", '
            # A pipeline cell's shape (torch-pipe's own settings): an empty column for
            # the other engines' cells, which do not have these tags.
            '"microbatches", "schedule", "replicas", "split", "energy_source"',
            result_format="table")))
    board = board.with_row(dashboard.Row("Against devices (finished cells)"))
    board = board.with_panel(_by_devices("CPU % against devices", "cpu_percent_mean",
                                         "percent"))
    board = board.with_panel(_by_devices("Memory against devices", "mem_used_mb_mean",
                                         "decmbytes"))
    board = board.with_panel(_by_devices("Network sent against devices", "net_sent_kb_per_s",
                                         "KBs"))
    board = board.with_panel(_by_devices("Training time against devices", "train_s", "s"))
    board = board.with_panel(_by_devices("Accuracy against devices", "val_accuracy",
                                         "percentunit"))
    board = board.with_panel(_by_devices("Samples/s against devices", "samples_per_s",
                                         "short"))
    board = board.with_row(dashboard.Row("Energy and cost (finished cells)"))
    board = board.with_panel(
        barchart.Panel().title("Energy per cell").datasource(DATASOURCE).unit("joule")
        .height(8).span(8).x_field("cell").with_target(InfluxQL(
            f'SELECT last("energy_j") AS "energy_j" FROM "cell" WHERE {cells} AND "status" = '
            "'ok' AND $timeFilter GROUP BY \"cell\"", result_format="table")))
    board = board.with_panel(_by_devices("Joules per sample against devices", "j_per_sample",
                                         "joule"))
    board = board.with_panel(_by_devices("Cost per epoch against devices",
                                         "cost_per_epoch_usd", "currencyUSD"))
    board = board.with_row(dashboard.Row("Training progress"))
    epochs = f"{cells} AND \"event\" = 'epoch'"
    board = board.with_panel(_timeseries(
        "Validation accuracy after each epoch", "percentunit",
        _series("train", "val_accuracy", epochs, '"cell"', agg="last", alias="$tag_cell")))
    board = board.with_panel(_timeseries(
        "Training loss per epoch (rank 0)", "short",
        _series("train", "train_loss", f"{epochs} AND \"rank\" = '0'", '"cell"',
                agg="last", alias="$tag_cell")))
    board = board.with_panel(
        table.Panel().title("Epochs done").datasource(DATASOURCE).height(8).span(WIDTH)
        .with_target(InfluxQL(f'SELECT max("epoch") AS "epochs done", '
                              f'last("epoch_s") AS "last epoch s" FROM "train" WHERE {epochs}'
                              ' AND $timeFilter GROUP BY "cell"', result_format="table")))
    return board


BOARDS = {"node-resources.json": node_resources, "sweep-overview.json": sweep_overview}


def render(builder: dashboard.Dashboard) -> str:
    return json.dumps(json.loads(JSONEncoder().encode(builder.build())), indent=2,
                      sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:] or [str(BOARDS_DIR)])[0])
    for name, build in BOARDS.items():
        (out / name).write_text(render(build()))
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
