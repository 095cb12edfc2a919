"""Grid expansion, cell ids and input validation (pure functions)."""

import pytest

from profiler.engines import all_models
from profiler.errors import ConfigError
from profiler import option_lists
from profiler.engines.mxnet import kvstore
from profiler.sweep import grid


def _expand(**kw):
    base = dict(engines=["mxnet"], models=["resnet"], layers=[20], batches=[32],
                devices=[2], syncs=["sync"])
    base.update(kw)
    return grid.expand(**base)


def test_cartesian_product_in_stable_order():
    cells = _expand(layers=[20, 32], batches=[32, 64], syncs=["sync", "async"])
    assert len(cells) == 8
    assert [(c.layers, c.batch, c.sync) for c in cells[:3]] == [
        (20, 32, "sync"), (20, 32, "async"), (20, 64, "sync")]


def test_cell_id_is_stable_and_distinct():
    a, b = _expand(batches=[32, 64])
    assert a.cell_id == _expand(batches=[32])[0].cell_id
    assert a.cell_id != b.cell_id and len(a.cell_id) == 12


def test_lenet_ignores_resnet_layers_and_one_device_collapses_sync():
    cells = _expand(models=["lenet-mlp", "resnet"], layers=[20, 32], devices=[1],
                    syncs=["sync", "async"])
    lenet = [c for c in cells if c.model == "lenet-mlp"]
    assert len(lenet) == 1 and lenet[0].layers is None and kvstore(lenet[0]) == "local"
    assert len([c for c in cells if c.model == "resnet"]) == 2


def test_kvstore_follows_sync_mode():
    sync, async_ = _expand(syncs=["sync", "async"])
    assert (kvstore(sync), kvstore(async_)) == ("dist_sync", "dist_async")


@pytest.mark.parametrize("kw, words", [
    (dict(layers=[33]), ["33", "6n+2", "110"]),
    (dict(batches=[0]), ["--batch 0"]),
    (dict(devices=[0]), ["--devices 0"]),
    (dict(models=["vgg"]), ["vgg", "lenet-mlp"]),
    (dict(syncs=["semi"]), ["semi", "async"]),
    (dict(engines=["horovod"], syncs=["async"]), ["Horovod", "--sync sync"]),
    (dict(epochs=0), ["--epochs 0", "--epochs 1"]),
    (dict(lr=float("nan")), ["--lr nan", "--lr 0.02"]),
    (dict(lr=float("inf")), ["--lr inf", "--lr 0.02"]),
    (dict(lr=0.0), ["--lr 0.0", "positive"]),
    (dict(lr=-1.0), ["--lr -1.0", "positive"]),
    (dict(max_samples=0), ["--max-samples 0", "at least 1"]),
    # 63 samples for 2 workers: 31 each, less than one batch of 32; the fix is 64.
    (dict(max_samples=63), ["--max-samples 63", "2 worker(s) 31 samples", "--max-samples 64"]),
    (dict(max_samples=100, batches=[32, 64]), ["--max-samples 100", "batch of 64",
                                                "--max-samples 128"]),
])
def test_bad_input_names_problem_and_fix(kw, words):
    with pytest.raises(ConfigError) as err:
        _expand(**kw)
    for word in words:
        assert word in str(err.value)


def test_list_parsing():
    assert option_lists.parse_int_list("32, 64", "--batch") == [32, 64]
    with pytest.raises(ConfigError, match="--batch 'x'"):
        option_lists.parse_int_list("32,x", "--batch")
    with pytest.raises(ConfigError, match="--batch ',' is an empty list"):
        option_lists.parse_int_list(",", "--batch")
    with pytest.raises(ConfigError, match="--model '' is an empty list"):
        option_lists.parse_choice_list("", "--model", all_models())
    with pytest.raises(ConfigError, match="unknown"):
        option_lists.parse_choice_list("sync,maybe", "--sync", grid.SYNC_MODES)


@pytest.mark.parametrize("option,parse,example", [
    ("--devices", option_lists.parse_int_list, "1,2,4"),
    ("--batch", option_lists.parse_int_list, "32,64"),
    ("--layers", option_lists.parse_int_list, "20,32"),
    ("--lr", option_lists.parse_float_list, "0.01,0.02"),
    ("--dilations", option_lists.parse_float_list, "2,4,8")])
def test_each_list_option_shows_an_example_of_its_own(option, parse, example):
    """``--devices abc`` is shown device counts, not the batch sizes every option once got."""
    for bad, said in (("abc", f"{option} 'abc' is not"), (",", f"{option} ',' is an empty")):
        with pytest.raises(ConfigError) as err:
            parse(bad, option)
        assert str(err.value).startswith(said)
        assert str(err.value).endswith(f"such as {option} {example}")
        others = {e for o, e in option_lists.LIST_EXAMPLES.items() if o != option}
        assert not any(other in str(err.value) for other in others), err.value


def test_horovod_skips_async_in_a_mixed_grid():
    cells = _expand(engines=["mxnet", "horovod"], syncs=["sync", "async"])
    assert [(c.engine, c.sync) for c in cells] == [
        ("mxnet", "sync"), ("mxnet", "async"), ("horovod", "sync")]


def test_every_worker_needs_one_full_batch():
    """The boundary: batch x devices samples is enough, one fewer is not."""
    assert len(_expand(max_samples=64)) == 1  # 2 workers x 32
    cell = _expand()[0]
    grid.check_shards(cell, 64)
    with pytest.raises(ConfigError, match="the synthetic training set \\(63 samples\\)"):
        grid.check_shards(cell, 63, "the synthetic training set")
