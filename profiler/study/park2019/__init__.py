"""Park, Lee & Kim (2019), *Hardware Resource Analysis in Distributed Training with Edge
Devices*: ten Raspberry Pi 3B, MXNet 0.9.5's KVStore, LeNet and ResNet (docs/study.md).

``grid.py`` holds its experiments as cells (one part per table or figure), ``reference.py``
its published numbers (``park2019.yaml``) and the cells that match them, ``ratios.py``
its findings as ratios with their bands. Its node profile, ``pi3b-park2019``, stays in
``cluster/profiles.yaml``, where the emulated cluster looks profiles up.
"""

from __future__ import annotations

from collections.abc import Hashable

from ...cell import CellConfig
from ..base import Grid, Study, StudyOption
from . import grid as g

PARTS_HELP = ("Which tables and figures: " + ", ".join(g.PARTS)
              + " (comma-separated) or all.")


class Park2019(Study):
    name = "park2019"
    description = ("Park, Lee & Kim (2019): Tables 1-4 and Figures 3-7 as one sweep, then "
                   "its report.")
    examples = ("sudo edgeprof study park2019 --scale 0.02 --speedup 4 --out runs/park2019",
                "sudo edgeprof study park2019 --parts table1,table2 --devices 1,2,4,8 "
                "--estimate")
    profile = "pi3b-park2019"
    # The grid's floor is the judged minimum too: a cell below it (an older sweep, a
    # sweep set beside the study) is "too few steps". The spread benchmark sets it.
    min_steps = g.MIN_STEPS
    parts_option = "parts"  # --budget chooses a scale per part (study/budget.py)
    options = (
        StudyOption("parts", "all", PARTS_HELP),
        StudyOption("devices", "1,2,3,4,5,6,7,8,9,10",
                    "Device counts of the device sweeps (1 is always run: the baseline)."),
        StudyOption("method", "scripts",
                    "scripts: as MXNet 0.9.5's example scripts ran the study (LeNet: every "
                    "worker the whole set, MXNet's example LeNet, lr 0.05; ResNet sharded; "
                    "a server beside every worker); sharded: every worker a 1/N shard, "
                    "LeNet-5, one master server (docs/study.md).", choices=g.METHODS),
    )

    def parse(self, given: dict) -> dict:
        from ...option_lists import parse_int_list
        parsed = dict(given)
        if isinstance(given.get("parts"), str):
            text = given["parts"].strip()
            parsed["parts"] = g.PARTS if text == "all" else tuple(
                p.strip() for p in text.split(",") if p.strip())
        if isinstance(given.get("devices"), str):
            parsed["devices"] = tuple(parse_int_list(given["devices"], "--devices"))
        return parsed

    def datasets_wanted(self) -> tuple[str, ...]:
        return ("mnist", "mnist-5k", "fashion-mnist", "cifar10")

    def grid(self, scale: float, options: dict, engine: str, available: set[str]) -> Grid:
        how = g.method(options.get("method", "scripts"))
        found = g.experiments(options.get("parts", g.PARTS),
                              options.get("devices", g.ALL_DEVICES), how)
        samples = g.train_samples(found, scale, how)
        datasets = g.choose_datasets({e.model for e in found}, samples,
                                     {name: True for name in available})
        notes = []
        floored = g.floored(found, scale, how)
        if floored:
            notes.append(f"raised to {g.MIN_STEPS} steps per worker on some device counts "
                         f"(so more samples than the scale): {', '.join(floored)}")
        if any(d == "synthetic" for d in datasets.values()):
            notes.append("accuracy on the synthetic set is not compared with the study's "
                         "(fetch MNIST and CIFAR-10 with `edgeprof data fetch`)")
        return Grid(cells=g.cells(found, samples, datasets, engine, how),
                    val_samples=g.val_samples(scale, datasets), samples=samples,
                    datasets=datasets, notes=notes, label=how.name,
                    # The study's own epoch, whatever the scale: edgeprof predict reads it
                    # as its --samples default (a prediction of the study's epoch time).
                    recorded={"method": how.name, "epoch_samples": {
                        model: g.FULL_TRAIN[model] for model in sorted({e.model for e in found})}})

    def rate(self, cell: CellConfig) -> float:
        if cell.model != "resnet":
            return g.STUDY_RATES[(cell.model, None)]
        known = {layers: rate for (model, layers), rate in g.STUDY_RATES.items()
                 if model == "resnet"}
        if cell.layers in known:
            return known[cell.layers]
        return known[32] * 32 / cell.layers  # the work grows with depth

    def device_factor(self, cell: CellConfig) -> float:
        """LeNet: Tables 1-2's time against devices; ResNet: about 1 / devices."""
        from .reference import load_reference
        if cell.devices == 1:
            return 1.0
        table = {"lenet-mlp": "table1_lenet_mlp", "lenet-cnn": "table2_lenet_cnn",
                 "lenet-example": "table2_lenet_cnn"}.get(cell.model)
        if table is None:
            return 1.0 / cell.devices
        rows = load_reference()[table]
        devices = min(cell.devices, max(rows["devices"]))
        return rows["elapsed_s"][rows["devices"].index(devices)] / rows["elapsed_s"][0]

    def expected_oom(self, cell: CellConfig) -> bool:
        return (cell.model, cell.layers, cell.batch) in g.EXPECTED_OOM

    def dilation_group(self, cell: CellConfig) -> str:
        # Every ratio compares cells of one model family (devices, sync, depth, batch):
        # with one speedup per family, the first budgeted runs' LeNet-MLP rows, whose
        # one-device cell ran at speedup 8 and ten devices at 2, moved by the two
        # quotas' calibration errors (docs/study.md, "Budgeted, repeated, twice").
        return cell.model

    def neutral_speedup(self, group: Hashable) -> float | None:
        from .dilations import neutral_dilations
        return neutral_dilations().get(group, {}).get("speedup")

    def section(self, records: list[dict]):
        from ...report.study_section import StudySection
        from .beyond import beyond
        from .ratios import reproduce
        from .reference import HARDWARE, matches
        extended = beyond(records)  # None: nothing of Table 1 or 3 can be fitted
        return StudySection(
            title="Reproducing the study",
            intro="Park, Lee & Kim (2019) as ratios between cells (most to the one-device "
                  "baseline), where hardware speed and the amount of data cancel",
            bands="Bands: x/÷1.25 for the study's tables (its own single runs wander that "
                  "much), x/÷1.5 for values its text gives approximately, x/÷1.1 for "
                  "accuracy, on the study's data only (docs/study.md).",
            ratios=reproduce(records, min_steps=self.min_steps), matches=matches(records),
            min_steps=self.min_steps,
            hardware=f"Park, Lee & Kim (2019): {HARDWARE}, MNIST and CIFAR-10",
            no_match="No cell matches a configuration the study reports (e.g. LeNet batch "
                     "64 sync on 1-10 devices, ResNet 32/80/110 x batch 32/64/128).",
            subsections=[extended] if extended else [])
