"""The hierarchical engine's decisions: Fashion-MNIST's label grouping, Zhang's equations
(4) and (5) and the Mapping they make, DDNN's entropy exit, the engine's settings and
bad inputs (one line each), a link's delay over a real loopback socket, and the columns
from step lines."""

from __future__ import annotations

import json
import math
import socket
import threading
import time

import numpy as np
import pytest

from profiler.cell import CellConfig
from profiler.engines import get_engine
from profiler.engines.hier import assign_tiers, settings
from profiler.engines.hier.columns import columns
from profiler.cluster.base import Node
from profiler.errors import ConfigError
from profiler.report.record_check import record_problem
from workloads.hier import labels, nets, schemes, wire


def test_the_coarse_labels_group_fashion_mnist_as_the_issue_says():
    groups = {c: [labels.FINE_NAMES[f] for f in range(10) if labels.to_coarse([f])[0] == c]
              for c in range(4)}
    assert groups == {0: ["T-shirt/top", "pullover", "coat", "shirt"],
                      1: ["trouser", "dress"], 2: ["sandal", "sneaker", "ankle boot"],
                      3: ["bag"]}
    assert list(labels.relabel([9, 8, 1], "coarse")) == [2, 3, 1]
    assert list(labels.relabel([9, 8, 1], "fine")) == [9, 8, 1]


@pytest.mark.parametrize("edge_s, end_s, expected", [
    (1.0, 0.5, 2), (1.0, 0.3, 4), (0.1, 1.0, 1), (0.5, 0.5, 1), (0.5 + 0.3, 0.4, 2),
    (1.0, 0.0, 1)])
def test_equation_4_is_the_ceiling_of_the_time_ratio(edge_s, end_s, expected):
    assert schemes.n_map(edge_s, end_s) == expected


def test_equation_5_and_the_mapping_it_makes():
    # Zhang's Figure 3 setting: N_map 1, 4 edge nodes, 8 end devices: half to the cloud.
    assert schemes.cloud_share(8, 4, 1) == 0.5
    assert [schemes.mapped_upper(i, 4, 1) for i in range(8)] == [
        ("edge", 0), ("edge", 1), ("edge", 2), ("edge", 3)] + [("cloud", 0)] * 4
    assert [schemes.mapped_upper(i, 2, 2) for i in range(5)] == [
        ("edge", 0), ("edge", 0), ("edge", 1), ("edge", 1), ("cloud", 0)]
    assert schemes.cloud_share(5, 2, 2) == pytest.approx(0.2)
    assert schemes.cloud_share(4, 4, 3) == 0.0  # the edge nodes take them all


def test_the_other_schemes_go_round_the_tier_in_order():
    counts = {"end": 5, "edge": 2, "cloud": 1}
    assert [schemes.upper("end-edge", i, counts) for i in range(3)] == [
        ("edge", 0), ("edge", 1), ("edge", 0)]
    assert schemes.upper("end-cloud", 4, counts) == ("cloud", 0)
    assert schemes.upper("end", 0, counts) is None
    assert schemes.upper("early-exit", 1, {"end": 2, "edge": 0, "cloud": 1}) == ("cloud", 0)


def test_a_sample_exits_when_its_entropy_in_nats_is_under_the_threshold():
    certain, uniform = [1.0, 0.0, 0.0, 0.0], [0.25] * 4
    middling = [0.7, 0.1, 0.1, 0.1]
    probs = np.array([certain, uniform, middling])
    entropy = schemes.entropy(probs)
    # The issue's threshold: the softmax's entropy in nats, 0 (certain) to ln(4) (uniform).
    assert entropy[0] == pytest.approx(0, abs=1e-9) and entropy[1] == pytest.approx(math.log(4))
    assert settings.max_threshold_nats() == pytest.approx(math.log(4))
    expected = -(0.7 * math.log(0.7) + 3 * 0.1 * math.log(0.1))
    assert entropy[2] == pytest.approx(expected)
    assert list(schemes.exits(probs, 0.0)) == [False, False, False]
    assert list(schemes.exits(probs, expected - 1e-6)) == [True, False, False]
    assert list(schemes.exits(probs, expected + 1e-6)) == [True, False, True]
    assert list(schemes.exits(probs, math.log(4))) == [True, False, True]
    assert settings.parse_thresholds("0,1.386") == [0.0, 1.386]


