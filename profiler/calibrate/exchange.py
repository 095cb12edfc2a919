"""Does the profile's link carry a training step's exchange in the time it should, here?

The compute check (check.py) holds one node's training rate to its board's. A step of
two or more devices also exchanges: each worker pushes its gradients to a parameter
server and pulls the new weights back, over the node's link (``link_mbit``: 100 Mbit for
a Pi 3B, a ``tbf`` on each end of the node's veth on the emulated cluster, k times that
at dilation k). That part is 70-80% of a 5-9-device LeNet-MLP step (docs/study.md, "Why
a ratio moved between hosts"), and the compute check's re-calibration does not
touch it. So before a study
(and with ``sweep --profile-check``) a short exchange is measured on a two-node cluster
of the profile: ``workloads/exchange_probe.py`` on each node, in its network namespace
and CPU quota (the model family's, at the dilation the family's multi-device cells
get), moves one step's bytes each way through a server in rounds, and one byte each way.

What it is held to, per step in the board's time (host time x k):

- **wire**: the step's bytes each way over the profile's link rate. The bytes are the
  model's parameters in float32 (``workloads.models.parameter_count`` x 4): a sync step
  pushes every gradient and pulls every weight. At two nodes MXNet's KVStore puts each
  array under a million elements on one server (``key * 9973 % servers``), so the
  LeNets' big weights all go through one server: 99.8% of LeNet-MLP's bytes, 99.9% of
  the example LeNet's; the push crosses the link to it and the pull comes back, one after
  the other (the server answers once the push is in).
- **per-message cost**: a round of one byte each way, measured by the same probe at the
  same quota: the nodes' wake-ups under their CFS quotas and the kernel's path. The
  study gives no board figure for it; it is this host's, under 1 ms here beside the
  wire's 70-276 ms (docs/study.md, "The calibrated cluster, checked on this host").

The measured round (median over ``ROUNDS``) must lie within x/÷(1 + ``TOLERANCE``) of
wire + per-message. When it does not, the link is not the profile's link on this host:
a ``tbf`` at another rate than the profile's, or nodes whose dilated quota cannot pay
the kernel's per-packet work of k times the link (pi3b-park2019 at k 4 here: 1.0-1.7 x,
and 0.95-1.02 x with the quota raised to 0.7 cores; docs/study.md). Every exchange of
the study would then be off by about as much. ``refuse`` stops in one line;
``recalibrate`` has nothing to re-calibrate for a link, so it says so and goes on;
either way the check is recorded with the compute checks (``sweep.json``'s
``profile_check``, ``"check": "exchange"``) and the report's environment names it.

Not checked: the framework's own handling of the exchange. The probe does no work of
its own, so it checks the link and the kernel's path under the quota; MXNet's KVStore
at a few hundredths of a core takes about 135 board-ms a 2-device LeNet-MLP step
whatever the link (1.6 x the 70 ms of wire; from five devices on the link's time covers
it: docs/study.md). Holding that to the board would take a 2-device cell of the model
and a board figure, which the study gives only through its 2 / 1 ratios.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from ..cluster import profiled_provider
from ..cluster.base import GridNeeds
from ..cluster.profiles import Profile
from ..errors import ClusterError, ConfigError

# Timed rounds of the step's bytes (and as many of one byte), after WARMUP untimed ones:
# ROUNDS, or as many as fit PROBE_S of the wire at the dilated link, at least MIN_ROUNDS.
# Ten rounds of LeNet-MLP at 100 Mbit take 0.7 s (70 ms a round), of the example LeNet
# 2.8 s (276 ms); ResNet-110's 6.9 MB a step, 1.1 s a round undilated, get five.
ROUNDS = 10
MIN_ROUNDS = 5
PROBE_S = 3.0
WARMUP = 2
# Within x/÷(1 + this) of wire + per-message. Measured (docs/study.md, "The calibrated
# cluster, checked on this host"): five probes of LeNet-MLP and of the example LeNet at
# the packaged profile's link, on this 2-core host beside other helpers' tests (load
# 5-10), gave 1.00-1.15 x at k 1 and 2, the rounds of one probe spreading by 4-36%; a
# link at half the profile's rate 2.04-2.16 x, at twice it 0.50-0.58 x (k 1). So 0.25:
# past every repeat, well inside a factor two, and the tables' own band (a step 70-80%
# exchange off by 25% moves a ratio by about 20%).
TOLERANCE = 0.25
PORT = 47470
PROBE_TIMEOUT_S = 30.0  # and ten times the probe's time on the link


@dataclass
class ExchangeCheck:
    """One model family's step exchange at dilation ``speedup``, against its link."""

    profile: str
    model: str
    workload: str
    speedup: float
    link_mbit: float
    bytes_per_step: int  # each way
    wire_ms: float
    per_message_ms: float
    measured_ms: float
    spread: float  # (slowest - fastest round) / median
    tolerance: float
    rounds: int
    check: str = "exchange"
    action: str = "none"  # none, or warned (recalibrate: nothing to re-calibrate)

    @property
    def expected_ms(self) -> float:
        return self.wire_ms + self.per_message_ms

    @property
    def ratio(self) -> float:
        return self.measured_ms / self.expected_ms

    @property
    def within(self) -> bool:
        return 1 / (1 + self.tolerance) <= self.ratio <= 1 + self.tolerance

    def as_record(self) -> dict:
        record = {**asdict(self), "expected_ms": round(self.expected_ms, 2),
                  "ratio": round(self.ratio, 4), "within": self.within}
        for key in ("wire_ms", "per_message_ms", "measured_ms", "spread"):
            record[key] = round(record[key], 3)
        return record

    def line(self) -> str:
        at = f" at speedup {self.speedup:g}" if self.speedup != 1 else ""
        return (f"{self.profile}: {self.workload}'s exchange ({self.bytes_per_step / 1e6:.2f} "
                f"MB each way a step){at} takes {self.measured_ms:.0f} board-ms on this host, "
                f"{self.ratio:.2f} x the {self.expected_ms:.0f} ms its {self.link_mbit:g} Mbit "
                f"link predicts ({self.wire_ms:.0f} ms on the wire + {self.per_message_ms:.1f} "
                f"ms a message; tolerance x/÷{1 + self.tolerance:g})")


