"""The worker's side of the data: read a set's arrays and take this worker's part.

``load`` gives a worker its training shard (or the whole set, ``replicate``) and the test
set as NCHW arrays. Images stay uint8 until the worker's shard (or batch) is normalized:
a single float32 copy, of the shard only. Which set and where its files are is the
resolver's business (``resolver.check``, ``resolver.locate``), shared with the controller
so both agree. A user's dataset arrives as the path of its staged file
(``user.is_staged``): ``user.Staged`` reads it and registers its ``DatasetSpec``, so it
is normalized (with its own per-channel mean and std), padded and sharded as the sets
above, and the model is built with its number of classes (``Dataset.classes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profiler.errors import ConfigError, DataError

from . import cifar, idx, mnist5k, user
from . import synthetic as _synthetic
from .. import models
from ..models import family_of, fits
from .catalog import CLASSES, DIGITS, SPECS, register
from .resolver import AUTO, Source, check, idx_files, locate


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
    classes: int = CLASSES  # what the model's last layer outputs

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """float32 normalized copy of uint8 images (already padded for the model)."""
        return _scale(x, self.name)


class _Files:
    """A located set's files, checked once: how many samples a split has, and its rows."""

    def __init__(self, source: Source):
        self.source = source
        if source.name in ("mnist", "fashion-mnist"):
            self.found = idx_files(source)
        elif source.name != "mnist-5k":
            self.found = cifar.check(source.path, source.fix)

    def count(self, split: str) -> int:
        if self.source.name in ("mnist", "fashion-mnist"):
            return self.found[split][2]
        if self.source.name == "mnist-5k":
            return len(self.read(split, slice(None))[1])  # 5,000 digits: read to count
        return cifar.count(self.found, split)

    def read(self, split: str, rows: slice) -> tuple[np.ndarray, np.ndarray]:
        """Only ``rows`` of the split are read (the large sets), as uint8 NCHW."""
        if self.source.name in ("mnist", "fashion-mnist"):
            return idx.read(self.found, split, rows)
        if self.source.name == "mnist-5k":
            x, y = mnist5k.read(self.source.path, split, self.source.fix)
            return x[rows], y[rows]
        return cifar.read(self.found, split, self.source.fix, rows)


def synthetic(model: str, samples: int, seed: int, split: str = "train"
              ) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` uint8 images shaped like the model's real dataset, with labels."""
    shape = (1, idx.SIDE, idx.SIDE) if family_of(model) == DIGITS else cifar.SHAPE
    return _synthetic.generate(shape, samples, seed, split)


def _pad(x: np.ndarray, model: str) -> np.ndarray:
    """Images zero-padded on every side up to the model's input (its record's shape):
    LeNet-5 takes MNIST's 28x28 digits as 32x32, as in the study."""
    height, width = models.input_shape(model)[1:]
    pad_h, pad_w = (height - x.shape[2]) // 2, (width - x.shape[3]) // 2
    if pad_h <= 0 and pad_w <= 0:
        return x
    pad_h, pad_w = max(pad_h, 0), max(pad_w, 0)
    return np.pad(x, ((0, 0), (0, 0), (pad_h, pad_h), (pad_w, pad_w)))


def _scale(x: np.ndarray, name: str) -> np.ndarray:
    channels = x.shape[1]
    mean, std = SPECS[name].normalization or ((0.5,) * channels, (0.25,) * channels)
    # In place after the one conversion: a single float32 copy, even for a whole shard.
    out = x.astype(np.float32)
    if x.dtype == np.uint8:  # pixels; a user's float data is normalized on its own scale
        out *= np.float32(1 / 255)
    out -= np.asarray(mean, np.float32).reshape(1, channels, 1, 1)
    out /= np.asarray(std, np.float32).reshape(1, channels, 1, 1)
    return out


def for_model(x: np.ndarray, model: str, name: str) -> np.ndarray:
    """uint8 images of the set ``name`` as ``model`` takes them: padded to its input and
    normalized, float32 (a network fed images read elsewhere: the hierarchy's tiers)."""
    return _scale(_pad(x, model), name)


def load(model: str, data_dir: str | Path | None = None, max_samples: int | None = None,
         val_samples: int | None = None, seed: int = 42, rank: int = 0,
         num_workers: int = 1, raw: bool = False, dataset: str = AUTO) -> Dataset:
    """This worker's training shard and the test set, float32 normalized NCHW.

    ``dataset`` is ``auto``, a name (``resolver.resolve``) or a user's staged file
    (``user.Staged``). ``max_samples`` caps the
    whole training set before sharding; each of ``num_workers`` workers gets the same
    number of samples (a contiguous slice by ``rank``; the remainder is dropped), so sync
    training never waits on a short shard. ``val_samples`` caps the test set. Only the
    shard is converted to float32. With ``raw`` the images stay uint8 (padded for the
    model) and the caller normalizes each batch (``Dataset.normalize``): the full
    CIFAR-10 training set is 150 MB as uint8 but 600 MB as float32, too much beside
    MXNet on a 1 GB Pi.
    """
    if not 0 <= rank < num_workers:
        raise ValueError(f"rank {rank} outside 0..{num_workers - 1}")
    files = None
    if user.is_staged(dataset):
        files = _staged(dataset, model)
        name = files.spec.name
    else:
        name = check(model, data_dir, dataset)
        if name != "synthetic":
            files = _Files(locate(name, data_dir))
    train_len = _synthetic.TRAIN_SAMPLES if files is None else files.count("train")
    classes = SPECS[name].classes
    total = min(train_len, max_samples) if max_samples else train_len
    per_worker = total // num_workers
    if per_worker == 0:
        raise DataError(f"{total} training samples cannot be shared by {num_workers} "
                        f"workers: raise --max-samples")
    shard = slice(rank * per_worker, (rank + 1) * per_worker)
    if files is None:
        test_n = min(val_samples or _synthetic.TEST_SAMPLES, _synthetic.TEST_SAMPLES)
        x_train, y_train = (a[shard] for a in synthetic(model, total, seed, "train"))
        x_test, y_test = synthetic(model, test_n, seed, "test")
    else:
        # Only this worker's rows: the rest of the set never enters its memory.
        x_train, y_train = files.read("train", shard)
        x_test, y_test = files.read("test", slice(val_samples))
    x_train, x_test = _pad(x_train, model), _pad(x_test, model)
    if raw:
        # Copies where a slice still views a larger array (synthetic, mnist-5k), so that
        # the rest can be freed; a read's own arrays are kept as they are.
        return Dataset(name, _own(x_train), _own(y_train), _own(x_test), _own(y_test),
                       total, raw=True, classes=classes)
    return Dataset(name, _scale(x_train, name), _own(y_train), _scale(x_test, name),
                   _own(y_test), total, classes=classes)


def _staged(path: str, model: str) -> user.Staged:
    """A user's staged dataset, registered (``SPECS``) and checked against the model."""
    files = user.Staged(path)
    register(files.spec)
    if not fits(files.spec.name, model):
        raise ConfigError(f"{path} holds {_shape(files.spec.input_shape)} samples, {model} "
                          f"takes {_shape(models.input_shape(model))}: give it data of its "
                          "shape")
    return files


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(n) for n in shape)


def _own(a: np.ndarray) -> np.ndarray:
    """``a`` itself if it owns its memory, else a copy that does."""
    return a if a.base is None else a.copy()
