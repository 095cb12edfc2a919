"""The report page from records built here: the study's numbers beside matching cells,
every status shown as such, and the environment of the sweep (not of the report's host).

``tests/integration/test_report.py`` renders a real sweep; these cover what a small real
sweep cannot reach here (ResNet on CIFAR-10 on ten devices, the study's Tables 3-4) and
the versions a sweep records.
"""

from __future__ import annotations

import json
import platform
import re
import struct
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from profiler import __version__
from profiler.report.build import environment
from profiler.report.html import render
from profiler.report.sweep_data import Sweep, config_label as _config
from profiler.study import STUDIES
from profiler.study.park2019.reference import load_reference
from tests.conftest import ROOT
from tests.report_tables import number as _float, rows as _rows

RECORDED = {"edgeprof": "9.8.7", "mxnet": "1.2.3", "horovod": "0.1.2", "python": "3.0.1"}


def _record(**overrides) -> dict:
    record = {"cell_id": f"c{len(overrides)}-{sorted(overrides.items())!r}"[:40],
              "engine": "mxnet", "model": "lenet-mlp", "layers": None, "batch": 64,
              "devices": 1, "sync": "sync", "epochs": 1, "status": "ok", "reason": "",
              "dataset": "mnist", "diverged": False, "epoch_s": [10.0],
              "val_accuracy_per_epoch": [0.9], "val_accuracy": 0.9, "train_s": 10.0,
              "train_samples": 1000}
    return {**record, **overrides}


def _page(records: list[dict], settings: dict | None = None, path: Path = Path("sweep")) -> str:
    sweep = Sweep(path=path, settings=settings or {"sweep_id": "s1", "versions": RECORDED,
                                                   "identity": {"cluster": "emulated"}},
                  records=records)
    return render(title="t", environment=environment(sweep), records=records,
                  config_of=_config, figures=[], cell_figures=[],
                  study=STUDIES["park2019"].section(records))




