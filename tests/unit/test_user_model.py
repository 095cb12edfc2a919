"""A user's ``nn.Module`` factory as one more model record: the reference's forms, the
controller's check (shape, classes, parameters, rate), the node's record and argv."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from profiler.cell import CellConfig
from profiler.engines.base import TrainOptions, train_argv
from profiler.errors import ConfigError
from profiler.sweep import grid, timeouts
from profiler.sweep import user_model as checks
from tests.conftest import need
from workloads import models, user_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cnn_model.py"
COLOUR_NET = """
from torch import nn

def colour(num_classes=10):
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 30 * 30, num_classes))
"""


@pytest.fixture(autouse=True)
def _forget_user_models():
    yield
    for name, spec in list(models.REGISTRY.items()):
        if spec.factory is not None:
            models.unregister(name)


def _need_torch():
    need("torch (scripts/setup.sh)", importlib.util.find_spec("torch") is not None)


def test_a_reference_names_a_file_or_a_module_and_a_function():
    assert user_model.split_ref("examples/cnn_model.py:make_model") == \
        ("examples/cnn_model.py", "make_model")
    assert user_model.is_file_ref("cnn_model.py:make_model")
    assert user_model.is_file_ref("/abs/net:make")  # a path, even without .py
    assert not user_model.is_file_ref("mypkg.nets:make_model")
    assert user_model.label_of("/a/b/cnn_model.py:make_model") == "cnn_model.py:make_model"
    assert user_model.label_of("mypkg.nets:make_model") == "mypkg.nets:make_model"
    for bad in ("cnn_model.py:", ":make_model", "cnn_model.py:make-model"):
        with pytest.raises(ConfigError, match="PATH.py:FACTORY"):
            user_model.split_ref(bad)
    assert checks.split(["lenet-mlp", "a.py:f", "resnet"]) == (["lenet-mlp", "resnet"],
                                                               ["a.py:f"])


def test_the_example_is_checked_on_digits_and_becomes_a_torch_only_record():
    _need_torch()
    import torch

    (found,) = checks.prepare([f"{EXAMPLE}:make_model"], ["auto"])
    assert found.label == "cnn_model.py:make_model"
    assert found.input_shape == (1, 28, 28) and found.classes == 10
    assert found.digest == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert found.file.staged_name == f"model-{found.digest[:12]}.py"
    spec = models.get(found.label)
    assert spec.family == "digits28" and spec.init == "own" and spec.depth is None
    assert spec.board_samples_per_s == pytest.approx(found.host_samples_per_s
                                                     / checks.HOST_PER_BOARD)
    net = spec.build("torch")
    assert found.parameters == sum(p.numel() for p in net.parameters()) == 105_866
    # The factory's own weights, not re-initialised: the same seed, the same module.
    torch.manual_seed(7)
    built = spec.build("torch")
    torch.manual_seed(7)
    spec_ = importlib.util.spec_from_file_location("cnn_direct", EXAMPLE)
    direct = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(direct)
    own = direct.make_model()
    assert all(torch.equal(a, b) for a, b in zip(built.parameters(), own.parameters()))
    # The grid takes it on the torch engines and refuses it elsewhere, in one line.
    cell = grid.validate(CellConfig(engine="torch-ddp", model=found.label, layers=None,
                                    dataset="fashion-mnist"))
    assert cell.lr == user_model.DEFAULT_LR
    assert timeouts.default_timeout_s(cell) > timeouts.STARTUP_ALLOWANCE_S
    with pytest.raises(ConfigError, match="torch"):
        grid.validate(CellConfig(engine="mxnet", model=found.label, layers=None))
    with pytest.raises(ConfigError, match="--engine torch,torch-ddp"):
        checks.check_engines([found.ref], ["mxnet", "horovod"])


def test_a_colour_model_trains_on_colour_images_under_auto(tmp_path):
    _need_torch()
    path = tmp_path / "colour_net.py"
    path.write_text(COLOUR_NET)
    (found,) = checks.prepare([f"{path}:colour"], ["auto"])
    assert found.input_shape == (3, 32, 32) and found.dataset == "cifar10"
    assert models.get(found.label).family == "colour32"
    assert found.parameters == 4 * 3 * 9 + 4 + (4 * 30 * 30 + 1) * 10


def test_the_node_gets_the_staged_file_or_the_module_and_the_input_shape(tmp_path):
    _need_torch()
    (found,) = checks.prepare([f"{EXAMPLE}:make_model"], ["fashion-mnist"])
    cell = checks.stamp([CellConfig(engine="torch", model=found.label, layers=None,
                                    dataset="fashion-mnist")], [found])[0]
    assert cell.model_digest == found.digest
    argv = train_argv(cell, tmp_path, TrainOptions(inputs_dir=tmp_path / "inputs"), "torch",
                      "local")
    factory = argv[argv.index(user_model.FACTORY_OPTION) + 1]
    assert factory == f"{tmp_path / 'inputs' / found.file.staged_name}:make_model"
    assert argv[argv.index(user_model.INPUT_OPTION) + 1] == "1x28x28"
    assert argv[argv.index("--model") + 1] == "cnn_model.py:make_model"
    # What the node makes of that command line: the same record, its factory staged.
    models.unregister(found.label)
    user_model.register_from_argv(argv[3:])
    spec = models.get(found.label)
    assert spec.factory == factory and spec.input_shape == (1, 28, 28)
    assert spec.family == "digits28"
    # A module reference travels as it is (it is importable on every node, not shipped).
    module_argv = user_model.node_argv("mypkg.nets:make", (3, 32, 32), None)
    assert module_argv == [user_model.FACTORY_OPTION, "mypkg.nets:make",
                           user_model.INPUT_OPTION, "3x32x32"]


def test_a_built_in_name_cannot_be_taken_by_a_factory():
    with pytest.raises(ConfigError, match="built-in"):
        models.register_factory("lenet-mlp", "x.py:f", (1, 28, 28), "mnist", 1.0, lr=0.01)
