"""Park's Table 1 and Table 3 past its ten boards: the study report's subsection "Beyond
the ten boards", from ``edgeprof predict``'s step model fitted on the study run's cells
(docs/predict.md, docs/study.md).

- **Table 1** (LeNet-MLP, batch 64, sync): every device count the run measured, its step
  and its epoch of the study's 60,000 images (``grid.FULL_TRAIN``, whatever the run's
  scale) with the time ratio to one device beside Park's; then the model's rows at
  ``PREDICTED_DEVICES`` Pi 3Bs: step, its 90% interval, epoch, time ratio and speed-up
  (samples/s against one device).
- **Table 3** (ResNet layers x batch, per device): each configuration of Park's the run
  measured, at its largest device count (the study's "ten"): CPU %, memory MB, network
  KB/s received and sent beside Park's, and the KB a worker's node receives a step
  (measured: its received KB over its steps); then at ``PREDICTED_DEVICES`` the bytes
  the scheme moves per device (``Scheme.worker_bytes``, each way half), per step and per
  epoch (a sharded epoch's steps shrink as 1/N), and as KB/s where the configuration's
  step could be fitted. CPU and memory are carried from the measured cell as per-node
  constants: Park saw neither move with the number of devices (Figure 6: CPU within 3%
  from 1 to 10 devices, memory 280 to 250 MB), as a worker computes the same batch on
  the same model however many others there are; the step model predicts time and bytes.

Nothing is shown unless a Table 1 or Table 3 configuration can be fitted (an ok cell at
1 device and cells at two or more other counts): ``beyond`` returns None, no error.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from ...cluster.profiles import load_catalog
from ...errors import ConfigError
from ...predict.cells import Group, groups_of, measured_ms
from ...predict.model import (BYTES_PER_PARAMETER, StepModel, Target, epoch_s, fit_group,
                              predict, steps_in_epoch)
from ...predict.table import fitted_on, interval
from ...report.study_section import StudySubsection, StudyTable
from .grid import FULL_TRAIN
from .reference import load_reference

PREDICTED_DEVICES = (20, 50, 100)
OWN = Target(None, None)  # the fitted board (pi3b-park2019: a Pi 3B) on its own link
TABLE1_HEADINGS = ["configuration", "N", "row", "step ms", "90% interval", "epoch s",
                   "time / 1 device", "speed-up", "Park's epoch s", "Park's time / 1 device"]
TABLE3_HEADINGS = ["configuration", "N", "row", "CPU %", "memory MB", "received KB/s",
                   "sent KB/s", "received KB/step", "received MB/epoch", "Park's CPU %",
                   "Park's memory MB", "Park's received KB", "Park's sent KB"]
MEASURED, PREDICTED = "measured", "predicted"


def beyond(records: list[dict], reference: dict | None = None) -> StudySubsection | None:
    """The subsection of a study run's records; None when nothing of Table 1 or Table 3
    can be fitted."""
    try:
        groups, _cluster = groups_of(records)
    except ConfigError:  # a cell without a step time (an older edgeprof's)
        return None
    ref = reference or load_reference()
    catalog = load_catalog()
    fitted: dict[tuple, StepModel] = {}
    for group in groups:
        if _is_table1(group) or _table3_key(group) in ref["table3_resnet_resources"]["config"]:
            try:
                fitted[group.key] = _study_epoch(fit_group(group, catalog))
            except ConfigError:
                continue
    if not fitted:
        return None
    tables = [t for t in (_table1(groups, fitted, ref, catalog),
                          _table3(groups, fitted, ref, catalog)) if t is not None]
    return StudySubsection(
        title="Beyond the ten boards",
        intro=("Park's tables past the ten Pi 3Bs the study had, by edgeprof predict's "
               "step model (docs/predict.md) fitted on this run's cells on its own board "
               "and link: the measured rows, then the predicted ones, marked so. The "
               "interval is the fit's 90% prediction interval; it widens past the fitted "
               "device counts and leaves out any error of the model itself (checked "
               "against measured cells in docs/predict.md, never past ten boards)."),
        tables=tables)


def _study_epoch(model: StepModel) -> StepModel:
    """The model asked about the study's own epoch (60,000 MNIST, 50,000 CIFAR-10)."""
    samples = FULL_TRAIN.get(model.group.fields["model"], model.train_samples)
    return replace(model, train_samples=samples, epoch_from="the study's epoch")


