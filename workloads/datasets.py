"""Training data from a data folder (MNIST IDX, CIFAR-10 binary) or a synthetic set.

LeNet models train on MNIST, ResNet on CIFAR-10 (as in Park, Lee & Kim 2019). Nothing is
downloaded here: ``edgeprof data fetch`` fills the folder beforehand, because a worker on
a Pi must not depend on the internet in the middle of a sweep.

Layout of a data folder ``DIR`` (each file raw or ``.gz`` for MNIST):

    DIR/mnist/train-images-idx3-ubyte[.gz]   (or directly in DIR)
    DIR/mnist/train-labels-idx1-ubyte[.gz]
    DIR/mnist/t10k-images-idx3-ubyte[.gz]
    DIR/mnist/t10k-labels-idx1-ubyte[.gz]
    DIR/cifar10/cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin
                                               (or DIR/cifar-10-batches-bin/)

Without a folder the dataset is ``synthetic``: fixed random class prototypes plus
Gaussian noise, same shapes as the real set, deterministic from the seed, so every
worker of a cell builds the same set and a model can learn it (accuracy well above
chance after one epoch). Images stay uint8 until the worker's shard is normalized.

``check()`` validates headers and sizes without reading the images or importing MXNet.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profiler.errors import DataError

from . import models

CLASSES = 10
SYNTHETIC_TRAIN_SAMPLES = 6000
SYNTHETIC_TEST_SAMPLES = 1000
# On the 0..255 scale: faint prototypes under strong noise, so accuracy climbs over
# epochs instead of jumping to 1.0 in the first few steps, yet stays learnable.
SYNTHETIC_CONTRAST = 0.3
# Prototypes are coarse blocks (side / 4 cells, upsampled), not pixel noise: pooling
# CNNs average pixel-level patterns away and could not learn them in a short run.
SYNTHETIC_BLOCK_PX = 4
SYNTHETIC_NOISE_STD = 48.0

MNIST_IMAGE_MAGIC = 2051
MNIST_LABEL_MAGIC = 2049
MNIST_SIDE = 28
MNIST_FILES = {  # split -> (images, labels)
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CIFAR_SHAPE = (3, 32, 32)
CIFAR_RECORD_BYTES = 1 + 3 * 32 * 32  # label byte, then R, G, B planes
CIFAR_DIR = "cifar-10-batches-bin"
CIFAR_FILES = {
    "train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
    "test": ("test_batch.bin",),
}
# Per-channel mean and std on the 0..1 scale (the usual published values).
NORMALIZATION = {
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "synthetic": None,  # mean 0.5, std 0.25 per channel: the prototypes are uniform
}
LENET_CNN_PAD = 2  # MNIST 28x28 -> 32x32, LeNet-5's input size


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


def _fix_hint(data_dir: Path) -> str:
    return f"run `edgeprof data fetch --data-dir {data_dir}`"


# ---------------------------------------------------------------- MNIST (IDX files)

def _mnist_path(data_dir: Path, name: str) -> Path:
    for folder in (data_dir / "mnist", data_dir):
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DataError(f"MNIST file missing: {data_dir / 'mnist' / name}[.gz]; "
                    f"{_fix_hint(data_dir)}")


def _idx_header(path: Path, data_dir: Path) -> tuple[int, tuple[int, ...], int]:
    """(magic, dims, uncompressed size in bytes) of an IDX file, without reading it."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                head = fh.read(16)
            # A gzip member's last 4 bytes are the uncompressed size mod 2**32.
            with open(path, "rb") as fh:
                fh.seek(-4, 2)
                size = struct.unpack("<I", fh.read(4))[0]
        else:
            with open(path, "rb") as fh:
                head = fh.read(16)
            size = path.stat().st_size
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:  # zlib: corrupt body
        raise DataError(f"MNIST file unreadable: {path} ({exc}); {_fix_hint(data_dir)}") from exc
    if len(head) < 8:
        raise DataError(f"MNIST file truncated: {path}; {_fix_hint(data_dir)}")
    magic, count = struct.unpack(">II", head[:8])
    dims = (count,)
    if magic == MNIST_IMAGE_MAGIC and len(head) == 16:
        dims = (count, *struct.unpack(">II", head[8:16]))
    return magic, dims, size


