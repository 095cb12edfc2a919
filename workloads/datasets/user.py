"""The user's own data (``--dataset PATH``): checked and converted on the controller,
read on the worker.

``PATH`` is a ``.npz`` with ``x_train, y_train, x_test, y_test`` (images NCHW or NHWC,
uint8 or float, or 2-D feature vectors, taken as (1, 1, F) samples; optional
``class_names``), or a folder of class subfolders of images (``imagefolder``).

On the controller ``describe`` checks it (one line, ``ConfigError``, for each way it
cannot train) and converts it once into the canonical file (``npzfile``): images NCHW
uint8 (float32 where the user's were float), int64 labels, each split in a fixed
shuffled order (so that every shard holds every class), the training split's
per-channel mean and std, the class names. The converted file is cached
(``cache_dir()``), keyed by the user's file's SHA-256, or by a folder's listing, sizes,
mtimes and the image size, so a second sweep neither decodes nor converts again. That
file is what is staged to the nodes, and its SHA-256 is the data's digest in results.

On the worker ``Staged`` reads the staged file (only a shard's rows) and ``spec``
registers it in ``catalog.SPECS``, so the loader normalizes, pads and shards it as a
built-in set. Its *family* decides which models take it: 1x28x28 data is ``DIGITS``
(LeNet), 3x32x32 ``COLOUR`` (ResNet), any other shape ``user-CxHxW`` (a user's model).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from profiler.errors import ConfigError

from . import catalog, imagefolder, npzfile
from .catalog import COLOUR, DIGITS, DatasetSpec

if TYPE_CHECKING:  # the controller's record of a staged file; a node never needs it
    from profiler.inputs import UserFile

FORMAT = 1  # the canonical file's layout; bumped when it changes (the cache's key)
ARRAYS = ("x_train", "y_train", "x_test", "y_test")
CACHE_ENV = "EDGEPROF_CACHE_DIR"
SHUFFLE_SEED = 0  # the converted file's fixed order of each split (``_write``)
_STATS_ROWS = 4096  # rows summed at a time for the mean and std (bounded float64 copies)


@dataclass(frozen=True)
class DataInfo:
    """A user's dataset as the controller knows it once ``describe`` has checked it.

    ``label``, ``input_shape``, ``classes``, ``train_samples``, ``test_samples``,
    ``digest`` and ``user_file`` are what other parts (the user-model check) rely on.
    """

    label: str  # what results call it: the file's or folder's name
    input_shape: tuple[int, int, int]  # one sample, (C, H, W)
    classes: int
    class_names: tuple[str, ...]
    train_samples: int
    test_samples: int
    digest: str  # SHA-256 of the canonical file (user_file.digest)
    user_file: UserFile  # the canonical file, to stage
    normalization: tuple[tuple[float, ...], tuple[float, ...]]
    path: Path  # the user's own file or folder

    @property
    def family(self) -> str:
        return family_of_shape(self.input_shape)

    @property
    def spec(self) -> DatasetSpec:
        return DatasetSpec(self.label, self.family, self.train_samples, self.test_samples,
                           self.normalization, f"the user's {self.path}",
                           classes=self.classes, input_shape=self.input_shape,
                           file=str(self.user_file.source))


def family_of_shape(shape: tuple[int, int, int]) -> str:
    """The family of models a sample shape serves (module docstring)."""
    if tuple(shape) == (1, 28, 28):
        return DIGITS
    if tuple(shape) == (3, 32, 32):
        return COLOUR
    return "user-" + "x".join(str(n) for n in shape)


def is_user_item(item: str) -> bool:
    """Whether a ``--dataset`` item names the user's data rather than a known set: a
    path (it has a ``/``, ends in ``.npz`` or exists) that is no catalog name."""
    item = item.strip()
    if not item or item in catalog.NAMES or item == "auto":
        return False
    return "/" in item or item.endswith(".npz") or Path(item).expanduser().exists()


def cache_dir() -> Path:
    """Where converted datasets are kept: ``$EDGEPROF_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/edgeprof/datasets`` (``~/.cache/edgeprof/datasets``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "edgeprof" / "datasets"


# ---------------------------------------------------------------- on the controller

def describe(path: str | Path, image_size: int | None = None,
             progress: bool = False) -> DataInfo:
    """Check the user's data at ``path``, convert it (or find it converted), describe it.

    ``image_size``: an image folder's images are resized to that square side (default:
    their own size, which must then agree). Raises ``ConfigError``, one line naming the
    problem and the fix, for every way the data cannot train.
    """
    from profiler.inputs import sha256_file, user_file

    source = Path(path).expanduser()
    _check_image_size(image_size)
    if not source.exists():
        raise ConfigError(f"--dataset {path}: no such file or folder: give an .npz file "
                          "or a folder of class subfolders of images")
    cache = cache_dir()
    if source.is_dir():
        found = imagefolder.listing(source)
        canonical = cache / f"folder-{found.key(image_size)[:24]}-v{FORMAT}.npz"
        if not canonical.is_file():
            arrays, _ = imagefolder.decode(found, image_size, progress)
            _write(canonical, *arrays["train"], *arrays["test"], found.class_names, path)
    else:
        if image_size is not None:
            raise ConfigError(f"--image-size applies to an image folder, not to {path}: "
                              "store the .npz at the size to train on and drop --image-size")
        canonical = cache / f"npz-{sha256_file(source)[:24]}-v{FORMAT}.npz"
        if not canonical.is_file():
            _convert_npz(source, canonical, path)
    staged = user_file("dataset", canonical, "--dataset")
    label = source.resolve().name
    if label in catalog.NAMES:  # a folder called "mnist" is not Debian's MNIST
        label = f"{label}@{staged.digest[:8]}"
    reader = npzfile.Reader(canonical)
    shape = reader.shape("x_train")
    mean, std = reader.array("mean"), reader.array("std")
    return DataInfo(label=label, input_shape=tuple(int(n) for n in shape[1:]),
                    classes=len(reader.array("class_names")),
                    class_names=tuple(str(n) for n in reader.array("class_names")),
                    train_samples=int(shape[0]), test_samples=reader.shape("x_test")[0],
                    digest=staged.digest, user_file=staged,
                    normalization=(tuple(map(float, mean)), tuple(map(float, std))),
                    path=source)


# The user's datasets this process has registered, by label (``described``).
_REGISTERED: dict[str, DataInfo] = {}


def _check_image_size(image_size: int | None) -> None:
    if image_size is not None and image_size < 1:
        raise ConfigError(f"--image-size {image_size} must be at least 1: give the side "
                          "in pixels, e.g. --image-size 32")


def register(info: DataInfo) -> DatasetSpec:
    """Make ``info`` a dataset the controller's resolver, grid and time limits know."""
    spec = catalog.register(info.spec)
    _REGISTERED[info.label] = info
    return spec


def forget() -> None:
    """Drop the user's datasets registered so far (a new ``--dataset`` list starts clean:
    the same file name may name other data in the next sweep of this process)."""
    for label in _REGISTERED:
        catalog.SPECS.pop(label, None)
    _REGISTERED.clear()


def described(label: str) -> DataInfo | None:
    """The user's dataset registered under ``label`` (a cell's ``dataset``), or None."""
    return _REGISTERED.get(label)


def resolve_items(items: list[str], image_size: int | None = None,
                  progress: bool = False) -> list[str]:
    """``--dataset``'s items with each of the user's paths described, registered and
    replaced by its label; the other items (names, ``auto``) as they are.
    ``image_size`` applies to the image folders among them (``ConfigError`` if none)."""
    _check_image_size(image_size)
    forget()
    out = []
    folders = 0
    for item in (i.strip() for i in items):
        if not is_user_item(item):
            out.append(item)
            continue
        is_folder = Path(item).expanduser().is_dir()
        folders += is_folder
        info = describe(item, image_size if is_folder else None, progress)
        out.append(register(info).name)
    if image_size is not None and not folders:
        raise ConfigError(f"--image-size {image_size} resizes the images of a folder given "
                          "as --dataset FOLDER: give one, or drop --image-size")
    return out


def _convert_npz(source: Path, canonical: Path, shown: str | Path) -> None:
    try:
        with np.load(source, allow_pickle=False) as archive:
            missing = [name for name in ARRAYS if name not in archive.files]
            if missing:
                raise ConfigError(f"--dataset {shown} lacks {', '.join(missing)}: save it "
                                  "with numpy.savez(path, x_train=..., y_train=..., "
                                  "x_test=..., y_test=...)")
            arrays = {name: archive[name] for name in ARRAYS}
            names = archive["class_names"] if "class_names" in archive.files else None
    except ConfigError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise ConfigError(f"--dataset {shown} is not a readable .npz file ({exc}): save it "
                          "with numpy.savez (no object arrays)") from None
    x_train, x_test = (_as_nchw(arrays[n], n, shown) for n in ("x_train", "x_test"))
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ConfigError(f"--dataset {shown}: x_train's samples are {_shape(x_train)}, "
                          f"x_test's {_shape(x_test)}: give both splits the same shape")
    if x_train.dtype != x_test.dtype:  # one is float: both are
        x_train, x_test = x_train.astype(np.float32), x_test.astype(np.float32)
    y_train, y_test = (_as_labels(arrays[n], n, shown) for n in ("y_train", "y_test"))
    for x, y, split in ((x_train, y_train, "train"), (x_test, y_test, "test")):
        if len(x) != len(y):
            raise ConfigError(f"--dataset {shown}: x_{split} has {len(x)} samples but "
                              f"y_{split} {len(y)} labels: give one label per sample")
        if len(x) == 0:
            raise ConfigError(f"--dataset {shown}: x_{split} is empty: give it samples")
    top = int(max(y_train.max(), y_test.max()))
    if names is not None:
        class_names = tuple(str(n) for n in np.ravel(names))
        if top >= len(class_names):
            raise ConfigError(f"--dataset {shown}: label {top} is outside 0.."
                              f"{len(class_names) - 1} (class_names has {len(class_names)}):"
                              " number the classes from 0")
    else:
        class_names = tuple(str(i) for i in range(top + 1))
    _write(canonical, x_train, y_train, x_test, y_test, class_names, shown)


def _shape(x: np.ndarray) -> str:
    return "x".join(str(n) for n in x.shape[1:])


def _as_nchw(x: np.ndarray, name: str, shown) -> np.ndarray:
    """Samples as NCHW (uint8 kept, any other type float32): NHWC is transposed, grey
    N x H x W gains a channel, feature vectors N x F become N x 1 x 1 x F."""
    if x.dtype.kind not in "uif" and x.dtype != np.bool_:
        raise ConfigError(f"--dataset {shown}: {name} holds {x.dtype} values: give numbers "
                          "(uint8 pixels or floats)")
    if x.ndim == 2:
        x = x[:, None, None, :]
    elif x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4:
        if x.shape[1] not in (1, 3, 4) and x.shape[3] in (1, 3, 4):
            x = x.transpose(0, 3, 1, 2)  # NHWC: the channels last
    else:
        raise ConfigError(f"--dataset {shown}: {name} has shape {x.shape}: give images "
                          "(N, C, H, W) or (N, H, W, C), or feature vectors (N, F)")
    if x.dtype == np.uint8:
        return np.ascontiguousarray(x)
    if x.dtype.kind in "ui" and x.size and x.min() >= 0 and x.max() <= 255:
        return np.ascontiguousarray(x, dtype=np.uint8)  # pixels in a wider integer type
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise ConfigError(f"--dataset {shown}: {name} holds NaN or infinite values: "
                          "clean them before saving")
    return x


def _as_labels(y: np.ndarray, name: str, shown) -> np.ndarray:
    """Class indices as int64; ``ConfigError`` for one-hot, fractional or negative ones."""
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ConfigError(f"--dataset {shown}: {name} has shape {y.shape}: give one class "
                          f"index per sample, shape (N,) (one-hot labels: {name}.argmax(1))")
    if y.dtype.kind not in "uifb":
        raise ConfigError(f"--dataset {shown}: {name} holds {y.dtype} values: give integer "
                          "class indices 0..classes-1")
    if y.dtype.kind == "f":
        bad = ~np.isfinite(y) | (y != np.round(y))
        if bad.any():
            raise ConfigError(f"--dataset {shown}: {name} holds labels that are not "
                              f"integers (e.g. {y[bad][0]!r}): give class indices "
                              "0..classes-1")
    if len(y) and y.min() < 0:
        raise ConfigError(f"--dataset {shown}: {name} holds label {y.min()!r}, outside "
                          "0..classes-1: number the classes from 0")
    return y.astype(np.int64)


def _channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of ``x`` (0..1 scale for uint8), summed in chunks."""
    channels = x.shape[1]
    total = np.zeros(channels)
    squares = np.zeros(channels)
    scale = 1 / 255 if x.dtype == np.uint8 else 1.0
    for start in range(0, len(x), _STATS_ROWS):
        chunk = x[start:start + _STATS_ROWS].astype(np.float64) * scale
        total += chunk.sum(axis=(0, 2, 3))
        squares += np.square(chunk).sum(axis=(0, 2, 3))
    count = x.size // channels
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean ** 2, 0.0))
    return mean, np.where(std > 1e-12, std, 1.0)  # a constant channel: leave it unscaled


def _write(canonical: Path, x_train, y_train, x_test, y_test, class_names, shown) -> None:
    if len(class_names) < 2:
        raise ConfigError(f"--dataset {shown} has one class ({class_names[0]}): a classifier "
                          "needs labels of two classes or more")
    mean, std = _channel_stats(x_train)
    # Each split in a fixed shuffled order: a folder is read class by class (and a
    # user's file may be sorted too), and a contiguous shard or a --max-samples cap must
    # hold every class, as the built-in sets' files (in random order) do.
    train_order, test_order = (np.random.default_rng(SHUFFLE_SEED).permutation(len(y))
                               for y in (y_train, y_test))
    x_train, y_train = x_train[train_order], y_train[train_order]
    x_test, y_test = x_test[test_order], y_test[test_order]
    canonical.parent.mkdir(parents=True, exist_ok=True)
    npzfile.write(canonical, {
        "x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test,
        "mean": mean, "std": std, "class_names": np.asarray(class_names, dtype=str),
        "format": np.asarray(FORMAT)})


# ---------------------------------------------------------------- on the worker

def is_staged(dataset: str) -> bool:
    """Whether a worker's ``--dataset`` is a staged file (the engine's argv, a path) and
    not a name: a label such as ``fashion.npz`` is a file's name, never a path."""
    return dataset.endswith(".npz") and "/" in dataset


