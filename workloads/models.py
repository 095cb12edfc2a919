"""The models edgeprof trains, as data: one ``ModelSpec`` record per model, registered here.

A record says everything the rest of edgeprof asks about a model: its input shape, the
real dataset it trains on (its data family follows from the dataset), its default
learning rate, its depth rule (``--layers``; None: a fixed depth), its weight
initialisation, a builder per framework (``"module:function"``, imported only when a
model is built), and one Raspberry Pi 3B's training rate, which the default time limit
of a cell is made from (``profiler.sweep.timeouts``). The engines' model lists, the
grid's checks, the learning rates, the data loader's padding, the CLI's help and the
time limits all read the record. Names are written elsewhere only as defaults and
examples (a cell's ``resnet``, ``edgeprof data``'s check of each family), in a study's
preset grid, and in the report's depth x batch figures, which are ResNet's. A new model
is one ``register(ModelSpec(...))`` below and its builders (docs/architecture.md,
"Adding a model"); a user's ``nn.Module`` factory (``--model PATH.py:FACTORY``) is one
more record, made at run time by ``register_factory`` (``workloads.user_model``).

The five built-in models:

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
- ``mobilenetv2`` (torch only): Sandler et al. 2018 in its CIFAR form
  (``workloads.torch_models``).

Gluon builders are in ``workloads.gluon_models``, torch ones in
``workloads.torch_models``. No framework is imported here: the controller validates a
grid with the records alone. ``parameter_count`` builds the model (in torch if it is
installed, else in Gluon) and counts its trainable parameters; only tests and benchmarks
call it on the controller, and a worker counts the model it has built.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass

from profiler.errors import ConfigError

from .datasets import catalog

# The architectures' sizes, shared by the Gluon and torch builders.
MLP_HIDDEN = (128, 64)
LENET_CONV_CHANNELS = (6, 16)
LENET_DENSE = (120, 84)
LENET_KERNEL = 5
EXAMPLE_CONV_CHANNELS = (20, 50)  # MXNet's example LeNet (same 5x5 kernels, 2x2 pools)
EXAMPLE_DENSE = 500
RESNET_STAGE_CHANNELS = (16, 32, 64)
# MobileNetV2 for CIFAR (torch engines only): (expansion t, channels c, repeats n, stride
# s) per bottleneck stage as in Sandler et al. 2018, Table 2, with the second stage's
# stride 1 instead of 2 (and the first convolution's): 32x32 input, not 224x224.
MOBILENETV2_FIRST, MOBILENETV2_LAST = 32, 1280
MOBILENETV2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

# The Python module each framework's builders need (what ``parameter_count`` looks for).
FRAMEWORK_MODULES = {"torch": "torch", "mxnet": "mxnet"}
# How a built model of each framework counts its trainable parameters.
COUNTERS = {"mxnet": "workloads.gluon_models:count_parameters",
            "torch": "workloads.torch_models:count_parameters"}
# "own": the builder's module keeps the weights it was made with (a user's factory).
INITS = ("xavier", "he", "own")


class ModelError(ConfigError, ValueError):
    """An unknown model, a depth it cannot have, or a framework it has no builder in.

    A ``ConfigError`` (one line, exit 2 from the CLI) and a ``ValueError`` (what the
    workloads' callers catch)."""


@dataclass(frozen=True)
class Depth:
    """A depth rule: ``layers = step * n + offset`` for n >= 1 blocks a stage."""

    step: int
    offset: int
    default: int
    kind: str  # what an error calls a valid depth, e.g. "a CIFAR ResNet depth"
    shown_up_to: int  # the largest depth the error names

    @property
    def rule(self) -> str:
        return f"{self.step}n+{self.offset}"

    def blocks(self, layers: int | None) -> int:
        """The blocks per stage of a ``layers``-deep model; ``ModelError`` if it cannot be."""
        if layers is None or layers < self.step + self.offset or (layers - self.offset) % self.step:
            first = ", ".join(str(self.step * n + self.offset) for n in range(1, 6))
            raise ModelError(f"--layers {layers} is not {self.kind}: use {self.rule} "
                             f"({first}, ..., {self.shown_up_to})")
        return (layers - self.offset) // self.step


@dataclass(frozen=True)
class ModelSpec:
    """One model: everything edgeprof asks about it (module docstring)."""

    name: str
    description: str  # one line: what the network is
    input_shape: tuple[int, int, int]  # one sample, (C, H, W)
    dataset: str  # the real set it trains on (a ``datasets.catalog`` name)
    lr: float  # default SGD learning rate (docs/workloads.md#learning-rates)
    builders: dict[str, str]  # framework -> "module:function(spec, layers, classes)"
    init: str  # "xavier" (uniform, average fan) or "he" (normal, fan-in): every framework
    # One Pi 3B's training samples/s (Park et al. 2019), for the default time limit; a
    # model with a depth rule was measured at ``board_layers`` and slows with its depth.
    board_samples_per_s: float
    board_layers: int | None = None
    depth: Depth | None = None  # None: a fixed depth (--layers does not apply)
    classes: int = 10
    # A user's factory, "PATH.py:FACTORY" or "package.module:FACTORY" (a record made at
    # run time by ``register_factory``); None for a built-in model.
    factory: str | None = None

    @property
    def frameworks(self) -> tuple[str, ...]:
        return tuple(self.builders)

    @property
    def family(self) -> str:
        """The family of images it takes (``datasets.catalog``: DIGITS or COLOUR)."""
        return catalog.SPECS[self.dataset].family

    @property
    def default_layers(self) -> int | None:
        return self.depth.default if self.depth else None

    def layers(self, layers: int | None) -> int | None:
        """``layers`` as a cell of this model has it: the default depth where none is
        given, None for a fixed depth (checked: ``ModelError``)."""
        if self.depth is None:
            return None
        layers = self.depth.default if layers is None else layers
        self.depth.blocks(layers)
        return layers

    def blocks(self, layers: int | None) -> int:
        """Blocks per stage (0 for a fixed depth); ``ModelError`` for a depth it cannot have."""
        return self.depth.blocks(layers) if self.depth else 0

    def stage_layers(self, layers: int | None) -> int:
        """The top-level modules of its torch build: where a pipeline can cut it."""
        return _stage_layers(self.name, layers)

    def board_rate(self, layers: int | None) -> float:
        """One Pi 3B's training samples/s for this model at ``layers``."""
        if self.board_layers is None:
            return self.board_samples_per_s
        return self.board_samples_per_s * self.board_layers / (layers or self.board_layers)

    def build(self, framework: str, layers: int | None = None, classes: int | None = None):
        """A new model in ``framework`` (torch: initialised from torch's seed; Gluon:
        uninitialised, see ``gluon_models.initializer``)."""
        self.blocks(layers)
        if framework not in self.builders:
            raise ModelError(f"{self.name} runs on the {' and '.join(self.frameworks)} "
                             f"engines only, not {framework}: use an engine of that "
                             f"framework (edgeprof sweep --help lists them)")
        return _resolve(self.builders[framework])(self, layers, classes or self.classes)


REGISTRY: dict[str, ModelSpec] = {}
# ``MODELS`` is the registry itself: ``name in MODELS``, ``", ".join(MODELS)``.
MODELS = REGISTRY


def register(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to the registry (a name is registered once)."""
    if spec.name in REGISTRY:
        raise ModelError(f"model {spec.name!r} is registered already")
    if spec.init not in INITS:
        raise ModelError(f"model {spec.name}: init {spec.init!r} is not one of {INITS}")
    REGISTRY[spec.name] = spec
    return spec


def register_factory(label: str, factory: str, input_shape: tuple[int, int, int],
                     dataset: str, board_samples_per_s: float, *, lr: float,
                     classes: int = 10) -> ModelSpec:
    """Register a user's ``torch.nn.Module`` factory as the model ``label`` (built by
    ``workloads.user_model``, torch engines only, its own initial weights); a record of
    the same label made earlier for a factory is replaced (a second sweep in one
    process), a built-in model's name is refused."""
    earlier = REGISTRY.get(label)
    if earlier is not None and earlier.factory is None:
        raise ModelError(f"{label} is a built-in model's name: give your factory another name")
    unregister(label)
    return register(ModelSpec(
        label, f"your factory {factory}", tuple(input_shape), dataset, lr=lr,
        builders={"torch": "workloads.user_model:build"}, init="own",
        board_samples_per_s=board_samples_per_s, classes=classes, factory=factory))


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)
    parameter_count.cache_clear()


