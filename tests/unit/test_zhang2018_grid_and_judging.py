"""The zhang2018 study's grid (its parts as hier cells, scaled) and its section's judging
on hand-made records: Table 2's delay per image, Table 5's shape (reassign grows,
monitor stays near, none cannot finish), Figure 3's order and DDNN's thresholds."""

from __future__ import annotations

import pytest

from profiler.errors import ConfigError
from profiler.study import STUDIES
from profiler.study.zhang2018 import grid as g
from profiler.study.zhang2018.ratios import reproduce

STUDY = STUDIES["zhang2018"]


def _grid(parts="all", scale=1.0, engine="hier", **options):
    parsed = STUDY.parse({"parts": parts, **options})
    return STUDY.grid(scale, parsed, engine, {"fashion-mnist"})


def test_the_parts_are_hier_cells_each_once():
    grid = _grid()
    assert {c.engine for c in grid.cells} == {"hier"} and {c.batch for c in grid.cells} == {50}
    assert len({c.cell_id for c in grid.cells}) == len(grid.cells)
    table5 = [dict(c.engine_params) for c in _grid("table5").cells]
    assert sorted((p["recovery"], p["fail_devices"]) for p in table5) == sorted(
        [("none", 0), ("none", 1)] + [(r, k) for r in ("reassign", "monitor")
                                      for k in range(4)])
    assert {p["tiers"] for p in table5} == {"end=4,cloud=1"}
    assert {c.devices for c in _grid("table5").cells} == {5}
    fewer = [dict(c.engine_params) for c in _grid("table5", failed="2").cells]
    assert sorted((p["recovery"], p["fail_devices"]) for p in fewer) == [
        ("monitor", 0), ("monitor", 2), ("none", 0), ("none", 2), ("reassign", 0),
        ("reassign", 2)]
    figure3 = _grid("figure3", end_devices="1,3").cells
    assert sorted({c.devices for c in figure3}) == [4, 6] and len(figure3) == 8
    table2 = [dict(c.engine_params) for c in _grid("table2").cells]
    assert sorted((p["scheme"], p["tier_delay"]) for p in table2) == [
        ("end", "0"), ("end-cloud", "0"), ("end-cloud", "edge=0.5,cloud=1.0"),
        ("end-edge", "0"), ("end-edge", "edge=0.5,cloud=1.0")]
    table4 = [dict(c.engine_params) for c in _grid("table4").cells]
    # His two rows, the module on the device (on) and on an edge node (edge), each against
    # the same cell with it off, straight to the cloud.
    assert sorted((p["tier_delay"], p["privacy"], p["tiers"]) for p in table4) == [
        (f"cloud={s}", on, tiers) for s in ("0.5", "1.0", "1.5", "2.0")
        for on, tiers in (("edge", "end=2,edge=1,cloud=1"), ("off", "end=2,cloud=1"),
                          ("on", "end=2,cloud=1"))]
    # Table 1 is table2's cells without delay: no cell of its own beside table2.
    table1 = [dict(c.engine_params) for c in _grid("table1").cells]
    assert sorted((p["scheme"], p["tier_delay"]) for p in table1) == [
        ("end", "0"), ("end-cloud", "0"), ("end-edge", "0")]
    assert len(_grid("table1,table2").cells) == len(table2)
    ddnn = [dict(c.engine_params)["exit_threshold"]
            for c in _grid("ddnn", thresholds="0,0.6").cells]
    assert ddnn == [0.0, 0.6]
    # Figure 3's Mapping at Zhang's N_map of 1; the other schemes leave it out (eq. 4).
    mapping = {dict(c.engine_params)["scheme"]: dict(c.engine_params).get("map_devices")
               for c in _grid("figure3", end_devices="4").cells}
    assert mapping == {"end": None, "end-edge": None, "end-cloud": None, "mapping": 1}


def test_scale_and_its_floor():
    assert _grid("table2", scale=1.0).val_samples == 1000
    assert _grid("table2", scale=0.5).val_samples == 500
    # table5's 4 end devices get 2 batches each at the least.
    small = _grid("table5", scale=0.01)
    assert small.val_samples == 400 and any("raised to 400" in n for n in small.notes)
    assert any("--timeout" in n for n in small.notes)