def test_study_values_beside_every_matching_cell():
    ref = load_reference()
    resnet = dict(model="resnet", layers=32, batch=32, devices=10, epochs=5, dataset="cifar10",
                  epoch_s=[2000.0, 2100.0, 2200.0, 2300.0, 2400.0],
                  val_accuracy_per_epoch=[0.35, 0.5, 0.6, 0.65, 0.66],
                  cpu_percent_mean=30.0, mem_used_mb_mean=200.0, net_recv_kb_per_s=100.0,
                  net_sent_kb_per_s=110.0)
    records = [
        _record(devices=2, epoch_s=[84.0], val_accuracy_per_epoch=[0.95]),
        _record(devices=3, dataset="mnist-5k", val_accuracy_per_epoch=[0.8]),
        _record(devices=7, epoch_s=[0.05]),
        _record(**resnet),
        # Never set beside the study: not finished, or not the study's configuration.
        _record(devices=4, status="failed", reason="worker 0 failed"),
        _record(devices=5, batch=32),
        _record(devices=6, sync="async"),
    ]
    rows = _rows(_page(records), "<h2>Beside the study</h2>")
    assert rows[0] == ["study", "our cell", "measure", "ours", "study", "ours / study", "note"]
    shown = {(row[0], row[1], row[2]): row[3:] for row in rows[1:]}
    # Tables 1 (2 rows per cell), 3 (4 measures) and 4 (2 rows per epoch), nothing else.
    assert len(shown) == len(rows) - 1 == 2 * 3 + 4 + 2 * 5, sorted(shown)

    table1 = ref["table1_lenet_mlp"]
    two = "lenet-mlp b64 x2 sync mxnet"
    assert shown[("Table 1", two, "training time s")] == [
        "84.0", str(table1["elapsed_s"][1]), "0.500", "other hardware"]
    ours, study, ratio, note = shown[("Table 1", two, "val accuracy")]
    assert (ours, _float(study), note) == ("0.950", table1["val_accuracy"][1], "")
    assert _float(ratio) == pytest.approx(0.95 / table1["val_accuracy"][1], abs=1e-3)
    # Accuracy on other data than the study's is shown, marked not comparable.
    assert shown[("Table 1", "lenet-mlp b64 x3 sync mxnet", "val accuracy")][3] == \
        "not comparable: ours on mnist-5k, study on mnist"
    # A short cell's time beside the Pi's: a small ratio keeps its digits.
    assert shown[("Table 1", "lenet-mlp b64 x7 sync mxnet", "training time s")][:3] == \
        ["0.050", str(table1["elapsed_s"][6]), f"{0.05 / table1['elapsed_s'][6]:.3g}"]

    table3 = ref["table3_resnet_resources"]
    i = table3["config"].index("32x32")
    cell = "resnet-32 b32 x10 sync mxnet"
    for measure, ours, study in (("CPU %", 30.0, table3["cpu_percent"][i]),
                                 ("memory MB", 200.0, table3["memory_mb"][i]),
                                 ("received KB/s", 100.0, table3["net_receive_kb"][i]),
                                 ("sent KB/s", 110.0, table3["net_send_kb"][i])):
        row = shown[("Table 3", cell, measure)]
        assert (_float(row[0]), _float(row[1])) == (ours, study), measure
        assert row[3] == "study: per-device means"

    table4 = ref["table4_resnet32_epochs"]
    for k, epoch in enumerate(table4["epochs"]):
        label = f"{cell}, epoch {epoch}"
        time_row = shown[("Table 4", label, "training time s")]
        # Table 4 accumulates epochs: ours is the sum of the first k epochs' times.
        assert _float(time_row[0]) == sum(resnet["epoch_s"][:epoch])
        assert _float(time_row[1]) == table4["elapsed_s"][k]
        accuracy = shown[("Table 4", label, "val accuracy")]
        assert _float(accuracy[0]) == resnet["val_accuracy_per_epoch"][k]
        assert _float(accuracy[1]) == table4["val_accuracy"][k]


def test_no_matching_cell_says_which_configurations_would():
    page = _page([_record(batch=32)])
    assert "No cell matches a configuration the study reports" in page


def test_every_status_is_a_row_of_its_own_kind():
    records = [_record(devices=2, status="timeout", reason="no result within --timeout 60 s",
                       epoch_s=[], val_accuracy=None),
               _record(devices=3, diverged=True, reason="diverged in epoch 1 (loss nan)"),
               _record(devices=4, status="oom", reason="worker 0 killed by the OOM killer"),
               _record(devices=5)]
    page = _page(records)
    classes = re.findall(r"<tr class='([^']*)'>", page)
    assert classes == ["timeout", "ok diverged", "oom", "ok"]
    rows = _rows(page, "<h2>Cells</h2>")
    status = rows[0].index("status")
    reason = rows[0].index("reason")
    assert [(r[status], r[reason]) for r in rows[1:]] == [
        ("timeout", "no result within --timeout 60 s"),
        ("ok, diverged", "diverged in epoch 1 (loss nan)"),
        ("oom", "worker 0 killed by the OOM killer"), ("ok", "")]
    # The counts above the table: a diverged cell is not counted as plainly ok.
    assert "1 ok; 1 ok,diverged; 1 oom; 1 timeout" in page


def test_environment_shows_the_versions_the_sweep_recorded():
    records = [_record(), _record(engine="horovod", devices=2, sync="sync")]
    rows = dict(_rows(_page(records), "<h2>Environment</h2>"))
    # This machine's versions differ from RECORDED: the page shows the sweep's.
    assert rows["edgeprof"] == "9.8.7"
    assert rows["engines"] == "horovod 0.1.2, mxnet 1.2.3"
    assert rows["python"] == "3.0.1"
    assert not [k for k in rows if "this machine" in k]
    assert rows["cluster"] == "emulated" and rows["devices"] == "1, 2"


