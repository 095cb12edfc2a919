"""The chaos soak: sweeps on the emulated cluster for a while under seeded random faults.

Runs ``edgeprof sweep --cluster emulated`` again and again, one engine's grid after the
other (mxnet and torch in both sync modes, torch-ddp and horovod in sync; tiny LeNet-MLP
cells), shipping live to a real InfluxDB 1.6 on loopback, while ``soak_faults`` injects
a fault at seeded random moments: kill -9 of a worker, a parameter server, a scheduler,
an agent or the controller itself (then rerun with ``--resume`` as a user would), a
link down for seconds, InfluxDB killed and restarted, a node slowed, a spool disk full,
SIGTERM to the controller, a worker stopped past the time limit. When the time is up it
lets the running sweep end, delivers what a killed controller left in its spools with
``edgeprof ship`` (as a user would after a crash), checks (``soak_checks``) and prints a
table; exit status 1 if a check failed. Needs root (the emulated cluster, tmpfs).

    sudo flock /tmp/edgeprof-emulated.lock .venv/bin/python benchmarks/soak.py \\
        --minutes 60 --seed 1

Everything goes to ``--workdir`` (default: a new folder under /tmp): the sweeps, the
fault log (``faults.jsonl``), the controller's memory samples and ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
import soak_checks
from soak_checks import Check
from soak_faults import EMULATED_ONLY, FAULTS, Attempt, FaultDriver

ROOT = Path(__file__).resolve().parents[1]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
# One engine's grid per sweep, in turn: (engine, sync modes, nodes it lacks roles of).
ENGINES = (("mxnet", "sync,async", ()), ("torch", "sync,async", ("scheduler",)),
           ("torch-ddp", "sync", ("server", "scheduler")),
           ("horovod", "sync", ("server", "scheduler")))
CELL_ARGS = ("--model", "lenet-mlp", "--devices", "2", "--max-samples", "4096",
             "--val-samples", "64", "--epochs", "1", "--interval", "0.5")
PROFILE = "pi4"
NODES = 3
DB = "edgeprof"
POLL_S = 0.05
RSS_EVERY_S = 1.0
RESUMES_MAX = 10  # a sweep stopped more often than this is given up (a check fails)


@dataclass
class SweepRun:
    """One sweep of the soak, across its runs (the first, then each ``--resume``)."""

    name: str
    out: Path
    engine: str
    syncs: str
    batches: str
    lacks: tuple
    timeout_s: float
    influx_url: str
    cluster: str = "emulated"
    planned: int = 0
    runs: int = 0
    exit: int | None = None
    proc: subprocess.Popen | None = None
    sweep_id: str | None = None

    @property
    def sweep(self) -> str:
        return self.name

    def start(self) -> None:
        resume = ["--resume"] if self.runs else []
        where = ["--cluster", "emulated", "--profile", PROFILE] \
            if self.cluster == "emulated" else ["--cluster", "local"]
        cmd = [*EDGEPROF, "sweep", *where, "--engine", self.engine, "--sync", self.syncs,
               "--batch", self.batches,
               *CELL_ARGS, "--timeout", f"{self.timeout_s:g}", "--influx-url",
               self.influx_url, "--influx-db", DB, "--out", str(self.out), *resume]
        self.runs += 1
        with open(self.out.parent / f"{self.name}.run{self.runs}.log", "w") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         env=sweep_env(self.out.parent))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _records(self) -> list[dict]:
        return soak_checks.records(self.out)

    def has_record(self, cell_id: str, attempt: int) -> bool:
        return any(r["cell_id"] == cell_id and r["attempt"] == attempt
                   for r in self._records())

    def attempt_folders(self) -> set[Path]:
        return set(self.out.glob("cells/*/attempt-*"))

    def running_attempt(self) -> Attempt | None:
        if not self.alive():
            return None
        done = {(r["cell_id"], r["attempt"]) for r in self._records()}
        newest = None
        for cell_json in self.out.glob("cells/*/attempt-*/cell.json"):
            folder = cell_json.parent
            key = (folder.parent.name, int(folder.name.split("-")[1]))
            if key in done:
                continue
            mtime = cell_json.stat().st_mtime
            if newest is None or mtime > newest[0]:
                newest = (mtime, Attempt(folder, *key))
        return newest[1] if newest else None

    def engine_lacks(self, role: str) -> bool:
        return role in self.lacks


def planned_cells(syncs: str, batches: str) -> int:
    return len(syncs.split(",")) * len(batches.split(","))


def run_sweep(run: SweepRun, driver: FaultDriver, rss: list[dict], deadline: float) -> None:
    """Run ``run`` to its end, resuming it while the driver stopped its controller; no
    new faults past ``deadline`` (the sweep then ends in peace)."""
    while True:
        run.start()
        run_started = time.monotonic()
        next_rss = 0.0
        while run.alive():
            if time.monotonic() >= deadline:
                driver.stop()
            driver.tick(run)
            now = time.monotonic()
            if now >= next_rss:
                next_rss = now + RSS_EVERY_S
                try:
                    rss_mb = psutil.Process(run.proc.pid).memory_info().rss / 2**20
                    rss.append({"run": f"{run.name}.run{run.runs}", "t": time.time(),
                                "age_s": round(now - run_started, 1),
                                "rss_mb": round(rss_mb, 1)})
                except psutil.Error:
                    pass
            time.sleep(POLL_S)
        run.exit = run.proc.returncode
        driver.tick(run)  # a stopped worker's SIGCONT, and so on
        records = run._records()
        if records and run.sweep_id is None:
            run.sweep_id = records[0]["sweep_id"]
        stopped_by_us = run.exit in (-9, -15, 128 + 15)
        if run.exit == 0 or not stopped_by_us or run.runs > RESUMES_MAX:
            return


def ship_leftovers(sweeps: list[SweepRun], url: str) -> dict[str, int]:
    """``edgeprof ship`` each sweep, as a user told so would: points it sent, by sweep."""
    import re
    sent = {}
    for run in sweeps:
        done = subprocess.run([*EDGEPROF, "ship", str(run.out), "--influx-url", url,
                               "--influx-db", DB], cwd=ROOT, capture_output=True, text=True,
                              check=False, timeout=600)
        found = re.search(r"shipped (\d+) points", done.stdout)
        if done.returncode or not found:
            raise SystemExit(f"edgeprof ship {run.out} failed: {done.stderr[-1000:]}")
        sent[run.name] = int(found.group(1))
    return sent


def check_leftover_points(sweeps: list[SweepRun], shipped: dict[str, int]) -> Check:
    """Points a sweep left for ``edgeprof ship`` only where its last run said so (its
    server was away as it ended: the shipper does not hold the exit for it)."""
    problems = []
    for run in sweeps:
        log = (run.out.parent / f"{run.name}.run{run.runs}.log").read_text(errors="replace")
        if shipped.get(run.name) and "run edgeprof ship" not in log:
            problems.append(f"{run.name}: {shipped[run.name]} points left undelivered, "
                            "and its last run did not say to run edgeprof ship")
    total = sum(shipped.values())
    told = sum(1 for n in shipped.values() if n)
    return Check("undelivered points announced", not problems,
                 f"{total} points left for edgeprof ship by {told} sweeps, each told so",
                 problems)


# What a sweep can make in its temp folder (SSH control sockets, the profile check's
# scratch). The soak's sweeps get a temp folder of their own (``TMPDIR``, ``sweep_env``):
# other users of this machine (the test suite's other workers, calibration) make such
# entries in /tmp meanwhile. (SSH's sockets stay in /tmp, for their path's length; the
# soak runs no inventory sweep.)
SWEEP_TMP_PREFIXES = ("edgeprof-ssh-", "edgeprof-profile-check-")


def sweep_tmp(workdir: Path) -> Path:
    return workdir / "tmp"


def sweep_env(workdir: Path) -> dict[str, str]:
    """The environment of every sweep the soak starts."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(sweep_tmp(workdir))}


