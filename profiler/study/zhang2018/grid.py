"""Zhang's heterogeneous DDNN evaluation as a preset grid of ``hier`` cells, one part a
table or figure (``PARTS``), scaled to a 2-core host.

Zhang ran 8 end devices, 4 edge devices and a cloud over CIFAR-100's 10,000 test images
in batches of 50. Here every cell is the ``hier`` engine on Fashion-MNIST (its coarse
and fine labels, docs/tiers.md) with the engine's LeNets, batches of 50, and fewer
nodes, each a process of one thread:

- ``table1``: per tier and its network, the inference time per image, coarse and fine
  accuracy, parameters and weights file: Table 2's cells without delay (End, End-Edge,
  End-Cloud: each tier's network on its own tier), so it adds no cell beside table2.
- ``table2``: processing time with and without the delays: 2 end devices, an edge node,
  a cloud; End, and End-Edge and End-Cloud at no delay and at Zhang's edge 0.5 s and
  cloud 1 s.
- ``table4``: the privacy module's overhead against the cloud's delay: 2 end devices
  and a cloud, End-Cloud with the module off and on (the first convolution of the
  cloud's network on the device) at his 0.5, 1, 1.5 and 2 s; his second row, the module
  on an edge device: an edge node between them (``--privacy edge``: the devices send
  it their images, it sends the features on), against the same cells with it off.
- ``table5``: completion time against failed end devices: 4 end devices and a cloud,
  End-Cloud with the cloud's delay at 0.5 s (a batch then takes about as long as his
  did); ``reassign`` and ``monitor`` at 0..3 failed devices (``--failed``), ``none``
  at 0 and the fewest failures (a cell of ``none`` with a failure cannot finish: it
  runs to its time limit, so one is enough to show it).
- ``figure3``: completion time against the number of end devices (``--end-devices``,
  default 1, 2, 4), 2 edge nodes and a cloud, the four schemes at Zhang's delays;
  Mapping with N_map set to his 1 (``--map-devices``; the record keeps eq. (4)'s too).
- ``ddnn``: DDNN's early exit at thresholds swept (``--thresholds``), 2 end devices,
  an edge node and a cloud, no delay: exit shares, accuracy per exit and overall, bytes.

Scale: ``scale`` times ``TEST_IMAGES`` (1,000: a tenth of Zhang's 10,000) test images
streamed (the sweep's
``--val-samples``), raised so that every end device of every cell gets at least
``MIN_BATCHES`` batches; each network trains on ``TRAIN_SAMPLES`` images, once per
sweep (the engine caches it).
"""

from __future__ import annotations

from ...cell import DEFAULT_ENGINE, CellConfig
from ...errors import ConfigError
from ...sweep.grid import validate

PARTS = ("table1", "table2", "table4", "table5", "figure3", "ddnn")
ENGINE = "hier"
MODEL = "lenet-mlp"  # the end devices' network; the upper tiers' are TIER_MODELS
TIER_MODELS = "edge=lenet-cnn,cloud=lenet-example"
DATASET = "fashion-mnist"
BATCH = 50  # Zhang's
# What scale 1 streams: a tenth of Zhang's 10,000 (CIFAR-100's test set), so that the
# whole study runs in minutes on 2 cores; --scale 10 streams as many as he did.
TEST_IMAGES = 1000
TRAIN_SAMPLES = 2000
# A device's fewest batches: table5's failed devices stop after half theirs, so each
# needs at least two, and a reassigned batch needs a survivor with batches left.
MIN_BATCHES = 2
ZHANG_DELAY_S = {"edge": 0.5, "cloud": 1.0}  # his round trips' delays
ZHANG_DELAYS = ",".join(f"{tier}={s:.1f}" for tier, s in ZHANG_DELAY_S.items())
NO_DELAY = "0"
TABLE2_TIERS = "end=2,edge=1,cloud=1"
# Table 1: the cell whose scheme runs each tier's network (table2's, without delay).
TABLE1_SCHEMES = {"end": "end", "edge": "end-edge", "cloud": "end-cloud"}
TABLE4_TIERS = "end=2,cloud=1"
TABLE4_DELAYS_S = (0.5, 1.0, 1.5, 2.0)  # his
# His second row: the module on an edge node, on the way to the cloud (no delay to it).
TABLE4_EDGE_TIERS = "end=2,edge=1,cloud=1"
# Where the module runs -> (its cells' tiers, its --privacy)
TABLE4_ROWS = {"end": (TABLE4_TIERS, "on"), "edge": (TABLE4_EDGE_TIERS, "edge")}
TABLE5_END = 4
TABLE5_TIERS = f"end={TABLE5_END},cloud=1"
TABLE5_DELAY = "cloud=0.5"
FAILED = tuple(range(TABLE5_END))  # failed end devices: 0 to all but device 0
RECOVERIES = ("none", "reassign", "monitor")
FIGURE3_EDGE = 2
# Zhang set N_map to 1 ("according to the evaluation system setup"); eq. (4) from our
# LeNets' times gives hundreds (an end batch in ~1 ms against a 0.5 s edge round trip).
ZHANG_N_MAP = 1
END_DEVICES = (1, 2, 4)
# Softmax entropy in nats (0 to ln 4 = 1.386 for the end network's 4 coarse classes):
# about 0.2, 0.5 and 0.8 of ln 4, the normalized thresholds this part first swept.
THRESHOLDS = (0.0, 0.3, 0.7, 1.1)
DDNN_TIERS = TABLE2_TIERS


