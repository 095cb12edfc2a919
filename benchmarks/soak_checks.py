"""The chaos soak's checks: what must hold once every sweep of the soak has ended.

Each check returns a ``Check`` (its name, whether it held, and the numbers or the
first problems found); ``soak.py`` prints them as a table and exits non-zero if one
failed. What each cell's record must say follows from the faults that hit its attempt
(the fault log's ``injected`` lines carry the sweep, cell and attempt they hit):

- no fault, or one the cell must ride through (an agent killed, a link down for a few
  seconds, a node slowed for a few seconds, a full spool disk): ``ok``;
- a worker, parameter server or scheduler killed: ``failed``, the reason naming that
  role (``worker-1 was killed by SIGKILL``);
- a worker stopped (SIGSTOP) past the time limit: ``timeout``;
- the controller sent SIGTERM: ``failed``, interrupted by SIGTERM;
- the controller killed (SIGKILL): no record for that attempt, a later one from
  ``--resume``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

RIDE_THROUGH = ("kill_agent", "link_down", "slow_node", "enospc")
FINAL_STATUSES = ("ok", "oom", "timeout")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    problems: list[str] = field(default_factory=list)


def injected(fault_log: Path) -> list[dict]:
    lines = fault_log.read_text().splitlines() if fault_log.exists() else []
    return [e for e in map(json.loads, lines) if e["phase"] == "injected"]


def records(sweep_dir: Path) -> list[dict]:
    path = sweep_dir / "results.jsonl"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def expected(kinds: list[str]) -> tuple[str | None, str | None]:
    """(status, pattern the reason must match) for an attempt hit by ``kinds``;
    (None, None): the attempt must have no record (its controller was killed)."""
    if "kill_controller" in kinds:
        return None, None
    for kind, role in (("kill_worker", "worker"), ("kill_server", "server"),
                       ("kill_scheduler", "scheduler")):
        if kind in kinds:
            return "failed", rf"^{role}-\d+( \(.*\))? was killed by SIGKILL"
    if "sigstop_worker" in kinds:
        return "timeout", r"--timeout"
    if "sigterm_controller" in kinds:
        return "failed", r"interrupted.*SIGTERM|SIGTERM.*interrupted"
    return "ok", r"^$"


def worker_ends(folder: Path) -> list[float]:
    """When each worker of an attempt wrote its end event (wall s); inf if it did not."""
    ends = []
    for path in folder.glob("events/worker-*.jsonl"):
        t_end = float("inf")
        for line in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "end":
                t_end = float(event["t"])
        ends.append(t_end)
    return ends


def too_late(kind: str, folder: Path, faults: list[dict], sweep: str) -> bool:
    """Whether a role fault of this attempt landed after every worker had ended (a
    process that has written its end event and is exiting): then it changes nothing."""
    if kind not in ("kill_worker", "kill_server", "kill_scheduler", "sigstop_worker"):
        return False
    walls = [f["wall"] for f in faults if f["kind"] == kind and f.get("sweep") == sweep
             and folder.parent.name == f.get("cell_id")
             and folder.name == f"attempt-{f.get('attempt')}"]
    ends = worker_ends(folder)
    return bool(walls and ends) and max(ends) <= min(walls)


def check_records(sweeps: list[dict], faults: list[dict]) -> list[Check]:
    """One final record per planned cell; each attempt's record as its faults say;
    every sweep's grid completed (by ``--resume`` where its controller was stopped)."""
    by_attempt: dict[tuple, list[str]] = {}
    for fault in faults:
        if "cell_id" in fault:
            by_attempt.setdefault((fault["sweep"], fault["cell_id"], fault["attempt"]),
                                  []).append(fault["kind"])
    one_final, agree, complete = [], [], []
    agreed = 0
    for sweep in sweeps:
        recs = records(Path(sweep["out"]))
        by_cell: dict[str, list[dict]] = {}
        for rec in recs:
            by_cell.setdefault(rec["cell_id"], []).append(rec)
        if len(by_cell) != sweep["planned"]:
            complete.append(f"{sweep['name']}: {len(by_cell)} of {sweep['planned']} cells "
                            "have a record")
        if sweep["exit"] != 0:
            complete.append(f"{sweep['name']}: its last run exited {sweep['exit']}")
        for cell_id, cell_recs in by_cell.items():
            finals = [i for i, r in enumerate(cell_recs) if r["status"] in FINAL_STATUSES]
            if len(finals) > 1 or (finals and finals[0] != len(cell_recs) - 1):
                one_final.append(f"{sweep['name']} {cell_id}: statuses "
                                 f"{[r['status'] for r in cell_recs]}")
            for rec in cell_recs:
                kinds = by_attempt.get((sweep["name"], cell_id, rec["attempt"]), [])
                folder = Path(sweep["out"]) / "cells" / cell_id / f"attempt-{rec['attempt']}"
                kinds = [k for k in kinds if not too_late(k, folder, faults, sweep["name"])]
                status, pattern = expected(kinds)
                if status is None:
                    agree.append(f"{sweep['name']} {cell_id} attempt {rec['attempt']}: a "
                                 f"record although its controller was killed: {rec['status']}")
                elif rec["status"] != status or not re.search(pattern, rec["reason"] or ""):
                    agree.append(f"{sweep['name']} {cell_id} attempt {rec['attempt']} "
                                 f"({rec['engine']} {rec['sync']}), faults {kinds or 'none'}: "
                                 f"{rec['status']} {rec['reason']!r}, expected {status}")
                else:
                    agreed += 1
        killed = [k for k, kinds in by_attempt.items()
                  if k[0] == sweep["name"] and "kill_controller" in kinds]
        for _, cell_id, attempt in killed:
            later = [r for r in by_cell.get(cell_id, []) if r["attempt"] > attempt]
            if not later:
                complete.append(f"{sweep['name']} {cell_id}: attempt {attempt}'s controller "
                                "was killed and no later attempt was recorded")
    n_records = sum(len(records(Path(s["out"]))) for s in sweeps)
    planned = sum(s["planned"] for s in sweeps)
    resumed = sum(s["runs"] - 1 for s in sweeps)
    return [
        Check("one final record per planned cell", not one_final,
              f"{planned} cells planned, {n_records} records", one_final),
        Check("status and reason agree with the faults", not agree,
              f"{agreed} of {n_records} records agree", agree),
        Check("--resume completed every grid", not complete,
              f"{len(sweeps)} sweeps, {resumed} resumed runs", complete),
    ]


