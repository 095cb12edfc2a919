"""The torch models are the Gluon models layer for layer: every trainable tensor's shape
in order, the exact parameter counts, the output; MobileNetV2's count; the same weights
from the same seed; MXNet's initialisation."""

from __future__ import annotations

import importlib.util
import math

import pytest

from tests.conftest import need
from workloads import models

GLUON_MODELS = [("lenet-mlp", None), ("lenet-cnn", None), ("lenet-example", None),
                ("resnet", 8), ("resnet", 20), ("resnet", 32)]


def _torch():
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    import torch

    from workloads import torch_models
    return torch, torch_models


def _gluon_shapes(model, layers):
    import mxnet as mx

    net = models.build(model, layers)
    net.initialize()
    net(mx.nd.zeros((2, *models.input_shape(model))))
    # Gluon names parameters in creation order: that is the layer order.
    return [tuple(p.shape) for p in net.collect_params().values() if p.grad_req != "null"]


@pytest.mark.parametrize("model,layers", GLUON_MODELS)
def test_every_trainable_tensor_matches_the_gluon_model(model, layers):
    torch, torch_models = _torch()
    net = torch_models.build(model, layers)
    shapes = [tuple(p.shape) for p in net.parameters() if p.requires_grad]
    gluon = _gluon_shapes(model, layers)
    # Gluon keeps BatchNorm's gamma and beta as (C,) like torch, Dense weights as
    # (out, in) like Linear, Conv2D weights as (out, in, k, k) like Conv2d.
    assert shapes == gluon
    assert sum(p.numel() for p in net.parameters()) == models.parameter_count(model, layers)
    assert net(torch.zeros(2, *models.input_shape(model))).shape == (2, 10)


@pytest.mark.parametrize("model,layers", [("resnet", 110), ("mobilenetv2", None)])
def test_deep_models_have_their_exact_counts(model, layers):
    torch, torch_models = _torch()
    net = torch_models.build(model, layers)
    assert sum(p.numel() for p in net.parameters()) == models.parameter_count(model, layers)


def test_mobilenetv2_cifar_form():
    torch, torch_models = _torch()
    # Sandler et al.'s MobileNetV2 has 3.5 M parameters with 1,000 classes; 10 classes
    # leave 2.24 M (the 1280 x 1000 dense layer shrinks to 1280 x 10).
    assert models.parameter_count("mobilenetv2") == 2_236_682
    net = torch_models.build("mobilenetv2")
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert models.input_shape("mobilenetv2") == (3, 32, 32)
    assert models.dataset_for("mobilenetv2") == "cifar10"
    with pytest.raises(ValueError, match="torch engines only"):
        models.build("mobilenetv2")


def test_the_same_seed_builds_the_same_weights():
    torch, torch_models = _torch()
    torch.manual_seed(7)
    first = [p.detach().clone() for p in torch_models.build("lenet-cnn").parameters()]
    torch.manual_seed(7)
    second = list(torch_models.build("lenet-cnn").parameters())
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_initialisation_is_mxnets():
    torch, torch_models = _torch()
    torch.manual_seed(0)
    mlp = torch_models.build("lenet-mlp")
    first = mlp[1]  # Linear 784 -> 128: Xavier uniform, bound sqrt(6 / (784 + 128))
    bound = math.sqrt(6 / (784 + 128))
    assert first.weight.abs().max() <= bound
    assert first.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)
    assert all(float(m.bias.abs().sum()) == 0 for m in mlp if hasattr(m, "bias")
               and m.bias is not None)
    resnet = torch_models.build("resnet", 20)
    conv = resnet[0]  # 3x3, 3 -> 16: He normal over the fan-in, std sqrt(2 / 27)
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / 27), rel=0.15)
    bn = resnet[1]
    assert float(bn.weight.min()) == 1.0 and float(bn.bias.abs().max()) == 0.0
    assert bn.momentum == pytest.approx(0.1) and bn.eps == pytest.approx(1e-5)