def _check_mnist(data_dir: Path) -> dict[str, tuple[Path, Path, int]]:
    """split -> (images path, labels path, samples); raises DataError on any problem."""
    found = {}
    for split, (images_name, labels_name) in MNIST_FILES.items():
        images, labels = _mnist_path(data_dir, images_name), _mnist_path(data_dir, labels_name)
        magic, dims, size = _idx_header(images, data_dir)
        expected_dims = (dims[0], MNIST_SIDE, MNIST_SIDE)
        if magic != MNIST_IMAGE_MAGIC or dims != expected_dims:
            raise DataError(f"not an MNIST image file (magic {magic}, dims {dims}): {images}; "
                            f"{_fix_hint(data_dir)}")
        if size != 16 + dims[0] * MNIST_SIDE * MNIST_SIDE:
            raise DataError(f"MNIST file truncated or padded ({size} bytes for {dims[0]} "
                            f"images): {images}; {_fix_hint(data_dir)}")
        l_magic, l_dims, l_size = _idx_header(labels, data_dir)
        if l_magic != MNIST_LABEL_MAGIC or l_size != 8 + l_dims[0]:
            raise DataError(f"not a valid MNIST label file (magic {l_magic}, {l_size} "
                            f"bytes): {labels}; {_fix_hint(data_dir)}")
        if l_dims[0] != dims[0]:
            raise DataError(f"MNIST {split} images ({dims[0]}) and labels ({l_dims[0]}) "
                            f"differ in count: {labels}; {_fix_hint(data_dir)}")
        found[split] = (images, labels, dims[0])
    return found


def _read_idx_body(path: Path, offset: int) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        return np.frombuffer(fh.read(), dtype=np.uint8, offset=offset)


