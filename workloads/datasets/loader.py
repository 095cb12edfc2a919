"""The worker's side of the data: read a set's arrays and take this worker's part.

``load`` gives a worker its training shard (or the whole set, ``replicate``) and the test
set as NCHW arrays. Images stay uint8 until the worker's shard (or batch) is normalized:
a single float32 copy, of the shard only. Which set and where its files are is the
resolver's business (``resolver.check``, ``resolver.locate``), shared with the controller
so both agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profiler.errors import DataError

from . import cifar, idx, mnist5k
from . import synthetic as _synthetic
from .catalog import DIGITS, SPECS, family_of
from .resolver import AUTO, Source, check, idx_files, locate

LENET_CNN_PAD = 2  # 28x28 -> 32x32, LeNet-5's input size


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


def _read(source: Source, split: str) -> tuple[np.ndarray, np.ndarray]:
    if source.name in ("mnist", "fashion-mnist"):
        return idx.read(idx_files(source), split)
    if source.name == "mnist-5k":
        return mnist5k.read(source.path, split, source.fix)
    return cifar.read(cifar.check(source.path, source.fix), split, source.fix)


def synthetic(model: str, samples: int, seed: int, split: str = "train"
              ) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` uint8 images shaped like the model's real dataset, with labels."""
    shape = (1, idx.SIDE, idx.SIDE) if family_of(model) == DIGITS else cifar.SHAPE
    return _synthetic.generate(shape, samples, seed, split)


def _pad(x: np.ndarray, model: str) -> np.ndarray:
    if model != "lenet-cnn":
        return x
    pad = LENET_CNN_PAD
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))


def _scale(x: np.ndarray, name: str) -> np.ndarray:
    channels = x.shape[1]
    mean, std = SPECS[name].normalization or ((0.5,) * channels, (0.25,) * channels)
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

    ``dataset`` is ``auto`` or a name (``resolver.resolve``). ``max_samples`` caps the
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
    name = check(model, data_dir, dataset)
    if name == "synthetic":
        train_n = min(max_samples or _synthetic.TRAIN_SAMPLES, _synthetic.TRAIN_SAMPLES)
        test_n = min(val_samples or _synthetic.TEST_SAMPLES, _synthetic.TEST_SAMPLES)
        x_train, y_train = synthetic(model, train_n, seed, "train")
        x_test, y_test = synthetic(model, test_n, seed, "test")
    else:
        source = locate(name, data_dir)
        x_train, y_train = _read(source, "train")
        x_test, y_test = _read(source, "test")
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
