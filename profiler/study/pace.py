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
"""

from __future__ import annotations

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
