"""What the container and the orchestrator cost: the same cells as bare processes
(``--cluster emulated``) and as Swarm services (``--cluster swarm``) on the same emulated
nodes, and the time to deploy the image to ten nodes (issue 49).

Run as root: ``python benchmarks/bench_swarm.py [--nodes 2] [--repeats 3]
[--engines torch-ddp,mxnet] [--deploy-nodes 10] [--swarm-mtu 1400,8950]
[--swarm-limits profile,none]``.

1. An emulated cluster of ``--nodes`` Pi 4s (``EDGEPROF_CLUSTER_INSTANCE`` picks which),
   a dockerd in each node's network namespace joined into one Swarm, the development
   image on each (``tests/support/swarm.py``, as the Swarm tests do).
2. ``--repeats`` rounds, each one sweep of the engines' cells as processes and one as
   services per overlay MTU of ``--swarm-mtu`` (the emulated links carry 9000-byte
   frames, so the overlay can take 8950: as few packets as the processes send) and
   task limit of ``--swarm-limits`` (``none``: the node's cgroup is the board), the
   order rotating round by round so that the host's drift cancels in the medians.
   ``--no-agent`` in both: the same sampler runs in every mode instead (every
   ``SAMPLE_S``):
   - each node's **bytes sent**, read on the bridge's end of its veth (what the node's
     eth0 put on its link: the overlay's VXLAN packets, headers and all, on Swarm);
   - each node's **memory**: its cgroup's ``memory.stat`` (``total_rss``: the anonymous
     memory of every process in it, containers included, since each node's dockerd puts
     its containers under the node's cgroup), and the RSS of the processes running a
     cell's containers outside it (the containerd-shims of the node's daemon) and of the
     controller's task processes (one per service: ``profiler.cluster.swarm.task``).
3. Per cell: samples/s and first step from launch (the results' ``samples_per_s`` and
   ``first_step_s``), bytes a node sends per step in the steady window (worker 0's
   ``first_step`` event to its first ``epoch`` event), against the floor: the gradients a node
   must send each step, 4 bytes x parameters x 2(n-1)/n (a ring allreduce's; with two
   nodes also a colocated parameter server's: each node pushes the half of the gradient
   held by the other node's server and sends back the half of the weights it serves).
4. The deploy: ``--deploy-nodes`` pi3b nodes, each with a dockerd that also listens on its
   emulated address, and ``docker save`` of the image on one node loaded into every
   other over TCP through its shaped link (100 Mbit), one node alone and all at once.

Prints one table: medians and ranges of each figure, and the ratios swarm/processes: of
the medians, and paired (each round's ratio, their geometric mean and range: the drift
between rounds cancels).
The goals (issue 49): samples/s ratio >= 0.97, bytes per step <= 1.12 x floor.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiler.cluster import emulated, netns  # noqa: E402
from tests.support.swarm import (OVERLAY_MTU, Daemon, SwarmOnNodes,  # noqa: E402
                                 dev_image_tar, dev_mounts, host_iptables)

IMAGE = "edgeprof-dev:bench"
SAMPLE_S = 0.1
PROC_SAMPLE_EVERY = 5  # scan /proc for shims and task processes every 5th sample
GRADIENT_BYTES = 4     # float32
ENGINE_API_PORT = 2375
DEFAULT_TAR = Path("/var/tmp/edgeprof-bench-swarm/bookworm-minbase.tar")


class Sampler(threading.Thread):
    """Samples every node's bytes sent and memory every ``SAMPLE_S`` until ``stop()``."""

    def __init__(self, nodes, daemons):
        super().__init__(daemon=True)
        self.nodes, self.daemons = nodes, daemons
        self.controller_pid: int | None = None  # the sweep's, once started
        self.points: list[dict] = []
        self._halt = threading.Event()

    def stop(self) -> list[dict]:
        self._halt.set()
        self.join()
        return self.points

    def run(self) -> None:
        tick = 0
        while not self._halt.is_set():
            point = {"t": time.time()}
            for node in self.nodes:
                veth = Path("/sys/class/net") / netns.host_veth_name(node.name) / "statistics"
                stat = _memory_stat(Path(node.scope.cgroup_memory))
                point[node.name] = {"sent_bytes": int((veth / "rx_bytes").read_text()),
                                    "rss_bytes": stat.get("total_rss", 0)}
            if tick % PROC_SAMPLE_EVERY == 0:
                point["procs"] = _outside_rss(self.daemons, self.controller_pid)
            self.points.append(point)
            tick += 1
            self._halt.wait(SAMPLE_S)


