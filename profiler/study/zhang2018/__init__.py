"""Zhang's heterogeneous distributed DNNs (after Teerapittayanon et al.'s DDNN, 2017): end
devices, edge devices and a cloud with a network each, delays between the tiers, four
schemes, early exits and devices that fail, on the ``hier`` engine (docs/tiers.md,
"The zhang2018 study").

``grid.py`` holds its experiments as cells (one part per table or figure),
``zhang2018.yaml`` its published numbers, ``ratios.py`` its findings as ratios with
their bands and Table 2 beside our matching cells.
"""

from __future__ import annotations

from ...cell import CellConfig
from ..base import Grid, Study, StudyOption
from . import grid as g


class Zhang2018(Study):
    name = "zhang2018"
    description = ("Zhang's heterogeneous DDNN: Tables 1, 2, 4 and 5, Figure 3 and DDNN's early "
                   "exits on the hier engine, then its report.")
    examples = ("edgeprof study zhang2018 --cluster local --timeout 60 --out runs/zhang2018",
                "edgeprof study zhang2018 --cluster local --parts table5 --scale 0.04 "
                "--timeout 40 --estimate")
    options = (
        StudyOption("parts", "all", "Which tables and figures: " + ", ".join(g.PARTS)
                    + " (comma-separated) or all."),
        StudyOption("end_devices", ",".join(map(str, g.END_DEVICES)),
                    "Figure 3's end device counts (2 edge nodes and a cloud beside them)."),
        StudyOption("failed", ",".join(map(str, g.FAILED)),
                    f"Table 5's failed end devices (of {g.TABLE5_END}; 0 always runs)."),
        StudyOption("thresholds", ",".join(f"{t:g}" for t in g.THRESHOLDS),
                    "The ddnn part's early-exit thresholds (softmax entropy in nats, 0-ln 4)."),
    )

    def parse(self, given: dict) -> dict:
        from ...engines.hier.settings import parse_thresholds
        from ...option_lists import parse_int_list
        parsed = dict(given)
        if isinstance(given.get("parts"), str):
            parsed["parts"] = g.parse_parts(given["parts"])
        if isinstance(given.get("end_devices"), str):
            parsed["end_devices"] = tuple(parse_int_list(given["end_devices"],
                                                         "--end-devices"))
        if isinstance(given.get("failed"), str):
            parsed["failed"] = g.parse_failed(given["failed"])
        if isinstance(given.get("thresholds"), str):
            parsed["thresholds"] = tuple(parse_thresholds(given["thresholds"],
                                                           "--thresholds"))
        return parsed

    def datasets_wanted(self) -> tuple[str, ...]:
        return (g.DATASET,)

    def grid(self, scale: float, options: dict, engine: str, available: set[str]) -> Grid:
        found = g.settings(options.get("parts", g.PARTS),
                           options.get("end_devices", g.END_DEVICES),
                           options.get("thresholds", g.THRESHOLDS),
                           options.get("failed", g.FAILED))
        val, floored = g.val_samples(scale, found)
        notes = [f"Zhang's 10,000 CIFAR-100 test images, 8 end and 4 edge devices scaled "
                 f"to {val:,} Fashion-MNIST test images in batches of {g.BATCH} on a few "
                 "processes of one thread (docs/tiers.md, \"The zhang2018 study\")"]
        if floored:
            notes.append(f"raised to {val:,} test images: every end device gets "
                         f"{g.MIN_BATCHES} batches or more")
        if any(p.get("recovery") == "none" and p.get("fail_devices") for p in found):
            notes.append("table5's none-with-a-failure cell cannot finish: it runs to its "
                         "time limit (give --timeout, e.g. 60)")
        return Grid(cells=g.cells(found, engine), val_samples=val,
                    samples={(g.MODEL,): g.TRAIN_SAMPLES}, datasets={g.MODEL: g.DATASET},
                    notes=notes, label="hier",
                    recorded={"parts": list(options.get("parts", g.PARTS))})

    def device_factor(self, cell: CellConfig) -> float:
        # The networks train once a sweep (the engine's cache), not once a cell.
        return 0.0

    def section(self, records: list[dict]):
        from ...report.study_section import StudySection
        from .ratios import load_reference, matches, reproduce
        return StudySection(
            title="Reproducing the study",
            intro="Zhang's heterogeneous DDNN as ratios between our hier cells (a cell "
                  "over another of the same part) and yes/no findings, where the networks' "
                  "speed and the data cancel",
            bands="Bands: x/÷1.25 for Table 2's delay per image and Figure 3's Mapping "
                  "against End-Edge, x/÷1.5 for Table 4's overhead against the delay and "
                  "Table 5's times against no failure (his five runs, our one, 4 end "
                  "devices for his 8), x/÷1.1 for accuracy (Table 1's tiers, DDNN's "
                  "exits); yes/no rows must agree (docs/tiers.md).",
            ratios=reproduce(records), matches=matches(records),
            hardware=load_reference()["hardware"],
            no_match="No cell matches Tables 1, 2 or 4 (run --parts table1,table2,table4).")
