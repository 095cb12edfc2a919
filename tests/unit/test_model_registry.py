"""Models as data: the five models moved into records unchanged, and a record is all a
model needs.

The pinned numbers were computed with the code before the registry (commit 151784c:
``workloads/models.py``'s arithmetic and if/elif builders, the MXNet worker's choice of
initializer by name): each model's parameter count, and, from one seed, its output on
two fixed images, its loss on them and its loss after one plain SGD step at lr 0.05.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from profiler.cell import CellConfig
from profiler.engines import ENGINES
from profiler.errors import ConfigError
from profiler.sweep import grid, timeouts
from tests.conftest import need
from workloads import models, optim
from workloads.datasets import catalog, loader

COUNTS = {
    ("lenet-mlp", None): 109_386,
    ("lenet-cnn", None): 61_706,
    ("lenet-example", None): 431_080,
    ("resnet", 8): 78_042,
    ("resnet", 20): 272_474,
    ("resnet", 32): 466_906,
    ("resnet", 110): 1_730_714,
    ("mobilenetv2", None): 2_236_682,
}
# (loss, loss after one step, the first four outputs of the first image)
TORCH = {
    ("lenet-mlp", None): (2.431446, 0.334369, (-0.674219, -0.416376, -0.519675, -0.304619)),
    ("lenet-cnn", None): (1.986667, 1.335576, (-0.315038, -0.044987, -0.173116, 0.160399)),
    ("lenet-example", None): (2.119730, 0.726638, (0.001837, 0.794473, -0.323681, 0.748228)),
    ("resnet", 8): (1.968617, 1.247576, (-0.757262, 1.260659, -1.191114, 1.386922)),
    ("resnet", 20): (2.131624, 0.291310, (-0.960632, -0.664773, -0.242008, 2.128742)),
    ("resnet", 32): (3.329657, 1.061655, (1.365419, 2.582160, 0.151556, -1.618040)),
    ("mobilenetv2", None): (2.877696, 0.466694, (0.528249, 0.287721, -0.618846, -0.190939)),
}
GLUON = {
    ("lenet-mlp", None): (2.462190, 0.966932, (0.490408, 0.776574, -0.008637, 0.361435)),
    ("lenet-cnn", None): (2.233327, 1.608007, (-0.261024, -0.604330, -0.557462, 0.077608)),
    ("lenet-example", None): (2.424798, 1.221682, (-0.178231, 0.120996, 0.138305, -0.058287)),
    ("resnet", 8): (2.363099, 3.103734, (-0.815187, -0.164819, -0.783095, -0.496257)),
    ("resnet", 20): (3.300721, 13.232004, (-0.452716, -0.658548, -0.689741, 0.797738)),
    ("resnet", 32): (1.547237, 62.006588, (1.001250, 0.255572, -0.471828, 1.345613)),
}
LABELS = [3, 7]
LR = 0.05
# Threads sum in another order from run to run: 1.2e-5 apart was seen on one model.
CLOSE = dict(rel=1e-3, abs=1e-4)


def _images(model):
    rng = np.random.default_rng(1)
    return rng.random((2, *models.input_shape(model)), dtype=np.float32)


@pytest.mark.parametrize("model,layers", COUNTS)
def test_parameter_counts_are_what_the_old_arithmetic_gave(model, layers):
    assert models.parameter_count(model, layers) == COUNTS[model, layers]


@pytest.mark.parametrize("model,layers", TORCH)
def test_torch_models_compute_what_they_did(model, layers):
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    import torch

    from workloads import torch_models

    torch.manual_seed(0)
    net = torch_models.build(model, layers)
    x, y = torch.from_numpy(_images(model)), torch.tensor(LABELS)
    out = net(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= LR * p.grad
    after = torch.nn.functional.cross_entropy(net(x), y)
    first_loss, loss_after, outputs = TORCH[model, layers]
    assert out[0, :4].tolist() == pytest.approx(outputs, **CLOSE)
    assert loss.item() == pytest.approx(first_loss, **CLOSE)
    assert after.item() == pytest.approx(loss_after, **CLOSE)
    assert torch_models.count_parameters(net) == COUNTS[model, layers]


@pytest.mark.parametrize("model,layers", GLUON)
def test_gluon_models_compute_what_they_did(model, layers):
    import mxnet as mx
    from mxnet import autograd, gluon

    from workloads import gluon_models

    mx.random.seed(0)
    net = models.build(model, layers)
    net.initialize(gluon_models.initializer(models.get(model)))  # as the MXNet worker does
    net.hybridize()
    x, y = mx.nd.array(_images(model)), mx.nd.array(LABELS)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR})
    with autograd.record():
        out = net(x)
        loss = loss_fn(out, y).mean()
    loss.backward()
    trainer.step(1)
    after = loss_fn(net(x), y).mean()
    first_loss, loss_after, outputs = GLUON[model, layers]
    assert out.asnumpy()[0, :4].tolist() == pytest.approx(outputs, **CLOSE)
    assert float(loss.asscalar()) == pytest.approx(first_loss, **CLOSE)
    assert float(after.asscalar()) == pytest.approx(loss_after, **CLOSE)
    assert gluon_models.count_parameters(net, models.get(model)) == COUNTS[model, layers]


def test_the_records_say_what_the_old_tables_did():
    assert {m: s.lr for m, s in models.REGISTRY.items()} == {
        "lenet-mlp": 0.02, "lenet-cnn": 0.02, "lenet-example": 0.05, "resnet": 0.05,
        "mobilenetv2": 0.05}
    assert {m: models.dataset_for(m) for m in models.MODELS} == {
        "lenet-mlp": "mnist", "lenet-cnn": "mnist", "lenet-example": "mnist",
        "resnet": "cifar10", "mobilenetv2": "cifar10"}
    # The old time limits' rates (Pi 3B samples/s).
    assert models.get("lenet-mlp").board_rate(None) == 60000 / 105
    assert models.get("lenet-example").board_rate(None) == 60000 / 1079
    assert models.get("resnet").board_rate(110) == 50000 / 20000 * 32 / 110
    assert models.get("mobilenetv2").board_rate(None) == 50000 / 20000 / 2
    assert ENGINES["mxnet"].models == ENGINES["horovod"].models == (
        "lenet-mlp", "lenet-cnn", "lenet-example", "resnet")
    assert ENGINES["torch"].models == ENGINES["torch-ddp"].models == tuple(models.MODELS)


def test_an_unknown_model_is_one_line_naming_the_models_everywhere():
    said = ("unknown model 'vgg': use one of lenet-mlp, lenet-cnn, lenet-example, resnet, "
            "mobilenetv2")
    cell = CellConfig(model="vgg", layers=None, lr=0.1)
    for ask in (lambda: models.get("vgg"), lambda: models.build("vgg"),
                lambda: models.parameter_count("vgg"), lambda: optim.default_lr("vgg"),
                lambda: models.family_of("vgg"), lambda: grid.validate(cell),
                # it raised KeyError at sweep time
                lambda: timeouts.default_timeout_s(cell)):
        with pytest.raises(ConfigError) as err:
            ask()
        assert str(err.value) == said


def test_unknown_model_in_torch_is_refused_not_built_as_mobilenetv2():
    need("torch", importlib.util.find_spec("torch") is not None)
    from workloads import torch_models

    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        torch_models.build("vgg")


def test_the_loader_pads_to_the_records_input_shape():
    digits, _ = loader.synthetic("lenet-mlp", 3, seed=1)
    assert digits.shape[1:] == (1, 28, 28)
    padded = loader._pad(digits, "lenet-cnn")
    assert padded.shape[1:] == models.input_shape("lenet-cnn") == (1, 32, 32)
    assert (padded[:, :, 2:30, 2:30] == digits).all() and padded[:, :, :2].sum() == 0
    assert loader._pad(digits, "lenet-example") is digits


def _tiny_torch(spec, layers, classes):
    from torch import nn

    c, h, w = spec.input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w * layers // 3, classes))


def test_one_record_is_all_a_new_model_needs():
    """A model registered with one record (as a user's factory will be) is trained by
    the engines of its framework, takes its depth rule, lr, data family, time limit and
    parameter count from the record, and nothing else had to change."""
    need("torch", importlib.util.find_spec("torch") is not None)
    spec = models.ModelSpec(
        "tiny", "one dense layer", (1, 28, 28), "mnist", lr=0.3,
        builders={"torch": f"{__name__}:_tiny_torch"}, init="xavier",
        board_samples_per_s=100.0, board_layers=3,
        depth=models.Depth(step=3, offset=0, default=3, kind="a tiny depth", shown_up_to=9))
    models.register(spec)
    try:
        assert "tiny" in ENGINES["torch-ddp"].models and "tiny" not in ENGINES["mxnet"].models
        cells = grid.expand(engines=["torch"], models=["tiny"], layers=[None], batches=[8],
                            devices=[1], syncs=["sync"])
        assert [(c.layers, c.lr) for c in cells] == [(3, 0.3)]
        assert optim.default_lr("tiny") == 0.3
        assert models.family_of("tiny") == catalog.DIGITS
        with pytest.raises(ConfigError, match=r"--layers 4 is not a tiny depth: use 3n\+0"):
            grid.validate(CellConfig(engine="torch", model="tiny", layers=4, lr=0.3))
        with pytest.raises(ConfigError,
                           match="tiny runs on the torch, torch-ddp and torch-pipe engines only"):
            grid.validate(CellConfig(engine="mxnet", model="tiny", layers=3, lr=0.3))
        # Twice the depth, half the board's rate: about twice the training time.
        deep = CellConfig(engine="torch", model="tiny", layers=6, lr=0.3, dataset="mnist")
        shallow = CellConfig(engine="torch", model="tiny", layers=3, lr=0.3, dataset="mnist")
        startup = timeouts.STARTUP_ALLOWANCE_S
        assert (timeouts.default_timeout_s(deep) - startup) == pytest.approx(
            2 * (timeouts.default_timeout_s(shallow) - startup), abs=1)
        assert models.parameter_count("tiny", 6) == 28 * 28 * 2 * 10 + 10
    finally:
        models.unregister("tiny")
    assert "tiny" not in ENGINES["torch"].models
