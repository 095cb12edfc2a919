"""The controller's check of a user's model (``--model PATH.py:FACTORY``), before anything runs.

Each factory is imported once, here, in this process (importing torch costs the
controller about a second, once per sweep), and built with the data's classes; one
forward pass of a batch of 2 samples of the data's shape must give (2, classes). What
goes wrong is one line naming the problem and the fix (exit 2): the file missing, a
reference not of the ``X:Y`` form, the import raising (its last line), no such
factory, the factory raising or not returning an ``nn.Module``, the forward pass
raising on the shape fed (named), an output of the wrong shape. Then the model is
registered as one more record of ``workloads.models`` (``register_factory``), so the
grid, the engines, the loader and the time limit read it as they read a built-in
model's, and its file becomes a ``UserFile`` the sweep stages and ships to every node.

The data's shape: a named set's (a built-in family's 1x28x28 or 3x32x32, a user's set's
own); with ``--dataset auto`` (or ``synthetic``) the model is tried on 1x28x28 digits
first, then 3x32x32 colour images, and trains on the first it takes.

The time limit (``profiler.sweep.timeouts``) needs a Raspberry Pi 3B's rate, which a
user's model never had measured: the check times forward + backward passes at batch 32
on one thread here and divides this host's samples/s by ``HOST_PER_BOARD``. Timed the
same way on this 2-core x86 host, the built-in models ran 37x (lenet-example,
mobilenetv2 35x) to 123x (lenet-mlp) their records' Pi 3B rates; dividing by 150, more
than any of them, makes a user's model at least as slow on paper as the slowest
built-in (its limit at least as generous), and the real step (data, optimizer,
communication) is slower than the timed passes again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from workloads import models as model_registry
from workloads import user_model
from workloads.datasets import catalog

from ..cell import CellConfig
from ..errors import ConfigError
from ..inputs import UserFile, sha256_file, user_file
from .. import option_lists

HOST_PER_BOARD = 150  # this host's samples/s over a Pi 3B's (module docstring)
PROBE_BATCH = 2  # the shape check's batch
RATE_BATCH = 32  # the rate's batch, the grid's default
RATE_MIN_S = 0.3  # time passes until this much has passed (at least two)
AUTO_SHAPES = tuple(user_model.FAMILY_SETS)  # (1, 28, 28) first, then (3, 32, 32)
USER_FRAMEWORKS = ("torch",)  # a user's model is a torch.nn.Module


@dataclass(frozen=True)
class UserModel:
    """A user's factory as checked: what the record, the cells and the results hold."""

    ref: str  # as given: PATH.py:FACTORY or package.module:FACTORY
    label: str  # <file name>:<FACTORY> or <module>:<FACTORY>, the cells' model
    file: UserFile | None  # None for a module: importable on every node, not shipped
    digest: str  # sha256 of the file (of the module's source file, if it has one)
    input_shape: tuple[int, int, int]
    dataset: str  # the record's dataset (its family decides which sets fit)
    classes: int
    parameters: int  # trainable, counted on the built module
    host_samples_per_s: float  # forward + backward at RATE_BATCH, one thread, here

    @property
    def board_samples_per_s(self) -> float:
        return self.host_samples_per_s / HOST_PER_BOARD


def parse(text: str, engines: Sequence[str], datasets: Sequence[str]
          ) -> tuple[list[str], list[UserModel]]:
    """``--model``'s list as model names (a factory by its label, once checked and
    registered: ``prepare``) and the user models it names."""
    from ..engines import all_models

    refs = split(part.strip() for part in str(text).split(","))[1]
    items = option_lists.parse_choice_list(text, "--model", (*all_models(), *refs))
    check_engines(refs, engines)
    checked = prepare(refs, datasets)
    labels = dict(zip(dict.fromkeys(refs), (m.label for m in checked)))
    return [labels.get(item, item) for item in items], checked


def split(items) -> tuple[list[str], list[str]]:
    """A ``--model`` list as (built-in names, user factory references)."""
    items = list(items)
    return ([m for m in items if not user_model.is_ref(m)],
            [m for m in items if user_model.is_ref(m)])


def check_engines(refs: Sequence[str], engines: Sequence[str]) -> None:
    """A user's model is a ``torch.nn.Module``: one line unless a torch engine is asked."""
    from ..engines import ENGINES

    # The engines that train the registry's torch models (a script engine trains none).
    torch_engines = [e.name for e in ENGINES.values()
                     if e.framework in USER_FRAMEWORKS and e.models]
    if refs and not set(engines) & set(torch_engines):
        raise ConfigError(f"--model {refs[0]} is a torch.nn.Module: it runs on the "
                          f"{', '.join(torch_engines)} engines, not on "
                          f"{', '.join(engines)}: give --engine {','.join(torch_engines)}")


def prepare(refs: Sequence[str], datasets: Sequence[str]) -> list[UserModel]:
    """Check each factory on the data (``datasets``: the ``--dataset`` list, ``auto`` or
    names the catalog knows) and register its record; ``ConfigError`` in one line."""
    checked = []
    for ref in dict.fromkeys(refs):  # each once, in order
        found = check(ref, datasets)
        model_registry.register_factory(
            found.label, found.ref, found.input_shape, found.dataset,
            found.board_samples_per_s, lr=user_model.DEFAULT_LR, classes=found.classes)
        checked.append(found)
    labels = [m.label for m in checked]
    for label in set(labels):
        if labels.count(label) > 1:
            raise ConfigError(f"--model names two factories called {label}: rename one "
                              "file (results tell models apart by that label)")
    return checked