def tmp_entries(workdir: Path) -> set[str]:
    return {p.name for p in sweep_tmp(workdir).glob("edgeprof-*")
            if p.name.startswith(SWEEP_TMP_PREFIXES)}


def check_leftovers(workdir: Path, tmp_before: set[str], emulated: bool) -> Check:
    """Nothing of edgeprof's left: processes, mounts, temp files, nodes' processes."""
    from profiler.cluster import netns
    problems = []
    me = psutil.Process()
    mine = {me.pid} | {p.pid for p in me.parents()}  # the soak and what started it
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if proc.info["pid"] not in mine and str(workdir) in cmdline and \
                proc.info["status"] != psutil.STATUS_ZOMBIE:
            problems.append(f"process {proc.info['pid']}: {cmdline[:150]}")
    for ns in netns.list_netns() if emulated else []:
        for pid in netns.netns_pids(ns):
            problems.append(f"process {pid} in {ns}")
    for line in Path("/proc/mounts").read_text().splitlines():
        if str(workdir) in line:
            problems.append(f"mount {line.split()[1]}")
    for path in workdir.glob("sweep-*/**/*.tmp"):  # torn atomic writes, spool segments
        problems.append(f"temp file {path.relative_to(workdir)}")
    for name in sorted(tmp_entries(workdir) - tmp_before):
        problems.append(f"temp {sweep_tmp(workdir)}/{name}")
    return Check("nothing of edgeprof's left", not problems,
                 f"{len(problems)} leftovers", problems)


