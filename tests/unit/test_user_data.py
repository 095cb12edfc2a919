"""The user's own data (``--dataset PATH``): real Fashion-MNIST exported to an ``.npz`` and
to a folder of PNGs, described, converted once, cached and read back by the loader; and
every bad input through the CLI (exit 2, one line, nothing runs).

Fashion-MNIST is Debian's (``dataset-fashion-mnist``, read with ``workloads.datasets.idx``):
skipped when absent, failed under ``CI=true``. ``export_npz`` and ``export_folder`` are
also what the integration test trains on.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from profiler.cli import cli
from tests.conftest import need
from tests.faults.test_bad_input import error_line
from workloads.datasets import catalog, idx, imagefolder, loader, npzfile, user
from workloads.datasets.resolver import Source, idx_files

CLASSES = 10


def fashion(train: int, test: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The first ``train`` / ``test`` images of Debian's Fashion-MNIST, uint8 NCHW."""
    need("Debian's dataset-fashion-mnist", idx.has_set(catalog.DEBIAN_FASHION_DIR))
    found = idx_files(Source("fashion-mnist", catalog.DEBIAN_FASHION_DIR))
    return {"train": idx.read(found, "train", slice(train)),
            "test": idx.read(found, "test", slice(test))}


def export_npz(path: Path, data: dict, nhwc: bool = False) -> Path:
    (x_train, y_train), (x_test, y_test) = data["train"], data["test"]
    if nhwc:
        x_train, x_test = x_train.transpose(0, 2, 3, 1), x_test.transpose(0, 2, 3, 1)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def export_folder(root: Path, data: dict, splits: bool = False) -> Path:
    """PNGs in ``root/<class>/`` (or ``root/train|test/<class>/`` with ``splits``)."""
    from PIL import Image

    for split, (x, y) in data.items():
        if split == "test" and not splits:
            continue
        base = root / split if splits else root
        for i, (image, label) in enumerate(zip(x, y)):
            folder = base / f"class{label}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image[0]).save(folder / f"{i:05d}.png")
    return root


@pytest.fixture(scope="module")
def data():
    return fashion(1200, 240)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(user.CACHE_ENV, str(tmp_path / "cache"))
    yield tmp_path / "cache"
    user.forget()


def test_npz_nchw_nhwc_and_wider_ints_convert_to_the_same_file(data, tmp_path):
    nchw = user.describe(export_npz(tmp_path / "a.npz", data))
    nhwc = user.describe(export_npz(tmp_path / "b.npz", data, nhwc=True))
    (x, y), (xt, yt) = data["train"], data["test"]
    np.savez(tmp_path / "c.npz", x_train=x.astype(np.int64)[:, 0], y_train=y,
             x_test=xt.astype(np.int64)[:, 0], y_test=yt.astype(np.float32))  # N x H x W
    wide = user.describe(tmp_path / "c.npz")
    assert nchw.digest == nhwc.digest == wide.digest
    assert (nchw.label, nhwc.label) == ("a.npz", "b.npz")
    assert nchw.input_shape == (1, 28, 28) and nchw.classes == CLASSES
    assert (nchw.train_samples, nchw.test_samples) == (1200, 240)
    assert nchw.spec.family == catalog.DIGITS
    # The training split's own statistics (Fashion-MNIST's published 0.2860 / 0.3530).
    (mean,), (std,) = nchw.normalization
    assert mean == pytest.approx((x / 255).mean()) and 0.27 < mean < 0.30
    assert std == pytest.approx((x / 255).std())


def test_the_converted_file_has_fixed_bytes_and_numpy_reads_it(data, tmp_path, cache):
    first = user.describe(export_npz(tmp_path / "a.npz", data))
    for path in cache.iterdir():
        path.unlink()
    again = user.describe(tmp_path / "a.npz")
    assert again.digest == first.digest
    with np.load(again.user_file.source) as archive:
        order = np.random.default_rng(user.SHUFFLE_SEED).permutation(240)
        assert np.array_equal(archive["x_test"], data["test"][0][order])
        assert np.array_equal(archive["y_test"], data["test"][1][order])
        assert archive["class_names"].tolist() == [str(i) for i in range(CLASSES)]


def test_float_images_and_feature_vectors(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, (60, 8, 8, 3)).astype(np.float64)  # NHWC float
    y = np.arange(60) % 3
    np.savez(tmp_path / "f.npz", x_train=x[:48], y_train=y[:48], x_test=x[48:], y_test=y[48:])
    info = user.describe(tmp_path / "f.npz")
    assert info.input_shape == (3, 8, 8) and info.classes == 3
    assert info.spec.family == "user-3x8x8"
    assert info.normalization[0] == pytest.approx(x[:48].mean(axis=(0, 1, 2)))
    staged = user.Staged(info.user_file.source)
    assert staged.read("train", slice(0, 2))[0].dtype == np.float32
    np.savez(tmp_path / "v.npz", x_train=x[:48].reshape(48, -1), y_train=y[:48],
             x_test=x[48:].reshape(12, -1), y_test=y[48:])
    assert user.describe(tmp_path / "v.npz").input_shape == (1, 1, 192)


