"""The torch builders of the models registered in ``workloads.models``: the Gluon models
(``workloads.gluon_models``) layer for layer, and MobileNetV2.

Each network is the Gluon one of ``workloads/gluon_models.py`` with the same layers in the
same order, the same shapes and so the same trainable parameter count
(``tests/unit/test_torch_models.py`` checks shapes and counts against the built Gluon
models), and the same initialisation: Xavier uniform weights for LeNet (MXNet's
``Xavier()``: uniform, average fan, magnitude 3), He normal over the fan-in for ResNet
and MobileNetV2 (MXNet's ``Xavier("gaussian", "in", 2)``), biases zero, BatchNorm
gamma 1 and beta 0. BatchNorm: momentum 0.1 here is MXNet's 0.9 (torch weighs the new
batch, MXNet the running value), eps 1e-5 in both.

``mobilenetv2`` (torch engines only): Sandler et al. 2018 in its common CIFAR form
(3x32x32 input): the first convolution strides 1 instead of 2 and so does the second
bottleneck stage (``models.MOBILENETV2_SETTINGS``), width 1.0, ReLU6, a 1x1 convolution
to 1280 channels, global average pooling and a dense layer to 10 classes.

Each builder is ``f(spec, layers, classes)``; ``build(model, layers, classes)`` finds it
through the model's record. Built deterministically from the caller's ``torch.manual_seed``.
"""

from __future__ import annotations

from .models import (EXAMPLE_CONV_CHANNELS, EXAMPLE_DENSE, LENET_CONV_CHANNELS,
                     LENET_DENSE, LENET_KERNEL, MLP_HIDDEN,
                     MOBILENETV2_FIRST, MOBILENETV2_LAST, MOBILENETV2_SETTINGS,
                     RESNET_STAGE_CHANNELS, get, input_shape)

__all__ = ["build", "input_shape"]


def build(model: str, layers: int | None = None, classes: int = 10):
    """A new ``torch.nn.Module`` for ``model``, initialised as its MXNet twin."""
    return get(model).build("torch", layers, classes)


def count_parameters(net, spec=None) -> int:
    """Trainable parameters of ``net`` (BatchNorm's running statistics are buffers)."""
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


def _side(side: int) -> int:
    """A 5x5 convolution and a 2x2 pool, twice: 32 -> 28 -> 14 -> 10 -> 5."""
    return ((side - LENET_KERNEL + 1) // 2 - LENET_KERNEL + 1) // 2


def lenet_mlp(spec, layers, classes: int):
    from torch import nn

    c, h, w = spec.input_shape
    sizes = (c * h * w, *MLP_HIDDEN)
    return _init(nn.Sequential(nn.Flatten(), *_dense_relu(sizes),
                               nn.Linear(sizes[-1], classes)), spec)


def lenet_cnn(spec, layers, classes: int):
    from torch import nn

    c1, c2 = LENET_CONV_CHANNELS
    side = _side(spec.input_shape[1])
    sizes = (c2 * side * side, *LENET_DENSE)
    return _init(nn.Sequential(
        nn.Conv2d(spec.input_shape[0], c1, LENET_KERNEL), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(c1, c2, LENET_KERNEL), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), *_dense_relu(sizes), nn.Linear(sizes[-1], classes)), spec)


def lenet_example(spec, layers, classes: int):
    from torch import nn

    c1, c2 = EXAMPLE_CONV_CHANNELS
    side = _side(spec.input_shape[1])
    return _init(nn.Sequential(
        nn.Conv2d(spec.input_shape[0], c1, LENET_KERNEL), nn.Tanh(), nn.MaxPool2d(2, 2),
        nn.Conv2d(c1, c2, LENET_KERNEL), nn.Tanh(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(c2 * side * side, EXAMPLE_DENSE), nn.Tanh(),
        nn.Linear(EXAMPLE_DENSE, classes)), spec)


def _dense_relu(sizes):
    from torch import nn

    layers = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    return layers


def _bn(channels: int):
    from torch import nn

    return nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1)


def resnet(spec, layers, classes: int):
    from torch import nn

    blocks = spec.blocks(layers)
    first = RESNET_STAGE_CHANNELS[0]
    modules = [nn.Conv2d(3, first, 3, padding=1, bias=False), _bn(first), nn.ReLU()]
    c_in = first
    for stage, channels in enumerate(RESNET_STAGE_CHANNELS):
        for block in range(blocks):
            downsample = stage > 0 and block == 0
            modules.append(_BasicBlock(c_in, channels, 2 if downsample else 1, downsample))
            c_in = channels
    modules += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
    return _init(nn.Sequential(*modules), spec)


def mobilenetv2(spec, layers, classes: int):
    from torch import nn

    modules = [nn.Conv2d(3, MOBILENETV2_FIRST, 3, 1, 1, bias=False), _bn(MOBILENETV2_FIRST),
               nn.ReLU6()]
    c_in = MOBILENETV2_FIRST
    for expansion, channels, repeats, stride in MOBILENETV2_SETTINGS:
        for index in range(repeats):
            modules.append(_InvertedResidual(c_in, channels, stride if index == 0 else 1,
                                             expansion))
            c_in = channels
    modules += [nn.Conv2d(c_in, MOBILENETV2_LAST, 1, bias=False), _bn(MOBILENETV2_LAST),
                nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                nn.Linear(MOBILENETV2_LAST, classes)]
    return _init(nn.Sequential(*modules), spec)


def _init(net, spec):
    """``net`` initialised as its record says (``spec.init``), as MXNet would."""
    from torch import nn

    he = spec.init == "he"
    for module in net.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            if he:
                nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
            else:
                nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    return net


def _BasicBlock(c_in: int, channels: int, stride: int, project: bool):
    return _block_classes()[0](c_in, channels, stride, project)


def _InvertedResidual(c_in: int, c_out: int, stride: int, expansion: int):
    return _block_classes()[1](c_in, c_out, stride, expansion)


_CLASSES: list = []


def _block_classes():
    """The two block classes, defined once torch is imported (not at module import)."""
    if _CLASSES:
        return _CLASSES
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        """conv3x3-BN-relu-conv3x3-BN + shortcut, relu (He et al. 2016, CIFAR variant)."""

        def __init__(self, c_in: int, channels: int, stride: int, project: bool):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(c_in, channels, 3, stride, 1, bias=False), _bn(channels), nn.ReLU(),
                nn.Conv2d(channels, channels, 3, 1, 1, bias=False), _bn(channels))
            self.shortcut = (nn.Sequential(nn.Conv2d(c_in, channels, 1, stride, bias=False),
                                           _bn(channels)) if project else None)

        def forward(self, x):
            residual = x if self.shortcut is None else self.shortcut(x)
            return torch.relu(self.body(x) + residual)

    class InvertedResidual(nn.Module):
        """1x1 expand (unless t = 1), 3x3 depthwise, 1x1 linear projection; the input is
        added back when the shapes allow (stride 1, same channels)."""

        def __init__(self, c_in: int, c_out: int, stride: int, expansion: int):
            super().__init__()
            hidden = c_in * expansion
            layers = []
            if expansion != 1:
                layers += [nn.Conv2d(c_in, hidden, 1, bias=False), _bn(hidden), nn.ReLU6()]
            layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                       _bn(hidden), nn.ReLU6(),
                       nn.Conv2d(hidden, c_out, 1, bias=False), _bn(c_out)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and c_in == c_out

        def forward(self, x):
            out = self.body(x)
            return x + out if self.residual else out

    _CLASSES.extend([BasicBlock, InvertedResidual])
    return _CLASSES