def series_key(measurement: str, tags: dict[str, str]) -> tuple:
    return (measurement, tuple(sorted(tags.items())))


def spooled_points(sweep_dir: Path) -> tuple[Counter, Counter, int]:
    """Per series: points in the spools (lines) and distinct timestamps; and the points
    the agents reported dropped on a full disk (their last ``points_dropped``)."""
    from profiler.agent.spool_reader import find_spools, read_points
    lines, distinct, dropped = Counter(), Counter(), 0
    for spool in find_spools(sweep_dir):
        seen = set()
        last_dropped = 0
        for base, point in read_points(spool):
            key = series_key(point.measurement, {**base, **point.tags})
            lines[key] += 1
            if (key, point.time_ms) not in seen:
                seen.add((key, point.time_ms))
                distinct[key] += 1
            if point.measurement == "agent":
                last_dropped = point.fields.get("points_dropped", last_dropped)
        dropped += int(last_dropped)
    return lines, distinct, dropped


def quarantined_points(sweep_dir: Path) -> tuple[Counter, list[str]]:
    from profiler.agent import lineproto
    counts, reasons = Counter(), []
    for path in sweep_dir.rglob("quarantine-*.lp"):
        for line in path.read_text().splitlines():
            if line.startswith("#"):
                reasons.append(line[:200])
            elif line.strip():
                point = lineproto.parse(line)
                counts[series_key(point.measurement, point.tags)] += 1
    return counts, reasons


def stored_points(url: str, db: str, sweep_id: str) -> Counter:
    from tests.support.servers import influx_query
    counts = Counter()
    for series in influx_query(url, db, f"SELECT * FROM /.*/ WHERE sweep = '{sweep_id}' "
                               "GROUP BY *"):
        tags = {k: v for k, v in (series.get("tags") or {}).items() if v != ""}
        counts[series_key(series["name"], tags)] += len(series["values"])
    return counts


