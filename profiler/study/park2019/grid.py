"""Park, Lee & Kim (2019) as a preset grid: every experiment of the paper, as cells.

Each *part* is one table or figure of the paper (``PARTS``); together they make the
grid. Cells that two parts share (Table 2's ten-device cell is Figure 3's sync bar) are
run once.

- ``table1``, ``table2``: LeNet MLP / CNN, batch 64, sync, 1..10 devices, 1 epoch
  (Figure 4, the CNN's resources against devices, reads the same cells).
- ``figure3``: sync against async on ten devices, LeNet (the CNN: the study's "1,000 s
  more for sync" leaves a positive async time only from the CNN's 2,625 s) and
  ResNet-32 x 32; and LeNet async on 5 and 10 devices (Figure 3b).
- ``figure5``: ResNet 32/80/110 x batch 32/64/128 on 1 and 10 devices, the extremes the
  text gives ("maximum ... 20,000 s and minimum 2,000 s"); Table 3 reads the ten-device
  cells. 110 x 128 is expected to run out of memory on a 1 GB node.
- ``figure6``: ResNet-32 x 32 on 1..10 devices; ``figure7``: ResNet-110 x 64 on 1..10.
- ``table4``: ResNet-32 x 32 on ten devices, 5 epochs.

Method (``METHODS``): how the study's cells are read. ``scripts`` (the default) runs
them as MXNet 0.9.5's example scripts did, which the study ran "without any
modification": ``train_mnist.py`` gives every worker the whole MNIST training set each
epoch (``replicate``, lr 0.05) and its "LeNet" is the example's (``lenet-example``);
``train_cifar10.py`` gives each worker its 1/N part (``shard``); ``tools/launch.py``
starts a server beside every worker (``colocated``). ``sharded`` is edgeprof's reading
before (every worker a 1/N shard, LeNet-5 as the CNN, one server on a master node),
kept for comparison. docs/study.md gives the evidence.

Scale. The study trained each cell on the whole training set (60,000 MNIST, 50,000
CIFAR-10 images) for hours to days on its boards. ``scale`` takes that fraction of the
data, but never less than ``MIN_STEPS`` steps per worker (else a cell would time little
more than its first step): a cell of many devices may so get more samples than one of
few. Every comparison is a ratio of times per sample between cells
(``ratios.py``), which does not depend on how many samples each trained;
accuracies are compared only between cells that trained on as many. ``scale`` may
also be one fraction per part (``{"table1": 0.2, "figure5": 0.005}``: ``--budget``
chooses them, ``study/budget.py``); a cell two parts share trains the larger of their
samples, and the validation set follows the smallest fraction.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.datasets import catalog
from workloads.datasets.resolver import parts

from ...cell import DEFAULT_ENGINE, CellConfig
from ...engines import get_engine
from ...errors import ConfigError
from ...sweep.grid import validate

PARTS = ("table1", "table2", "figure3", "figure5", "figure6", "figure7", "table4")
METHODS = ("scripts", "sharded")
ALL_DEVICES = tuple(range(1, 11))
MAX_DEVICES = 30  # three times the study's cluster: past that a grid is no longer the study's
# The fewest steps per worker a judged cell trains (benchmarks/bench_ratio_spread.py,
# emulated pi3b-park2019, 4 / 1 devices, 5 repeats, docs/study.md): ResNet-20's ratio
# varied with a coefficient of variation of 0.06-0.10 at 3 steps, 0.04 at 7 and 19. The
# first step pays one-off costs; below 7 the few steady ones move with the host.
MIN_STEPS = 7
# The study's training sets and its validation set (10,000 images either way).
FULL_TRAIN = {"lenet-mlp": 60000, "lenet-cnn": 60000, "lenet-example": 60000,
              "resnet": 50000}
FULL_VAL = 10000
MIN_VAL = 200  # a ResNet-110 on a Pi-speed node validates about 2 samples/s
# The study's one-device training rates, samples/s (Tables 1-2; Figure 5's longest
# times for ResNet, whose batch "does not affect the training time").
STUDY_RATES = {("lenet-mlp", None): 60000 / 105, ("lenet-cnn", None): 60000 / 1079,
               ("lenet-example", None): 60000 / 1079,
               ("resnet", 32): 50000 / 20000, ("resnet", 80): 50000 / 50000,
               ("resnet", 110): 50000 / 80000}
EXPECTED_OOM = {("resnet", 110, 128)}


@dataclass(frozen=True)
class Method:
    """How the study's cells are set up (module doc)."""

    name: str
    cnn: str  # the model of the study's "LeNet (CNN)"
    lenet_partition: str
    placement: str
    lenet_lr: float | None  # None: the model's default (workloads.optim)

    def partition(self, model: str) -> str:
        return "shard" if model == "resnet" else self.lenet_partition

    def lr(self, model: str) -> float | None:
        return None if model == "resnet" else self.lenet_lr


