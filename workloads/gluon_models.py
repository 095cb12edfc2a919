"""The Gluon builders of the models registered in ``workloads.models``, as hybridizable
blocks: LeNet MLP, LeNet-5 CNN, MXNet's example LeNet, CIFAR ResNet (their records say
what each is; ``mobilenetv2`` has no Gluon builder).

Each builder is ``f(spec, layers, classes)`` and returns a new, uninitialized
``gluon.HybridSequential``; ``initializer(spec)`` is the initialisation its record names.
MXNet is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import functools

from .models import (EXAMPLE_CONV_CHANNELS, EXAMPLE_DENSE, LENET_CONV_CHANNELS,
                     LENET_DENSE, LENET_KERNEL, MLP_HIDDEN, RESNET_STAGE_CHANNELS)


def initializer(spec):
    """MXNet's initializer for ``spec.init``: Xavier uniform over the average fan, or He
    normal over the fan-in (``Xavier("gaussian", "in", 2)``)."""
    import mxnet as mx

    if spec.init == "he":
        return mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)
    return mx.init.Xavier()


def count_parameters(net, spec) -> int:
    """Trainable parameters of ``net`` (BatchNorm's running statistics are not counted);
    a net not initialised yet is, with its shapes from one forward pass of zeros."""
    import mxnet as mx

    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    try:
        return sum(p.data().size for p in params)
    except RuntimeError:  # uninitialised, or its shapes deferred to a first forward pass
        net.initialize(initializer(spec))
        net(mx.nd.zeros((1, *spec.input_shape)))
        return sum(p.data().size for p in params)


def _sequential(spec):
    from mxnet.gluon import nn

    return nn.HybridSequential(prefix=f"{spec.name.replace('-', '_')}_")


def lenet_mlp(spec, layers, classes: int):
    from mxnet.gluon import nn

    net = _sequential(spec)
    with net.name_scope():
        net.add(nn.Flatten())
        for units in MLP_HIDDEN:
            net.add(nn.Dense(units, activation="relu"))
        net.add(nn.Dense(classes))
    return net


def lenet_cnn(spec, layers, classes: int):
    from mxnet.gluon import nn

    net = _sequential(spec)
    with net.name_scope():
        for channels in LENET_CONV_CHANNELS:
            net.add(nn.Conv2D(channels, LENET_KERNEL, activation="relu"), nn.MaxPool2D(2, 2))
        net.add(nn.Flatten())
        for units in LENET_DENSE:
            net.add(nn.Dense(units, activation="relu"))
        net.add(nn.Dense(classes))
    return net


def lenet_example(spec, layers, classes: int):
    from mxnet.gluon import nn

    net = _sequential(spec)
    with net.name_scope():
        for channels in EXAMPLE_CONV_CHANNELS:
            net.add(nn.Conv2D(channels, LENET_KERNEL, activation="tanh"), nn.MaxPool2D(2, 2))
        net.add(nn.Flatten(), nn.Dense(EXAMPLE_DENSE, activation="tanh"), nn.Dense(classes))
    return net


def resnet(spec, layers, classes: int):
    from mxnet.gluon import nn

    blocks = spec.blocks(layers)
    net = _sequential(spec)
    with net.name_scope():
        first = RESNET_STAGE_CHANNELS[0]
        net.add(nn.Conv2D(first, 3, padding=1, use_bias=False), nn.BatchNorm(),
                nn.Activation("relu"))
        c_in = first
        for stage, channels in enumerate(RESNET_STAGE_CHANNELS):
            for block in range(blocks):
                downsample = stage > 0 and block == 0
                net.add(_basic_block_class()(channels, stride=2 if downsample else 1,
                                             project=downsample, in_channels=c_in))
                c_in = channels
        net.add(nn.GlobalAvgPool2D(), nn.Dense(classes))
    return net


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