def parse_parts(text: str) -> tuple[str, ...]:
    text = str(text).strip()
    if text == "all":
        return PARTS
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise ConfigError(f"--parts {text!r}: give some of {', '.join(PARTS)} "
                          "(comma-separated) or all")
    return parts


def table4_delay(seconds: float) -> str:
    return f"cloud={seconds:.1f}"


def _params(tiers: str, scheme: str, delay: str = NO_DELAY, threshold: float = 0.5,
            fail: int | None = None, recovery: str | None = None,
            privacy: str = "off") -> dict:
    params = {"scheme": scheme, "exit_threshold": threshold, "privacy": privacy,
              "tiers": tiers, "tier_models": TIER_MODELS, "tier_delay": delay}
    if recovery is not None:  # off (the engine's default) stays out of the cell's id
        params.update(fail_devices=fail or 0, recovery=recovery)
    return params


def _devices(tiers: str) -> int:
    return sum(int(pair.split("=")[1]) for pair in tiers.split(","))


def end_count(tiers: str) -> int:
    return int(dict(pair.split("=") for pair in tiers.split(","))["end"])


def parse_failed(text: str) -> tuple[int, ...]:
    from ...option_lists import parse_int_list
    counts = parse_int_list(text, "--failed")
    if any(not 0 <= k < TABLE5_END for k in counts):
        raise ConfigError(f"--failed {text}: table5 has {TABLE5_END} end devices and device "
                          f"0 stays; give counts of 0-{TABLE5_END - 1}, e.g. 0,1,2,3")
    return tuple(sorted({0, *counts}))  # 0: the baseline of every ratio


def none_failed(failed: tuple[int, ...]) -> tuple[int, ...]:
    """none's failure counts: 0 and the fewest failures (every other cannot finish
    either, each at its time limit)."""
    return tuple(sorted({0, *[k for k in failed if k][:1]}))


def settings(parts: tuple[str, ...], end_devices: tuple[int, ...] = END_DEVICES,
             thresholds: tuple[float, ...] = THRESHOLDS,
             failed: tuple[int, ...] = FAILED) -> list[dict]:
    """Every cell's engine settings, part by part, each once (in the parts' order)."""
    found: list[dict] = []
    if "table1" in parts:  # each tier's network on its own tier, no delay
        found += [_params(TABLE2_TIERS, scheme) for scheme in TABLE1_SCHEMES.values()]
    if "table2" in parts:
        found.append(_params(TABLE2_TIERS, "end"))
        for scheme in ("end-edge", "end-cloud"):
            for delay in (NO_DELAY, ZHANG_DELAYS):
                found.append(_params(TABLE2_TIERS, scheme, delay))
    if "table4" in parts:
        for seconds in TABLE4_DELAYS_S:
            found.append(_params(TABLE4_TIERS, "end-cloud", table4_delay(seconds)))
            for tiers, privacy in TABLE4_ROWS.values():
                found.append(_params(tiers, "end-cloud", table4_delay(seconds),
                                     privacy=privacy))
    if "table5" in parts:
        for recovery in RECOVERIES:
            for fail in (none_failed(failed) if recovery == "none" else failed):
                found.append(_params(TABLE5_TIERS, "end-cloud", TABLE5_DELAY, fail=fail,
                                     recovery=recovery))
    if "figure3" in parts:
        for n in end_devices:
            for scheme in ("end", "end-edge", "end-cloud", "mapping"):
                params = _params(f"end={n},edge={FIGURE3_EDGE},cloud=1", scheme, ZHANG_DELAYS)
                if scheme == "mapping":
                    params["map_devices"] = ZHANG_N_MAP
                found.append(params)
    if "ddnn" in parts:
        for threshold in thresholds:
            found.append(_params(DDNN_TIERS, "early-exit", NO_DELAY, threshold))
    unique: dict[tuple, dict] = {}
    for params in found:
        unique.setdefault(tuple(sorted(params.items())), params)
    return list(unique.values())


def cells(found: list[dict], engine: str) -> list[CellConfig]:
    if engine not in (ENGINE, DEFAULT_ENGINE):
        raise ConfigError(f"study zhang2018 runs the hierarchical engine, not {engine}: "
                          f"leave --engine out or give --engine {ENGINE}")
    return [validate(CellConfig(engine=ENGINE, model=MODEL, layers=None,
                                devices=_devices(p["tiers"]), batch=BATCH,
                                max_samples=TRAIN_SAMPLES, dataset=DATASET,
                                engine_params=tuple(p.items())))
            for p in found]


def val_samples(scale: float, found: list[dict]) -> tuple[int, bool]:
    """The test images streamed at ``scale``, and whether the floor raised them (every
    end device of every cell ``MIN_BATCHES`` batches, in whole batches)."""
    most_end = max((end_count(p["tiers"]) for p in found), default=1)
    floor = MIN_BATCHES * BATCH * most_end
    wanted = int(round(TEST_IMAGES * scale / BATCH)) * BATCH
    return max(wanted, floor), wanted < floor