def check_cluster_down() -> Check:
    from profiler.cluster import cgroups, emulated, netns
    problems = []
    emulated.down()
    problems += [f"namespace {ns}" for ns in netns.list_netns()]
    problems += [f"link {link}" for link in netns.list_links()]
    for root in cgroups.detect_layout().roots():
        if (root / cgroups.BASE_NAME).exists():
            problems.append(f"cgroup {root / cgroups.BASE_NAME}")
    return Check("no namespace, veth or cgroup left", not problems,
                 f"{len(problems)} left after the cluster's teardown", problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0,
                        help="how long to start new sweeps (the last one then ends)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mean-gap-s", type=float, default=12.0,
                        help="mean seconds between two faults (exponential)")
    parser.add_argument("--timeout-s", type=float, default=40.0, help="each cell's limit")
    parser.add_argument("--batches", default="32,64", help="each sweep's --batch")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="the kinds to draw from (comma-separated)")
    parser.add_argument("--rss-bound-mb", type=float, default=250.0)
    parser.add_argument("--rss-growth-mb", type=float, default=40.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--cluster", choices=("emulated", "local"), default="emulated",
                        help="local: a quick try of the soak itself, without the "
                        "emulated cluster's faults (" + ", ".join(EMULATED_ONLY) + ")")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("soak: needs root (the emulated cluster, tmpfs mounts)", file=sys.stderr)
        return 2
    kinds = tuple(args.faults.split(","))
    if args.cluster == "local":
        kinds = tuple(k for k in kinds if k not in EMULATED_ONLY)
    unknown = set(kinds) - set(FAULTS)
    if unknown:
        print(f"soak: unknown faults {sorted(unknown)}: choose from {FAULTS}",
              file=sys.stderr)
        return 2

    from profiler.cluster import emulated
    from tests.support.servers import LocalServer

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    sweep_tmp(workdir).mkdir(exist_ok=True)
    tmp_before = tmp_entries(workdir)
    influx = LocalServer("influxdb1", workdir / "influxdb").start()
    try:
        if args.cluster == "emulated":
            emulated.ensure_cluster(NODES, PROFILE)
        driver = FaultDriver(args.seed, workdir / "faults.jsonl", args.mean_gap_s, influx,
                             kinds, node="n1" if args.cluster == "emulated" else "local1")
        started = time.monotonic()
        sweeps, rss, mount_problems = run_sweeps(args, workdir, influx, driver)
        if influx.proc is None:
            influx.start()
        shipped_by_sweep = ship_leftovers(sweeps, influx.url)
        shipped_after = sum(shipped_by_sweep.values())
        sweep_dicts = [{"name": r.name, "out": str(r.out), "planned": r.planned,
                        "runs": r.runs, "exit": r.exit, "sweep_id": r.sweep_id}
                       for r in sweeps]
        faults = soak_checks.injected(workdir / "faults.jsonl")
        checks = soak_checks.check_records(sweep_dicts, faults)
        points_check, totals = soak_checks.check_points(sweep_dicts, influx.url, DB)
        checks.append(points_check)
        checks.append(check_leftover_points(sweeps, shipped_by_sweep))
        checks.append(soak_checks.check_memory(rss, args.rss_bound_mb, args.rss_growth_mb))
    finally:
        influx.stop()
    leftovers = check_leftovers(workdir, tmp_before, args.cluster == "emulated")
    leftovers.problems += mount_problems
    leftovers.ok = not leftovers.problems
    checks.append(leftovers)
    if args.cluster == "emulated":
        checks.append(check_cluster_down())

    statuses = Counter(r["status"] for s in sweep_dicts
                       for r in soak_checks.records(Path(s["out"])))
    by_kind = Counter(f["kind"] for f in faults)
    summary = {"seed": args.seed, "minutes": round((time.monotonic() - started) / 60, 1),
               "faults": dict(by_kind), "records_by_status": dict(statuses),
               "points": dict(totals), "shipped_after": shipped_after,
               "enospc": soak_checks.enospc_report(
                   faults, lambda spool: spool.parents[1] / "logs" / f"agent-{spool.name}.log"),
               "checks": {c.name: c.ok for c in checks}}
    (workdir / "summary.json").write_text(json.dumps(summary, indent=1))
    (workdir / "rss.jsonl").write_text("".join(json.dumps(s) + "\n" for s in rss))
    print_summary(summary, checks)
    return 0 if all(c.ok for c in checks) else 1


