"""The pace the profile check measured on this host, for the plan made after it.

The estimate takes a node of a calibrated profile to train at the study's own rate
times its dilation (``estimate.node_rate``): an assumption, which the check
(``profiler.calibrate.check``) puts to the test before every study by training each
model family at each dilation its cells get. Within the check's tolerance the node may
still be off by up to 1.1 x (1.25 x before issue 47), and on a fast host a LeNet-MLP
cell "raised to 2.5 s" by the window (window.py) trained 1.73-1.75 s. So the plan after the check
(``plan.replanned``) takes the pace the check measured: per (model family, dilation k),
the rate measured over the board's rate times k. After a re-calibration that is the
last measurement of the search, at the new quota (``Check.new_samples_per_s``).

After the study, ``denominator_note`` says what the one-device cells themselves
trained at against the board's rate: every N / 1 ratio divides by them, so a study's
verdicts hold as far as they do (issue 47: at 0.94-1.18 x on one host the same rows
were within in three runs; at 0.65-1.20 x on another, rows 10-16% from an edge flipped).
"""

from __future__ import annotations

from statistics import median

from ..calibrate.check import CHECK_TOLERANCE, within

# (model family, dilation k) -> samples/s measured / (board's samples/s x k).
Paces = dict[tuple[str, float], float]


def measured(checks: list[dict]) -> Paces:
    """The pace of every quota ``checks`` (``sweep.extra["profile_check"]``, the records
    of ``Check.as_record``) measured at; a record without a rate (a re-calibration
    recorded before ``new_samples_per_s`` was) gives none, and the plan keeps the
    board's rate there, the one the re-calibration aimed at."""
    paces: Paces = {}
    for check in checks:
        k = float(check.get("speedup", 1.0))
        board = check.get("board_samples_per_s")
        recalibrated = check.get("action") == "recalibrated"
        rate = check.get("new_samples_per_s" if recalibrated else "samples_per_s")
        if board and rate and k > 0:
            paces[(check["model"], k)] = rate / (board * k)
    return paces


def pace_of(paces: Paces | None, model: str, k: float) -> float:
    """The measured pace of ``model`` at dilation ``k``, 1 (the board's) when unmeasured."""
    return (paces or {}).get((model, float(k)), 1.0)


def pace_notes(paces: Paces | None) -> list[str]:
    """The plan's line saying which paces it was sized from."""
    if not paces:
        return []
    return ["the window and the estimate sized from the pace measured on this host: "
            + ", ".join(f"{model} {pace:.2f} x the board"
                        + (f" at speedup {k:g}" if k != 1 else "")
                        for (model, k), pace in sorted(paces.items()))]


def one_device_paces(records: list[dict], catalog) -> dict[str, list[float]]:
    """model -> the rate each finished one-device cell trained at, in the board's time,
    over its profile's ``board_rates`` entry for that model (cells at another batch or
    depth than the board's rate was measured at, or on a mix, give none)."""
    from ..report.ratios import per_sample_s
    paces: dict[str, list[float]] = {}
    for r in records:
        names = set((r.get("node_profiles") or {}).values())
        if r.get("devices") != 1 or r.get("status") != "ok" or len(names) != 1:
            continue
        profile = catalog.profiles.get(names.pop())
        rate = profile.board_rates.get(r.get("model")) if profile else None
        if rate is None or r.get("batch") != rate.batch \
                or (rate.layers is not None and r.get("layers") != rate.layers):
            continue
        if seconds := per_sample_s(r):
            paces.setdefault(r["model"], []).append(1.0 / seconds / rate.samples_per_s)
    return paces


def denominator_note(paces: dict[str, list[float]],
                     tolerance: float = CHECK_TOLERANCE) -> str | None:
    """One line: the one-device cells' paces per model, and a warning when a model's
    median lies off the board's rate by more than ``tolerance`` (the profile check's
    own, by default)."""
    if not paces:
        return None
    shown = ", ".join(f"{model} {min(v):.2f}-{max(v):.2f}" if len(v) > 1
                      else f"{model} {v[0]:.2f}" for model, v in sorted(paces.items()))
    off = [m for m, v in sorted(paces.items()) if not within(median(v), tolerance)]
    warning = (f"; {', '.join(off)} off by more than x/\u00f7{1 + tolerance:g}: its ratios to "
               "one device carry that factor (docs/study.md, \"The Show on a slow host\")"
               if off else "")
    return f"the one-device cells (every N / 1 ratio's denominator) trained at {shown} " \
           f"x the board's rate{warning}"
