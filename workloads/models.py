"""The study's models as hybridizable Gluon blocks: LeNet MLP, LeNet-5 CNN, MXNet's
example LeNet, CIFAR ResNet;
their exact parameter counts, and MobileNetV2's (built in torch: ``workloads.torch_models``).

- ``lenet-mlp``: flatten, dense 128 relu, dense 64 relu, dense 10 (MNIST 1x28x28).
- ``lenet-cnn``: LeNet-5 (conv 6@5x5, max pool, conv 16@5x5, max pool, dense 120, 84,
  10) on MNIST padded 28 -> 32, as in Park, Lee & Kim 2019.
- ``lenet-example``: the LeNet of MXNet's ``example/image-classification/symbols/
  lenet.py`` (tag v0.9.5), which the study's ``train_mnist.py --network lenet`` built:
  conv 20@5x5 tanh, max pool, conv 50@5x5 tanh, max pool, dense 500 tanh, dense 10, on
  MNIST's 28x28 (431,080 parameters, 7x LeNet-5's: docs/study.md).
- ``resnet``: He et al.'s CIFAR ResNet of depth 6n+2: a 3x3 conv, three stages of n basic
  blocks (16/32/64 channels, the first block of stages 2 and 3 strides by 2 and projects
  its shortcut with a 1x1 conv + BN, as MXNet's own examples do), global average pool,
  dense 10. Convolutions followed by BN have no bias.

MXNet is imported inside the functions that need it, so ``import workloads.models`` and
``parameter_count`` stay cheap (the profiler uses them to validate cells and to compare
network bytes per step with the model's size).
"""

from __future__ import annotations

import functools

MODELS = ("lenet-mlp", "lenet-cnn", "lenet-example", "resnet", "mobilenetv2")
# Models with CIFAR-10's 3x32x32 input (the others take MNIST's 28x28 grey images).
CIFAR_MODELS = ("resnet", "mobilenetv2")
RESNET_STAGE_CHANNELS = (16, 32, 64)
RESNET_MAX_DEPTH = 1202  # deepest CIFAR ResNet He et al. trained; only bounds the message
MLP_HIDDEN = (128, 64)
LENET_CONV_CHANNELS = (6, 16)
LENET_DENSE = (120, 84)
LENET_KERNEL = 5
EXAMPLE_CONV_CHANNELS = (20, 50)  # MXNet's example LeNet (same 5x5 kernels, 2x2 pools)
EXAMPLE_DENSE = 500
# MobileNetV2 for CIFAR (torch engines only): (expansion t, channels c, repeats n, stride
# s) per bottleneck stage as in Sandler et al. 2018, Table 2, with the second stage's
# stride 1 instead of 2 (and the first convolution's): 32x32 input, not 224x224.
MOBILENETV2_FIRST, MOBILENETV2_LAST = 32, 1280
MOBILENETV2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _check(model: str, layers: int | None) -> int:
    """Validate a model name and depth; return the number of blocks per ResNet stage."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: use one of {', '.join(MODELS)}")
    if model != "resnet":
        return 0
    if layers is None or layers < 8 or (layers - 2) % 6 != 0:
        raise ValueError(f"--layers {layers} is not a CIFAR ResNet depth: use 6n+2 "
                         f"(8, 14, 20, 26, 32, ..., 110)")
    return (layers - 2) // 6


def input_shape(model: str) -> tuple[int, int, int]:
    """One sample's shape (C, H, W) as the model expects it."""
    _check(model, 8 if model == "resnet" else None)
    if model in CIFAR_MODELS:
        return (3, 32, 32)
    return {"lenet-mlp": (1, 28, 28), "lenet-cnn": (1, 32, 32),
            "lenet-example": (1, 28, 28)}[model]


def dataset_for(model: str) -> str:
    """The real dataset a model trains on: ``mnist`` for LeNet, ``cifar10`` for ResNet and
    MobileNetV2."""
    _check(model, 8 if model == "resnet" else None)
    return "cifar10" if model in CIFAR_MODELS else "mnist"


