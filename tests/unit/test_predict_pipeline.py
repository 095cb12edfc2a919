"""The pipeline in ``edgeprof predict``'s step model, on synthetic ``torch-pipe`` records
made from known layer costs, boundary bytes, a cost per step and a link: the fit
recovers them, the bubble's (M + S - 1) slots are priced at S and M, another board scales
the stages' compute and another link the boundaries' wire; and torch's parameter server
(sync, async; master, colocated) fits and predicts as the other parameter servers do.
Labels tell apart configurations that differ only in placement or a pipeline's settings."""

from __future__ import annotations

import itertools

import pytest

from profiler.cluster.profiles import load_catalog
from profiler.errors import ConfigError
from profiler.predict.boards import compute_scale, node_profiles
from profiler.predict.cells import GROUP_FIELDS, groups_of, scheme_of, to_cell
from profiler.predict.model import Target, fit_group, predict
from profiler.predict.pipeline import shape_of, stages_at
from workloads import pipeline_split

CATALOG = load_catalog()
BOARD = "pi3b-park2019"
LINK_MBIT = CATALOG.profiles[BOARD].link_mbit
# Twelve layers (LeNet-CNN's count): ms per micro-batch on the board, output bytes.
LAYER_MS = (3.0, 0.4, 0.6, 5.0, 0.3, 0.5, 0.2, 2.0, 0.2, 1.0, 0.1, 0.3)
OUT_BYTES = (37_632, 37_632, 9_408, 12_800, 12_800, 3_200, 3_200, 1_920, 1_920, 1_344, 1_344,
             160)
PARAMS = (156, 0, 0, 2_416, 0, 0, 0, 48_120, 0, 10_164, 0, 850)
PROFILE_SCALE = 1.25  # a step's stages compute 1.25 x what the profile timed alone
ROUND_MS, WIRE = 40.0, 1.5  # the truth the fit must find
M, BATCH = 4, 32


def _cut(stages: int) -> tuple[int, ...]:
    """The engine's balanced cut on the board's (true) layer costs."""
    true = pipeline_split.LayerCosts(tuple(t * PROFILE_SCALE / 1e3 for t in LAYER_MS),
                                     OUT_BYTES, PARAMS)
    return pipeline_split.choose("balanced", stages, [true] * stages, LINK_MBIT * 1e6 / 8)


def _true_step_ms(counts: tuple[int, ...], link_mbit: float = LINK_MBIT,
                  scale: float = 1.0) -> float:
    """The step the truth makes: the slowest stage's M micro-batches and the others' one
    each (fill and drain), compute and boundary, plus the step's fixed cost."""
    bounds = list(itertools.accumulate(counts, initial=0))
    per_micro = []
    for s, (a, b) in enumerate(zip(bounds, bounds[1:])):
        compute = scale * PROFILE_SCALE * sum(LAYER_MS[a:b])
        wire = 2 * OUT_BYTES[b - 1] * 8 / (link_mbit * 1e6) * 1e3 if s < len(counts) - 1 else 0
        per_micro.append((compute, wire))
    slowest = max(range(len(counts)), key=lambda s: sum(per_micro[s]))  # ideal wire
    times = [c + WIRE * w for c, w in per_micro]
    return (M - 1) * times[slowest] + sum(times) + ROUND_MS * scale


def _record(stages: int, **kw) -> dict:
    counts = _cut(stages)
    bounds = list(itertools.accumulate(counts, initial=0))
    step_ms = _true_step_ms(counts)
    return {"status": "ok", "engine": "torch-pipe", "model": "lenet-cnn", "layers": None,
            "batch": BATCH, "sync": "sync", "placement": "master", "data_partition": "shard",
            "dataset": "mnist", "devices": stages, "microbatches": M, "schedule": "gpipe",
            "replicas": 1, "split": "balanced", "task": "train", "weights": None,
            "cell_id": f"pipe{stages}", "train_samples": 640, "parameters": 61_706,
            "speedup": 1.0, "robust_s_per_sample": step_ms / BATCH / 1e3,
            "worker_nodes": {str(i): f"n{i}" for i in range(stages)},
            "node_profiles": {f"n{i}": BOARD for i in range(stages)},
            "pipe_split": ",".join(map(str, counts)),
            "stage_compute_ms": [M * PROFILE_SCALE * sum(LAYER_MS[a:b])
                                 for a, b in zip(bounds, bounds[1:])],
            "pipe_layer_ms": list(LAYER_MS), "pipe_layer_out_bytes": list(OUT_BYTES),
            "pipe_layer_params": list(PARAMS), **kw}


def _model(stage_counts=(2, 3, 4), **kw):
    groups, _ = groups_of([_record(s, **kw) for s in stage_counts])
    assert len(groups) == 1
    return fit_group(groups[0], CATALOG)