def test_a_folder_holds_out_a_sixth_of_each_class_and_keeps_the_pixels(data, tmp_path):
    root = export_folder(tmp_path / "fm", data)
    info = user.describe(root)
    assert info.label == "fm" and info.classes == CLASSES
    assert info.class_names == tuple(f"class{i}" for i in range(CLASSES))
    assert info.input_shape == (1, 28, 28)
    x, y = data["train"]
    counts = np.bincount(y, minlength=CLASSES)
    assert info.test_samples == sum(n // 6 for n in counts)
    assert info.train_samples == 1200 - info.test_samples
    # Every 6th image of a class (in file order) is a test image, the pixels as exported
    # (PNG is lossless); each split is shuffled, so that a shard holds every class.
    staged = user.Staged(info.user_file.source)
    x_train, y_train = staged.read("train", slice(None))
    x_test, y_test = staged.read("test", slice(None))
    for label in range(CLASSES):
        mine = x[y == label]
        held = {image.tobytes() for image in mine[5::6]}
        assert {image.tobytes() for image in x_test[y_test == label]} == held
        assert {image.tobytes() for image in x_train[y_train == label]} == (
            {image.tobytes() for image in mine} - held)
    assert len(set(y_train[:60])) == CLASSES  # the first rows are not one class


def test_split_folders_colour_and_resizing(data, tmp_path):
    from PIL import Image

    root = export_folder(tmp_path / "sp", data, splits=True)
    info = user.describe(root)
    assert (info.train_samples, info.test_samples) == (1200, 240)
    # One colour image makes the whole set RGB; --image-size resizes every image.
    Image.new("RGB", (28, 28), (200, 10, 10)).save(root / "train" / "class1" / "red.png")
    colour = user.describe(root, image_size=32)
    assert colour.input_shape == (3, 32, 32) and colour.spec.family == catalog.COLOUR
    assert colour.train_samples == 1201 and colour.digest != info.digest


def test_a_folder_is_decoded_once_until_a_file_changes(data, tmp_path, monkeypatch):
    root = export_folder(tmp_path / "fm", data)
    first = user.describe(root)

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again")

    real = imagefolder.decode
    monkeypatch.setattr(imagefolder, "decode", no_decoding)
    assert user.describe(root).digest == first.digest
    some = next((root / "class3").iterdir())
    os.utime(some, ns=(0, 0))  # its mtime changes: the listing no longer matches
    monkeypatch.setattr(imagefolder, "decode", real)
    assert user.describe(root).digest == first.digest  # same pixels, decoded again


def test_the_loader_reads_a_shard_with_the_datas_classes_and_statistics(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (100, 1, 28, 28), dtype=np.uint8)
    y = np.arange(100) % 5
    np.savez(tmp_path / "five.npz", x_train=x[:80], y_train=y[:80], x_test=x[80:],
             y_test=y[80:], class_names=np.array(list("abcde")))
    info = user.describe(tmp_path / "five.npz")
    assert info.classes == 5 and info.class_names == tuple("abcde")
    part = loader.load("lenet-cnn", rank=1, num_workers=2, raw=True,
                       dataset=str(info.user_file.source))
    assert part.classes == 5 and part.train_total == 80 and len(part.x_test) == 20
    # Rows 40..79 of the converted file only, padded 28 -> 32 for LeNet-5.
    x_all, y_all = user.Staged(info.user_file.source).read("train", slice(None))
    assert sorted(map(bytes, x_all)) == sorted(map(bytes, x[:80]))  # a fixed shuffle
    assert np.array_equal(part.x_train[:, :, 2:30, 2:30], x_all[40:80])
    assert np.array_equal(part.y_train, y_all[40:80])
    normalized = part.normalize(part.x_train[:, :, 2:30, 2:30])
    mean, std = info.normalization
    assert normalized.mean() == pytest.approx((x_all[40:80] / 255).mean() / std[0]
                                              - mean[0] / std[0], abs=1e-5)
    assert user.classes(str(info.user_file.source)) == 5


def test_rows_of_a_stored_member_are_read_from_their_offset(tmp_path):
    arrays = {"a": np.arange(1000, dtype=np.int32).reshape(100, 10), "b": np.arange(7.0)}
    npzfile.write(tmp_path / "x.npz", arrays)
    reader = npzfile.Reader(tmp_path / "x.npz")
    assert np.array_equal(reader.rows("a", slice(30, 33)), arrays["a"][30:33])
    assert np.array_equal(reader.array("b"), arrays["b"])
    # Bytes outside the rows asked for are never read: spoil the first row's.
    offset = reader._members["a"][0]
    with open(tmp_path / "x.npz", "r+b") as fh:
        fh.seek(offset)
        fh.write(b"\xff" * 40)
    assert np.array_equal(npzfile.Reader(tmp_path / "x.npz").rows("a", slice(1, 3)),
                          arrays["a"][1:3])


# ---------------------------------------------------------------- bad input, via the CLI

def _npz(path: Path, **changes) -> Path:
    rng = np.random.default_rng(2)
    arrays = {"x_train": rng.integers(0, 256, (64, 1, 28, 28), dtype=np.uint8),
              "y_train": np.arange(64) % 4,
              "x_test": rng.integers(0, 256, (16, 1, 28, 28), dtype=np.uint8),
              "y_test": np.arange(16) % 4}
    arrays.update(changes)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def _one_class(root: Path) -> Path:
    from PIL import Image

    (root / "only").mkdir(parents=True)
    for i in range(6):
        Image.new("L", (8, 8), i).save(root / "only" / f"{i}.png")
    return root


def _undecodable(root: Path) -> Path:
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(6):
            (root / name / f"{i}.png").write_bytes(b"not a png")
    return root


def _sizes(root: Path) -> Path:
    from PIL import Image

    for name, side in (("a", 8), ("b", 9)):
        (root / name).mkdir(parents=True)
        for i in range(6):
            Image.new("L", (side, side), i).save(root / name / f"{i}.png")
    return root


BAD = {  # id: (make(tmp) -> path, extra argv, words of the one line)
    "missing": (lambda t: t / "nope.npz", [], ("nope.npz", "no such file or folder")),
    "no-arrays": (lambda t: _npz(t / "d.npz", x_test=None, y_test=None), [],
                  ("lacks x_test, y_test", "numpy.savez")),
    "fractional-labels": (lambda t: _npz(t / "d.npz", y_train=np.arange(64) / 3), [],
                          ("y_train", "not integers")),
    "negative-labels": (lambda t: _npz(t / "d.npz", y_test=np.arange(16) - 1), [],
                        ("y_test", "label -1", "outside 0..classes-1")),
    "labels-past-names": (lambda t: _npz(t / "d.npz", class_names=np.array(["a", "b"])), [],
                          ("label 3 is outside 0..1",)),
    "npz-one-class": (lambda t: _npz(t / "d.npz", y_train=np.zeros(64, int),
                                     y_test=np.zeros(16, int)), [],
                      ("d.npz has one class (0)", "two classes or more")),
    "lengths-differ": (lambda t: _npz(t / "d.npz", y_train=np.arange(63) % 4), [],
                       ("x_train has 64 samples but y_train 63 labels",)),
    "one-class": (lambda t: _one_class(t / "one"), [], ("has one class (only)",)),
    "undecodable": (lambda t: _undecodable(t / "bad"), [],
                    ("a/0.png is not an image Pillow can decode",)),
    "sizes-differ": (lambda t: _sizes(t / "sz"), [], ("differ in size", "--image-size N")),
    "image-size-0": (lambda t: _sizes(t / "sz"), ["--image-size", "0"],
                     ("--image-size 0 must be at least 1",)),
    "image-size-npz": (lambda t: _npz(t / "d.npz"), ["--image-size", "28"],
                       ("--image-size 28 resizes the images of a folder",)),
    "shape-misfit": (lambda t: _npz(t / "d.npz"), ["--model", "resnet"],
                     ("d.npz holds 1x28x28 samples", "resnet takes 3x32x32")),
}


@pytest.fixture
def nothing_runs(monkeypatch) -> list[str]:
    import profiler.sweep.sweep

    ran: list[str] = []
    monkeypatch.setattr(profiler.sweep.sweep, "run_sweep",
                        lambda *a, **k: ran.append("run_sweep"))
    return ran


@pytest.mark.parametrize("case", list(BAD))
def test_bad_data_is_one_line_exit_2_before_anything_runs(case, tmp_path, nothing_runs,
                                                          monkeypatch):
    make, extra, words = BAD[case]
    path = make(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "--engine", "torch", "--model", "lenet-mlp", "--dataset", str(path),
            "--out", str(tmp_path / "out"), "--no-agent", *extra]
    if "--model" in extra:
        argv[3:5] = []  # the case's own --model
    result = CliRunner().invoke(cli, argv)
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        output += "\nTraceback (in-process): " + repr(result.exception)
    assert result.exit_code == 2, output
    line = error_line(output)
    for word in words:
        assert word in line, line
    assert nothing_runs == [] and not (tmp_path / "out").exists()


def test_a_label_is_never_taken_for_a_staged_file():
    # A label is a file's name (``fashion.npz``); a worker's staged file is a path.
    assert not user.is_staged("fashion.npz") and not user.is_staged("fashion-mnist")
    assert user.is_staged("/sweep/inputs/dataset-0123456789ab.npz")
    assert user.is_user_item("fashion.npz") and user.is_user_item("./mnist")
    assert not user.is_user_item("mnist") and not user.is_user_item("auto")
