"""The report's energy and cost (profiler.report.energy): the time-energy figure there
when a cell has energy and absent otherwise, the section beside a cloud VM, bad
``--cloud-*`` input in one line."""

from __future__ import annotations

import pytest

from profiler.cluster.prices import load_prices
from profiler.cluster.profiles import PACKAGED_PROFILES
from profiler.errors import ConfigError
from profiler.report import energy
from profiler.report.html import number


def _record(devices: int, sync: str, energy_j: float | None, **kw) -> dict:
    return {"cell_id": f"c{devices}{sync}", "status": "ok", "model": "lenet-cnn",
            "layers": None, "batch": 64, "devices": devices, "sync": sync, "engine": "torch",
            "elapsed_s": 100.0 / devices, "train_s": 80.0 / devices,
            "epoch_s": [40.0 / devices, 40.0 / devices],
            "energy_j": energy_j, "j_per_sample": None if energy_j is None else energy_j / 1e3,
            "energy_source": None if energy_j is None else "modelled", **kw}


@pytest.fixture(scope="module")
def table():
    return load_prices([PACKAGED_PROFILES])


def test_the_figure_has_a_mark_per_cell_with_energy():
    records = [_record(d, s, 50.0 * d) for d in (1, 2, 4) for s in ("sync", "async")]
    records.append(_record(8, "sync", None))  # no energy: not drawn, no error
    figure = energy.figure(records)
    assert figure is not None and figure.png.startswith(b"\x89PNG")
    assert figure.name == "fig-time-energy" and "modelled" in figure.caption


def test_no_energy_no_figure_no_section():
    records = [_record(1, "sync", None), {**_record(2, "sync", 10.0), "status": "failed"}]
    assert energy.figure(records) is None
    assert energy.section([_record(1, "sync", None)], None, number, str) is None
    assert energy.status_columns([_record(1, "sync", None)]) == []


def test_the_section_sets_each_cell_beside_the_cloud_vm(table):
    cloud = energy.cloud_vm("c6g.2xlarge", 4, "lenet-cnn=30", table)
    assert cloud.usd_per_epoch("lenet-cnn") == pytest.approx(4 * 0.272 * 30 / 3600)
    assert cloud.usd_per_epoch("resnet") is None and "1.088 USD/h" in cloud.label
    mine = 4 * 0.272 * 30 / 3600 / 2  # half the cloud's cost per epoch
    section = energy.section([_record(2, "sync", 100.0, cost_per_epoch_usd=mine,
                                      price_source="0.1 USD/h x 3 nodes")],
                             cloud, number, lambda r: f"x{r['devices']}")
    [row] = section["rows"]
    values = dict(zip(section["headings"], row["numbers"]))
    assert values["energy J"] == "100.0" and values["source"] == "modelled"
    assert values["cost / cloud"] == "0.500"
    assert values["epoch s"] == "20.0" and values["time / cloud"] == "0.667"
    # Each price said once, without the cells' node counts.
    assert section["prices"] == ["0.1 USD/h"] and row["config"] == "x2"


def test_one_epoch_time_for_every_model(table):
    cloud = energy.cloud_vm("c6g.medium", 1, "12.5", table)
    assert cloud.epoch_s_of("resnet") == cloud.epoch_s_of("lenet-mlp") == 12.5


def test_status_columns_only_where_a_record_has_them():
    records = [_record(1, "sync", 5.0), _record(2, "sync", None)]
    assert [k for k, _ in energy.status_columns(records)] == ["energy_j", "j_per_sample"]


@pytest.mark.parametrize("vm, count, epoch_s, said", [
    ("pi3b", 1, "30", "is a board"), ("m5.huge", 1, "30", "unknown price"),
    ("c6g.large", 0, "30", "how many VMs"), ("c6g.large", 1, "-3", "seconds one epoch"),
    ("c6g.large", 1, "resnet=", "seconds one epoch"), ("c6g.large", 1, "", "seconds"),
    ("c6g.large", 1, "a=1,a=2", "seconds one epoch"),
])
def test_bad_cloud_input_is_one_line(table, vm, count, epoch_s, said):
    with pytest.raises(ConfigError, match=said) as caught:
        energy.cloud_vm(vm, count, epoch_s, table)
    assert "\n" not in str(caught.value)