def test_a_pipelines_cell_is_its_batch_a_step():
    # Its stages pass the same batches: a step is a batch, not N shards of one.
    record = _record(3)
    assert to_cell(record).step_ms == pytest.approx(_true_step_ms(_cut(3)))
    assert scheme_of(record).pipeline and scheme_of(record).sync


def test_the_fit_recovers_the_layers_the_step_cost_and_the_wire():
    model = _model()
    assert model.pipe.profile_scale == pytest.approx(PROFILE_SCALE)
    assert model.pipe.layer_ms == pytest.approx([t * PROFILE_SCALE for t in LAYER_MS])
    assert model.fit.term("round_ms") == pytest.approx(ROUND_MS, rel=1e-6)
    assert model.fit.term("wire") == pytest.approx(WIRE, rel=1e-6)
    assert model.fit.dof == 1 and model.devices_fitted == (2, 3, 4)
    # Asked about a stage count not run, it cuts as the engine would and prices it.
    for stages in (5, 6):
        p = predict(model, stages, Target(None, None), CATALOG, None)
        assert p.step_ms == pytest.approx(_true_step_ms(_cut(stages)), rel=1e-6)
        assert p.samples_per_s == pytest.approx(BATCH / p.step_ms * 1e3)
        assert p.low_ms < p.step_ms < p.high_ms


def test_the_bubble_is_gpipes_on_equal_stages_and_the_others_fill_and_drain():
    """On S equal stages the step is the engine's (M + S - 1) x t and the slowest stage
    idles (S - 1) / (M + S - 1) of it (GPipe); on unequal ones, (M - 1) x the slowest's
    t plus every stage's t once: more micro-batches shrink the bubble either way."""
    shape = _model().pipe
    equal = shape.__class__(**{**shape.__dict__, "layer_ms": (2.0,) * 12,
                               "out_bytes": (0,) * 12})
    for stages, micro in ((2, 4), (4, 4), (4, 8), (6, 2)):
        cut = stages_at(equal.__class__(**{**equal.__dict__, "microbatches": micro}),
                        [1.0] * stages, LINK_MBIT)
        t = cut.compute_ms[0]
        assert set(cut.compute_ms) == {t}  # 12 layers cut evenly
        assert cut.compute_step_ms() == pytest.approx(
            pipeline_split.predicted_step_s([t] * stages, micro))
        assert cut.bubble == pytest.approx(pipeline_split.gpipe_bubble(stages, micro))
    uneven = stages_at(shape, [1.0] * 3, 1e9, counts=(3, 5, 4))
    t = uneven.compute_ms
    assert uneven.compute_step_ms() == pytest.approx((M - 1) * max(t) + sum(t))
    assert uneven.bubble == pytest.approx(1 - M * max(t) / ((M - 1) * max(t) + sum(t)),
                                          rel=1e-4)


def test_the_boundaries_move_activations_both_ways():
    shape = _model().pipe
    cut = stages_at(shape, [1.0] * 3, LINK_MBIT, counts=(3, 5, 4))
    assert cut.boundary_bytes == (OUT_BYTES[2], OUT_BYTES[7])
    # The middle stage receives one boundary and sends the next, each with its gradient.
    assert cut.worker_bytes() == 2 * M * (OUT_BYTES[2] + OUT_BYTES[7])
    assert cut.wire_ms[0] == pytest.approx(2 * OUT_BYTES[2] * 8 / (LINK_MBIT * 1e6) * 1e3)
    assert cut.wire_ms[-1] == 0  # the last stage sends nothing on


def test_another_link_moves_the_wire_and_another_board_the_compute():
    model = _model()
    slow = predict(model, 4, Target(None, 10.0), CATALOG, None)
    counts = stages_at(model.pipe, [1.0] * 4, 10.0).counts
    assert slow.step_ms == pytest.approx(_true_step_ms(counts, link_mbit=10.0), rel=1e-6)
    scale = compute_scale(CATALOG, CATALOG.profiles[BOARD], CATALOG.profiles["pi4"],
                          "lenet-cnn")[0]
    assert scale < 1
    pi4 = predict(model, 4, Target("pi4", LINK_MBIT), CATALOG, None)
    counts = stages_at(model.pipe, [scale] * 4, LINK_MBIT).counts
    assert pi4.step_ms == pytest.approx(_true_step_ms(counts, scale=scale), rel=1e-6)
    assert pi4.step_ms < predict(model, 4, Target(None, None), CATALOG, None).step_ms


def test_what_it_cannot_fit_is_one_line():
    with pytest.raises(ConfigError, match="needs cells at >= 2 device counts"):
        _model(stage_counts=(2,))
    with pytest.raises(ConfigError, match="--replicas"):
        _model(replicas=2)
    with pytest.raises(ConfigError, match="inference stream"):
        _model(task="infer")
    with pytest.raises(ConfigError, match="pipe_layer_ms"):
        _model(pipe_layer_ms=None)
    with pytest.raises(ConfigError, match="layer profile"):
        shape_of([{"pipe_layer_ms": [1.0]}], "x")