# train_mnist.py's lr (v0.9.5); momentum 0.9 and wd 1e-4 (common/fit.py) are edgeprof's
# defaults, and train_cifar10.py's lr 0.05 is ResNet's.
SCRIPT_LENET_LR = 0.05
METHOD = {"scripts": Method("scripts", "lenet-example", "replicate", "colocated",
                            SCRIPT_LENET_LR),
          "sharded": Method("sharded", "lenet-cnn", "shard", "master", None)}


def method(name: str) -> Method:
    if name not in METHOD:
        raise ConfigError(f"--method {name}: use {' or '.join(METHODS)} (docs/study.md)")
    return METHOD[name]


@dataclass(frozen=True)
class Experiment:
    """One configuration of a part, over its device counts and sync modes."""

    part: str
    model: str
    layers: int | None
    batch: int
    devices: tuple[int, ...]
    syncs: tuple[str, ...] = ("sync",)
    epochs: int = 1

    @property
    def key(self) -> tuple:
        return (self.model, self.layers, self.batch)


def experiments(parts: tuple[str, ...] = PARTS,
                devices: tuple[int, ...] = ALL_DEVICES,
                how: Method = METHOD["scripts"]) -> list[Experiment]:
    """The parts' experiments, device counts limited to ``devices`` (1 is always kept:
    it is every ratio's baseline); the CNN is ``how.cnn``."""
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ConfigError(f"unknown part {', '.join(unknown)}: use {', '.join(PARTS)} "
                          "(comma-separated) or all")
    bad = [d for d in devices if not 1 <= d <= MAX_DEVICES]
    if bad:
        raise ConfigError(f"--devices {','.join(map(str, bad))}: device counts go from 1 to "
                          f"{MAX_DEVICES} (the study's were 1 to 10)")
    wanted = tuple(sorted({1, *devices}))

    def some(*counts: int) -> tuple[int, ...]:
        return tuple(d for d in counts if d in wanted)

    ten = max(wanted)  # "ten devices" when fewer are asked for: the largest asked
    found: list[Experiment] = []
    for part in parts:
        if part == "table1":
            found.append(Experiment(part, "lenet-mlp", None, 64, wanted))
        elif part == "table2":
            found.append(Experiment(part, how.cnn, None, 64, wanted))
        elif part == "figure3":
            found.append(Experiment(part, how.cnn, None, 64, (1, ten), ("sync", "async")))
            found.append(Experiment(part, how.cnn, None, 64, some(5), ("async",)))
            found.append(Experiment(part, "resnet", 32, 32, (ten,), ("sync", "async")))
        elif part == "figure5":
            for layers in (32, 80, 110):
                for batch in (32, 64, 128):
                    found.append(Experiment(part, "resnet", layers, batch, (1, ten)))
        elif part == "figure6":
            found.append(Experiment(part, "resnet", 32, 32, wanted))
        elif part == "figure7":
            found.append(Experiment(part, "resnet", 110, 64, wanted))
        elif part == "table4":
            found.append(Experiment(part, "resnet", 32, 32, (ten,), epochs=5))
    return [e for e in found if e.devices]


def part_scale(scale: float | dict[str, float], part: str) -> float:
    """The fraction of the study's data ``part``'s cells train on."""
    return scale[part] if isinstance(scale, dict) else scale


def _check_scale(scale: float | dict[str, float]) -> None:
    for value in (scale.values() if isinstance(scale, dict) else (scale,)):
        if not 0 < value <= 1:
            raise ConfigError(f"--scale {value:g}: give the fraction of the study's data to "
                              "train on, from 0 (exclusive) to 1, e.g. 0.05")