def test_tiers_come_from_the_nodes_or_the_option_in_order():
    nodes = [Node(f"n{i}") for i in range(7)]
    by_tier = assign_tiers(nodes, "end=4,edge=2,cloud=1")
    assert [[n.name for n in by_tier[t]] for t in ("end", "edge", "cloud")] == [
        ["n0", "n1", "n2", "n3"], ["n4", "n5"], ["n6"]]
    by_tier = assign_tiers(nodes, "cloud=1,edge=2,end=4")  # a mix listing its big nodes first
    assert [[n.name for n in by_tier[t]] for t in ("end", "edge", "cloud")] == [
        ["n3", "n4", "n5", "n6"], ["n1", "n2"], ["n0"]]
    assert settings.counts("auto", 7) == {"end": 4, "edge": 2, "cloud": 1}
    assert settings.counts("auto", 2) == {"end": 1, "edge": 0, "cloud": 1}

    class Tiered:  # a node as the tiers helper's cluster will give it: its own tier
        def __init__(self, name, tier):
            self.name, self.tier = name, tier

    tiered = [Tiered("a", "cloud"), Tiered("b", "end"), Tiered("c", "edge"), Tiered("d", "end")]
    by_tier = assign_tiers(tiered, "end=1,cloud=3")  # the nodes' own tiers win
    assert [[n.name for n in by_tier[t]] for t in ("end", "edge", "cloud")] == [
        ["b", "d"], ["c"], ["a"]]


def _cell(**params) -> CellConfig:
    base = {"scheme": "end-edge", "exit_threshold": 0.5, "privacy": "off", "tiers": "auto",
            "tier_models": settings.DEFAULT_MODELS, "tier_delay": "0"}
    base.update(params)
    return CellConfig(engine="hier", model="lenet-mlp", layers=None, devices=4, batch=50,
                      dataset="fashion-mnist", engine_params=tuple(base.items()))