def _ps_record(devices: int, sync: str, placement: str, step_ms: float) -> dict:
    return {"status": "ok", "engine": "torch", "model": "lenet-mlp", "layers": None,
            "batch": 32, "sync": sync, "placement": placement, "data_partition": "shard",
            "dataset": "mnist", "devices": devices, "cell_id": f"{sync}{placement}{devices}",
            "train_samples": 640, "parameters": 431_080, "speedup": 1.0,
            "steady_step_ms": step_ms}


@pytest.mark.parametrize("sync", ["sync", "async"])
@pytest.mark.parametrize("placement", ["master", "colocated"])
def test_torchs_parameter_server_fits_and_predicts(sync, placement):
    records = [_ps_record(n, sync, placement, 50.0 + 7.0 * (n - 1)) for n in (1, 2, 3, 4)]
    groups, _ = groups_of(records)
    group = next(g for g in groups if g.cells)
    comm = "ps-sync" if sync == "sync" else "ps-async"
    assert (group.scheme.comm, group.scheme.placement) == (comm, placement)
    assert group.scheme.through_master == (placement == "master")
    model = fit_group(group, None)
    assert model.base_ms == 50.0
    p = predict(model, 8, Target(None, None), None, None)
    assert p.step_ms > predict(model, 4, Target(None, None), None, None).step_ms > 50
    worker_bytes = 2 * 431_080 * 4 if placement == "master" else 4 * 431_080 * 4 * 7 / 8
    assert p.mb_per_step == pytest.approx(worker_bytes / 1e6)
    assert group.label == "lenet-mlp b32 torch " + sync + (
        " colocated" if placement == "colocated" else "")


def test_labels_tell_apart_what_only_a_setting_separates():
    records = [_record(s) for s in (2, 3)] + [_record(s, microbatches=8, cell_id=f"m8{s}")
                                              for s in (2, 3)]
    records += [_ps_record(n, "sync", p, 50.0 + n) for n in (1, 2, 3)
                for p in ("master", "colocated")]
    records += [_ps_record(n, "async", "master", 50.0 + n) | {"data_partition": d}
                for n in (2, 3) for d in ("shard", "replicate")]
    labels = sorted(g.label for g in groups_of(records)[0])
    assert len(labels) == len(set(labels)), labels
    assert "lenet-cnn b32 torch-pipe M4 gpipe sync" in labels
    assert "lenet-cnn b32 torch-pipe M8 gpipe sync" in labels
    assert "lenet-mlp b32 torch sync" in labels  # today's label where nothing differs
    assert "lenet-mlp b32 torch sync colocated" in labels
    assert "lenet-mlp b32 torch async data_partition=replicate" in labels
    assert "microbatches" in GROUP_FIELDS


def test_a_dilated_cells_stage_times_are_read_in_the_boards_time():
    """``--speedup k`` runs k times faster: every time, the stages' and the layers' lists
    too, is k times too short, and is read back x k (``sweep.board_time``)."""
    k = 4.0
    dilated = []
    for stages in (2, 3, 4):
        r = _record(stages)
        dilated.append({**r, "speedup": k, "robust_s_per_sample": r["robust_s_per_sample"] / k,
                        "stage_compute_ms": [t / k for t in r["stage_compute_ms"]],
                        "pipe_layer_ms": [t / k for t in r["pipe_layer_ms"]]})
    model = fit_group(groups_of(dilated)[0][0], CATALOG)
    assert model.pipe.layer_ms == pytest.approx([t * PROFILE_SCALE for t in LAYER_MS])
    assert model.fit.term("round_ms") == pytest.approx(ROUND_MS, rel=1e-6)


def test_a_mix_cuts_each_stage_on_its_own_board():
    """Stage s runs on node s of the mix: the engine's balanced cut prices each stage on
    its own board, so the step lies between the uniform boards' and the faster nodes'
    stages hold more layers than on uniform boards."""
    model = _model()
    link = 1000.0
    steps = {name: predict(model, 4, Target(name, link), CATALOG, None).step_ms
             for name in ("pi3b", "pi4", "mix-2pi4-2pi3b")}
    assert steps["pi4"] < steps["mix-2pi4-2pi3b"] < steps["pi3b"]
    nodes = node_profiles(CATALOG, "mix-2pi4-2pi3b", 4)
    scales = [compute_scale(CATALOG, CATALOG.profiles[BOARD], p, "lenet-cnn")[0]
              for p in nodes]
    mixed = stages_at(model.pipe, scales, link)
    uniform = stages_at(model.pipe, [max(scales)] * 4, link)
    assert max(mixed.compute_ms) <= max(uniform.compute_ms)
    faster = [s for s, c in enumerate(scales) if c < max(scales)]  # the Pi 4s
    assert faster and (sum(mixed.counts[s] for s in faster)
                       > sum(uniform.counts[s] for s in faster))