def _load_mnist(data_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    images, labels, count = _check_mnist(data_dir)[split]
    x = _read_idx_body(images, 16).reshape(count, 1, MNIST_SIDE, MNIST_SIDE)
    return x, _read_idx_body(labels, 8).astype(np.int32)


# ---------------------------------------------------------------- CIFAR-10 (binary batches)

def _cifar_dir(data_dir: Path) -> Path:
    for folder in (data_dir / "cifar10" / CIFAR_DIR, data_dir / CIFAR_DIR):
        if folder.is_dir():
            return folder
    raise DataError(f"CIFAR-10 folder missing: {data_dir / 'cifar10' / CIFAR_DIR}; "
                    f"{_fix_hint(data_dir)}")


def _check_cifar(data_dir: Path) -> dict[str, list[Path]]:
    folder = _cifar_dir(data_dir)
    found = {}
    for split, names in CIFAR_FILES.items():
        paths = []
        for name in names:
            path = folder / name
            if not path.is_file():
                raise DataError(f"CIFAR-10 file missing: {path}; {_fix_hint(data_dir)}")
            size = path.stat().st_size
            if size == 0 or size % CIFAR_RECORD_BYTES:
                raise DataError(f"CIFAR-10 file corrupt ({size} bytes, not a multiple of "
                                f"{CIFAR_RECORD_BYTES}): {path}; {_fix_hint(data_dir)}")
            with open(path, "rb") as fh:
                label = fh.read(1)[0]
            if label >= CLASSES:
                raise DataError(f"CIFAR-10 file corrupt (label {label}): {path}; "
                                f"{_fix_hint(data_dir)}")
            paths.append(path)
        found[split] = paths
    return found


def _load_cifar(data_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    records = np.concatenate([np.fromfile(p, dtype=np.uint8).reshape(-1, CIFAR_RECORD_BYTES)
                              for p in _check_cifar(data_dir)[split]])
    y = records[:, 0].astype(np.int32)
    if y.max(initial=0) >= CLASSES:
        raise DataError(f"CIFAR-10 {split} labels out of range in {_cifar_dir(data_dir)}; "
                        f"{_fix_hint(data_dir)}")
    return records[:, 1:].reshape(-1, *CIFAR_SHAPE), y


# ---------------------------------------------------------------- synthetic

def synthetic(model: str, samples: int, seed: int, split: str = "train"
              ) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` uint8 images shaped like the model's real dataset, with labels.

    Train and test share the class prototypes (drawn from ``seed``) and differ in
    their noise stream, so test accuracy measures real learning.
    """
    shape = (1, MNIST_SIDE, MNIST_SIDE) if models.dataset_for(model) == "mnist" else CIFAR_SHAPE
    channels, height, width = shape
    block = SYNTHETIC_BLOCK_PX
    coarse = np.random.default_rng([seed, 0]).integers(
        0, 256, (CLASSES, channels, height // block, width // block))
    prototypes = coarse.repeat(block, axis=2).repeat(block, axis=3)
    rng = np.random.default_rng([seed, 1 if split == "train" else 2])
    y = rng.integers(0, CLASSES, samples).astype(np.int32)
    x = np.empty((samples, *shape), dtype=np.uint8)
    chunk = 1000  # bounds the float64 noise buffer
    for start in range(0, samples, chunk):
        labels = y[start:start + chunk]
        faint = 128 + SYNTHETIC_CONTRAST * (prototypes[labels] - 128)
        noisy = faint + rng.normal(0.0, SYNTHETIC_NOISE_STD,
                                                (len(labels), *shape))
        x[start:start + chunk] = np.clip(noisy, 0, 255)
    return x, y


# ---------------------------------------------------------------- public API

def check(model: str, data_dir: str | Path | None) -> str:
    """The dataset ``model`` will train on (``mnist``, ``cifar10`` or ``synthetic``).

    Reads only headers and sizes. Raises ``DataError`` naming the file and the fix.
    """
    if data_dir is None:
        models.dataset_for(model)  # validates the model name
        return "synthetic"
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"data folder not found: {data_dir}; {_fix_hint(data_dir)} "
                        f"or leave out --data-dir to train on the synthetic set")
    name = models.dataset_for(model)
    _check_mnist(data_dir) if name == "mnist" else _check_cifar(data_dir)
    return name


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
         num_workers: int = 1, raw: bool = False) -> Dataset:
    """This worker's training shard and the test set, float32 normalized NCHW.

    ``max_samples`` caps the whole training set before sharding; each of
    ``num_workers`` workers gets the same number of samples (a contiguous slice by
    ``rank``; the remainder is dropped), so sync training never waits on a short shard.
    ``val_samples`` caps the test set. Only the shard is converted to float32.
    With ``raw`` the images stay uint8 (padded for the model) and the caller
    normalizes each batch (``Dataset.normalize``): the full CIFAR-10 training set is
    150 MB as uint8 but 600 MB as float32, too much beside MXNet on a 1 GB Pi.
    """
    if not 0 <= rank < num_workers:
        raise ValueError(f"rank {rank} outside 0..{num_workers - 1}")
    name = check(model, data_dir)
    if name == "synthetic":
        train_n = min(max_samples or SYNTHETIC_TRAIN_SAMPLES, SYNTHETIC_TRAIN_SAMPLES)
        test_n = min(val_samples or SYNTHETIC_TEST_SAMPLES, SYNTHETIC_TEST_SAMPLES)
        x_train, y_train = synthetic(model, train_n, seed, "train")
        x_test, y_test = synthetic(model, test_n, seed, "test")
    else:
        reader = _load_mnist if name == "mnist" else _load_cifar
        x_train, y_train = reader(Path(data_dir), "train")
        x_test, y_test = reader(Path(data_dir), "test")
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