def run_sweeps(args, workdir: Path, influx, driver: FaultDriver
               ) -> tuple[list[SweepRun], list[dict], list[str]]:
    """Sweep after sweep until ``--minutes`` are up; then every fault undone and every
    tmpfs unmounted: (the sweeps, the controller's RSS samples, unmount problems)."""
    sweeps: list[SweepRun] = []
    rss: list[dict] = []
    started = time.monotonic()
    deadline = started + args.minutes * 60
    print(f"soak: seed {args.seed}, {args.minutes:g} min, faults every ~{args.mean_gap_s:g} s,"
          f" in {workdir}", flush=True)
    try:
        index = 0
        while time.monotonic() < deadline:
            engine, syncs, lacks = ENGINES[index % len(ENGINES)]
            run = SweepRun(f"sweep-{index:03d}-{engine}", workdir / f"sweep-{index:03d}",
                           engine, syncs, args.batches, lacks, args.timeout_s, influx.url,
                           cluster=args.cluster, planned=planned_cells(syncs, args.batches))
            sweeps.append(run)
            run_sweep(run, driver, rss, deadline)
            print(f"  {run.name}: exit {run.exit} after {run.runs} run(s), "
                  f"{time.monotonic() - started:.0f} s", flush=True)
            index += 1
    finally:
        driver.stop()
        for run in sweeps:
            if run.alive():
                run.proc.kill()
                run.proc.wait()
        driver.finish()
        mount_problems = driver.unmount_all()
    return sweeps, rss, mount_problems


def print_summary(summary: dict, checks: list[Check]) -> None:
    points = summary["points"]
    print(f"\nfaults injected ({sum(summary['faults'].values())}): "
          + ", ".join(f"{k} {n}" for k, n in sorted(summary["faults"].items())))
    print("records by status: " + ", ".join(
        f"{k} {n}" for k, n in sorted(summary["records_by_status"].items())))
    print(f"points: spooled {points['spooled']}, delivered {points['delivered']} "
          f"({summary['shipped_after']} of them by edgeprof ship afterwards), quarantined "
          f"{points['quarantined']}, dropped by agents on a full disk "
          f"{points['dropped_enospc']}")
    for line in summary["enospc"]:
        print(f"full spool disk: {line}")
    print()
    print(soak_checks.table(checks))


if __name__ == "__main__":
    sys.exit(main())
