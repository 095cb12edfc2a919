"""A user's own ``torch.nn.Module``, on the node: ``--model PATH.py:FACTORY``.

A factory reference is ``PATH.py:FACTORY`` (one self-contained Python file; the sweep
ships it to every node as ``<sweep>/inputs/model-<digest12>.py``) or
``package.module:FACTORY`` (a module importable on every node: it is not shipped).
FACTORY is called with ``num_classes`` when it takes that argument (or ``**kwargs``),
else with none, and returns a ``torch.nn.Module``. Its weights are kept as the factory
made them (the record's init is ``own``): every process calls it after the same
``torch.manual_seed``, so every process starts from the same weights, as with a
built-in model.

``workloads.train`` registers the record before it parses its options
(``register_from_argv``: ``--model``'s choices are the registry), from
``--model-factory REF --model-input CxHxW`` that the engine added
(``node_argv``); the model is built, and the factory imported, only when the worker (or
the torch parameter server) builds it. The controller's checks are
``profiler.sweep.user_model``'s; both import a factory with ``load_factory``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from profiler.errors import ConfigError

FACTORY_OPTION, INPUT_OPTION = "--model-factory", "--model-input"
# A user model trains with SGD at this rate unless --lr says otherwise: the low end of
# the built-in models' measured defaults (0.02-0.05, docs/workloads.md#learning-rates),
# where a small CNN learns without diverging at momentum 0.9.
DEFAULT_LR = 0.01
# Shapes of the built-in data families, and a real set of each (a record's ``dataset``
# only decides its family: which sets fit it, what ``--dataset auto`` picks).
FAMILY_SETS = {(1, 28, 28): "fashion-mnist", (3, 32, 32): "cifar10"}


def is_ref(text: str) -> bool:
    """Whether a ``--model`` item names a user's factory rather than a built-in model
    (a file without ``:FACTORY`` too: ``split_ref`` then says what is missing)."""
    return ":" in text or text.endswith(".py") or "/" in text


def split_ref(ref: str) -> tuple[str, str]:
    """``("PATH.py" or "package.module", "FACTORY")``; ``ConfigError`` if not that form."""
    where, sep, name = ref.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ConfigError(f"--model {ref} is not PATH.py:FACTORY or package.module:FACTORY: "
                          "name the file (or module) and the function that returns your "
                          "torch.nn.Module, e.g. --model examples/cnn_model.py:make_model")
    return where, name


def is_file_ref(ref: str) -> bool:
    """A file (shipped with the sweep) rather than a module importable on every node."""
    where = split_ref(ref)[0]
    return where.endswith(".py") or "/" in where


def label_of(ref: str) -> str:
    """What results call the model: ``<file name>:<FACTORY>`` or ``<module>:<FACTORY>``."""
    where, name = split_ref(ref)
    return f"{Path(where).name if is_file_ref(ref) else where}:{name}"


def shape_text(shape) -> str:
    return "x".join(str(n) for n in shape)


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        c, h, w = (int(n) for n in text.split("x"))
    except ValueError:
        raise ConfigError(f"{INPUT_OPTION} {text!r} is not CxHxW, e.g. 1x28x28") from None
    return c, h, w


def record_dataset(input_shape, dataset: str) -> str:
    """The ``dataset`` of a user model's record: the cell's own set where it is a real
    one (a catalog name, a user's data label; on a node, a user's staged file, named as
    the loader registers it), else the built-in set of its shape."""
    from .datasets.catalog import SPECS
    from .datasets.user import is_staged

    if is_staged(dataset):
        return Path(dataset).stem
    spec = SPECS.get(dataset)
    if spec is not None and spec.family != "*":
        return dataset
    return FAMILY_SETS.get(tuple(input_shape), "synthetic")


def node_argv(ref: str, input_shape, staged: Path | None) -> list[str]:
    """What the engine adds to ``workloads.train``'s command line for a user model:
    the factory where the node finds it (``staged``: the shipped file) and its input."""
    where_on_node = f"{staged}:{split_ref(ref)[1]}" if staged is not None else ref
    return [FACTORY_OPTION, where_on_node, INPUT_OPTION, shape_text(input_shape)]


def register_from_argv(argv: list[str] | None) -> None:
    """Register the user model ``workloads.train``'s command line names, if it names one."""
    from . import models

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model")
    parser.add_argument(FACTORY_OPTION, dest="factory")
    parser.add_argument(INPUT_OPTION, dest="input", default="1x28x28")
    parser.add_argument("--dataset", default="auto")
    parser.add_argument("--lr", type=float, default=DEFAULT_LR)
    known, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if known.factory is None or known.model is None:
        return
    shape = parse_shape(known.input)
    # The board rate is the controller's business (the time limit); a node never reads it.
    models.register_factory(known.model, known.factory, shape,
                            record_dataset(shape, known.dataset), board_samples_per_s=1.0,
                            lr=known.lr)


def load_factory(ref: str):
    """The FACTORY callable of ``ref``; ``ConfigError`` in one line when it cannot be had."""
    where, name = split_ref(ref)
    if is_file_ref(ref):
        path = Path(where)
        if not path.is_file():
            raise ConfigError(f"--model {ref}: {where} is no file: give the path of your "
                              "model's .py file")
        # One module name per file: a process may load two files of the same name.
        module_name = "edgeprof_user_model_" + hashlib.sha256(
            str(path.resolve()).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"--model {ref}: {where} is not a Python file: give a .py file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses and pickling look modules up here
        importing = lambda: spec.loader.exec_module(module)  # noqa: E731
    else:
        module = None
        importing = lambda: importlib.import_module(where)  # noqa: E731
    try:
        loaded = importing()
    except Exception as exc:  # noqa: BLE001 - whatever the user's import raises
        raise ConfigError(f"--model {ref}: importing {where} raised {one_line(exc)}: fix "
                          "the file (or install what it imports on every node)") from None
    module = module or loaded
    factory = getattr(module, name, None)
    if not callable(factory):
        found = [n for n, v in vars(module).items()
                 if callable(v) and not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
        raise ConfigError(f"--model {ref}: {where} has no function {name}"
                          + (f" (it defines {', '.join(found)})" if found else "")
                          + ": name the function that returns your torch.nn.Module")
    return factory


def make(factory, ref: str, classes: int):
    """Call ``factory`` (with ``num_classes`` when it takes it) and check it made a module."""
    import torch

    try:
        params = inspect.signature(factory).parameters.values()
        takes = any(p.name == "num_classes" or p.kind is p.VAR_KEYWORD for p in params)
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        takes = False
    call = f"{split_ref(ref)[1]}(num_classes={classes})" if takes else f"{split_ref(ref)[1]}()"
    try:
        net = factory(num_classes=classes) if takes else factory()
    except Exception as exc:  # noqa: BLE001 - whatever the user's factory raises
        raise ConfigError(f"--model {ref}: {call} raised {one_line(exc)}: fix the "
                          "factory") from None
    if not isinstance(net, torch.nn.Module):
        raise ConfigError(f"--model {ref}: {call} returned {type(net).__name__}, not a "
                          "torch.nn.Module: return the model itself")
    return net


def build(spec, layers, classes: int):
    """The torch builder of a user model's record: the factory's module, weights as made."""
    return make(load_factory(spec.factory), spec.factory, classes)


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (the last line of a multi-line message)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__
