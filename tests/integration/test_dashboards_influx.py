"""Every panel and template-variable query of every dashboard, run against a real InfluxDB.

Debian's InfluxDB 1.6.7 on loopback receives the points of a real small sweep shipped
live by ``edgeprof sweep --influx-url`` (agents' metrics and the cells' training
points), and of a second one run with ``--no-agent`` (training points only, which the
sweep overview must still list and show). The queries are those of the committed
profiler/dashboards/*.json, with Grafana's
macros substituted as Grafana renders them (a third sweep, one ``torch-pipe`` cell,
checks that a pipeline cell's points, tagged with its own settings, fill every panel
too, and that the cells table names its shape): ``$timeFilter`` as a time range covering
the sweep, ``$__interval`` as 1s, each variable as one of the values its own query
returned (chained: the cell list comes from the chosen sweep, and so on) and once as
the "All" value. Each must return at least one series: this is what catches a panel
that would silently show nothing.

Power and energy (issue 32): this machine has no power meter (no RAPL, hwmon or Pi 5
PMIC) and the local cluster's slots have no power model, so its cells have no energy.
The points a metered node's agent ships (``power_pmic``, ``power_hwmon``,
``power_rapl``) and the energy columns a modelled cell carries are written here as a
stand-in, with the sweep's own tags, the cell points through ``train_points`` itself.
The sweeps run with ``--price``, so their cost columns are real.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.support.servers import LocalServer, influx_query
from tests.conftest import ROOT, need_binary

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
BOARDS_DIR = ROOT / "profiler" / "dashboards"  # the committed dashboards
BOARDS = sorted(BOARDS_DIR.glob("*.json"))
DB = "edgeprof"


def _sweep(server, out: Path, *args: str, dataset: str = "mnist-5k") -> str:
    """Run a small real sweep shipping live to ``server``; return its sweep id."""
    done = subprocess.run(
        [sys.executable, "-m", "profiler.cli", "sweep", "--model", "lenet-mlp",
         "--dataset", dataset, "--batch", "32", "--max-samples", "400", "--out", str(out),
         "--influx-url", server.url, "--influx-db", DB, "--price", "0.034", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "sweep.json").read_text())["sweep_id"]


def _next_second(sweep_id: str) -> None:
    """Sweep ids are the start time to the second: the next sweep must not share one.
    A sweep lasts longer than a second, so this returns at once but on a fast machine."""
    from profiler.sweep.folder import new_sweep_id

    while new_sweep_id() <= sweep_id:
        time.sleep(0.01)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    need_binary("influxd")
    work = tmp_path_factory.mktemp("dashboards")
    with LocalServer("influxdb1", work / "influxdb") as server:
        sweep_id = _sweep(server, work / "sweep", "--devices", "1,2", "--epochs", "2",
                          "--interval", "0.5")
        _next_second(sweep_id)
        no_agent_id = _sweep(server, work / "no-agent", "--devices", "1", "--epochs", "1",
                             "--no-agent")
        assert no_agent_id != sweep_id
        _next_second(no_agent_id)
        pipe_id = _sweep(server, work / "pipe", "--engine", "torch-pipe", "--devices", "2",
                         "--microbatches", "2", "--interval", "0.5", dataset="synthetic")
        for folder, shipped_id in ((work / "sweep", sweep_id), (work / "pipe", pipe_id)):
            _stand_in_power_and_energy(server, folder, shipped_id)
        yield server, sweep_id, no_agent_id, pipe_id


def _stand_in_power_and_energy(server, sweep_dir: Path, sweep_id: str) -> None:
    """What a metered, modelled cluster adds to a sweep's points (the module's docstring
    says why they are written here): measured power beside every node's ``cpu`` series,
    and each cell's energy columns, spooled by ``train_points`` and written as shipped."""
    from profiler.agent import lineproto
    from profiler.engines import cell_of_record
    from profiler.agent.spool_reader import Position, read_batch
    from profiler.sweep.train_points import SPOOL_NAME, spool_cell_points

    now_ms = int(time.time() * 1000)
    lines, nodes_of = [], {}
    for series in influx_query(server.url, DB, 'SELECT last("cpu_percent") FROM "cpu" '
                               f"WHERE \"sweep\" = '{sweep_id}' GROUP BY *"):
        tags = {k: v for k, v in series["tags"].items() if v}
        nodes_of.setdefault(tags["cell"], []).append(tags["node"])
        lines += [lineproto.encode("power_pmic", tags, {"board_w": 4.2, "rails_w": 3.2}, now_ms),
                  lineproto.encode("power_hwmon", {**tags, "monitor": "ina219/hwmon2",
                                                   "channel": "1"}, {"power_w": 3.9}, now_ms),
                  lineproto.encode("power_rapl", {**tags, "domain": "package-0"},
                                   {"power_w": 12.5}, now_ms)]
    for i, text in enumerate((sweep_dir / "results.jsonl").read_text().splitlines()):
        record = json.loads(text)
        nodes = sorted(nodes_of.get(record["cell_id"], ["n0"]))
        record.update(energy_j=30.0 * len(nodes), avg_power_w=3.0 * len(nodes),
                      j_per_sample=0.1, energy_source="modelled",
                      energy_j_by_node={node: 30.0 for node in nodes})
        cell = cell_of_record(record)  # the pipeline's settings too: its cell_id
        stand_in = sweep_dir / "stand-in" / str(i)
        spool_cell_points(stand_in, cell, record, sweep_id)
        lines += read_batch(stand_in / SPOOL_NAME, Position(), 10_000)[0]
    done = requests.post(f"{server.url}/write", params={"db": DB, "precision": "ms"},
                         data="\n".join(line for line in lines if line).encode(), timeout=30)
    assert done.status_code == 204, done.text