@pytest.mark.parametrize("params, words", [
    ({"scheme": "end-edge", "tiers": "end=3,cloud=1"}, ["--scheme end-edge", "edge tier"]),
    ({"scheme": "mapping", "tiers": "end=3,edge=1"}, ["--scheme mapping", "cloud tier"]),
    ({"scheme": "early-exit", "tiers": "end=4"}, ["early-exit", "no edge or cloud"]),
    ({"tiers": "end=2,edge=1"}, ["--tiers end=2,edge=1", "--devices 4"]),
    ({"privacy": "on", "tier_models": "edge=lenet-mlp"}, ["--privacy on", "convolution"]),
    ({"privacy": "edge", "scheme": "end-edge", "tiers": "end=2,edge=1,cloud=1"},
     ["--privacy edge", "not with --scheme end-edge", "--scheme end-cloud"]),
    ({"privacy": "edge", "scheme": "end-cloud", "tiers": "end=3,cloud=1"},
     ["--privacy edge needs an edge node and a cloud node"]),
    ({"privacy": "edge", "scheme": "end-cloud", "tiers": "end=2,edge=1,cloud=1",
      "tier_models": "cloud=lenet-mlp"}, ["--privacy edge", "convolution"]),
])
def test_a_cell_the_hierarchy_cannot_run_is_refused_in_one_line(params, words):
    with pytest.raises(ConfigError) as caught:
        get_engine("hier").check_cell(_cell(**params))
    message = str(caught.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_a_network_its_node_cannot_hold_is_refused_in_one_line():
    """The node profile's memory against the tier's network: a torch process, its weights
    and a batch's activations (nets.memory_needed_mb); nodes without a limit pass."""
    from workloads.hier.nets import TORCH_PROCESS_MB, memory_needed_mb

    engine = get_engine("hier")
    cell = _cell(scheme="end-cloud", tiers="end=3,cloud=1")
    need, weights, activations = memory_needed_mb("lenet-example", "fine", 50)
    assert need == TORCH_PROCESS_MB + weights + activations
    assert weights == pytest.approx(431080 * 4 / 1e6) and activations > 0
    # a bigger batch needs more activations, the same weights
    assert memory_needed_mb("lenet-example", "fine", 500)[2] > 5 * activations
    roomy = [Node(f"n{i}", memory_mb=512) for i in range(4)]
    engine.check_nodes(cell, roomy)
    engine.check_nodes(cell, [Node(f"n{i}") for i in range(4)])  # no limit: not checked
    small = roomy[:3] + [Node("n3", memory_mb=int(need) - 1)]
    with pytest.raises(ConfigError) as caught:
        engine.check_nodes(cell, small)
    message = str(caught.value)
    assert "\n" not in message
    for words in ("--tier-models cloud=lenet-example does not fit", "cloud tier's node n3",
                  f"({int(need) - 1} MB)", "a batch of 50", "smaller network"):
        assert words in message, message
    # the end devices' own network, named by --model
    with pytest.raises(ConfigError, match="--model lenet-mlp does not fit the end tier's"):
        engine.check_nodes(cell, [Node("n0", memory_mb=100)] + roomy[1:])
    # a tier the scheme does not send to runs no network: its node is not checked
    engine.check_nodes(_cell(scheme="end", tiers="end=3,cloud=1"), small)
    # --privacy edge: the edge node holds the cloud's network (its first convolution)
    edge_cell = _cell(scheme="end-cloud", tiers="end=2,edge=1,cloud=1", privacy="edge")
    tight_edge = roomy[:2] + [Node("n2", memory_mb=int(need) - 1), roomy[3]]
    with pytest.raises(ConfigError, match=r"--tier-models cloud=lenet-example \(--privacy "
                       r"edge runs it on the edge\) does not fit the edge tier"):
        engine.check_nodes(edge_cell, tight_edge)


def test_mapping_n_map_is_given_or_eq_4_and_both_are_recorded(tmp_path):
    from profiler.engines.base import TrainOptions

    nodes = [Node(f"n{i}", address=f"10.0.0.{i}") for i in range(4)]
    for given, expected in ((None, 0), (1, 1)):
        params = {"scheme": "mapping", "tiers": "end=2,edge=1,cloud=1"}
        if given is not None:
            params["map_devices"] = given
        specs = get_engine("hier").plan(_cell(**params), nodes, tmp_path, TrainOptions())
        assert json.loads(specs[-1].env["EDGEPROF_HIER_PLAN"])["n_map"] == expected
    counts = {"end": 4, "edge": 2, "cloud": 1}
    start = {"hier": {"counts": counts, "models": {}, "n_map": 1, "n_map_eq4": 300}}
    line = {"t": 0.0, "step_s": 0.1, "compute_s": 0.01, "local_s": 0.01, "n": 50, "up": 50}
    out = columns({0: [line]}, {0: start})
    # eq. (5) from the N_map used: 4 end devices, 2 edge nodes taking 1 each: half to the cloud
    assert (out["hier_n_map"], out["hier_n_map_eq4"]) == (1, 300)
    assert out["hier_cloud_share_predicted"] == 0.5


@pytest.mark.parametrize("parse, text, word", [
    (settings.parse_thresholds, "1.5", r"outside 0-ln\(4\) = 1.386: it is the softmax "
                                       "entropy in nats"),
    (settings.parse_thresholds, "-0.1", r"outside 0-ln\(4\)"),
    (settings.parse_map_devices, "-1", "--map-devices -1 is negative"),
    (settings.parse_tiers, "end=2,fog=1", "TIER=VALUE"),
    (settings.parse_tiers, "edge=2", "no end device"),
    (settings.parse_delays, "cloud=-1", "outside 0-60"),
    (settings.parse_models, "edge=alexnet", "unknown model"),
    (settings.parse_schemes, "edge-only", "unknown"),
])
def test_bad_settings_are_one_line(parse, text, word):
    with pytest.raises(ConfigError, match=word):
        parse(text)


def test_a_link_holds_its_delay_back_on_every_round_trip():
    """A real loopback server answering at once: each request through a link of 0.2 s
    takes at least 0.2 s, one without no more than a fraction of it; bytes counted."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def echo():
        conn, _ = listener.accept()
        with conn:
            try:
                while True:
                    header, array, _ = wire.recv(conn)
                    if header.get("op") == "ping":
                        wire.send(conn, {})
                    else:
                        wire.send(conn, {"n": len(array)}, array)
            except ConnectionError:
                return

    for delay_s in (0.2, 0.0):
        thread = threading.Thread(target=echo, daemon=True)
        thread.start()
        link = wire.Link("end-edge", f"127.0.0.1:{port}", delay_s)
        images = np.arange(50 * 784, dtype=np.uint8).reshape(50, 1, 28, 28)
        link.request({}, images)  # connects
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            reply, back = link.request({"op": "infer"}, images)
            times.append(time.perf_counter() - t0)
            assert reply == {"n": 50} and np.array_equal(back, images)
        link.close()
        thread.join(5)
        if delay_s:
            assert min(times) >= delay_s
            delayed = min(times)
        else:
            assert max(times) < delayed
        assert link.bytes_sent > 4 * 50 * 784 and link.bytes_received > 4 * 50 * 784
    listener.close()


def test_the_columns_add_up_from_the_devices_lines():
    models = {"end": "lenet-mlp", "edge": "lenet-cnn", "cloud": "lenet-example"}
    counts = {"end": 2, "edge": 1, "cloud": 1}
    start = {"hier": {"counts": counts, "n_map": 1, "models": models,
                      "sizes": nets.tier_sizes(models, counts)}}
    line = {"t": 100.0, "step_s": 0.5, "compute_s": 0.01, "local_s": 0.01, "n": 50, "up": 20,
            "end_coarse_ok": 45, "ans_end": 30, "coarse_ok_end": 29, "ans_edge": 15,
            "coarse_ok_edge": 14, "fine_ok_edge": 12, "ans_cloud": 5, "coarse_ok_cloud": 5,
            "fine_ok_cloud": 4, "infer_edge_s": 0.02, "img_edge": 20, "infer_cloud_s": 0.01,
            "img_cloud": 5, "bytes_end_edge": 16000, "bytes_edge_cloud": 4000,
            "exchange_s": 0.49, "privacy_s": 0.0, "link": "end-edge", "upper_infer_s": 0.03}
    later = {**line, "t": 100.5}
    out = columns({0: [line, later], 1: [line]}, {0: start, 1: start})
    assert record_problem(out) is None  # every column as the report takes it
    # a device that only answered locally: no link, no bytes, no round trip
    local = {k: v for k, v in line.items() if not k.startswith(("bytes", "link"))}
    alone = columns({0: [{**local, "up": 0}]}, {0: start})
    assert record_problem(alone) is None
    assert alone["hier_bytes_per_sample"] is None and alone["hier_round_trip_ms_by_link"] is None
    assert sum(out["hier_share"].values()) == pytest.approx(1)
    assert out["hier_share"] == {"end": 0.6, "edge": 0.3, "cloud": 0.1}
    assert out["hier_completion_s"] == pytest.approx(1.0)
    assert out["hier_coarse_accuracy"] == pytest.approx(48 / 50)
    assert out["hier_fine_accuracy"] == pytest.approx(16 / 20)
    assert out["hier_exit_fine_accuracy"] == {"edge": 0.8, "cloud": 0.8}
    assert out["hier_bytes_per_sample"] == {"end-edge": 320.0, "edge-cloud": 80.0}
    assert out["hier_infer_ms_per_image"]["edge"] == pytest.approx(1.0)
    # 30 of 50 answered locally at 10 ms, 20 sent up at 500 ms: p50 local, p95 up
    assert out["hier_latency_p50_ms"] == pytest.approx(10)
    assert out["hier_latency_p95_ms"] == pytest.approx(500)
    assert out["hier_n_map"] == 1 and out["hier_cloud_share_predicted"] == 0.5
    assert out["hier_cloud_share"] == pytest.approx(0.1)
    assert out["hier_round_trip_ms_by_link"] == {"end-edge": pytest.approx(460)}
    # Table 1's sizes: each network built with its tier's classes (coarse 4, fine 10);
    # lenet-example's 431,080 parameters in float32 are 1.72 MB plus the file's framing.
    assert out["hier_params_by_tier"] == {"end": 108996, "edge": 61706, "cloud": 431080}
    cloud_mb = out["hier_weights_mb_by_tier"]["cloud"]
    assert 4 * 431080 / 1e6 < cloud_mb < 1.05 * 4 * 431080 / 1e6


def test_only_the_tiers_a_scheme_sends_to_serve(tmp_path):
    """The plan: end devices are the decisive workers, each with its rank and the plan;
    edge and cloud servers only where the scheme sends (``end`` starts none), each told
    its node's address, which the devices' plan names as where to dial."""
    from profiler.engines.base import TrainOptions

    engine = get_engine("hier")
    nodes = [Node(f"n{i}", address=f"10.0.0.{i}") for i in range(4)]
    tiers = "end=2,edge=1,cloud=1"
    for scheme, privacy, roles in (("end", "off", ["worker", "worker"]),
                                   ("end-edge", "off", ["server", "worker", "worker"]),
                                   ("early-exit", "off", ["server", "server", "worker",
                                                          "worker"]),
                                   # the module on the edge node, on the way to the cloud
                                   ("end-cloud", "edge", ["server", "server", "worker",
                                                          "worker"])):
        specs = engine.plan(_cell(scheme=scheme, tiers=tiers, privacy=privacy), nodes,
                            tmp_path, TrainOptions())
        assert [s.role for s in specs] == roles, scheme
        workers = [s for s in specs if s.role == "worker"]
        assert [(s.node.name, s.env["RANK"], s.decisive) for s in workers] == [
            ("n0", "0", True), ("n1", "1", True)]
        plan = json.loads(workers[0].env["EDGEPROF_HIER_PLAN"])
        for server in (s for s in specs if s.role == "server"):
            assert not server.decisive
            host = server.argv[server.argv.index("--host") + 1]
            port = server.argv[server.argv.index("--port") + 1]
            tier = server.argv[server.argv.index("--tier") + 1]
            assert host == server.node.address
            assert plan["addresses"][f"end-{tier}"] == [f"{host}:{port}"]
        assert plan["privacy_edge"] == (privacy == "edge")
        if privacy == "edge":  # the edge node dials the cloud to forward the features
            assert len(plan["addresses"]["edge-cloud"]) == 1


def test_devices_dial_what_the_cluster_gives_for_a_link(tmp_path):
    """With the cluster's ``link_address`` (a fake here standing for the emulated
    cluster's delaying relay, which is the tiers helper's and not in this branch), a
    device dials the relay's address for each upper node and an edge node the relay's
    for the cloud, while the servers still listen on their own address and port."""
    from profiler.engines.base import TrainOptions

    asked = []

    def relay(source, target, port):
        asked.append((source.name, target.name))
        return "10.9.9.9", port + 1000

    nodes = [Node(f"n{i}", address=f"10.0.0.{i}") for i in range(4)]
    specs = get_engine("hier").plan(_cell(scheme="early-exit", tiers="end=2,edge=1,cloud=1"),
                                    nodes, tmp_path, TrainOptions(link_address=relay))
    plan = json.loads(specs[-1].env["EDGEPROF_HIER_PLAN"])
    ports = {s.node.name: int(s.argv[s.argv.index("--port") + 1])
             for s in specs if s.role == "server"}
    assert plan["addresses"] == {"end-edge": [f"10.9.9.9:{ports['n2'] + 1000}"],
                                 "end-cloud": [f"10.9.9.9:{ports['n3'] + 1000}"],
                                 "edge-cloud": [f"10.9.9.9:{ports['n3'] + 1000}"]}
    assert sorted(asked) == [("n0", "n2"), ("n0", "n3"), ("n2", "n3")]


def test_a_link_waits_for_a_node_behind_a_relay_that_closes_at_first():
    """A relay between tiers accepts a connection at once and closes it while the node
    behind it does not listen yet (it trains first): the link connects again until the
    node answers its ping, then requests go through."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def relay_then_node():
        for _ in range(2):  # the node is not up yet: accepted, then closed
            conn, _ = listener.accept()
            conn.close()
        conn, _ = listener.accept()
        with conn:
            try:
                while True:
                    header, array, _ = wire.recv(conn)
                    wire.send(conn, {} if header.get("op") == "ping" else {"n": len(array)})
            except ConnectionError:
                return

    thread = threading.Thread(target=relay_then_node, daemon=True)
    thread.start()
    link = wire.Link("end-edge", f"127.0.0.1:{port}")
    link.connect(timeout_s=30)
    reply, _ = link.request({"op": "infer"}, np.zeros((3, 1, 28, 28), np.uint8))
    assert reply == {"n": 3}
    link.close()
    thread.join(5)
    listener.close()


