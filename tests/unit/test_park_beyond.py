"""The park2019 study report's "Beyond the ten boards" from hand-made records of known
step terms: Table 1's predicted rows at 20, 50 and 100 Pi 3Bs where the terms put them
(its measured rows beside Park's), Table 3's bytes per device from the scheme with CPU
and memory carried, and no subsection (no error) when nothing can be fitted."""

from __future__ import annotations

import math

import pytest

from profiler.study.park2019 import Park2019
from profiler.study.park2019.beyond import PREDICTED_DEVICES, beyond
from profiler.study.park2019.reference import load_reference

# MXNet sync, a server beside every worker (the study's scripts), on pi3b-park2019's
# 100 Mbit links: base + peer x (N-1) + the wire's 2B(N-1)/N (wire at its floor, 1).
BASE_MS, PEER_MS, LINK_MBIT = 110.0, 40.0, 100.0
MLP_PARAMETERS, RESNET_PARAMETERS = 100_000, 466_906


def _wire_ms(n: int, parameters: int) -> float:
    return 2 * parameters * 4 * (n - 1) / n * 8 / (LINK_MBIT * 1e6) * 1e3 if n > 1 else 0.0


def _truth(n: int, parameters: int = MLP_PARAMETERS, base_ms: float = BASE_MS) -> float:
    return base_ms + PEER_MS * (n - 1) + _wire_ms(n, parameters)


def _record(n: int, repeat: int, model="lenet-mlp", layers=None, batch=64,
            parameters=MLP_PARAMETERS, base_ms=BASE_MS, **more) -> dict:
    return {"status": "ok", "cell_id": f"{model}{layers}x{batch}-{n}-{repeat}",
            "model": model, "layers": layers, "batch": batch, "engine": "mxnet",
            "sync": "sync", "placement": "colocated",
            "data_partition": "shard" if model == "resnet" else "replicate",
            "dataset": "mnist", "devices": n, "parameters": parameters,
            # +-1 ms around the truth: residuals, so an interval.
            "steady_step_ms": _truth(n, parameters, base_ms) + (1.0 if repeat else -1.0),
            "train_samples": 1200, "cluster": "emulated", "straggler": "none",
            "node_profiles": {f"n{i}": "pi3b-park2019" for i in range(n)},
            "worker_nodes": {str(i): f"n{i}" for i in range(n)}, **more}


def _table1_records(devices=(1, 2, 3, 4)) -> list[dict]:
    return [_record(n, r) for n in devices for r in (0, 1)]


def _resnet(n: int, repeat: int, layers: int, batch: int) -> dict:
    # A ResNet cell measured as a node sees it: CPU, memory and the KB it received.
    return _record(n, repeat, "resnet", layers, batch, RESNET_PARAMETERS, base_ms=3000.0,
                   cpu_percent_mean=80.0 + repeat, mem_used_mb_mean=280.0,
                   net_recv_kb_per_s=700.0, net_sent_kb_per_s=690.0,
                   net_recv_kb=3500.0 * 7, syncs_per_worker=7)


def _table(sub, title_start: str):
    table = next(t for t in sub.tables if t.title.startswith(title_start))
    col = {h: i for i, h in enumerate(table.headings)}
    return table, col


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_table1_is_extended_to_20_50_100_boards_where_the_terms_put_them():
    sub = beyond(_table1_records())
    assert sub is not None and sub.title == "Beyond the ten boards"
    table, col = _table(sub, "Table 1 extended")
    rows = {(int(r[col["N"]]), r[col["row"]]): r for r in table.rows}
    assert sorted(rows) == [(1, "measured"), (2, "measured"), (3, "measured"),
                            (4, "measured"), *((n, "predicted") for n in PREDICTED_DEVICES)]
    park = load_reference()["table1_lenet_mlp"]
    steps_in_epoch = math.ceil(60000 / 64)  # the study's epoch, every worker all of it
    for n in PREDICTED_DEVICES:
        row = rows[(n, "predicted")]
        step = _number(row[col["step ms"]])
        # The model recovers the terms it was made of, and asks about Park's epoch.
        assert step == pytest.approx(_truth(n), rel=0.03)
        assert _number(row[col["epoch s"]]) == pytest.approx(steps_in_epoch * step / 1e3,
                                                             rel=0.001)
        low, high = (_number(v) for v in row[col["90% interval"]].split("-"))
        assert low < step < high
        assert _number(row[col["speed-up"]]) == pytest.approx(n * BASE_MS / step, rel=0.02)
        assert _number(row[col["time / 1 device"]]) == pytest.approx(step / BASE_MS,
                                                                      rel=0.02)
        assert row[col["Park's epoch s"]] == ""  # Park measured 1-10 only
    # Measured rows: ours beside Park's numbers for the same device count.
    four = rows[(4, "measured")]
    assert _number(four[col["step ms"]]) == pytest.approx(_truth(4))
    assert four[col["Park's epoch s"]] == f"{park['elapsed_s'][3]:,}"
    assert _number(four[col["Park's time / 1 device"]]) == pytest.approx(
        park["elapsed_s"][3] / park["elapsed_s"][0], abs=0.01)
    assert table.notes and "peer_ms 40" in table.notes[0]