def get(model: str) -> ModelSpec:
    """The record of ``model``; ``ModelError`` naming the known models otherwise."""
    try:
        return REGISTRY[model]
    except (KeyError, TypeError):
        raise ModelError(f"unknown model {model!r}: use one of {', '.join(REGISTRY)}") from None


def names(framework: str | None = None) -> tuple[str, ...]:
    """The models registered (those with a ``framework`` builder), in registration order."""
    return tuple(n for n, s in REGISTRY.items() if framework is None or framework in s.builders)


def with_depth() -> tuple[str, ...]:
    """The models that take ``--layers``."""
    return tuple(n for n, s in REGISTRY.items() if s.depth is not None)


def input_shape(model: str) -> tuple[int, int, int]:
    """One sample's shape (C, H, W) as the model expects it."""
    return get(model).input_shape


def family_of(model: str) -> str:
    """The family of images ``model`` takes: its record's dataset's."""
    return get(model).family


def fits(dataset: str, model: str) -> bool:
    """Whether ``dataset`` (a ``datasets.catalog`` name) has the images ``model`` takes: of
    its family, or (a user's data) of exactly its input shape."""
    spec = catalog.SPECS[dataset]
    if spec.family == "*" or spec.family == family_of(model):
        return True
    return spec.input_shape is not None and spec.input_shape == input_shape(model)


def dataset_for(model: str) -> str:
    """The real dataset a model trains on (``mnist``, ``cifar10``)."""
    return get(model).dataset


