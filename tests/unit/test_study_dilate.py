"""A study's cells dilated alike (``study/dilate.py``): one speedup per dilation group.

Checked through the code that uses it: the cells' caps, the estimate's rate, the
profile check's dilations and the cell ids (unchanged while no cap is set).
"""

from __future__ import annotations

from dataclasses import replace

from profiler.calibrate.check import dilations_used
from profiler.cell import CellConfig
from profiler.cluster.profiles import load_catalog
from profiler.study import STUDIES
from profiler.study.base import Study
from profiler.study.dilate import alone, dilated_alike
from profiler.study.estimate import node_rate

PARK = STUDIES["park2019"]
PROFILE = "pi3b-park2019"


def _lenet(devices: int) -> CellConfig:
    return CellConfig(model="lenet-mlp", layers=None, batch=64, devices=devices,
                      placement="colocated", data_partition="replicate")


def test_a_group_gets_its_smallest_speedup_and_the_estimate_and_check_follow():
    catalog = load_catalog()
    cells = [_lenet(d) for d in (1, 4, 10)] + [CellConfig(model="resnet", layers=32,
                                                          devices=1)]
    capped = dilated_alike(PARK, cells, "profile", PROFILE, catalog, 100.0)
    lenets = capped[:3]
    least = min(alone(c, PROFILE, catalog, 100.0) for c in cells[:3])
    assert {c.max_speedup for c in lenets} == {least}
    # The ResNet cell is a group of its own: its cap is what it gets alone, up to the
    # dilation shown neutral for ResNet (dilations.yaml).
    assert capped[3].max_speedup == alone(cells[3], PROFILE, catalog,
                                          PARK.neutral_speedup("resnet"))
    # The estimate and the profile check see the cap: one speedup for LeNet's three.
    assert {k for model, k in dilations_used(catalog.profiles[PROFILE], lenets, 100.0,
                                             2.0) if model == "lenet-mlp"} == {least}
    one = node_rate(PARK, lenets[0], "profile", PROFILE, catalog, 100.0)
    uncapped = node_rate(PARK, cells[0], "profile", PROFILE, catalog, 100.0)
    assert one <= uncapped
    # Capping twice changes nothing; the cap is part of the cell's identity.
    assert dilated_alike(PARK, capped, "profile", PROFILE, catalog, 100.0) == capped
    assert capped[0].cell_id != cells[0].cell_id
    assert replace(capped[0], max_speedup=None).cell_id == cells[0].cell_id


def test_nothing_is_capped_undilated_elsewhere_or_without_groups():
    catalog = load_catalog()
    cells = [_lenet(d) for d in (1, 10)]
    assert dilated_alike(PARK, cells, "profile", PROFILE, catalog, 1.0) == cells
    assert dilated_alike(PARK, cells, "host", None, catalog, 100.0) == cells
    assert dilated_alike(Study(), cells, "profile", PROFILE, catalog, 100.0) == cells


def test_a_group_dilates_no_further_than_shown_neutral_and_the_plan_says_so():
    from profiler.study.dilate import neutral_notes

    class Shown(Study):
        def dilation_group(self, cell):
            return cell.model

        def neutral_speedup(self, group):
            return {"lenet-mlp": 2.0}.get(group)

    catalog = load_catalog()
    cells = [_lenet(d) for d in (1, 4)] + [CellConfig(model="resnet", layers=32, devices=1)]
    capped = dilated_alike(Shown(), cells, "profile", PROFILE, catalog, 100.0)
    assert {c.max_speedup for c in capped[:2]} == {2.0}
    # Unshown: as far as the host lets it, as before.
    assert capped[2].max_speedup == alone(cells[2], PROFILE, catalog, 100.0) > 2.0
    notes = neutral_notes(Shown(), capped, "profile", 100.0)
    assert any("lenet-mlp x 2" in n for n in notes)
    assert any("no dilation shown neutral: resnet" in n for n in notes)
    assert neutral_notes(Shown(), capped, "profile", 1.0) == []
    # park2019 keeps what was shown in its dilations.yaml, each with how it was shown.
    from profiler.study.park2019.dilations import neutral_dilations
    shown = neutral_dilations()
    assert shown and all(v["speedup"] >= 1 and v["shown"] for v in shown.values())
    assert PARK.neutral_speedup("lenet-mlp") == shown["lenet-mlp"]["speedup"]
