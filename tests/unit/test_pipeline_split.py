"""Where a pipeline cuts a model: the splits, their checks and the pipeline model."""

from __future__ import annotations

import random

import pytest

from profiler.errors import ConfigError
from workloads import pipeline_split as ps


def _profile(seconds, out_bytes=None, params=None):
    n = len(seconds)
    return ps.LayerCosts(tuple(seconds), tuple(out_bytes or [1000] * n),
                         tuple(params or [10] * n))


@pytest.mark.parametrize("seed", range(20))
def test_the_balanced_split_is_the_best_contiguous_one(seed):
    """Dynamic programming finds what trying every split finds, on random profiles with
    unequal nodes and a link that makes big activations expensive."""
    rng = random.Random(seed)
    layers, stages = rng.randint(4, 14), rng.randint(2, 4)
    profiles = [_profile([rng.uniform(0.001, 0.05) for _ in range(layers)],
                         [rng.randint(1_000, 2_000_000) for _ in range(layers)])
                for _ in range(stages)]
    cost = ps.timed_cost(profiles, link_bytes_per_s=12.5e6)
    found = ps.min_max_split(cost, layers, stages)
    best = ps.exhaustive_split(cost, layers, stages)
    assert sum(found) == layers and len(found) == stages and min(found) >= 1
    assert ps.bottleneck(found, cost) == pytest.approx(ps.bottleneck(best, cost))


def test_a_slow_node_gets_fewer_layers():
    """Stage 1 on a node at half speed: the split gives it less of a uniform model."""
    fast, slow = _profile([0.01] * 12), _profile([0.02] * 12)
    counts = ps.choose("balanced", 2, [fast, slow], link_bytes_per_s=None)
    assert counts == (8, 4)


def test_the_link_moves_the_cut_to_a_small_activation():
    """Equal layers, but cutting after layer 2 sends 100x fewer bytes than elsewhere."""
    out = [4_000_000] * 8
    out[2] = 40_000
    profile = _profile([0.01] * 8, out)
    assert ps.choose("balanced", 2, [profile, profile], link_bytes_per_s=12.5e6) == (3, 5)
    assert ps.choose("balanced", 2, [profile, profile], link_bytes_per_s=None) == (4, 4)


def test_params_layers_and_hand_splits():
    profile = _profile([0.01] * 6, params=[1, 1, 1, 1, 100, 1])
    assert ps.choose("params", 2, [profile] * 2, None) in ((5, 1), (4, 2))
    assert ps.choose("layers", 4, [profile] * 4, None) == (2, 2, 1, 1)
    assert ps.choose(ps.parse("1,5"), 2, [profile] * 2, None) == (1, 5)


@pytest.mark.parametrize("split, stages, layers, said", [
    ("3,5", 3, 8, "gives 2 stages and --stages is 3"),
    ("3,4", 2, 8, "adds up to 7 layers, lenet-cnn has 8"),
    ("balanced", 9, 8, "more than lenet-cnn's 8 layers"),
])
def test_a_split_that_cannot_be_is_one_line(split, stages, layers, said):
    with pytest.raises(ConfigError, match=said) as info:
        ps.check(ps.parse(split), stages, layers, "lenet-cnn")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["even", "3,x", "0,4", ""])
def test_an_unknown_split_is_one_line(text):
    with pytest.raises(ConfigError, match="--split"):
        ps.parse(text)


def test_the_pipeline_model():
    assert ps.gpipe_bubble(4, 4) == pytest.approx(3 / 7)
    assert ps.gpipe_bubble(2, 8) == pytest.approx(1 / 9)
    # A balanced pipeline of S stages of t each: (M + S - 1) t.
    assert ps.predicted_step_s([0.01] * 4, 8) == pytest.approx(0.11)
    assert ps.imbalance([1.0, 1.0, 2.0]) == pytest.approx(1.5)
    assert ps.imbalance([]) is None


def test_a_grid_of_both_schedules_leaves_out_what_1f1b_cannot_run():
    """1F1B needs a micro-batch per stage: with GPipe in the grid too, its smaller
    combinations are left out (as a sync mode an engine lacks is); alone, refused."""
    from profiler.sweep.grid import expand

    def cells(schedules):
        return expand(engines=["torch-pipe"], models=["lenet-cnn"], layers=[None],
                      batches=[32], devices=[4], syncs=["sync"],
                      engine_values={"microbatches": [1, 2, 4], "schedule": schedules})
    from profiler.engines import cell_label

    shapes = [(c.param("microbatches"), c.param("schedule")) for c in cells(["gpipe", "1f1b"])]
    assert shapes == [(1, "gpipe"), (2, "gpipe"), (4, "gpipe"), (4, "1f1b")]
    assert [cell_label(c) for c in cells(["gpipe", "1f1b"])][-1] == \
        "lenet-cnn b32 d4 sync torch-pipe S4 M4 1f1b"
    with pytest.raises(ConfigError, match="1f1b needs at least one micro-batch per stage"):
        cells(["1f1b"])