def _memory_stat(group: Path) -> dict[str, int]:
    with contextlib.suppress(OSError):
        return {k: int(v) for k, v in (line.split() for line in
                                       (group / "memory.stat").read_text().splitlines())}
    return {}


def _outside_rss(daemons, controller_pid: int | None) -> dict[str, int]:
    """RSS in bytes of what runs a cell's containers outside the nodes' cgroups: each
    node's containerd-shims (``shim:<node>``) and the task processes of the controller
    ``controller_pid`` (its children: other sweeps on this host have their own)."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "containerd-shim" in cmdline:
                key = next((f"shim:{d.node.name}" for d in daemons
                            if str(d.root) in cmdline), None)
            elif "profiler.cluster.swarm.task" in cmdline:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                key = "task-processes" if ppid == controller_pid else None
            else:
                continue
            if key is None:
                continue
            rss_kb = next(int(line.split()[1]) for line in
                          (proc / "status").read_text().splitlines()
                          if line.startswith("VmRSS:"))
        except (OSError, StopIteration, ValueError):
            continue
        found[key] = found.get(key, 0) + rss_kb * 1024
    return found


def _sweep(mode: str, swarm: SwarmOnNodes, out: Path, args, sampler: Sampler) -> list[dict]:
    """One sweep of the engines' cells: ``emulated`` (processes) or ``swarm@MTU:LIMITS``."""
    mode, _, rest = mode.partition("@")
    mtu, _, limits = rest.partition(":")
    cell = ["--engine", args.engines, "--placement", "colocated", "--model", args.model,
            "--batch", "32", "--devices", str(args.nodes), "--epochs", "1",
            "--max-samples", str(args.samples), "--val-samples", "64", "--no-agent",
            "--out", str(out)]
    argv = [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", mode, *cell]
    if mode == "swarm":
        argv += ["--swarm-host", swarm.manager_url, "--swarm-image", IMAGE,
                 "--swarm-python", sys.executable,
                 "--swarm-mounts", ",".join(dev_mounts(ROOT)),
                 "--swarm-limits", limits, "--swarm-mtu", mtu]
    log = out.with_suffix(".log")
    with open(log, "wb") as output:
        sweep = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT)
    sampler.controller_pid = sweep.pid
    if sweep.wait(timeout=1800) != 0:
        raise RuntimeError(f"{mode} sweep exited {sweep.returncode}: "
                           f"{log.read_text()[-2000:]}")
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    bad = [f"{r['engine']}: {r['status']} {r.get('reason')}" for r in records
           if r["status"] != "ok"]
    if bad:
        raise RuntimeError(f"{mode} cells not ok: {bad}")
    return records


def _window(out: Path, record: dict) -> tuple[float, float, int]:
    """Worker 0's steady window: its first step's event to its first epoch's end, and the
    steps in it (the epoch's but the first; MXNet's steps are timed 1 in 100, so the
    steps file does not count them)."""
    events = out / "cells" / record["cell_id"] / f"attempt-{record['attempt']}" / "events"
    lines = [json.loads(line) for line in (events / "worker-0.jsonl").open()]
    first = next(e["t"] for e in lines if e["event"] == "first_step")
    end = next(e["t"] for e in lines if e["event"] == "epoch")
    steps = next(e["steps_per_epoch"] for e in lines if e["event"] == "start")
    return first, end, steps - 1


def _at(points: list[dict], t: float, node: str, key: str) -> float:
    """The counter at time ``t``, interpolated between the samples either side."""
    before = max((p for p in points if p["t"] <= t), key=lambda p: p["t"])
    after = min((p for p in points if p["t"] >= t), key=lambda p: p["t"], default=before)
    if after["t"] == before["t"]:
        return before[node][key]
    share = (t - before["t"]) / (after["t"] - before["t"])
    return before[node][key] + share * (after[node][key] - before[node][key])


def measure(record: dict, out: Path, points: list[dict], nodes) -> dict:
    start, end, steps = _window(out, record)
    sent = [(_at(points, end, n.name, "sent_bytes") - _at(points, start, n.name, "sent_bytes"))
            / steps for n in nodes]
    n = len(nodes)
    floor = GRADIENT_BYTES * record["parameters"] * 2 * (n - 1) / n
    during = [p for p in points if record["launched_at"] <= p["t"] <= record["reaped_at"]]
    rss = max(sum(p[node.name]["rss_bytes"] for node in nodes) for p in during) / n
    outside = [p["procs"] for p in during if "procs" in p]
    shims = max((sum(v for k, v in p.items() if k.startswith("shim:")) for p in outside),
                default=0) / n
    tasks = max((p.get("task-processes", 0) for p in outside), default=0)
    return {"samples_per_s": record["samples_per_s"], "first_step_s": record["first_step_s"],
            "kb_per_step": statistics.mean(sent) / 1e3, "floor_kb": floor / 1e3,
            "over_floor": statistics.mean(sent) / floor, "steps": steps,
            "node_rss_mb": rss / 1e6, "shim_rss_mb": shims / 1e6,
            "task_processes_rss_mb": tasks / 1e6}