def step_bytes(model: str, layers: int | None) -> int:
    """A step's bytes each way: the model's trainable parameters in float32."""
    from workloads.models import parameter_count

    return 4 * parameter_count(model, layers)


def judged(profile: Profile, model: str, workload: str, speedup: float, size: int,
           rounds_s: list[float], tiny_s: list[float],
           tolerance: float = TOLERANCE) -> ExchangeCheck:
    """The check of one probe's rounds (host seconds at dilation ``speedup``)."""
    median = statistics.median(rounds_s)
    wire_ms = 2 * size * 8 / (profile.link_mbit * 1e6) * 1000
    return ExchangeCheck(profile.name, model, workload, speedup, profile.link_mbit, size,
                         wire_ms, statistics.median(tiny_s) * speedup * 1000,
                         median * speedup * 1000,
                         (max(rounds_s) - min(rounds_s)) / median, tolerance, len(rounds_s))


def probe_exchange(cluster, model: str, speedup: float, size: int, link_mbit: float,
                   work: Path, rounds: int = ROUNDS) -> tuple[float, list[float], list[float]]:
    """Run the probe between the first two nodes of ``cluster`` at ``model``'s quota at
    dilation up to ``speedup`` (``link_mbit``: the profile's, undilated, for the time it
    may take); (the dilation got, rounds, one-byte rounds), seconds."""
    k = cluster.prepare(SimpleNamespace(model=model), 2, speedup)
    server, worker = cluster.nodes()[:2]
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"probe-{model}-{k:g}.json"
    base = [sys.executable, "-m", "workloads.exchange_probe"]
    serving = cluster.start(server, [*base, "serve", "--port", str(PORT)], {},
                            work / f"serve-{model}-{k:g}.log", role="server")
    try:
        probing = cluster.start(worker, [*base, "probe", "--host", server.address,
                                         "--port", str(PORT), "--bytes", str(size),
                                         "--rounds", str(rounds), "--warmup", str(WARMUP),
                                         "--out", str(out)],
                                {}, work / f"probe-{model}-{k:g}.log", role="worker")
        # Ten times the probe's time at the profile's link: a link far slower than that
        # still ends, and is judged, rather than timing out.
        limit_s = PROBE_TIMEOUT_S + 10 * (rounds + WARMUP) * 2 * size * 8 / (
            link_mbit * k * 1e6)
        try:
            status = probing.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            probing.kill()
            probing.wait()
            raise ClusterError(f"the exchange probe between {worker.name} and {server.name} "
                               f"did not end in {limit_s:.0f} s: is the host overloaded? "
                               "(`edgeprof cluster status` shows the nodes' links)") from None
        if status != 0 or not out.exists():
            log = (work / f"probe-{model}-{k:g}.log").read_text(errors="replace")
            tail = (log.strip().splitlines() or ["no output"])[-1]
            raise ClusterError(f"the exchange probe between {worker.name} and "
                               f"{server.name} failed (exit {status}): {tail}")
    finally:
        serving.kill()
        serving.wait()
    found = json.loads(out.read_text())
    return k, found["rounds_s"], found["tiny_s"]


def check_exchanges(profile: Profile, todo: list[tuple[str, int | None, str, float]], *,
                    mode: str, tolerance: float = TOLERANCE, work: Path,
                    report: Callable[[str], None] = lambda line: None
                    ) -> list[ExchangeCheck]:
    """Probe each ``(model, layers, workload label, dilation k)`` of ``todo`` on one
    two-node cluster of ``profile`` (brought up and down here); raises ``ConfigError``
    with ``mode="refuse"`` when one is off (module doc)."""
    if not todo:
        return []
    # A name of its own: an idle cluster of the profile's name is not taken over as is.
    settings = profiled_provider()(profile=replace(profile, name=f"{profile.name}-exchange"),
                                   speedup=max(k for *_, k in todo))
    checks = []
    with settings.open(GridNeeds(nodes=2)) as cluster:
        for model, layers, workload, k in todo:
            size = step_bytes(model, layers)
            round_s = 2 * size * 8 / (profile.link_mbit * k * 1e6)
            rounds = max(MIN_ROUNDS, min(ROUNDS, int(PROBE_S / round_s)))
            got, rounds_s, tiny_s = probe_exchange(cluster, model, k, size, profile.link_mbit,
                                                    work, rounds)
            check = judged(profile, model, workload, got, size, rounds_s, tiny_s,
                           tolerance)
            report(("ok: " if check.within else "off: ") + check.line())
            if not check.within:
                if mode == "refuse":
                    raise ConfigError(f"{check.line()}: the emulated link is not the "
                                      f"profile's; {_fix(check)}")
                check.action = "warned"
                report(f"{profile.name}: a link cannot be re-calibrated; every exchange of "
                       f"this run is off by about as much ({_fix(check)})")
            checks.append(check)
    return checks


def _fix(check: ExchangeCheck) -> str:
    if check.ratio > 1:
        return ("use a smaller --speedup (a node's quota pays the kernel's work of k "
                "times its link), run on a quieter host, or check no other tc qdisc "
                "shapes the nodes' links (`edgeprof cluster status`)")
    return ("check the profile's link_mbit against the tc qdisc on the nodes' links "
            "(`edgeprof cluster status`)")
