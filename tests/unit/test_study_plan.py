"""The park2019 study as a grid, its estimate, and the report's ratios against the study."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiler.errors import ConfigError
from profiler.report.ratios import Ratio, summary
from profiler.study import STUDIES, StudySettings, estimate, plan
from profiler.study.park2019 import grid as park2019
from profiler.study.park2019.ratios import ACCURACY, TABLE, TEXT, reproduce

PARK = STUDIES["park2019"]


def test_every_part_is_in_the_grid_and_shared_cells_run_once():
    found = park2019.experiments()
    samples = park2019.train_samples(found, 0.02)
    cells = park2019.cells(found, samples, {"lenet-mlp": "mnist", "lenet-example": "mnist",
                                            "resnet": "synthetic"})
    assert len({c.cell_id for c in cells}) == len(cells)
    labels = {(c.model, c.layers, c.batch, c.devices, c.sync, c.epochs) for c in cells}
    # Tables 1-2: LeNet batch 64 sync on 1..10 devices (the CNN: MXNet's example LeNet).
    for model in ("lenet-mlp", "lenet-example"):
        assert {d for m, _, b, d, s, _ in labels if m == model and s == "sync"} == \
            set(range(1, 11))
    # Figure 3: async beside sync on ten devices; Figure 3b: async on five.
    assert ("lenet-example", None, 64, 10, "async", 1) in labels
    assert ("lenet-example", None, 64, 5, "async", 1) in labels
    assert ("resnet", 32, 32, 10, "async", 1) in labels
    # Figure 5: 3 depths x 3 batches on 1 and 10 devices (110 x 128 included: its OOM
    # is a finding); Table 4: five epochs on ten devices.
    for layers in (32, 80, 110):
        for batch in (32, 64, 128):
            assert {("resnet", layers, batch, d, "sync", 1) for d in (1, 10)} <= labels
    assert ("resnet", 32, 32, 10, "sync", 5) in labels
    # Figures 6-7: 32 x 32 and 110 x 64 on every device count.
    assert {d for m, l_, b, d, s, e in labels if (l_, b, e) == (110, 64, 1)} == set(range(1, 11))
    # One device trains alike in both modes: no async cell on one device.
    assert not any(d == 1 and s == "async" for *_, d, s, _e in labels)


def test_each_part_is_partitioned_placed_and_stepped_as_the_studys_scripts():
    scripts, sharded = park2019.METHOD["scripts"], park2019.METHOD["sharded"]
    data = {"lenet-mlp": "mnist", "lenet-example": "mnist", "lenet-cnn": "mnist",
            "resnet": "synthetic"}
    for part in park2019.PARTS:
        found = park2019.experiments((part,), (1, 2, 10), scripts)
        for cell in park2019.cells(found, park2019.train_samples(found, 0.01), data):
            # train_mnist.py: every worker the whole set, lr 0.05; train_cifar10.py: a
            # 1/N part each, lr 0.05 (ResNet's default); tools/launch.py: a server per
            # worker.
            want = ("shard", 0.05) if cell.model == "resnet" else ("replicate", 0.05)
            assert (cell.data_partition, cell.lr) == want, (part, cell.label)
            assert cell.placement == "colocated" and cell.model != "lenet-cnn"
        found = park2019.experiments((part,), (1, 2, 10), sharded)
        for cell in park2019.cells(found, park2019.train_samples(found, 0.01, sharded),
                                   data, how=sharded):
            assert (cell.data_partition, cell.placement) == ("shard", "master")
            assert cell.model != "lenet-example"
            assert cell.lr == (0.05 if cell.model == "resnet" else 0.02)
    # Replicated, ten devices train as many samples a worker as one: the floor is one
    # worker's MIN_STEPS (600 samples: 9 steps); sharded, ten workers need MIN_STEPS each.
    for how, ten in ((scripts, 600), (sharded, 10 * 64 * park2019.MIN_STEPS)):
        found = park2019.experiments(("table1",), (1, 10), how)
        samples = park2019.train_samples(found, 0.01, how)
        assert samples[("lenet-mlp", None, 64, 10)] == ten
    with pytest.raises(ConfigError, match="--method usual: use scripts or sharded"):
        park2019.method("usual")


def test_scale_keeps_a_few_steps_per_worker():
    found = park2019.experiments(("table1", "figure5"))
    samples = park2019.train_samples(found, 0.05)
    assert samples[("lenet-mlp", None, 64, 1)] == 3000  # 5% of 60,000
    assert samples[("lenet-mlp", None, 64, 10)] == 3000  # replicated: 47 steps a worker
    assert samples[("resnet", 32, 32, 10)] == 2500  # 5% of 50,000
    assert samples[("resnet", 110, 128, 1)] == 2500
    # Floored to MIN_STEPS a worker, but at most what the synthetic set holds (8,960 >
    # 6,000: such a cell trains 4 steps and its ratios are "too few steps").
    assert samples[("resnet", 110, 128, 10)] == min(10 * 128 * park2019.MIN_STEPS, 6000)
    with pytest.raises(ConfigError, match="--scale 0"):
        park2019.train_samples(found, 0)
    with pytest.raises(ConfigError, match="--scale 2"):
        park2019.train_samples(found, 2)


def test_fewer_devices_keep_the_one_device_baseline():
    found = park2019.experiments(("table1",), devices=(4, 8))
    assert found[0].devices == (1, 4, 8)
    with pytest.raises(ConfigError, match="unknown part figure9"):
        park2019.experiments(("figure9",))


def test_datasets_prefer_the_studys_own_then_real_digits_that_hold_the_cells():
    samples = {("lenet-mlp", None, 64, 1): 3000, ("resnet", 32, 32, 1): 2500}
    none = {"mnist": False, "mnist-5k": True, "fashion-mnist": True, "cifar10": False}
    assert park2019.choose_datasets({"lenet-mlp", "resnet"}, samples, none) == \
        {"lenet-mlp": "mnist-5k", "resnet": "synthetic"}
    fetched = {**none, "mnist": True, "cifar10": True}
    assert park2019.choose_datasets({"lenet-mlp", "resnet"}, samples, fetched) == \
        {"lenet-mlp": "mnist", "resnet": "cifar10"}
    # 5,000 digits hold 4,000 for training: more goes to Fashion-MNIST.
    big = {("lenet-mlp", None, 64, 10): 12000}
    assert park2019.choose_datasets({"lenet-mlp"}, big, none) == {"lenet-mlp": "fashion-mnist"}
    with pytest.raises(ConfigError, match="resnet needs 25,000 training samples"):
        park2019.choose_datasets({"resnet"}, {("resnet", 32, 32, 1): 25000}, none)


def test_plan_describes_the_grid_and_its_estimate_grows_with_scale():
    small = plan(PARK, StudySettings(scale=0.02, options={"parts": ("table1",)},
                                     cluster="local"))
    large = plan(PARK, StudySettings(scale=0.04, options={"parts": ("table1",)},
                                     cluster="local"))
    assert len(small.sweep.cells) == 10 and small.sweep.extra["scale"] == 0.02
    assert large.estimate_s > small.estimate_s > 0
    text = small.describe()
    assert "10 cells on the local cluster" in text and "estimated time" in text
    assert estimate.shown(40) == "40 s" and estimate.shown(3 * 3600 + 300) == "3 h 05 min"


def _cell(model, devices, epoch_s, samples=4480, *, layers=None, batch=64, sync="sync",
          acc=None, dataset="mnist", status="ok", epochs=1, **more):
    accs = acc if isinstance(acc, list) else [acc if acc is not None else 0.9]
    return {"model": model, "layers": layers, "batch": batch, "devices": devices,
            "sync": sync, "engine": "mxnet", "epochs": epochs, "status": status,
            "epoch_s": epoch_s if isinstance(epoch_s, list) else [epoch_s],
            "train_samples": samples, "val_accuracy_per_epoch": accs, "dataset": dataset,
            "cell_id": f"{model}{layers}-{batch}-{devices}-{sync}-{epochs}", **more}


def test_ratios_to_the_baseline_are_judged_against_the_studys_own():
    # Table 1: 105 s on one device, 286 s on four: ratio 2.72.
    records = [_cell("lenet-mlp", 1, 10.0, acc=0.90), _cell("lenet-mlp", 4, 27.0, acc=0.91),
               _cell("lenet-mlp", 2, 40.0, acc=0.5)]
    rows = {(r.source, r.measure, r.config): r for r in reproduce(records)}
    four = rows[("Table 1", "time", "lenet-mlp b64 sync, 4 / 1 devices")]
    assert four.study == pytest.approx(286 / 105) and four.ours == pytest.approx(2.7)
    assert four.band == TABLE and four.within is True
    two = rows[("Table 1", "time", "lenet-mlp b64 sync, 2 / 1 devices")]
    assert two.within is False  # 4.0 against the study's 1.6
    accuracy = rows[("Table 1", "accuracy", "lenet-mlp b64 sync, 2 / 1 devices")]
    assert accuracy.band == ACCURACY and accuracy.within is False  # 0.56 against 1.01
    # A device count without a cell of ours is listed, not judged.
    three = rows[("Table 1", "time", "lenet-mlp b64 sync, 3 / 1 devices")]
    assert three.ours is None and three.within is None
    counts = summary(list(rows.values()))
    assert counts["within"] >= 2 and counts["missing"] >= 1


def test_accuracy_on_other_data_is_shown_but_not_judged():
    records = [_cell("lenet-cnn", 1, 10.0, dataset="mnist-5k"),
               _cell("lenet-cnn", 10, 24.0, dataset="mnist-5k")]
    rows = [r for r in reproduce(records) if r.source == "Table 2" and r.measure == "accuracy"]
    ten = next(r for r in rows if "10 / 1" in r.config)
    assert ten.comparable is False and ten.within is None and "mnist-5k" in ten.note


def test_figure5_out_of_memory_and_per_sample_times_across_batches():
    records = [
        _cell("resnet", 1, 100.0, 640, layers=32, batch=32),
        _cell("resnet", 1, 400.0, 2560, layers=32, batch=128),  # same time per sample
        _cell("resnet", 1, None, 2560, layers=110, batch=128, status="oom"),
        _cell("resnet", 10, None, 2560, layers=110, batch=128, status="oom"),
    ]
    rows = {(r.measure, r.config): r for r in reproduce(records)}
    batch = rows[("time by batch, 1 device", "ResNet-32, batch 128 / 32")]
    assert batch.ours == pytest.approx(1.0) and batch.band == TEXT and batch.within
    oom = rows[("out of memory", "ResNet-110 x 128")]
    assert oom.within is True
    records[-1]["status"] = "ok"
    oom = next(r for r in reproduce(records) if r.measure == "out of memory")
    assert oom.within is False


def test_table4_compares_cumulative_epoch_times():
    # 2,240 samples: seven steps a worker, the study's minimum (fewer: "too few steps").
    r = _cell("resnet", 10, [10.0, 10.0, 10.5, 9.5, 10.0], 2240, layers=32, batch=32, epochs=5,
              acc=[0.3, 0.4, 0.45, 0.5, 0.5], dataset="synthetic")
    rows = [x for x in reproduce([r]) if x.source == "Table 4"]
    five = next(x for x in rows if x.measure == "cumulative time" and "epoch 5" in x.config)
    assert five.ours == pytest.approx(5.0) and five.within
    assert all(x.comparable is False for x in rows if x.measure == "accuracy")


def test_table4_reads_epoch_1_at_its_steady_rate():
    # Three steps a worker: epoch 1 = a 16 s first step (one-off set-up) + two steps of
    # 2 s; epochs 2-5 take 6 s (three steps). A full epoch hides the set-up: so must we.
    per_sample = 4.0 / (2 * 32 * 10)
    r = _cell("resnet", 10, [20.0, 6.0, 6.0, 6.0, 6.0], 960, layers=32, batch=32, epochs=5,
              acc=[0.3, 0.4, 0.45, 0.5, 0.5], dataset="synthetic",
              steady_s_per_sample=per_sample)
    rows = {x.config: x for x in reproduce([r]) if x.measure == "cumulative time"}
    assert rows["ResNet-32 x 32, 10 devices, epoch 2 / 1"].ours == pytest.approx(2.0)
    assert rows["ResNet-32 x 32, 10 devices, epoch 5 / 1"].ours == pytest.approx(5.0)


def test_a_ratio_band_is_symmetric():
    assert Ratio("x", "m", "c", 2.0, 2.4, 1.25).within
    assert Ratio("x", "m", "c", 2.0, 1.61, 1.25).within
    assert not Ratio("x", "m", "c", 2.0, 1.59, 1.25).within


def test_dilated_cells_are_read_back_in_the_boards_time():
    # One device undilated, four devices dilated x 10: 2.7 board-seconds a sample
    # against 1, the study's 286 / 105.
    records = [_cell("lenet-mlp", 1, 10.0, speedup=1.0),
               _cell("lenet-mlp", 4, 2.7, speedup=10.0)]
    four = next(r for r in reproduce(records)
                if r.measure == "time" and r.config.startswith("lenet-mlp b64 sync, 4 / 1"))
    assert four.ours == pytest.approx(2.7) and four.within


def test_dilation_takes_the_largest_calibrated_speedup_that_fits():
    from profiler.cluster.profiles import dilation
    eleven = {1.0: [0.05] * 11, 3.0: [0.13] * 11, 10.0: [0.45] * 11}
    assert dilation(eleven, 2.0, 100) == 3  # 11 x 0.45 cores would not fit in 1.5
    one = {1.0: [0.03], 10.0: [0.3], 30.0: [0.95], 100.0: [2.9]}
    assert dilation(one, 2.0, 100) == 30  # one node: at most one core
    assert dilation(one, 2.0, 20) == 10  # the cap
    assert dilation({1.0: [0.05], 3.0: [None]}, 2.0, 100) == 1  # not calibrated for 3
    assert dilation(one, 2.0, 1) == 1


def test_the_study_plans_on_a_mix_paced_by_its_slowest_node():
    """``--profile mix-2pi4-8pi3b-park2019``: Pi 4 class nodes beside the calibrated Pi 3Bs.
    Its cells run as on ``pi3b-park2019`` (the mix is not a grid setting), the estimate
    follows the slowest node the cell uses (sync waits for it), and the host check is
    said to skip a mix."""
    from profiler.cluster.profiles import load_catalog

    catalog = load_catalog()
    pi4, pi3b = (catalog.profiles[n] for n in ("pi4-park2019", "pi3b-park2019"))
    assert catalog.mixes["mix-2pi4-8pi3b-park2019"] == ("pi4-park2019",) * 2 + \
        ("pi3b-park2019",) * 8
    for model in ("lenet-mlp", "lenet-cnn", "lenet-example", "resnet"):
        assert pi4.cpu_cores_for(model) == pytest.approx(pi3b.cpu_cores_for(model) * 7 / 3,
                                                         abs=1e-4)
    settings = dict(scale=0.01, options={"parts": ("table1",), "devices": (1, 2, 4)})
    mix = plan(PARK, StudySettings(cluster_options={"profile": "mix-2pi4-8pi3b-park2019"},
                                   **settings))
    uniform = plan(PARK, StudySettings(**settings))
    assert mix.sweep.cluster.identity()["profile"] == "mix-2pi4-8pi3b-park2019"
    # The same grid, but for the samples study/window.py gives short cells: the Pi 4s
    # train faster, so their cells take more to fill the same window.
    assert [replace(c, max_samples=0).cell_id for c in mix.sweep.cells] == \
        [replace(c, max_samples=0).cell_id for c in uniform.sweep.cells]
    assert all(m.max_samples >= u.max_samples
               for m, u in zip(mix.sweep.cells, uniform.sweep.cells))
    # One and two devices (colocated: nodes 0-1) run on Pi 4s, four reach the Pi 3Bs.
    rate = {c.devices: estimate.node_rate(PARK, c, "profile", "mix-2pi4-8pi3b-park2019",
                                         catalog)
            for c in mix.sweep.cells}
    assert rate[2] == pytest.approx(rate[1]) and rate[4] == pytest.approx(rate[1] * 3 / 7,
                                                                         rel=1e-3)
    assert any("is a mix of profiles: not checked" in note for note in mix.notes)