def idle_bytes_per_s(nodes, seconds: float = 5.0) -> float:
    """What a node sends with nothing running: the Swarm's own gossip and heartbeats."""
    def sent():
        return sum(int((Path("/sys/class/net") / netns.host_veth_name(n.name) / "statistics"
                        / "rx_bytes").read_text()) for n in nodes)
    before = sent()
    time.sleep(seconds)
    return (sent() - before) / seconds / len(nodes)


def cost(args, work: Path, tar: Path) -> tuple[dict, dict, float, float]:
    """Medians etc. of every figure by (mode, engine); the Swarm's idle bytes/s; the time
    to form the Swarm."""
    cluster, brought_up = emulated.ensure_cluster(args.nodes, "pi4")
    if len(cluster.nodes()) != args.nodes:
        emulated.down()
        cluster, brought_up = emulated.up(args.nodes, "pi4"), True
    nodes = cluster.nodes()[:args.nodes]
    swarm = SwarmOnNodes(nodes, work / "swarm")
    runs: dict[tuple[str, str], list[dict]] = {}
    try:
        swarm.start()
        swarm.import_image(tar, IMAGE)
        idle = idle_bytes_per_s(nodes)
        every = ["emulated", *swarm_modes(args)]
        for round_ in range(args.repeats):
            shift = round_ % len(every)
            for mode in every[shift:] + every[:shift]:
                out = work / f"{mode.replace('@', '-').replace(':', '-')}-{round_}"
                sampler = Sampler(nodes, swarm.daemons)
                sampler.start()
                try:
                    records = _sweep(mode, swarm, out, args, sampler)
                finally:
                    points = sampler.stop()
                for record in records:
                    figures = measure(record, out, points, nodes)
                    runs.setdefault((mode, record["engine"]), []).append(figures)
                    print(f"round {round_} {mode:19s} {record['engine']:10s} "
                          + " ".join(f"{k} {v:.4g}" for k, v in figures.items()), flush=True)
    finally:
        swarm.stop()
        if brought_up:
            emulated.down()
    return runs, idle, swarm.formed_s


class ListeningDaemon(Daemon):
    """A node's dockerd that also answers on its emulated address (the image crosses the
    node's shaped link, as it would a board's)."""

    def argv(self, cgroup_parent: str) -> list[str]:
        return [*super().argv(cgroup_parent), "-H",
                f"tcp://{self.node.address}:{ENGINE_API_PORT}"]


def deploy(count: int, work: Path, tar: Path) -> dict:
    """Time ``docker save`` on one node and ``docker load`` into the others over their
    links: into one node alone, then into all of them at once."""
    import docker

    emulated.down()
    cluster = emulated.up(count, "pi3b")
    nodes = cluster.nodes()
    swarm = SwarmOnNodes(nodes, work / "deploy")
    swarm.daemons = [ListeningDaemon(d.node, d.root) for d in swarm.daemons]
    try:
        swarm.start()
        with swarm.client() as client, open(tar, "rb") as data:  # the first node's
            client.api.import_image_from_data(data, repository=IMAGE.split(":")[0],
                                              tag=IMAGE.split(":")[1])
        began = time.monotonic()
        with swarm.client() as client:
            saved = b"".join(client.images.get(IMAGE).save(named=True))
        save_s = time.monotonic() - began

        def load(daemon) -> float:
            started = time.monotonic()
            client = docker.DockerClient(
                base_url=f"tcp://{daemon.node.address}:{ENGINE_API_PORT}", timeout=600)
            try:
                client.images.load(saved)
            finally:
                client.close()
            return time.monotonic() - started

        one_s = load(swarm.daemons[1])
        with swarm.client(swarm.daemons[1]) as client:
            client.images.remove(IMAGE, force=True)
        began = time.monotonic()
        threads, times = [], {}
        for daemon in swarm.daemons[1:]:
            thread = threading.Thread(target=lambda d=daemon: times.__setitem__(
                d.node.name, load(d)))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        all_s = time.monotonic() - began
        missing = [d.node.name for d in swarm.daemons[1:] if d.node.name not in times]
        if missing:
            raise RuntimeError(f"the image did not load on {missing}")
        return {"nodes": count, "image_mb": len(saved) / 1e6, "save_s": save_s,
                "load_one_s": one_s, "load_all_s": all_s, "formed_s": swarm.formed_s}
    finally:
        swarm.stop()
        emulated.down()