class Staged:
    """A staged canonical file on a node: counts, rows and its ``DatasetSpec``.

    The same interface as the loader's readers of the built-in sets (``count``,
    ``read``)."""

    def __init__(self, path: str | Path):
        self.reader = npzfile.Reader(path)
        missing = [n for n in (*ARRAYS, "mean", "std", "class_names")
                   if n not in self.reader.names]
        if missing:
            raise ConfigError(f"{path} is not a dataset edgeprof converted (it lacks "
                              f"{', '.join(missing)}): pass the user's data to "
                              "`edgeprof sweep --dataset`")
        shape = self.reader.shape("x_train")
        mean, std = self.reader.array("mean"), self.reader.array("std")
        input_shape = tuple(int(n) for n in shape[1:])
        self.spec = DatasetSpec(Path(path).stem, family_of_shape(input_shape),
                                int(shape[0]), self.count("test"),
                                (tuple(map(float, mean)), tuple(map(float, std))),
                                "staged by the controller",
                                classes=len(self.reader.array("class_names")),
                                input_shape=input_shape, file=str(path))

    def count(self, split: str) -> int:
        return self.reader.shape(f"x_{split}")[0]

    def read(self, split: str, rows: slice) -> tuple[np.ndarray, np.ndarray]:
        """Only ``rows`` of the split, NCHW (uint8, or float32), int64 labels."""
        return self.reader.rows(f"x_{split}", rows), self.reader.rows(f"y_{split}", rows)


def classes(dataset: str) -> int:
    """How many classes a worker's ``--dataset`` has (a parameter server builds the
    model without loading data)."""
    if is_staged(dataset):
        return len(npzfile.Reader(dataset).array("class_names"))
    return catalog.SPECS[dataset].classes if dataset in catalog.SPECS else catalog.CLASSES