def _floor(e: Experiment, devices: int, how: Method) -> int:
    """The fewest samples that give each worker ``MIN_STEPS`` steps, at most what the set
    every host has (synthetic) holds: a cell it cannot give them trains what it can and
    is judged "too few steps" (report/ratios.py)."""
    return min(parts(how.partition(e.model), devices) * e.batch * MIN_STEPS,
               catalog.SPECS["synthetic"].train_samples)


def _scaled(e: Experiment, scale: float | dict[str, float]) -> int:
    return round(FULL_TRAIN[e.model] * part_scale(scale, e.part))


def train_samples(found: list[Experiment], scale: float | dict[str, float],
                  how: Method = METHOD["scripts"]) -> dict[tuple, int]:
    """Training samples per (model, layers, batch, devices); see the module doc. A
    replicated cell's workers each train all of them, a sharded cell's share them."""
    _check_scale(scale)
    samples: dict[tuple, int] = {}
    for e in found:
        for devices in e.devices:
            wanted = max(_scaled(e, scale), _floor(e, devices, how))
            key = (*e.key, devices)
            samples[key] = max(samples.get(key, 0), wanted)  # shared: the larger part's
    return samples


def floored(found: list[Experiment], scale: float | dict[str, float],
            how: Method = METHOD["scripts"]) -> list[str]:
    """The configurations raised to ``MIN_STEPS`` steps per worker on some device count
    (more samples than their part's scale), as ``resnet-32 x 32``."""
    return sorted({f"{e.model}{'-' + str(e.layers) if e.layers else ''} x {e.batch}"
                   for e in found for d in e.devices
                   if _floor(e, d, how) > _scaled(e, scale)})


def val_samples(scale: float | dict[str, float], datasets: dict[str, str]) -> int:
    """The validation set: the study's 10,000 scaled (by the smallest part's fraction),
    at least ``MIN_VAL``, at most what the smallest test set used has."""
    smallest = min(catalog.SPECS[name].test_samples for name in datasets.values())
    least = min(scale.values()) if isinstance(scale, dict) else scale
    return min(smallest, max(MIN_VAL, round(FULL_VAL * least)))


def choose_datasets(models: set[str], samples: dict[tuple, int],
                    available: dict[str, bool]) -> dict[str, str]:
    """The set each model trains on: the study's own when fetched, else real digits
    that hold the samples needed (mnist-5k, then Fashion-MNIST) for LeNet, else the
    synthetic set. ``available``: dataset name -> present on this machine."""
    chosen = {}
    for model in sorted(models):
        needed = max(n for (m, *_), n in samples.items() if m == model)
        if model == "resnet":
            order = ("cifar10", "synthetic")
        else:
            order = ("mnist", "mnist-5k", "fashion-mnist", "synthetic")
        for name in order:
            if (name == "synthetic" or available.get(name)) and \
                    needed <= catalog.SPECS[name].train_samples:
                chosen[model] = name
                break
        else:
            biggest = max(catalog.SPECS[n].train_samples for n in order
                          if n == "synthetic" or available.get(n))
            raise ConfigError(
                f"{model} needs {needed:,} training samples at this --scale and the largest "
                f"set here holds {biggest:,}: lower --scale (to "
                f"{biggest / FULL_TRAIN[model]:.2g} or less), or fetch the study's data "
                "(`edgeprof data fetch --data-dir DIR`, then --data-dir DIR)")
    return chosen


def cells(found: list[Experiment], samples: dict[tuple, int], datasets: dict[str, str],
          engine: str = DEFAULT_ENGINE, how: Method = METHOD["scripts"]) -> list[CellConfig]:
    """The grid's cells, each once, in the parts' order."""
    out: dict[str, CellConfig] = {}
    for e in found:
        for devices in e.devices:
            for sync in e.syncs if devices > 1 else ("sync",):
                if sync not in get_engine(engine).sync_modes:
                    continue  # e.g. allreduce is synchronous only
                cell = validate(CellConfig(
                    engine=engine, model=e.model, layers=e.layers, batch=e.batch,
                    devices=devices, sync=sync, epochs=e.epochs,
                    max_samples=samples[(*e.key, devices)], dataset=datasets[e.model],
                    lr=how.lr(e.model), placement=how.placement,
                    data_partition=how.partition(e.model)))
                out.setdefault(cell.cell_id, cell)
    return list(out.values())