def shipper_accounts(sweep_dir: Path) -> tuple[int, int]:
    """What the shippers' own state says they delivered and quarantined, over spools."""
    sent = quarantined = 0
    for path in sweep_dir.rglob("ship-*.json"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        sent += int(state.get("points", 0))
        quarantined += int(state.get("quarantined", 0))
    return sent, quarantined


def check_points(sweeps: list[dict], url: str, db: str) -> tuple[Check, dict]:
    """Every spooled point in InfluxDB exactly once, or quarantined with a reason."""
    problems: list[str] = []
    totals = Counter()
    for sweep in sweeps:
        out = Path(sweep["out"])
        sweep_id = sweep.get("sweep_id")
        if sweep_id is None:
            continue
        lines, distinct, dropped = spooled_points(out)
        quarantined, reasons = quarantined_points(out)
        stored = stored_points(url, db, sweep_id)
        sent, q_state = shipper_accounts(out)
        totals.update(spooled=sum(lines.values()), distinct=sum(distinct.values()),
                      delivered=sum(stored.values()), quarantined=sum(quarantined.values()),
                      dropped_enospc=dropped, shipper_sent=sent)
        for key in sorted(set(distinct) | set(stored), key=str):
            want = distinct[key] - quarantined[key]
            if stored[key] != want:
                problems.append(f"{sweep['name']} {key[0]} {dict(key[1]).get('node')} "
                                f"{dict(key[1]).get('cell', '')[:12]}: spooled {distinct[key]}"
                                f" (quarantined {quarantined[key]}), in InfluxDB {stored[key]}")
        if sent + q_state != sum(lines.values()):
            problems.append(f"{sweep['name']}: the shippers account for {sent} sent + "
                            f"{q_state} quarantined of {sum(lines.values())} spooled lines")
        if sum(quarantined.values()) and not reasons:
            problems.append(f"{sweep['name']}: quarantined points without a reason")
    detail = (f"spooled {totals['spooled']}, delivered {totals['delivered']}, quarantined "
              f"{totals['quarantined']}, dropped on a full disk {totals['dropped_enospc']}")
    return Check("every spooled point in InfluxDB once", not problems, detail, problems), totals


SETTLED_AFTER_S = 15.0  # a controller's imports and first cell's start are done by then


def check_memory(samples: list[dict], bound_mb: float, growth_bound_mb: float) -> Check:
    """The controller's RSS: under ``bound_mb``, and growing less than ``growth_bound_mb``
    within one run once it settled (``SETTLED_AFTER_S`` after its start)."""
    problems = []
    peak = max((s["rss_mb"] for s in samples), default=0.0)
    if peak > bound_mb:
        problems.append(f"peak RSS {peak:.0f} MB over {bound_mb:.0f} MB")
    growth = 0.0
    by_run: dict[str, list[float]] = {}
    for s in samples:
        if s["age_s"] >= SETTLED_AFTER_S:
            by_run.setdefault(s["run"], []).append(s["rss_mb"])
    for run, rss in by_run.items():
        grew = max(rss) - rss[0]
        growth = max(growth, grew)
        if grew > growth_bound_mb:
            problems.append(f"{run}: RSS grew {grew:.0f} MB within the run")
    return Check("controller memory bounded", not problems,
                 f"peak {peak:.0f} MB (bound {bound_mb:.0f}), most growth in a run "
                 f"{growth:.0f} MB (bound {growth_bound_mb:.0f})", problems)


def table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    rows = [f"{'check':<{width}}  result  detail"]
    for c in checks:
        rows.append(f"{c.name:<{width}}  {'ok' if c.ok else 'FAILED':<6}  {c.detail}")
        rows += [f"{'':<{width}}          - {p}" for p in c.problems[:8]]
        if len(c.problems) > 8:
            rows.append(f"{'':<{width}}          ... {len(c.problems) - 8} more")
    return "\n".join(rows)


def enospc_report(faults: list[dict], log_path_of) -> list[str]:
    """For each spool that filled up: what its agent said and did, and what it kept."""
    lines = []
    for fault in faults:
        if fault["kind"] != "enospc":
            continue
        spool = Path(fault["spool"])
        spooled, _, dropped = spooled_points(spool)
        try:
            log = log_path_of(spool).read_text(errors="replace")
        except OSError:
            log = ""
        said = [w for w in ("cannot be written", "writable again") if w in log]
        lines.append(f"{fault['sweep']} {fault['cell_id']} attempt {fault['attempt']}: the "
                     f"agent logged {said or 'nothing'}, dropped {dropped} points while the "
                     f"disk was full, kept {sum(spooled.values())} (all in InfluxDB when the "
                     "points check holds)")
    return lines