def test_environment_of_an_inventory_sweep_names_whose_versions_they_are():
    settings = {"versions": RECORDED, "identity": {"cluster": "inventory"}}
    rows = dict(_rows(_page([_record()], settings), "<h2>Environment</h2>"))
    assert rows["engines (the controller; the nodes run their own install)"] == "mxnet 1.2.3"


def test_environment_of_an_older_sweep_is_this_machines_and_says_so():
    rows = dict(_rows(_page([_record()], {"identity": {"cluster": "local"}}),
                      "<h2>Environment</h2>"))
    label = " (this machine; the sweep recorded none)"
    assert rows[f"edgeprof{label}"] == __version__
    assert rows[f"python{label}"] == platform.python_version()
    assert rows[f"engines{label}"] == f"mxnet {metadata.version('mxnet')}"
    assert "edgeprof" not in rows and "engines" not in rows


def test_a_new_sweep_records_its_versions_without_importing_mxnet(tmp_path):
    """``sweep.json`` holds the versions that ran the sweep (every registered engine's
    packages), read from package metadata: importing MXNet or torch in the controller
    would cost seconds."""
    script = (
        "import json, sys\n"
        "from profiler.cell import CellConfig\n"
        "from profiler.sweep.folder import prepare_sweep_dir\n"
        "from profiler.sweep.sweep import SweepSettings\n"
        "cell = CellConfig(model='lenet-mlp', layers=None)\n"
        f"prepare_sweep_dir(SweepSettings(cells=[cell], out_dir={str(tmp_path / 's')!r}))\n"
        "print(json.dumps(sorted(m for m in ('mxnet', 'horovod', 'torch') "
        "if m in sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []  # no framework was imported
    versions = json.loads((tmp_path / "s" / "sweep.json").read_text())["versions"]
    expected = {"edgeprof": __version__, "python": platform.python_version()}
    for package in ("mxnet", "horovod", "torch"):
        try:
            expected[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    assert versions == expected


def test_figures_draw_dilated_cells_in_the_boards_time():
    from profiler.report.figures import _ok
    dilated = {"status": "ok", "speedup": 4.0, "train_s": 10.0, "net_sent_kb_per_s": 800.0,
               "cpu_percent_mean": 50.0}
    plain = {"status": "ok", "train_s": 10.0, "net_sent_kb_per_s": 800.0}
    failed = {"status": "oom", "speedup": 4.0}
    board, undilated = _ok([dilated, plain, failed])
    assert (board["train_s"], board["net_sent_kb_per_s"]) == (40.0, 200.0)
    assert board["cpu_percent_mean"] == 50.0  # a share of the quota: unchanged by k
    assert undilated == plain and dilated["train_s"] == 10.0  # the records are not changed


def test_engines_side_by_side_set_the_same_cell_of_each_engine_in_one_row():
    same = dict(model="lenet-cnn", devices=2, samples_per_s=100.0)
    records = [_record(**same, engine="torch", epoch_s=[4.0, 6.0]),
               _record(**same, engine="mxnet", epoch_s=[10.0]),
               _record(**same, engine="torch-ddp", epoch_s=[2.5], status="failed"),
               _record(model="lenet-mlp", engine="torch")]  # alone on its engine
    page = _page(records)
    section = page.split("<h2 id='engines'>")[1].split("<h2")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", section)
    assert len(rows) == 2  # the header and the one shared cell (DDP's failed)
    assert "mxnet s/epoch" in rows[0] and "torch / mxnet time" in rows[0]
    assert "torch-ddp" not in rows[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", rows[1])
    assert cells[0] == "lenet-cnn b64 x2 sync"
    # mxnet first (10 s an epoch), torch second (mean of 4 and 6 s), then torch/mxnet.
    assert cells[1] == "10.0" and cells[4] == "5.000" and cells[-1] == "0.500"
    assert "id='engines'" not in _page([_record(engine="torch")])  # one engine: no section


def test_environment_names_the_profile_check_of_a_study():
    check = {"profile": "pi3b-park2019", "model": "lenet-mlp", "workload": "lenet-mlp batch 64",
             "speedup": 1.0, "quota_cores": 0.0694, "board_samples_per_s": 571.4,
             "samples_per_s": 1190.0, "tolerance": 0.25, "action": "recalibrated",
             "new_quota_cores": 0.0331, "ratio": 2.0826, "within": False}
    settings = {"versions": RECORDED, "identity": {"cluster": "emulated"},
                "extra": {"study": "park2019", "scale": 0.01, "method": "scripts",
                          "profile_check": [check]}}
    ok = {**check, "model": "resnet", "workload": "resnet-32 batch 32", "speedup": 16.0,
          "action": "none", "new_quota_cores": None, "ratio": 0.97, "within": True,
          "train_s": 2.61}  # how long the check trained (since issue 47; not in older ones)
    settings["extra"]["profile_check"].append(ok)
    rows = dict(_rows(_page([_record()], settings), "<h2>Environment</h2>"))
    assert rows["study"] == "park2019 at scale 0.01 of its data, method scripts"
    assert rows["profile check"] == (
        "pi3b-park2019 on this host: lenet-mlp batch 64 2.08 x the board's rate (outside "
        "x/÷1.25), re-calibrated 0.0694 -> 0.0331 cores; resnet-32 batch 32 at speedup 16 "
        "0.97 x the board's rate over 2.6 s (within x/÷1.25)")


def test_a_sweeps_values_come_out_escaped():
    """The page is a Jinja2 template with autoescape on: markup in a record (a reason,
    a dataset's name, a worker's name) is shown as text, never run."""
    attack = "<script>alert('x')</script>"
    records = [_record(devices=2, status="failed", reason=attack, dataset=f"d{attack}"),
               _record(devices=3, compute_ms_mean=1.0, slowest_worker=attack)]
    page = _page(records)
    assert "<script" not in page
    # The reason, the dataset (its row and the environment's list), the slowest worker.
    assert page.count("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;") == 4
    rows = _rows(page, "<h2>Cells</h2>")
    reason = rows[0].index("reason")
    assert rows[1][reason] == attack  # shown as the text it is


def test_no_network_panels_when_no_cell_had_two_devices():
    from profiler.report.figures import network_drawn, node_series

    def png_size(png: bytes) -> tuple[int, int]:
        return struct.unpack(">II", png[16:24])  # IHDR: width, height

    nodes = {"n0": {"cpu_percent": [(0.0, 50.0), (1.0, 60.0)], "mem_used_mb": [(0.0, 100.0)],
                    "net_sent_kb_per_s": [(0.0, 0.0)], "net_recv_kb_per_s": [(0.0, 0.0)]}}
    single = [_record(devices=1), _record(devices=1, batch=32)]
    assert not network_drawn(single) and network_drawn([*single, _record(devices=2)])
    four = png_size(node_series(single[0], nodes).png)
    two = png_size(node_series(single[0], nodes, network=False).png)
    assert two[0] < 0.6 * four[0] and two[1] == four[1]  # two panels, not four
    page = render(title="t", environment={}, records=single, config_of=_config, figures=[],
                  cell_figures=[], network_drawn=False)
    section = page.split("<h2>Per-node time series</h2>")[1]
    assert "No network panels: no cell ran on two or more devices" in section
    assert "No network panels" not in _page([_record(devices=2)])


def test_cells_table_shows_the_cells_memory_and_the_nodes_apart():
    rows = _rows(_page([_record(rss_mb_peak=185.5, mem_used_mb_peak=5120.0)]), "<h2>Cells</h2>")
    shown = dict(zip(rows[0], rows[1]))
    assert (shown["mem peak MB"], shown["node mem peak MB"]) == ("185.5", "5,120.0")