def _is_table1(group: Group) -> bool:
    f = group.fields
    return (f["model"], f["batch"], f["sync"]) == ("lenet-mlp", 64, "sync")


def _table3_key(group: Group) -> str:
    f = group.fields
    return f"{f['layers']}x{f['batch']}" if (f["model"], f["sync"]) == ("resnet", "sync") \
        else ""


def _table1(groups: list[Group], fitted: dict[tuple, StepModel], ref: dict,
            catalog) -> StudyTable | None:
    park = ref["table1_lenet_mlp"]
    park_s = dict(zip(park["devices"], park["elapsed_s"]))
    rows, notes = [], []
    for group in groups:
        model = fitted.get(group.key)
        if model is None or not _is_table1(group):
            continue
        label = group.label
        one = predict(model, 1, OWN, catalog, None)
        for n, step in sorted(measured_ms(group).items()):
            epoch = epoch_s(model, n, step)
            rate = n * group.fields["batch"] / step * 1e3
            rows.append([label, str(n), MEASURED, f"{step:,.1f}", "", f"{epoch:,.1f}",
                         f"{epoch / one.epoch_s:.2f}", f"{rate / one.samples_per_s:.2f}",
                         _park(park_s, n, "{:,.0f}"),
                         _park(park_s, n, "{:.2f}", 1 / park_s[1])])
        for n in PREDICTED_DEVICES:
            p = predict(model, n, OWN, catalog, None)
            rows.append([label, str(n), PREDICTED, f"{p.step_ms:,.1f}", interval(p),
                         f"{p.epoch_s:,.1f}", f"{p.epoch_s / one.epoch_s:.2f}",
                         f"{p.samples_per_s / one.samples_per_s:.2f}", "", ""])
        notes.append(fitted_on(model))
    if not rows:
        return None
    return StudyTable(
        title="Table 1 extended: LeNet-MLP, batch 64, sync",
        intro=(f"An epoch of the study's {FULL_TRAIN['lenet-mlp']:,} MNIST images at each "
               "row's step, on the board (a dilated cell's times x its speedup). Time / 1 "
               "device is Park's Table 1 ratio (the epoch's time against one device's); "
               "speed-up is the samples all workers train per second against one device's. "
               "Park measured 1-10 devices only: the predicted rows have nothing of his "
               "beside them."),
        headings=TABLE1_HEADINGS, rows=rows, notes=notes)


def _park(values: dict, n: int, fmt: str, scale: float = 1.0) -> str:
    return fmt.format(values[n] * scale) if n in values else ""


