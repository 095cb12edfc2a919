"""``hier``: hierarchical inference over end devices, edge nodes and a cloud (Zhang
2018's schemes, DDNN's early exit), torch on the CPU, one thread a process.

A cell's nodes are put in tiers: by each node's own ``tier`` where the cluster gives
every node one (a tiered profile), else by ``--tiers end=4,edge=2,cloud=1`` laid over
the cell's nodes in order, the tiers in the order named (``auto``: end devices, then a
third of the rest but one as edge nodes, then one cloud node). End devices
(``workloads.hier.device``, the cell's workers) hold the test set of Fashion-MNIST in
shards and stream it in batches of ``--batch`` through their network (``--model``,
trained on the four coarse labels); edge and cloud nodes (``workloads.hier.serve``,
servers) answer with the fine label, by the scheme (``--scheme
end,end-edge,end-cloud,mapping,early-exit``; ``workloads.hier.schemes``).
``--exit-threshold`` is early-exit's softmax entropy (nats, 0 to ln of the end network's
classes: ln 4 = 1.386) under which a device answers itself; ``--privacy on`` runs the
upper network's first convolution on the device so that only features leave it;
``--privacy edge`` (with ``end-cloud``) runs the cloud network's first convolution on an
edge node, which the devices send their images to and which sends only features on to
the cloud (Zhang's Table 4, second row). ``--tier-models edge=M,cloud=M`` names the
upper tiers' networks (trained on the ten fine labels), ``--tier-delay
edge=0.5,cloud=1.0`` the seconds each round trip to that tier is held back in the
application (as the work set its delays; it works on every cluster). Each network is
trained before the cell streams on ``--max-samples`` training samples (default
``TRAIN_SAMPLES``), cached per (model, labels, samples) so a sweep trains it once. The
test samples streamed are ``--val-samples`` (default the whole 10,000).

Links between tiers: a device dials what the cluster's ``link_address`` gives for the
upper node (``TrainOptions.link_address``, set by the launcher): on a cluster whose links
between tiers are a delaying relay (the tiers helper's emulated cluster), the relay's
address, so the link's delay is the network's; elsewhere the node itself. ``--tier-delay``
is held back in the application on top of whatever the link adds: give one or the other.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from workloads.hier import PLAN_ENV, Plan, schemes
from workloads.hier.nets import DATASET

from ...cell import CellConfig
from ...cluster.base import Node
from ...errors import ConfigError
from ...ports import free_port
from ..base import EngineOption, ProcessSpec, ReportSection, TrainOptions
from ..pytorch import _TorchEngine
from . import columns as hier_columns
from . import report, settings

TRAIN_SAMPLES = 2000
# Networks the hierarchy builds for Fashion-MNIST's 28x28 grey images.
DIGIT_MODELS = ("lenet-mlp", "lenet-cnn", "lenet-example")


class HierEngine(_TorchEngine):
    name = "hier"
    description = ("hierarchical inference: end devices, edge nodes and a cloud, Zhang's "
                   "schemes and DDNN's early exit on Fashion-MNIST (torch, inference only)")
    sync_modes = ("sync",)
    models = DIGIT_MODELS
    worker = "workloads.hier.device:EndDevice"
    options = (
        EngineOption("scheme", "end-edge", settings.parse_schemes,
                     f"Where batches go (hier): {', '.join(schemes.SCHEMES)}.", "str",
                     "a hierarchical cell's scheme"),
        EngineOption("exit_threshold", "0.5", settings.parse_thresholds,
                     "Early exit (hier --scheme early-exit): a device answers a sample "
                     "when its softmax's entropy is under this, in nats: 0 to ln(4) = "
                     "1.386 (the end network's 4 coarse classes); e.g. 0.3,0.7.", "float",
                     "early-exit's softmax entropy threshold, nats"),
        EngineOption("privacy", "off", settings.parse_privacy,
                     "on: the upper tier's first convolution runs on the end device and "
                     "only its features leave it; edge (with --scheme end-cloud): the "
                     "cloud's first convolution runs on an edge node, between (hier).", "str",
                     "the privacy module: off, on (the end device) or edge"),
        EngineOption("tiers", settings.AUTO, settings.parse_tiers,
                     "Nodes per tier laid over the cell's nodes in order when they have "
                     "no tier of their own (hier): auto, or e.g. end=4,edge=2,cloud=1; "
                     "several separated by ';'.", "str", "nodes per tier as asked"),
        EngineOption("tier_models", settings.DEFAULT_MODELS, settings.parse_models,
                     "The upper tiers' networks (hier; --model is the end devices'), "
                     "e.g. edge=lenet-cnn,cloud=lenet-example.", "str",
                     "the edge and cloud networks"),
        EngineOption("tier_delay", "0", settings.parse_delays,
                     "Seconds each round trip to a tier is held back in the application "
                     "(hier), e.g. edge=0.5,cloud=1.0; 0: none.", "str",
                     "round-trip delay per upper tier, held back by the sender"),
        # Failures: added after the first cells had ids, so at their defaults they stay
        # out of a cell's id.
        EngineOption("fail_devices", "0", settings.parse_fail,
                     "End devices that fail, stopping after half their batches (hier; "
                     "needs --recovery), e.g. 0,2,4.", "int",
                     "end devices that fail after half their batches", omit_default=True),
        EngineOption("map_devices", str(settings.MAP_EQ4), settings.parse_map_devices,
                     "Mapping (hier --scheme mapping): the end devices each edge node takes "
                     "(N_map; Zhang set 1), or 0: each device computes it from eq. (4) "
                     "with its measured times.", "int",
                     "Mapping's N_map as given (0: from eq. 4)", omit_default=True),
        EngineOption("recovery", settings.RECOVERY_OFF, settings.parse_recovery,
                     "How batches are handed out and failures survived (hier): off (each "
                     "device streams its own shard), or end device 0 assigns them: none, "
                     "reassign, monitor (Zhang's three).", "str",
                     "the task assigner's way with failed devices: off, none, reassign, "
                     "monitor", omit_default=True),
    )
    columns = hier_columns.COLUMNS
    compare_measures = (("hier_completion_s", "done s"), ("hier_latency_p50_ms", "p50 ms"),
                        ("hier_coarse_accuracy", "coarse acc"))

    def comm(self, cell: CellConfig) -> str:
        return "hier"

    def task(self, rec: dict) -> str:
        return "infer"

    def label(self, rec: dict, *, stages: bool = True) -> str:
        """``hier end-edge``, with the threshold of an early exit, ``privacy``, and the
        tiers and delays when given."""
        if rec.get("scheme") is None:
            return self.name
        parts = [self.name, str(rec["scheme"])]
        if rec["scheme"] == "early-exit":
            parts.append(f"thr={rec.get('exit_threshold')}")
        if rec.get("privacy") == "on":
            parts.append("privacy")
        elif rec.get("privacy") == "edge":
            parts.append("privacy at edge")
        if stages and (rec.get("tiers") or settings.AUTO) != settings.AUTO:
            parts.append(str(rec["tiers"]))
        if str(rec.get("tier_delay") or "0") != "0":
            parts.append(f"delay {rec['tier_delay']}")
        if (rec.get("recovery") or settings.RECOVERY_OFF) != settings.RECOVERY_OFF:
            parts.append(f"fail={rec.get('fail_devices') or 0} {rec['recovery']}")
        return " ".join(parts)

    def summarize(self, workers: dict[int, list[dict]], starts: dict[int, dict]) -> dict:
        return hier_columns.columns(workers, starts)

    def report_sections(self, records: list[dict]) -> list[ReportSection]:
        return report.sections(records, self.name)

    def check_cell(self, cell: CellConfig) -> None:
        if cell.dataset not in ("auto", DATASET):
            raise ConfigError(f"--engine hier streams Fashion-MNIST (its labels have the "
                              f"hierarchy), not {cell.dataset}: give --dataset fashion-mnist")
        if cell.epochs != 1:
            raise ConfigError("--engine hier streams the test set once (inference): give "
                              "--epochs 1")
        tiers = cell.param("tiers") or settings.AUTO
        counts = settings.counts(tiers, cell.devices)
        if tiers != settings.AUTO and sum(counts.values()) != cell.devices:
            raise ConfigError(f"--tiers {tiers} makes {sum(counts.values())} nodes, the cell "
                              f"has --devices {cell.devices}: give as many")
        check_tiers(counts, cell.param("scheme") or "end-edge")
        check_failures(cell.param("fail_devices") or 0,
                       cell.param("recovery") or settings.RECOVERY_OFF, counts["end"])
        models = settings.tier_models(cell.param("tier_models") or settings.DEFAULT_MODELS,
                                      cell.model)
        for tier in ("edge", "cloud"):
            if models[tier] not in DIGIT_MODELS:
                raise ConfigError(f"--tier-models {tier}={models[tier]} takes colour images, "
                                  "Fashion-MNIST is grey: give one of "
                                  f"{', '.join(DIGIT_MODELS)}")
        privacy = cell.param("privacy") or "off"
        if privacy == "edge":
            check_privacy_edge(counts, cell.param("scheme") or "end-edge")
        if privacy != "off":
            from workloads.hier.nets import first_conv_problem

            for tier in ("edge", "cloud") if privacy == "on" else ("cloud",):
                problem = counts[tier] and first_conv_problem(models[tier])
                if problem:
                    raise ConfigError(f"--privacy {privacy}: {problem}")

    def nodes_needed(self, cell: CellConfig) -> int:
        return cell.devices

    def check_nodes(self, cell: CellConfig, nodes: list[Node]) -> None:
        """Refuse a tier's network that its node's memory (the node profile's
        ``memory_mb``) cannot hold, by ``nets.memory_needed_mb``'s estimate. Only nodes
        with a limit are checked (local nodes have none), so torch is loaded here only
        then."""
        by_tier = assign_tiers(nodes[:self.nodes_needed(cell)],
                               cell.param("tiers") or settings.AUTO)
        models = settings.tier_models(cell.param("tier_models") or settings.DEFAULT_MODELS,
                                      cell.model)
        # The option that names each tier's network, as the line will say it.
        given = {tier: f"--tier-models {tier}={model}" for tier, model in models.items()}
        given["end"] = f"--model {models['end']}"
        if cell.param("privacy") == "edge":  # the edge node holds the cloud's network
            models["edge"] = models["cloud"]
            given["edge"] = f"{given['cloud']} (--privacy edge runs it on the edge)"
        for tier in ("end", *served(cell)):
            limited = [n for n in by_tier[tier] if n.memory_mb]
            if not limited:
                continue
            from workloads.hier.labels import TIER_LABELS
            from workloads.hier.nets import memory_needed_mb

            need, weights, activations = memory_needed_mb(models[tier], TIER_LABELS[tier],
                                                          cell.batch)
            node = min(limited, key=lambda n: n.memory_mb)
            if need > node.memory_mb:
                raise ConfigError(
                    f"{given[tier]} does not fit the {tier} tier's node {node.name} "
                    f"({node.memory_mb} MB): it needs about {need:.0f} MB (a torch process, "
                    f"{weights:.1f} MB of weights, {activations:.1f} MB of activations for a "
                    f"batch of {cell.batch}): give the {tier} tier a smaller network, a node "
                    "profile with more memory, or a smaller --batch")

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        nodes = nodes[:self.nodes_needed(cell)]
        by_tier = assign_tiers(nodes, cell.param("tiers") or settings.AUTO)
        scheme = cell.param("scheme") or "end-edge"
        check_tiers({t: len(n) for t, n in by_tier.items()}, scheme)
        privacy_edge = cell.param("privacy") == "edge"
        used = served(cell)
        ports = {node.name: free_port() for tier in used for node in by_tier[tier]}
        plan = Plan(scheme=scheme, counts={t: len(n) for t, n in by_tier.items()},
                    models=settings.tier_models(cell.param("tier_models")
                                                or settings.DEFAULT_MODELS, cell.model),
                    addresses=addresses(by_tier, ports, options, used),
                    delays=settings.delays(str(cell.param("tier_delay") or "0")),
                    threshold=settings.threshold(cell.param("exit_threshold")),
                    privacy=cell.param("privacy") == "on", privacy_edge=privacy_edge,
                    train_samples=cell.max_samples or TRAIN_SAMPLES, seed=options.seed,
                    n_map=cell.param("map_devices") or settings.MAP_EQ4)
        recovery = cell.param("recovery") or settings.RECOVERY_OFF
        check_failures(cell.param("fail_devices") or 0, recovery, len(by_tier["end"]))
        if recovery != settings.RECOVERY_OFF:  # end device 0 runs the task assigner
            plan = dataclasses.replace(
                plan, fail=cell.param("fail_devices") or 0, recovery=recovery,
                assigner=f"{by_tier['end'][0].address}:{free_port()}")
        common = {PLAN_ENV: plan.to_env(), "WORLD_SIZE": str(len(by_tier["end"])),
                  "OMP_NUM_THREADS": str(options.threads_per_process),
                  "PYTHONUNBUFFERED": "1"}
        specs = []
        # Only the tiers the scheme sends to serve (an idle node trains no network).
        for tier in used:
            for index, node in enumerate(by_tier[tier]):
                argv = [sys.executable, "-m", "workloads.hier.serve", "--tier", tier,
                        "--index", str(index), "--host", node.address,
                        "--port", str(ports[node.name]),
                        "--threads", str(options.threads_per_process)]
                if options.data_dir is not None:
                    argv += ["--data-dir", str(options.data_dir)]
                specs.append(ProcessSpec("server", len(specs), node, argv, dict(common),
                                         decisive=False, part=f"{tier} {index}"))
        argv = self.train_argv(cell, cell_dir, options)
        specs += [ProcessSpec("worker", index, node, argv, {**common, "RANK": str(index)},
                              part=f"end {index}")
                  for index, node in enumerate(by_tier["end"])]
        return specs


def addresses(by_tier: dict[str, list[Node]], ports: dict[str, int],
              options: TrainOptions, used: tuple[str, ...]) -> dict[str, list[str]]:
    """``host:port`` of each upper node as the lower tier dials it, by link (``end-edge``:
    one per edge node; ``edge-cloud``: the cloud as an edge node dials it): the
    cluster's ``link_address`` where it has one (a relay holding the link's delay: the
    same address for every node of the lower tier), else the node itself."""
    out = {}
    for low, high in (("end", "edge"), ("end", "cloud"), ("edge", "cloud")):
        if by_tier[low] and by_tier[high] and low in ("end", *used) and high in used:
            out[f"{low}-{high}"] = [_address(by_tier[low][0], node, ports.get(node.name, 0),
                                             options) for node in by_tier[high]]
    return out


def _address(source: Node, target: Node, port: int, options: TrainOptions) -> str:
    if options.link_address is None:
        return f"{target.address}:{port}"
    host, port = options.link_address(source, target, port)
    return f"{host}:{port}"


def assign_tiers(nodes: list[Node], tiers: str) -> dict[str, list[Node]]:
    """The cell's nodes by tier: each node's own ``tier`` when every node has one, else
    ``--tiers`` laid over the nodes in order, the tiers in the order it names them
    (``cloud=1,edge=2,end=4``: node 0 the cloud; ``auto``: end devices first)."""
    own = [getattr(node, "tier", None) for node in nodes]
    if all(own):
        return {tier: [n for n, t in zip(nodes, own) if t == tier] for tier in schemes.TIERS}
    counts = settings.counts(tiers, len(nodes))
    out, at = {}, 0
    for tier in counts:
        out[tier] = nodes[at:at + counts[tier]]
        at += counts[tier]
    return out


def check_failures(fail: int, recovery: str, end_devices: int) -> None:
    """Refuse (one line) failures without an assigner, or leaving no end device."""
    if fail and recovery == settings.RECOVERY_OFF:
        raise ConfigError(f"--fail-devices {fail} needs the task assigner to hand out the "
                          "batches: give --recovery none, reassign or monitor")
    if fail >= end_devices:
        raise ConfigError(f"--fail-devices {fail} is more failures than the cell's "
                          f"{end_devices} end devices can have (end device 0 assigns the "
                          f"batches and stays): give --fail-devices {end_devices - 1} or "
                          "fewer, or more end devices")


def served(cell: CellConfig) -> tuple[str, ...]:
    """The upper tiers whose nodes run a server in ``cell``: those its scheme sends to,
    and under ``--privacy edge`` the edge node on the way to the cloud as well."""
    if cell.param("privacy") == "edge":
        return ("edge", "cloud")
    return schemes.USES[cell.param("scheme") or "end-edge"]


def check_privacy_edge(counts: dict[str, int], scheme: str) -> None:
    """Refuse (one line) ``--privacy edge`` where the edge cannot stand between the end
    devices and the cloud."""
    if scheme != settings.PRIVACY_EDGE_SCHEME:
        raise ConfigError(f"--privacy edge runs the cloud's first convolution on an edge node "
                          f"on the way to the cloud, not with --scheme {scheme}: give --scheme "
                          f"{settings.PRIVACY_EDGE_SCHEME} (or --privacy on)")
    if not (counts.get("edge") and counts.get("cloud")):
        raise ConfigError("--privacy edge needs an edge node and a cloud node: give --tiers "
                          "with edge=1 and cloud=1 or more (e.g. end=2,edge=1,cloud=1)")


def check_tiers(counts: dict[str, int], scheme: str) -> None:
    """Refuse (one line) a scheme whose tiers have no node."""
    if not counts.get("end"):
        raise ConfigError("the cell has no end device: give --tiers with end=1 or more")
    for tier in schemes.NEEDS[scheme]:
        if not counts.get(tier):
            raise ConfigError(f"--scheme {scheme} sends batches to the {tier} tier, which has "
                              f"no node here: give --tiers with {tier}=1 or more (e.g. "
                              "--tiers end=4,edge=2,cloud=1) and as many --devices")
    if scheme == "early-exit" and not (counts.get("edge") or counts.get("cloud")):
        raise ConfigError("--scheme early-exit sends unconfident samples up, and the cell "
                          "has no edge or cloud node: give --tiers with edge=1 or cloud=1")
