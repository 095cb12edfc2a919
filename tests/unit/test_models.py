"""Models: shapes, exact parameter counts, depth validation, cheap import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workloads import models


def _built(model, layers):
    import mxnet as mx

    net = models.build(model, layers)
    net.initialize()
    net.hybridize()
    out = net(mx.nd.zeros((2, *models.input_shape(model))))
    trainable = sum(p.data().size for p in net.collect_params().values()
                    if p.grad_req != "null")
    return out.shape, trainable


@pytest.mark.parametrize("model,layers", [("lenet-mlp", None), ("lenet-cnn", None),
                                          ("lenet-example", None), ("resnet", 8),
                                          ("resnet", 20), ("resnet", 32)])
def test_output_shape_and_exact_parameter_count(model, layers):
    shape, trainable = _built(model, layers)
    assert shape == (2, 10)
    assert trainable == models.parameter_count(model, layers)


def test_known_sizes():
    # He et al. report 0.27 M for ResNet-20 and 1.7 M for ResNet-110.
    assert models.parameter_count("resnet", 20) == 272_474
    assert 1.6e6 < models.parameter_count("resnet", 110) < 1.8e6
    # LeNet-5: 156 + 2,416 + 48,120 + 10,164 + 850.
    assert models.parameter_count("lenet-cnn") == 61_706
    assert models.parameter_count("lenet-mlp") == 784 * 128 + 128 + 128 * 64 + 64 + 650
    # MXNet's example LeNet (v0.9.5 symbols/lenet.py): 520 + 25,050 + 400,500 + 5,010.
    assert models.parameter_count("lenet-example") == 431_080


def test_input_shapes():
    assert models.input_shape("lenet-mlp") == (1, 28, 28)
    assert models.input_shape("lenet-cnn") == (1, 32, 32)
    assert models.input_shape("lenet-example") == (1, 28, 28)
    assert models.input_shape("resnet") == (3, 32, 32)


@pytest.mark.parametrize("layers", [None, 2, 21, 33, 0])
def test_invalid_resnet_depth_names_valid_depths(layers):
    with pytest.raises(ValueError, match=r"6n\+2 \(8, 14, 20"):
        models.build("resnet", layers)


def test_unknown_model():
    with pytest.raises(ValueError, match="lenet-mlp, lenet-cnn, lenet-example, resnet"):
        models.parameter_count("vgg")


def test_import_does_not_load_mxnet():
    code = ("import sys, workloads.models, workloads.datasets.resolver, workloads.datasets.loader; "
            "print('mxnet' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