def build(model: str, layers: int | None = None, classes: int = 10):
    """A new, uninitialized ``gluon.HybridBlock`` for ``model`` (call ``hybridize()``)."""
    return get(model).build("mxnet", layers, classes)


@functools.lru_cache(maxsize=None)
def parameter_count(model: str, layers: int | None = None, classes: int = 10) -> int:
    """Trainable parameters of the built model (what KVStore/allreduce moves each step).

    Built in the first of its frameworks installed here (torch builds without a forward
    pass, so it goes first); the frameworks' counts agree (tests/unit/test_torch_models.py).
    BatchNorm's running mean/variance are not trainable and never pushed, so they are
    not counted; gamma and beta are. Model bytes on the wire = 4 * count (float32).
    """
    spec = get(model)
    spec.blocks(layers)
    for framework in sorted(spec.frameworks, key=lambda f: f != "torch"):
        module = FRAMEWORK_MODULES.get(framework)
        if module is None or importlib.util.find_spec(module) is not None:
            return _resolve(COUNTERS[framework])(spec.build(framework, layers, classes), spec)
    raise ModelError(f"{model}: none of {', '.join(spec.frameworks)} is installed here to "
                     "build it and count its parameters: run ./scripts/setup.sh")


@functools.lru_cache(maxsize=None)
def _stage_layers(model: str, layers: int | None) -> int:
    if "torch" not in get(model).builders:
        raise ModelError(f"{model} has no torch build to split into pipeline stages: use "
                         f"one of {', '.join(names('torch'))}")
    import torch

    built = get(model).build("torch", layers)
    if not isinstance(built, torch.nn.Sequential):
        raise ModelError(f"{model} is a {type(built).__name__}, not a torch.nn.Sequential: "
                         "a pipeline cuts a model between the layers of a Sequential; return "
                         "one from the factory")
    return len(list(built.children()))


def _resolve(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


# The records. Board rates: the study's Pi 3B times for one device (Park et al. 2019,
# Tables 1-2, Figure 5): LeNet-MLP 105 s and "LeNet (CNN)" 1,079 s an MNIST epoch (that
# rate stands for both CNNs: docs/study.md, it was most likely MXNet's example LeNet),
# ResNet-32 about 20,000 s for CIFAR-10's 50,000 images, its cost growing with depth.
# MobileNetV2 (CIFAR form) was never timed on a Pi 3B; per sample it costs about what
# ResNet-32 does in multiply-adds, but depthwise convolutions run far below a CPU's
# peak: half ResNet-32's rate keeps the limit generous. Learning rates:
# docs/workloads.md#learning-rates (lenet-example's 0.05 is MXNet's train_mnist.py's).
PI3B_LENET_CNN_SAMPLES_PER_S = 60000 / 1079
PI3B_RESNET32_SAMPLES_PER_S = 50000 / 20000
_GLUON, _TORCH = "workloads.gluon_models", "workloads.torch_models"

register(ModelSpec(
    "lenet-mlp", "flatten, dense 128 relu, dense 64 relu, dense 10", (1, 28, 28), "mnist",
    lr=0.02, builders={"mxnet": f"{_GLUON}:lenet_mlp", "torch": f"{_TORCH}:lenet_mlp"},
    init="xavier", board_samples_per_s=60000 / 105))
register(ModelSpec(
    "lenet-cnn", "LeNet-5 on MNIST padded 28 -> 32", (1, 32, 32), "mnist",
    lr=0.02, builders={"mxnet": f"{_GLUON}:lenet_cnn", "torch": f"{_TORCH}:lenet_cnn"},
    init="xavier", board_samples_per_s=PI3B_LENET_CNN_SAMPLES_PER_S))
register(ModelSpec(
    "lenet-example", "MXNet's example LeNet (v0.9.5), the study's", (1, 28, 28), "mnist",
    lr=0.05, builders={"mxnet": f"{_GLUON}:lenet_example",
                       "torch": f"{_TORCH}:lenet_example"},
    init="xavier", board_samples_per_s=PI3B_LENET_CNN_SAMPLES_PER_S))
_RESNET_DEPTH = Depth(step=6, offset=2, default=20, kind="a CIFAR ResNet depth",
                      shown_up_to=110)

register(ModelSpec(
    "resnet", f"CIFAR ResNet of depth {_RESNET_DEPTH.rule}", (3, 32, 32), "cifar10",
    lr=0.05, builders={"mxnet": f"{_GLUON}:resnet", "torch": f"{_TORCH}:resnet"},
    init="he", board_samples_per_s=PI3B_RESNET32_SAMPLES_PER_S, board_layers=32,
    depth=_RESNET_DEPTH))
register(ModelSpec(
    "mobilenetv2", "MobileNetV2, CIFAR form", (3, 32, 32), "cifar10",
    lr=0.05, builders={"torch": f"{_TORCH}:mobilenetv2"},
    init="he", board_samples_per_s=PI3B_RESNET32_SAMPLES_PER_S / 2))
