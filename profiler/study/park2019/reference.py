"""The study's published numbers, and the cells of a sweep that match its configurations.

The report sets them side by side ("Beside the study": ``report.study_section.Match``).

Park, Lee & Kim (2019) ran ten Raspberry Pi 3B with MXNet 0.9.5 on MNIST and CIFAR-10
(``park2019.yaml``, copied from the project's shared reference). A cell matches a row
when its model, depth, batch, sync mode and device count are the study's; every match
is shown as other hardware and software, with our cluster and dataset named, since
absolute times differ by the boards' speed (``edgeprof cluster calibrate``) and
accuracies are comparable only on the study's own data (``mnist``, ``cifar10``).

Ours, per match: time is the training time of the first epoch (``epoch_s[0]``; the
study's tables are one epoch, Table 4 accumulates epochs), times the cell's time
dilation (``speedup``) on the emulated cluster; accuracy is after that epoch;
CPU, memory and network are the cell's means over its worker nodes, network as KB/s
(what Ganglia's ``bytes_in``/``bytes_out`` are).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ...report.study_section import Match
from ...report.sweep_data import config_label as _config
from ...status import Status
from ...sweep import board_time

REFERENCE = Path(__file__).with_name("park2019.yaml")
STUDY_DATA = {"lenet-mlp": "mnist", "lenet-cnn": "mnist", "lenet-example": "mnist",
              "resnet": "cifar10"}
HARDWARE = "10 x Raspberry Pi 3B, MXNet 0.9.5, Ganglia every 30 s"


def load_reference(path: Path = REFERENCE) -> dict:
    return yaml.safe_load(path.read_text())


def study_cnn(records: list[dict]) -> str:
    """The model that stands for the study's "LeNet (CNN)": MXNet's example LeNet when
    the sweep has it (``edgeprof study park2019``'s default method), else LeNet-5."""
    return "lenet-example" if any(r.get("model") == "lenet-example" for r in records) \
        else "lenet-cnn"


def matches(records: list[dict], reference: dict | None = None) -> list[Match]:
    """Every (cell, measure) of ``records`` that the study reports, in table order."""
    ref = reference or load_reference()
    found: list[Match] = []
    for table, model in (("table1_lenet_mlp", "lenet-mlp"),
                         ("table2_lenet_cnn", study_cnn(records))):
        rows = ref[table]
        for r in _finished(records):
            if (r["model"], r["batch"], r["sync"]) != (model, 64, "sync"):
                continue
            if r["devices"] not in rows["devices"]:
                continue
            i = rows["devices"].index(r["devices"])
            source = "Table 1" if model == "lenet-mlp" else "Table 2"
            found += _time_and_accuracy(source, r, rows["elapsed_s"][i],
                                        rows["val_accuracy"][i], epoch=1)
    rows = ref["table3_resnet_resources"]
    for r in _finished(records):
        key = f"{r.get('layers')}x{r['batch']}"
        if r["model"] != "resnet" or key not in rows["config"]:
            continue
        i = rows["config"].index(key)
        for measure, ours, study in (
                ("CPU %", r.get("cpu_percent_mean"), rows["cpu_percent"][i]),
                ("memory MB", r.get("mem_used_mb_mean"), rows["memory_mb"][i]),
                ("received KB/s", board_time.value(r, "net_recv_kb_per_s"),
                 rows["net_receive_kb"][i]),
                ("sent KB/s", board_time.value(r, "net_sent_kb_per_s"),
                 rows["net_send_kb"][i])):
            found.append(Match("Table 3", r["cell_id"], _config(r), measure, ours, study,
                               True, "study: per-device means"))
    rows = ref["table4_resnet32_epochs"]
    for r in _finished(records):
        if (r["model"], r.get("layers"), r["batch"], r["devices"], r["sync"]) != \
                ("resnet", 32, 32, 10, "sync"):
            continue
        for i, epoch in enumerate(rows["epochs"]):
            found += _time_and_accuracy("Table 4", r, rows["elapsed_s"][i],
                                        rows["val_accuracy"][i], epoch=epoch)
    return found


def _time_and_accuracy(source: str, r: dict, study_s: float, study_acc: float,
                       epoch: int) -> list[Match]:
    epochs_s = r.get("epoch_s") or []
    accuracies = r.get("val_accuracy_per_epoch") or []
    if len(epochs_s) < epoch:
        return []
    ours_s = sum(epochs_s[:epoch]) * board_time.speedup(r)  # the board's time
    ours_acc = accuracies[epoch - 1] if len(accuracies) >= epoch else None
    same_data = r.get("dataset") == STUDY_DATA.get(_model(r))
    label = f"{_config(r)}" + (f", epoch {epoch}" if source == "Table 4" else "")
    return [Match(source, r["cell_id"], label, "training time s", ours_s, study_s, True,
                  "other hardware"),
            Match(source, r["cell_id"], label, "val accuracy", ours_acc, study_acc, same_data,
                  "" if same_data else f"ours on {r.get('dataset')}, "
                                        f"study on {STUDY_DATA.get(_model(r))}")]


def _finished(records: list[dict]) -> list[dict]:
    # The study's boards were alike: a cell with a straggler is not its cell.
    return [r for r in records if r.get("status") == Status.OK
            and r.get("straggler", "none") == "none"]


def _model(r: dict) -> str:
    return r["model"]