@pytest.mark.parametrize("bad, words", [
    ({"parts": "table9"}, "--parts 'table9'"),
    ({"parts": "table2", "thresholds": "1.5"}, "--thresholds 1.5 is outside 0-ln"),
    ({"parts": "table5", "failed": "4"}, "--failed 4: table5 has 4 end devices"),
])
def test_bad_options_are_one_line(bad, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        STUDY.parse(bad)


def test_threshold_zero_is_kept():
    # The ddnn part's threshold 0 (nothing exits) once ran as the engine's default 0.5.
    from profiler.engines.hier.settings import threshold
    assert threshold(0.0) == 0.0 and threshold("0") == 0.0 and threshold(None) == 0.5


def test_another_engine_is_refused():
    with pytest.raises(ConfigError, match="runs the hierarchical engine, not pytorch"):
        _grid("table2", engine="pytorch")


def _rec(tiers, scheme, delay="0", status="ok", **columns):
    return {"engine": "hier", "tiers": tiers, "scheme": scheme, "tier_delay": delay,
            "status": status, "batch": 50, "repeat": 0, "exit_threshold": 0.5,
            "cell_id": f"{scheme}-{delay}-{columns.get('fail_devices', 0)}"
                       f"-{columns.get('recovery')}-{columns.get('exit_threshold')}",
            **columns}


def _t5(recovery, fail, seconds, status="ok"):
    return _rec(g.TABLE5_TIERS, "end-cloud", g.TABLE5_DELAY, status,
                recovery=recovery, fail_devices=fail, hier_completion_s=seconds,
                hier_batches_moved=fail * 2)


def _verdicts(records):
    return {(r.source, r.measure, r.config): (r.verdict, r.ours) for r in reproduce(records)}


def test_table5_shape_is_judged():
    records = [_t5("reassign", 0, 10.0), _t5("reassign", 1, 17.0), _t5("reassign", 2, 36.0),
               _t5("reassign", 3, 80.0),
               _t5("monitor", 0, 10.0), _t5("monitor", 1, 10.5), _t5("monitor", 2, 11.0),
               _t5("monitor", 3, 25.0),  # 2.5 x: outside his 1.45 x/÷1.5
               _t5("none", 0, 9.0), _t5("none", 1, None, status="timeout")]
    v = _verdicts(records)
    config = "end-cloud, 4 end devices ({} of his 8)"
    assert v[("Table 5", "reassign: completion 1 / 0 failed", config.format(2))] == \
        ("within", pytest.approx(1.7))  # his 43.2 / 25.7 = 1.68
    assert v[("Table 5", "reassign: completion 3 / 0 failed", config.format(6))][0] == "within"
    assert v[("Table 5", "reassign: time grows with every failure", "0-3 of 4 failed")] == \
        ("within", True)
    assert v[("Table 5", "monitor: completion 1 / 0 failed", config.format(2))][0] == "within"
    assert v[("Table 5", "monitor: completion 3 / 0 failed", config.format(6))] == \
        ("outside", pytest.approx(2.5))
    assert v[("Table 5", "none: finishes with no failure", "end-cloud")] == ("within", True)
    assert v[("Table 5", "none: cannot finish with 1 failed", "end-cloud")] == \
        ("within", True)
    # A none cell that finished with a device failed is the finding missed.
    records[-1] = _t5("none", 1, 9.0)
    assert _verdicts(records)[("Table 5", "none: cannot finish with 1 failed",
                               "end-cloud")] == ("outside", False)


def test_table2_figure3_and_ddnn_are_judged():
    t2 = g.TABLE2_TIERS
    records = [_rec(t2, "end", hier_latency_p50_ms=1.0),
               _rec(t2, "end-edge", hier_latency_p50_ms=5.0),
               _rec(t2, "end-edge", g.ZHANG_DELAYS, hier_latency_p50_ms=505.0),
               _rec(t2, "end-cloud", hier_latency_p50_ms=14.0),
               _rec(t2, "end-cloud", g.ZHANG_DELAYS, hier_latency_p50_ms=1614.0)]
    f3 = "end=2,edge=2,cloud=1"
    for scheme, seconds in (("end", 0.3), ("end-edge", 5.0), ("end-cloud", 10.0),
                            ("mapping", 5.2)):
        records.append(_rec(f3, scheme, g.ZHANG_DELAYS, hier_completion_s=seconds))
    for threshold, local, sent, acc in ((0.0, 0.0, 800, 0.90), (0.5, 0.7, 250, 0.89),
                                        (0.8, 0.9, 90, 0.80)):
        records.append(_rec(g.DDNN_TIERS, "early-exit", exit_threshold=threshold,
                            hier_share={"end": local, "edge": 1 - local, "cloud": 0},
                            hier_bytes_per_sample={"end-edge": sent},
                            hier_coarse_accuracy=acc))
    v = _verdicts(records)
    edge = "end-edge, 0.5 s delay, end=2,edge=1,cloud=1"
    cloud = "end-cloud, 1 s delay, end=2,edge=1,cloud=1"
    assert v[("Table 2", "time added per image / delay per image", edge)] == \
        ("within", pytest.approx(1.0))
    # 1.6 s where 1 s was asked: 1.6 / his 1.01 is outside x/÷1.25.
    assert v[("Table 2", "time added per image / delay per image", cloud)][0] == "outside"
    assert v[("Table 2", "processing time with / without the delay", edge)] == \
        ("outside", pytest.approx(101.0))  # his 2.18: the same delay weighs more on faster networks
    config = "2 end, 2 edge, delays edge=0.5,cloud=1.0"
    assert v[("Figure 3", "End is the fastest", config)] == ("within", True)
    assert v[("Figure 3", "End-Edge faster than End-Cloud", config)] == ("within", True)
    assert v[("Figure 3", "Mapping / End-Edge", config)] == ("within", pytest.approx(1.04))
    assert v[("DDNN", "share answered on the device rises with the threshold",
              "thresholds 0-0.8")] == ("within", True)
    assert v[("DDNN", "bytes per sample fall as the threshold rises", "thresholds 0-0.8")] \
        == ("within", True)
    assert v[("DDNN", "coarse accuracy / everything sent up", "threshold 0.5 / 0")][0] == \
        "within"
    assert v[("DDNN", "coarse accuracy / everything sent up", "threshold 0.8 / 0")][0] == \
        "outside"  # 0.80 / 0.90 = 0.89 < 1 / 1.1
    section = STUDY.section(records)
    assert [m.study for m in section.matches] == [10.4, 8.4, 18.3, 10.8, 31.0]
    assert section.matches[2].ours == pytest.approx(10.1)


def _t1(scheme, infer_ms, coarse, fine=None):
    tier = {"end": "end", "end-edge": "edge", "end-cloud": "cloud"}[scheme]
    sizes = {"end": (108996, 0.44), "edge": (61706, 0.25), "cloud": (431080, 1.73)}
    return _rec(g.TABLE2_TIERS, scheme, hier_infer_ms_per_image={"end": 0.1, tier: infer_ms},
                hier_end_accuracy=coarse if tier == "end" else 0.8,
                hier_exit_coarse_accuracy={tier: coarse},
                hier_exit_fine_accuracy={tier: fine} if fine else None,
                hier_params_by_tier={t: n for t, (n, _) in sizes.items()},
                hier_weights_mb_by_tier={t: mb for t, (_, mb) in sizes.items()},
                hier_models={"end": "lenet-mlp", "edge": "lenet-cnn",
                             "cloud": "lenet-example"})


def test_table1_per_tier_is_judged_and_set_beside_his():
    records = [_t1("end", 0.05, 0.80), _t1("end-edge", 0.2, 0.88, 0.70),
               _t1("end-cloud", 0.4, 0.90, 0.84)]
    v = _verdicts(records)
    own = "each tier's network on its own tier"
    assert v[("Table 1", "inference time per image: end < edge < cloud", own)] == \
        ("within", True)
    # The end tier's MLP has more parameters than the edge's CNN: the order is missed.
    assert v[("Table 1", "parameters: end < edge < cloud", own)] == ("outside", False)
    # His edge is 1.46 x his end on coarse labels; ours 1.1 x: outside x/÷1.1.
    assert v[("Table 1", "coarse accuracy edge / end", "end and edge networks, no delay")] \
        == ("outside", pytest.approx(1.1))
    assert v[("Table 1", "fine accuracy cloud / edge", "edge and cloud networks, no delay")] \
        == ("within", pytest.approx(1.2))  # his 0.73 / 0.61 = 1.197
    matches = [m for m in STUDY.section(records).matches if m.source == "Table 1"]
    by = {(m.config.split(":")[0], m.measure): m for m in matches}
    assert by[("end", "inference ms/image")].study == 5.20
    assert by[("end", "inference ms/image")].ours == pytest.approx(0.05)
    assert by[("cloud", "parameters (M)")].ours == pytest.approx(0.43108)
    assert by[("edge", "fine accuracy")].comparable is False
    assert ("end", "fine accuracy") not in by  # MobileNet answers coarse labels only
    # One tier's cell missing: its rows are unjudged, nothing raises.
    v = _verdicts(records[:2])
    assert v[("Table 1", "inference time per image: end < edge < cloud", own)][0] == "no cell"


def test_table4_overhead_against_the_delay_is_judged():
    records = []
    for seconds, added_ms in ((0.5, 300.0), (1.0, 330.0), (1.5, 300.0), (2.0, 310.0)):
        base_ms = seconds * 1000 + 20
        delay = g.table4_delay(seconds)
        records += [_rec(g.TABLE4_TIERS, "end-cloud", delay, privacy="off",
                         hier_latency_p50_ms=base_ms),
                    _rec(g.TABLE4_TIERS, "end-cloud", delay, privacy="on",
                         hier_latency_p50_ms=base_ms + added_ms),
                    # on an edge node: a constant 0.2 s, but at 2 s more than at 1.5 s
                    _rec(g.TABLE4_EDGE_TIERS, "end-cloud", delay, privacy="edge",
                         hier_latency_p50_ms=base_ms + (400 if seconds == 2.0 else 200))]
    for r in records:
        r["cell_id"] += r["privacy"]
    v = _verdicts(records)
    config = "end-cloud, module on the end device, end=2,cloud=1"
    # A constant 0.3 s a batch: its share falls with the delay as his (0.332 / 0.571).
    verdict, ours = v[("Table 4", "privacy overhead at 1 / 0.5 s delay", config)]
    assert verdict == "within" and ours == pytest.approx((330 / 1020) / (300 / 520))
    assert v[("Table 4", "privacy overhead falls as the delay grows",
              "module on the end device, 0.5, 1, 1.5, 2 s")] == ("within", True)
    edge = "end-cloud, module on an edge node, end=2,edge=1,cloud=1"
    verdict, ours = v[("Table 4", "privacy overhead at 1 / 0.5 s delay", edge)]
    assert verdict == "within" and ours == pytest.approx((200 / 1020) / (200 / 520))  # his 0.62
    assert v[("Table 4", "privacy overhead falls as the delay grows",
              "module on an edge node, 0.5, 1, 1.5, 2 s")] == ("outside", False)
    # at 2 s, 400 ms against the device's 310: his finding missed
    assert v[("Table 4", "the module costs less on an edge node than on the device",
              "every delay")] == ("outside", False)
    matches = STUDY.section(records).matches
    assert [m.study for m in matches] == [0.571, 0.332, 0.247, 0.179,
                                          0.440, 0.272, 0.206, 0.159]
    assert matches[0].ours == pytest.approx(300 / 520)
    assert matches[4].ours == pytest.approx(200 / 520)


def test_missing_cells_leave_rows_out_or_unjudged():
    assert STUDY.section([]).ratios == [] and STUDY.section([]).matches == []
    # Table 2 with its delayed cell failed: the rows say "no cell", nothing raises.
    only = [_rec(g.TABLE2_TIERS, "end-edge", hier_latency_p50_ms=5.0),
            _rec(g.TABLE2_TIERS, "end-edge", g.ZHANG_DELAYS, status="failed")]
    rows = [r for r in reproduce(only) if r.source == "Table 2"]
    assert rows and {r.verdict for r in rows} == {"no cell"}