def swarm_modes(args) -> list[str]:
    """``swarm@MTU:LIMITS`` for every overlay MTU and task limit asked."""
    return [f"swarm@{mtu}:{limits}" for mtu in args.swarm_mtu.split(",")
            for limits in args.swarm_limits.split(",")]


def _spread(values: list[float], fmt: str = "{:.4g}") -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


def table(runs: dict, engines: list[str], swarm_mode: str) -> list[str]:
    lines = [f"{'engine':10s} {'figure':22s} {'processes':>22s} {swarm_mode:>22s} "
             f"{'ratio of medians':>16s} {'paired ratio':>22s}"]
    figures = ("samples_per_s", "first_step_s", "kb_per_step", "over_floor",
               "node_rss_mb", "shim_rss_mb", "task_processes_rss_mb")
    for engine in engines:
        for figure in figures:
            bare = [r[figure] for r in runs[("emulated", engine)]]
            swarm = [r[figure] for r in runs[(swarm_mode, engine)]]
            ratio = paired = ""
            if all(bare):
                ratio = f"{statistics.median(swarm) / statistics.median(bare):.3f}"
                # Round by round (each round ran both, back to back): the host's drift
                # between rounds cancels; the geometric mean of the rounds' ratios.
                rounds = [s / b for s, b in zip(swarm, bare)]
                paired = (f"{statistics.geometric_mean(rounds):.3f} "
                          f"({min(rounds):.3f}-{max(rounds):.3f})")
            lines.append(f"{engine:10s} {figure:22s} {_spread(bare):>22s} "
                         f"{_spread(swarm):>22s} {ratio:>16s} {paired:>22s}")
        floor = runs[("emulated", engine)][0]["floor_kb"]
        lines.append(f"{engine:10s} {'floor_kb':22s} {floor:>22.1f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", default="torch-ddp,mxnet")
    parser.add_argument("--model", default="lenet-mlp")
    parser.add_argument("--samples", type=int, default=24000)
    parser.add_argument("--deploy-nodes", type=int, default=10, help="0: no deploy")
    # none by default: the node's cgroup is the board, as a real board is its own limit
    # (profile nests the container's 100 ms-period quota under the node's: 0.93 x).
    parser.add_argument("--swarm-limits", default="none",
                        help="profile, none or both (profile,none); none: a task limited "
                             "by its node's cgroup only (the daemon's --cgroup-parent), not "
                             "also by its container's quota")
    parser.add_argument("--swarm-mtu", default=str(OVERLAY_MTU),
                        help="the overlay's MTU, or several (1400,8950): each a mode of its "
                             "own, compared with the processes [default: the emulated "
                             "links' 9000 less VXLAN's 50]")
    parser.add_argument("--image-tar", type=Path, default=DEFAULT_TAR,
                        help="the development image's root (made by mmdebstrap if missing)")
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/edgeprof-bench-swarm"))
    args = parser.parse_args()

    before = host_iptables()
    args.image_tar.parent.mkdir(parents=True, exist_ok=True)
    tar = dev_image_tar(args.image_tar)
    work = args.work / f"run-{os.getpid()}"
    work.mkdir(parents=True)
    runs, idle, formed_s = cost(args, work, tar)
    engines = args.engines.split(",")
    print(f"\n{args.nodes} x pi4, {args.model}, {args.samples} samples, {args.repeats} "
          "rounds (median (min-max)); kb_per_step: what a node sends per step, "
          "floor_kb: the gradients it must send")
    for mode in swarm_modes(args):
        print("\n".join(table(runs, engines, mode)))
    print(f"Swarm formed in {formed_s:.1f} s; idle Swarm traffic {idle:.0f} bytes/s a node")
    if args.deploy_nodes:
        result = deploy(args.deploy_nodes, work, tar)
        print(f"deploy: image {result['image_mb']:.0f} MB (docker save {result['save_s']:.1f} "
              f"s); docker load over a 100 Mbit link into one node {result['load_one_s']:.1f} "
              f"s, into {result['nodes'] - 1} nodes at once {result['load_all_s']:.1f} s; "
              f"{result['nodes']}-node Swarm formed in {result['formed_s']:.1f} s")
    after = host_iptables()
    if after != before:
        print("WARNING: the host's iptables changed during the benchmark")


if __name__ == "__main__":
    main()