def _table3(groups: list[Group], fitted: dict[tuple, StepModel], ref: dict,
            catalog) -> StudyTable | None:
    park = ref["table3_resnet_resources"]
    rows, notes = [], []
    for group in groups:
        key = _table3_key(group)
        if key not in park["config"]:
            continue
        cells = [c for c in [*group.base, *group.cells] if c.devices > 1
                 and c.record.get("straggler", "none") == "none"]
        if not cells:
            continue
        top = max(c.devices for c in cells)  # the study's "ten": the largest measured
        measured = [c.record for c in cells if c.devices == top]
        model = fitted.get(group.key)
        i = park["config"].index(key)
        label = group.label
        cpu, mem = _mean(measured, "cpu_percent_mean"), _mean(measured, "mem_used_mb_mean")
        recv_per_step = _mean([{"v": r["net_recv_kb"] / r["syncs_per_worker"]}
                               for r in measured if r.get("net_recv_kb")
                               and r.get("syncs_per_worker")], "v")
        epoch_steps = _steps(group, top)
        rows.append([label, str(top), MEASURED, _num(cpu, ".1f"), _num(mem, ",.1f"),
                     _num(_mean(measured, "net_recv_kb_per_s"), ",.1f"),
                     _num(_mean(measured, "net_sent_kb_per_s"), ",.1f"),
                     _num(recv_per_step, ",.0f"),
                     _num(recv_per_step * epoch_steps / 1e3 if recv_per_step else None,
                          ",.1f"),
                     f"{park['cpu_percent'][i]:g}", f"{park['memory_mb'][i]:g}",
                     f"{park['net_receive_kb'][i]:g}", f"{park['net_send_kb'][i]:g}"])
        model_bytes = _model_bytes(group)
        for n in PREDICTED_DEVICES:
            step_kb = group.scheme.worker_bytes(n, model_bytes) / 2 / 1e3  # each way
            rate = "n/a"
            if model is not None:
                rate = f"{step_kb / (predict(model, n, OWN, catalog, None).step_ms / 1e3):,.1f}"
            rows.append([label, str(n), f"{PREDICTED}; CPU, memory carried",
                         _num(cpu, ".1f"), _num(mem, ",.1f"), rate, rate, f"{step_kb:,.0f}",
                         f"{step_kb * _steps(group, n) / 1e3:,.1f}", "", "", "", ""])
        floor_kb = group.scheme.worker_bytes(top, model_bytes) / 2 / 1e3
        notes.append(
            f"{label}: at {top} devices a worker's node received "
            + (f"{recv_per_step / floor_kb:.2f} x the {floor_kb:,.0f} KB a step its "
               "scheme moves (headers, validation, the framework's messages); "
               if recv_per_step else "")
            + (fitted_on(model) if model is not None else
               "its step not fitted (it needs an ok cell at 1 device and cells at two or "
               "more other device counts: of Table 3's configurations, the part figure6 "
               "runs ResNet-32 x 32 so), so no KB/s beyond it"))
    if not rows:
        return None
    return StudyTable(
        title="Table 3 extended: ResNet, per device",
        intro=("Per layers x batch configuration of Park's Table 3: CPU and memory per "
               "worker node, network KB/s received and sent (Park's \"KB\" are Ganglia's "
               "bytes_in/bytes_out, most likely KB/s), KB a worker's node receives a step "
               "and MB an epoch of the study's 50,000 CIFAR-10 images (sharded: N workers "
               "share it). Predicted rows: the bytes the exchange's scheme moves per "
               "device (a server beside every worker: 2B(N-1)/N each way), per step, per "
               "epoch and at the predicted step's rate (sent as received). CPU and memory "
               "are carried from the measured cell as per-node constants: Park saw neither "
               "change with the number of devices (Figure 6: CPU within 3% from 1 to 10, "
               "memory 280 to 250 MB), and a worker computes the same batch on the same "
               "model however many others there are. Our CPU % is a share of the node's "
               "quota, Park's of a Pi 3B's four cores: compare them as ratios (the "
               "ratios above), not side by side."),
        headings=TABLE3_HEADINGS, rows=rows, notes=notes)


def _steps(group: Group, n: int) -> int:
    """A worker's steps in the study's epoch at ``n`` devices."""
    f = group.fields
    return steps_in_epoch(FULL_TRAIN[f["model"]], n, f["batch"], f["data_partition"])


def _model_bytes(group: Group) -> float:
    parameters = next((c.parameters for c in [*group.base, *group.cells] if c.parameters), 0)
    return parameters * BYTES_PER_PARAMETER


def _mean(records: list[dict], column: str) -> float | None:
    """The column's mean over ``records`` (a ``Cell``'s: in the board's time already)."""
    values = [r[column] for r in records if isinstance(r.get(column), (int, float))]
    return statistics.fmean(values) if values else None


def _num(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)