def test_table3_gives_the_schemes_bytes_per_device_and_carries_cpu_and_memory():
    records = [*_table1_records(),
               # ResNet-32 x 32 at 1-3 devices (the study's figure6): its step fits.
               *(_resnet(n, r, 32, 32) for n in (1, 2, 3) for r in (0, 1)),
               # ResNet-80 x 32 at 1 and 3 only (figure5): bytes, but no fitted step.
               *(_resnet(n, 0, 80, 32) for n in (1, 3))]
    table, col = _table(beyond(records), "Table 3 extended")
    rows = {(r[col["configuration"]], int(r[col["N"]])): r for r in table.rows}
    assert sorted(rows) == sorted((f"resnet-{layers} b32 mxnet sync colocated", n)
                                  for layers in (32, 80) for n in (3, *PREDICTED_DEVICES))
    park = load_reference()["table3_resnet_resources"]
    measured = rows[("resnet-32 b32 mxnet sync colocated", 3)]
    assert measured[col["row"]] == "measured"
    assert _number(measured[col["CPU %"]]) == pytest.approx(80.5)  # both repeats' mean
    assert _number(measured[col["received KB/step"]]) == pytest.approx(3500)
    assert measured[col["Park's CPU %"]] == f"{park['cpu_percent'][0]:g}"
    for n in PREDICTED_DEVICES:
        row = rows[("resnet-32 b32 mxnet sync colocated", n)]
        assert "predicted" in row[col["row"]] and "carried" in row[col["row"]]
        assert row[col["CPU %"]] == measured[col["CPU %"]]
        assert row[col["memory MB"]] == measured[col["memory MB"]]
        # A server beside every worker: 2B(N-1)/N each way a step, B = parameters x 4.
        kb = 2 * RESNET_PARAMETERS * 4 * (n - 1) / n / 1e3
        assert _number(row[col["received KB/step"]]) == pytest.approx(kb, abs=1)
        steps = math.ceil(50000 / (n * 32))  # sharded: N workers share the epoch
        assert _number(row[col["received MB/epoch"]]) == pytest.approx(kb * steps / 1e3,
                                                                       rel=0.01)
        rate = _number(row[col["received KB/s"]])
        assert rate == pytest.approx(kb / (_truth(n, RESNET_PARAMETERS, 3000.0) / 1e3),
                                     rel=0.05)
        unfitted = rows[("resnet-80 b32 mxnet sync colocated", n)]
        assert unfitted[col["received KB/s"]] == "n/a"
        assert _number(unfitted[col["received KB/step"]]) == pytest.approx(kb, abs=1)
    assert any("resnet-80" in note and "not fitted" in note for note in table.notes)


def test_nothing_to_fit_gives_no_subsection_and_no_error():
    assert beyond([]) is None
    assert beyond(_table1_records(devices=(1, 10))) is None  # one count above 1
    assert beyond(_table1_records(devices=(2, 3, 4))) is None  # no one-device base
    assert beyond([{k: v for k, v in r.items() if k != "steady_step_ms"}
                   for r in _table1_records()]) is None  # an older edgeprof's cells
    # A fittable configuration that is neither Table 1's nor Table 3's: none either.
    assert beyond([{**r, "batch": 32} for r in _table1_records()]) is None
    # Through the study's section: the subsection only when it has something.
    assert Park2019().section(_table1_records(devices=(1, 10))).subsections == []
    shown = Park2019().section(_table1_records())
    assert [s.title for s in shown.subsections] == ["Beyond the ten boards"]


def test_predict_asks_a_study_run_about_the_studys_epoch_unless_told():
    from profiler.cluster.profiles import load_catalog
    from profiler.predict.cells import groups_of
    from profiler.predict.model import fit_group
    from profiler.predict.run import with_epochs

    groups, _ = groups_of(_table1_records())
    model = fit_group(groups[0], load_catalog())
    assert model.train_samples == 1200  # the run's cells: the study cut to its scale
    study = {"extra": {"study": "park2019", "scale": 0.02,
                       "epoch_samples": {"lenet-mlp": 60000}}}
    (taken,) = with_epochs([model], None, study)
    assert taken.train_samples == 60000 and "park2019" in taken.epoch_from
    (told,) = with_epochs([model], 6000, study)  # --samples wins
    assert told.train_samples == 6000 and told.epoch_from == "--samples"
    # A study run recorded before the epoch was: its own set, and the table says so.
    (old,) = with_epochs([model], None, {"extra": {"study": "park2019", "scale": 0.02}})
    assert old.train_samples == 1200 and "--samples" in old.epoch_from
    (plain,) = with_epochs([model], None, {"extra": {}})  # a sweep: its own set
    assert plain == model
    for bad in (0, -5, True, "60000", None):  # a folder from elsewhere: its own set
        (kept,) = with_epochs([model], None, {"extra": {"study": "park2019",
                                                        "epoch_samples": {"lenet-mlp": bad}}})
        assert kept.train_samples == 1200