def _render(query: str, values: dict[str, str]) -> str:
    query = query.replace("$timeFilter", "time > now() - 1h").replace("$__interval", "1s")
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        query = query.replace(f"${name}", value)
    assert "$" not in re.sub(r"\$tag_\w+|\^|\$/", "", query), query  # nothing left over
    return query


def _variable_values(server, board: dict, sweep_id: str, *, all_values: bool) -> dict:
    chosen: dict[str, str] = {}
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        rows = influx_query(server.url, DB, _render(variable["query"], chosen))
        values = [v for series in rows for _, v in series["values"]]
        assert values, f"{board['uid']}: variable {variable['name']} lists nothing"
        if variable["name"] == "sweep":
            assert sweep_id in values
            chosen["sweep"] = sweep_id
        else:
            chosen[variable["name"]] = variable.get("allValue", ".*") if all_values \
                else re.escape(sorted(values)[0])
    return chosen


def _targets(board: dict):
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target


@pytest.mark.parametrize("board_path", BOARDS, ids=[p.stem for p in BOARDS])
@pytest.mark.parametrize("all_values", [False, True], ids=["one-value", "all"])
def test_every_query_of_the_dashboard_returns_data(shipped, board_path: Path, all_values):
    server, sweep_id, _, _ = shipped
    board = json.loads(board_path.read_text())
    values = _variable_values(server, board, sweep_id, all_values=all_values)
    empty = _empty_panels(server, board, values)
    assert not empty, "panels with no data:\n" + "\n".join(empty)


def _empty_panels(server, board: dict, values: dict) -> list[str]:
    targets = list(_targets(board))
    assert targets
    empty = []
    for title, target in targets:
        query = _render(target["query"], values)
        if not influx_query(server.url, DB, query):
            empty.append(f"{title}: {query}")
    return empty


@pytest.mark.parametrize("all_values", [False, True], ids=["one-value", "all"])
def test_sweep_overview_shows_a_sweep_run_without_agents(shipped, all_values):
    """A ``--no-agent`` sweep has no agents' points: the overview still lists it and its
    cells (from the ``cell`` measurement) and shows everything but the resources and the
    energy (nothing measured the nodes' CPU use to model it from); its cost is there."""
    server, _, no_agent_id, _ = shipped
    board = json.loads((BOARDS_DIR / "sweep-overview.json").read_text())
    values = _variable_values(server, board, no_agent_id, all_values=all_values)
    assert "cpu" not in _measurements(server, no_agent_id)  # no agent ran indeed
    empty = {line.split(":", 1)[0] for line in _empty_panels(server, board, values)}
    assert empty == {"CPU % against devices", "Memory against devices",
                     "Network sent against devices", "Energy per cell",
                     "Joules per sample against devices"}, empty


@pytest.mark.parametrize("board_path", BOARDS, ids=[p.stem for p in BOARDS])
def test_a_pipeline_sweep_fills_every_panel(shipped, board_path: Path):
    """A torch-pipe cell's points (its stages are its nodes; its tags add microbatches,
    schedule, replicas, split) fill every panel, and the cells table shows its shape."""
    server, _, _, pipe_id = shipped
    board = json.loads(board_path.read_text())
    for all_values in (False, True):
        values = _variable_values(server, board, pipe_id, all_values=all_values)
        assert not _empty_panels(server, board, values), all_values
    if board["uid"] != "edgeprof-sweep-overview":
        return
    [target] = [t for title, t in _targets(board) if title.startswith("Cells")]
    # One cell: its row, and the stand-in energy's (tagged energy_source) beside it.
    rows = influx_query(server.url, DB, _render(target["query"], {
        "sweep": pipe_id, "cell": ".*"}))
    assert len({series["tags"]["cell"] for series in rows}) == 1
    for series in rows:
        assert {k: series["tags"][k] for k in ("engine", "microbatches", "schedule")} == \
            {"engine": "torch-pipe", "microbatches": "2", "schedule": "gpipe"}


def _measurements(server, sweep_id: str) -> set[str]:
    rows = influx_query(server.url, DB, f"SHOW MEASUREMENTS WHERE \"sweep\" = '{sweep_id}'")
    return {v[0] for series in rows for v in series["values"]}


def test_there_are_two_dashboards():
    assert [p.name for p in BOARDS] == ["node-resources.json", "sweep-overview.json"]