def _dense(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def _conv(c_in: int, c_out: int, kernel: int, bias: bool) -> int:
    return c_in * c_out * kernel * kernel + (c_out if bias else 0)


def parameter_count(model: str, layers: int | None = None, classes: int = 10) -> int:
    """Exact number of trainable parameters (what KVStore/allreduce moves each step).

    BatchNorm's running mean/variance are not trainable and never pushed, so they are
    not counted; gamma and beta are. Model bytes on the wire = 4 * count (float32).
    """
    blocks = _check(model, layers)
    if model == "lenet-mlp":
        c, h, w = input_shape(model)
        sizes = (c * h * w, *MLP_HIDDEN, classes)
        return sum(_dense(a, b) for a, b in zip(sizes, sizes[1:]))
    if model == "lenet-cnn":
        c1, c2 = LENET_CONV_CHANNELS
        k = LENET_KERNEL
        side = ((32 - k + 1) // 2 - k + 1) // 2  # 32 -> 28 -> 14 -> 10 -> 5
        sizes = (c2 * side * side, *LENET_DENSE, classes)
        return (_conv(1, c1, k, True) + _conv(c1, c2, k, True)
                + sum(_dense(a, b) for a, b in zip(sizes, sizes[1:])))
    if model == "lenet-example":
        c1, c2 = EXAMPLE_CONV_CHANNELS
        k = LENET_KERNEL
        side = ((28 - k + 1) // 2 - k + 1) // 2  # 28 -> 24 -> 12 -> 8 -> 4
        return (_conv(1, c1, k, True) + _conv(c1, c2, k, True)
                + _dense(c2 * side * side, EXAMPLE_DENSE) + _dense(EXAMPLE_DENSE, classes))
    bn = 2  # gamma, beta per channel
    if model == "mobilenetv2":
        return _mobilenetv2_count(classes)
    first = RESNET_STAGE_CHANNELS[0]
    total = _conv(3, first, 3, False) + bn * first
    c_in = first
    for stage, channels in enumerate(RESNET_STAGE_CHANNELS):
        for block in range(blocks):
            total += _conv(c_in, channels, 3, False) + bn * channels
            total += _conv(channels, channels, 3, False) + bn * channels
            if stage > 0 and block == 0:
                total += _conv(c_in, channels, 1, False) + bn * channels
            c_in = channels
    return total + _dense(c_in, classes)


def _mobilenetv2_count(classes: int) -> int:
    bn = 2
    total = _conv(3, MOBILENETV2_FIRST, 3, False) + bn * MOBILENETV2_FIRST
    c_in = MOBILENETV2_FIRST
    for expansion, channels, repeats, _ in MOBILENETV2_SETTINGS:
        for _ in range(repeats):
            hidden = c_in * expansion
            if expansion != 1:
                total += _conv(c_in, hidden, 1, False) + bn * hidden
            total += hidden * 3 * 3 + bn * hidden  # depthwise: one 3x3 filter a channel
            total += _conv(hidden, channels, 1, False) + bn * channels
            c_in = channels
    total += _conv(c_in, MOBILENETV2_LAST, 1, False) + bn * MOBILENETV2_LAST
    return total + _dense(MOBILENETV2_LAST, classes)


def build(model: str, layers: int | None = None, classes: int = 10):
    """A new, uninitialized ``gluon.HybridBlock`` for ``model`` (call ``hybridize()``)."""
    blocks = _check(model, layers)
    if model == "mobilenetv2":
        raise ValueError("mobilenetv2 runs on the torch engines only: use --engine torch "
                         "or torch-ddp")
    from mxnet.gluon import nn

    net = nn.HybridSequential(prefix=f"{model.replace('-', '_')}_")
    with net.name_scope():
        if model == "lenet-mlp":
            net.add(nn.Flatten())
            for units in MLP_HIDDEN:
                net.add(nn.Dense(units, activation="relu"))
            net.add(nn.Dense(classes))
        elif model == "lenet-cnn":
            for channels in LENET_CONV_CHANNELS:
                net.add(nn.Conv2D(channels, LENET_KERNEL, activation="relu"),
                        nn.MaxPool2D(2, 2))
            net.add(nn.Flatten())
            for units in LENET_DENSE:
                net.add(nn.Dense(units, activation="relu"))
            net.add(nn.Dense(classes))
        elif model == "lenet-example":
            for channels in EXAMPLE_CONV_CHANNELS:
                net.add(nn.Conv2D(channels, LENET_KERNEL, activation="tanh"),
                        nn.MaxPool2D(2, 2))
            net.add(nn.Flatten(), nn.Dense(EXAMPLE_DENSE, activation="tanh"),
                    nn.Dense(classes))
        else:
            _add_resnet(net, blocks, classes)
    return net


def _add_resnet(net, blocks: int, classes: int) -> None:
    from mxnet.gluon import nn

    first = RESNET_STAGE_CHANNELS[0]
    net.add(nn.Conv2D(first, 3, padding=1, use_bias=False), nn.BatchNorm(),
            nn.Activation("relu"))
    c_in = first
    for stage, channels in enumerate(RESNET_STAGE_CHANNELS):
        for block in range(blocks):
            downsample = stage > 0 and block == 0
            net.add(_BasicBlock(channels, stride=2 if downsample else 1,
                                project=downsample, in_channels=c_in))
            c_in = channels
    net.add(nn.GlobalAvgPool2D(), nn.Dense(classes))


@functools.lru_cache(maxsize=None)
def _basic_block_class():
    # Defined lazily: subclassing HybridBlock needs mxnet at class-creation time.
    from mxnet.gluon import nn

    class BasicBlock(nn.HybridBlock):
        """conv3x3-BN-relu-conv3x3-BN + shortcut, relu (He et al. 2016, CIFAR variant)."""

        def __init__(self, channels: int, stride: int, project: bool, in_channels: int,
                     **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.body = nn.HybridSequential(prefix="")
                self.body.add(nn.Conv2D(channels, 3, stride, 1, use_bias=False,
                                        in_channels=in_channels),
                              nn.BatchNorm(), nn.Activation("relu"),
                              nn.Conv2D(channels, 3, 1, 1, use_bias=False,
                                        in_channels=channels),
                              nn.BatchNorm())
                self.shortcut = None
                if project:
                    self.shortcut = nn.HybridSequential(prefix="")
                    self.shortcut.add(nn.Conv2D(channels, 1, stride, use_bias=False,
                                                in_channels=in_channels),
                                      nn.BatchNorm())

        def hybrid_forward(self, F, x):
            residual = x if self.shortcut is None else self.shortcut(x)
            return F.Activation(self.body(x) + residual, act_type="relu")

    return BasicBlock


def _BasicBlock(*args, **kwargs):
    return _basic_block_class()(*args, **kwargs)