def check(ref: str, datasets: Sequence[str]) -> UserModel:
    """One factory imported, built and tried on the data; ``ConfigError`` in one line."""
    import torch

    where, _ = user_model.split_ref(ref)
    if user_model.is_file_ref(ref):
        if not where.endswith(".py"):
            raise ConfigError(f"--model {ref}: {where} is not a .py file: give your "
                              "model's Python file, PATH.py:FACTORY")
        file = user_file("model", where, "--model")
        digest, node_ref = file.digest, f"{file.source}:{user_model.split_ref(ref)[1]}"
    else:
        file, digest, node_ref = None, "", ref
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a training process's thread, and the rate's
    try:
        factory = user_model.load_factory(node_ref)
        if file is None:
            digest = _module_digest(where)
        nets = {}

        def net_for(classes: int):  # one module per number of classes asked for
            if classes not in nets:
                nets[classes] = user_model.make(factory, ref, classes)
            return nets[classes]

        shape, dataset, classes = _fitting_shape(net_for, ref, _candidates(datasets))
        net = net_for(classes)
        rate = _samples_per_s(net, ref, shape)
    finally:
        torch.set_num_threads(threads)
    return UserModel(
        ref=node_ref, label=user_model.label_of(ref), file=file, digest=digest,
        input_shape=shape, dataset=user_model.record_dataset(shape, dataset),
        classes=classes,
        parameters=sum(p.numel() for p in net.parameters() if p.requires_grad),
        host_samples_per_s=rate)


def stamp(cells: Sequence[CellConfig], checked: Sequence[UserModel]) -> list[CellConfig]:
    """The cells of a user's model carry its file's digest (``model_digest``)."""
    digests = {m.label: m.digest for m in checked}
    return [replace(c, model_digest=digests[c.model]) if c.model in digests else c
            for c in cells]


def user_files(checked: Sequence[UserModel]) -> tuple[UserFile, ...]:
    """The files the sweep stages and ships: each user model's file (modules are not)."""
    return tuple(m.file for m in checked if m.file is not None)


def _module_digest(module: str) -> str:
    """sha256 of a module's source file ("" for one without a file): a changed module
    makes new cells, as a changed file does."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    origin = getattr(spec, "origin", None)
    return sha256_file(Path(origin)) if origin and Path(origin).is_file() else ""


def _candidates(datasets: Sequence[str]) -> list[tuple[tuple[int, int, int], str, int]]:
    """(input shape, dataset, classes) to try, in order: each named set's shape, then,
    for ``auto`` or ``synthetic``, the built-in families' shapes."""
    found = []
    for name in datasets:
        spec = catalog.SPECS.get(name)
        if spec is None or spec.family == "*":
            found += [(shape, name, catalog.CLASSES) for shape in AUTO_SHAPES]
            continue
        shape = spec.input_shape or next(s for s, n in user_model.FAMILY_SETS.items()
                                         if catalog.SPECS[n].family == spec.family)
        found.append((tuple(shape), name, spec.classes))
    return list(dict.fromkeys(found))


def _fitting_shape(net_for, ref: str, candidates) -> tuple[tuple[int, int, int], str, int]:
    """The first candidate (shape, dataset, classes) the module takes, its output
    checked; else one line. ``net_for(classes)``: the factory's module."""
    import torch

    failures = []
    for shape, dataset, classes in candidates:
        batch = (PROBE_BATCH, *shape)
        net = net_for(classes)
        try:
            with torch.no_grad():
                out = net(torch.zeros(batch))
        except Exception as exc:  # noqa: BLE001 - whatever the user's forward raises
            failures.append(f"{user_model.shape_text(batch)} ({dataset}) raised "
                            f"{user_model.one_line(exc)}")
            continue
        got = tuple(getattr(out, "shape", ()))
        if got != (PROBE_BATCH, classes):
            raise ConfigError(
                f"--model {ref}: a batch of {user_model.shape_text(batch)} ({dataset}) gave "
                f"an output of shape {user_model.shape_text(got) or type(out).__name__}, "
                f"not {PROBE_BATCH}x{classes} for the data's {classes} classes: make the "
                f"last layer give {classes} outputs (the factory may take num_classes)")
        return shape, dataset, classes
    fix = ("give --dataset with data of the shape it takes" if len(failures) > 1 else
           "make the model take the data's shape, or give --dataset with data it takes")
    raise ConfigError(f"--model {ref}: its forward pass on a batch of "
                      f"{'; on '.join(failures)}: {fix}")


def _samples_per_s(net, ref: str, shape) -> float:
    """Samples/s of forward + backward passes at ``RATE_BATCH`` here (one thread); a
    training step that raises (an output without a gradient) is one line."""
    import torch

    images = torch.zeros((RATE_BATCH, *shape))
    labels = torch.zeros(RATE_BATCH, dtype=torch.int64)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        net.zero_grad(set_to_none=True)
        loss_fn(net(images), labels).backward()

    try:
        step()  # the first pass pays one-off costs
    except Exception as exc:  # noqa: BLE001 - e.g. an output without a gradient
        raise ConfigError(f"--model {ref}: a training step (forward, cross-entropy loss, "
                          f"backward) raised {user_model.one_line(exc)}: make the module "
                          "trainable, its output a tensor of logits") from None
    passes, t0 = 0, time.perf_counter()
    while True:
        step()
        passes += 1
        elapsed_s = time.perf_counter() - t0
        if passes >= 2 and elapsed_s >= RATE_MIN_S:
            return RATE_BATCH * passes / elapsed_s
