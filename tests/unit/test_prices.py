"""``--price`` and the price table (profiler.cluster.prices), a cell's cost columns
(profiler.sweep.cost), and bad ``--price`` input through the CLI (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler.cli import cli
from profiler.cluster.base import Node
from profiler.cluster.prices import load_prices, parse_price
from profiler.cluster.profiles import PACKAGED_PROFILES, load_catalog
from profiler.errors import ConfigError
from profiler.sweep.cost import cost_columns


@pytest.fixture(scope="module")
def table():
    return load_prices([PACKAGED_PROFILES])


@pytest.fixture(scope="module")
def catalog():
    return load_catalog([PACKAGED_PROFILES])


def test_packaged_table_holds_the_boards_and_the_vm_paper_prices(table):
    vms = {name: table.prices[name].usd_per_h for name in
           ("c6g.medium", "c6g.large", "c6g.xlarge", "c6g.2xlarge", "p4d.24xlarge")}
    assert vms == {"c6g.medium": 0.034, "c6g.large": 0.068, "c6g.xlarge": 0.136,
                   "c6g.2xlarge": 0.272, "p4d.24xlarge": 32.7726}
    # Four 8-CPU VMs, as Lerat & Mahmoudi price their run: 1.088 USD/h.
    assert 4 * vms["c6g.2xlarge"] == pytest.approx(1.088)
    for board in ("pi3b", "pi4", "pi5"):
        price = table.prices[board]
        assert price.is_board and price.board_usd > 0 and price.life_h > 0 and price.source
    assert table.prices["pi3b"].board_usd == 35
    assert 0 < table.electricity_usd_per_kwh < 1 and table.electricity_source


def test_a_number_prices_every_node(table, catalog):
    spec = parse_price("0.034", table, catalog)
    assert spec.price_of("pi3b").usd_per_h == spec.price_of("host").usd_per_h == 0.034
    assert not spec.price_of("pi4").is_board


def test_a_board_is_its_list_price_over_its_life_with_its_power_model(table, catalog):
    spec = parse_price("pi3b", table, catalog)
    price = spec.price_of("host")
    assert price.is_board
    assert price.hardware_usd_per_h == pytest.approx(35 / 26280)
    power = getattr(catalog.profiles["pi3b"], "power", None)
    assert price.full_w == getattr(power, "full_w", None)


def test_prices_per_profile(table, catalog):
    spec = parse_price("pi4=0.02, pi3b=pi3b", table, catalog)
    assert spec.price_of("pi4").usd_per_h == 0.02
    assert spec.price_of("pi3b").name == "pi3b"
    assert spec.price_of("pi5") is None


@pytest.mark.parametrize("text, said", [
    ("", "empty"), ("-0.1", "0 or more"), ("nan", "0 or more"), ("inf", "0 or more"),
    ("pi9", "unknown price 'pi9'"), ("pi4=0.02,0.01", "PROFILE=PRICE pairs"),
    ("0.01,0.02", "one price for every node"), ("pi4=", "PROFILE=PRICE"),
    ("nosuch=0.1", "not a node profile"), ("pi4=-2", "0 or more"),
    ("pi4=1,pi4=2", "twice"), ("pi4=c7.huge", "unknown price"),
])
def test_bad_price_is_one_line(table, catalog, text, said):
    with pytest.raises(ConfigError, match=said) as caught:
        parse_price(text, table, catalog)
    assert "\n" not in str(caught.value)


def test_a_users_file_overrides_and_adds_prices(tmp_path, catalog):
    user = tmp_path / "profiles.yaml"
    user.write_text("electricity: {usd_per_kwh: 0.30}\n"
                    "prices:\n  pi3b: {board_usd: 50, life_h: 8760, power_profile: pi3b}\n"
                    "  my-vm: {usd_per_h: 0.5, source: my cloud}\n")
    table = load_prices([PACKAGED_PROFILES, user])
    assert table.electricity_usd_per_kwh == 0.30
    assert table.prices["pi3b"].board_usd == 50
    assert table.prices["my-vm"].usd_per_h == 0.5
    assert table.prices["c6g.large"].usd_per_h == 0.068  # the packaged ones stay


@pytest.mark.parametrize("entry, said", [
    ("pi3b: {board_usd: 35}", "lacks life_h"), ("x: {usd_per_h: -1}", "0 or more"),
    ("x: {usd_per_h: lots}", "not a number"), ("x: 3", "must be a mapping"),
    ("x: {board_usd: 35, life_h: 0}", "above 0"),
])
def test_bad_price_entry_is_one_line(tmp_path, entry, said):
    user = tmp_path / "profiles.yaml"
    user.write_text(f"prices:\n  {entry}\n")
    with pytest.raises(ConfigError, match=said):
        load_prices([PACKAGED_PROFILES, user])


def _record(**kw) -> dict:
    return {"status": "ok", "elapsed_s": 1800.0, "epoch_s": [800.0, 800.0], **kw}


def test_cost_of_an_hourly_price_is_nodes_times_hours(table, catalog):
    nodes = [Node(f"n{i}", profile="pi3b") for i in range(4)]
    cost = cost_columns(_record(), parse_price("0.272", table, catalog), nodes)
    assert cost["cost_usd"] == pytest.approx(4 * 0.272 * 0.5)
    # One epoch's time (800 s of the 1,800), the start-up out.
    assert cost["cost_per_epoch_usd"] == pytest.approx(4 * 0.272 * 800 / 3600)
    assert "0.272 USD/h x 4 nodes" in cost["price_source"]


def test_a_board_adds_the_cells_own_energy_at_the_electricity_rate(table, catalog):
    nodes = [Node("n0", profile="pi3b"), Node("n1", profile="pi3b")]
    record = _record(energy_j_by_node={"n0": 3.6e6, "n1": 7.2e6}, energy_source="modelled",
                     train_s=1600.0)
    cost = cost_columns(record, parse_price("pi3b", table, catalog), nodes)
    hardware = 2 * 35 / 26280 * 0.5
    electricity = 3 * table.electricity_usd_per_kwh  # 3 kWh
    assert cost["cost_usd"] == pytest.approx(hardware + electricity)
    # An epoch: the boards' hours for 800 s, and 800 s of the 1,600 s the joules cover.
    assert cost["cost_per_epoch_usd"] == pytest.approx(
        2 * 35 / 26280 * 800 / 3600 + electricity / 2)
    assert "modelled energy" in cost["price_source"]


def test_a_board_without_energy_pays_its_model_at_full_load(table, catalog):
    price = parse_price("pi3b", table, catalog).price_of("n0")
    cost = cost_columns(_record(), parse_price("pi3b", table, catalog), [Node("n0")])
    assert price.full_w == 3.7  # pi3b's model, at full load
    assert cost["cost_usd"] == pytest.approx(35 / 26280 * 0.5 + 3.7 * 1800 / 3.6e6 * 0.16)
    assert "pi3b at full load 3.7 W" in cost["price_source"]


def test_a_dilated_cell_is_paid_for_the_boards_time(table, catalog):
    cost = cost_columns(_record(elapsed_s=450.0, epoch_s=[200.0], speedup=4.0),
                        parse_price("1", table, catalog), [Node("n0")])
    assert cost["cost_usd"] == pytest.approx(0.5)
    assert cost["cost_per_epoch_usd"] == pytest.approx(800 / 3600)


def test_a_node_without_a_price_leaves_the_cost_empty_and_says_why(table, catalog):
    nodes = [Node("n0", profile="pi4"), Node("n1", profile="pi3b")]
    cost = cost_columns(_record(), parse_price("pi4=0.02", table, catalog), nodes)
    assert cost["cost_usd"] is None and "no price for profile pi3b" in cost["price_source"]


def test_a_failed_cell_is_paid_from_launch_to_reaping(table, catalog):
    record = {"status": "failed", "launched_at": 100.0, "reaped_at": 460.0}
    cost = cost_columns(record, parse_price("2", table, catalog), [Node("n0")])
    assert cost["cost_usd"] == pytest.approx(0.2) and cost["cost_per_epoch_usd"] is None


def test_no_price_no_columns():
    assert cost_columns(_record(), None, [Node("n0")]) == {}


@pytest.mark.parametrize("price, said", [
    ("-1", "0 or more"), ("pi9", "unknown price"), ("pi4=0.1,3", "PROFILE=PRICE"),
])
def test_bad_price_on_the_command_line_exits_2(tmp_path: Path, price, said):
    result = CliRunner().invoke(cli, ["run", "--engine", "torch", "--model", "lenet-mlp",
                                      "--out", str(tmp_path / "out"), "--no-agent",
                                      "--price", price])
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