def _drain(assigner, rank, limit=100):
    """Ask as ``rank`` until finished or told to wait; the batches it was given."""
    got, finished = [], None
    for _ in range(limit):
        reply = assigner.next(rank, finished)
        finished = None
        if "task" not in reply:
            return got, reply
        got.append(reply["task"])
        finished = reply["task"]
    raise AssertionError("never finished")


def test_the_assigner_hands_out_batches_in_order_and_survives_failures(monkeypatch):
    from workloads.hier import assign

    monkeypatch.setattr(assign, "TRANSFER_TIMEOUT_S", 0.01)
    assert assign.own_batches(1, 3, 8) == [1, 4, 7]
    # No failure: each device its own batches, then finished.
    a = assign.Assigner(2, 4, "monitor")
    assert _drain(a, 0) == ([0, 2], {"wait": assign.WAIT_S, "timeouts_s": 0.0})
    assert _drain(a, 1)[0] == [1, 3] and a.next(0, None) == {"finished": True}
    for recovery, moved in (("monitor", [5, 3]), ("reassign", [5, 3])):
        a = assign.Assigner(2, 6, recovery)
        assert a.next(1, None)["task"] == 1  # device 1 does one batch, is given 3, fails
        assert a.next(1, 1)["task"] == 3
        a.leave(1)  # its connection closes: 3 goes back, stranded with 5
        got, reply = _drain(a, 0)
        assert got == [0, 2, 4, *moved] and reply == {"finished": True}, recovery
    # reassign's turns on the failed device cost the transfer's timeout; monitor's none
    a = assign.Assigner(2, 6, "reassign")
    a.next(1, None)
    a.leave(1)
    replies = [a.next(0, None if i == 0 else t) for i, t in enumerate([None, 0, 2, 4, 5])]
    assert sum(r.get("timeouts_s", 0) for r in replies) > 0
    # none: the stranded batches are never given: the job cannot finish
    a = assign.Assigner(2, 4, "none")
    a.next(1, None)
    a.leave(1)
    got, reply = _drain(a, 0)
    assert got == [0, 2] and "wait" in reply and a.next(0, None) != {"finished": True}


@pytest.mark.parametrize("params, words", [
    ({"fail_devices": 2, "recovery": "off"}, ["--fail-devices 2", "--recovery"]),
    ({"fail_devices": 2, "recovery": "monitor", "tiers": "end=2,edge=1,cloud=1"},
     ["more failures", "--fail-devices 1"]),
])
def test_failures_a_cell_cannot_have_are_one_line(params, words):
    with pytest.raises(ConfigError) as caught:
        get_engine("hier").check_cell(_cell(**params))
    assert all(w in str(caught.value) for w in words), caught.value
