"""The fuzz pass's shared pieces: one fixed Hypothesis profile, hostile values, and the
property every reader of outside input must keep.

The property (``refused_or_read``): a reader fed a truncated, corrupted or hostile file
either reads it (bad lines quarantined or skipped) or refuses it with one
``EdgeprofError`` line; no other exception escapes, and nothing is written outside the
folder it was given (``writes_outside``).

The profile is derandomized (the same cases every run, no example database) with no
deadline; each test sets its own ``max_examples`` so the folder stays under 60 s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile(
    "fuzz", derandomize=True, deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture])
FUZZ = settings.get_profile("fuzz")

# JSON nested deeper than the parser's recursion limit: json.loads raises RecursionError.
DEEP_JSON = "[" * 5_000 + "]" * 5_000
HUGE_INT = 10 ** 400  # past a float's range: float() of it raises OverflowError
TRAVERSALS = ["..", "../../outside", "/etc", "a/../../outside", "", ".", "x\x00y",
              "../" * 8 + "tmp/edgeprof-fuzz-escape"]

# Values a hostile file puts where a number or a name belongs.
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.just(HUGE_INT), st.just(-HUGE_INT),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(TRAVERSALS))
json_values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                     st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)


def mutated(record: dict, data_draw) -> dict:
    """``record`` with some keys dropped and some values replaced by hostile ones."""
    out = dict(record)
    for key in list(record):
        choice = data_draw(st.integers(0, 5))
        if choice == 0:
            del out[key]
        elif choice == 1:
            out[key] = data_draw(json_values)
    return out


def line_of(value) -> str:
    """A JSON line as a writer that allows NaN and Infinity (Python's default) writes it."""
    return json.dumps(value, default=str)


@st.composite
def corrupted_text(draw, lines: list[str]) -> bytes:
    """A file of ``lines`` damaged one way: truncated, bytes flipped, invalid UTF-8 added,
    a very deep JSON line, or left as it is."""
    text = "".join(line + "\n" for line in lines).encode()
    how = draw(st.sampled_from(["as is", "truncated", "flipped", "bad utf-8", "deep"]))
    if how == "truncated" and text:
        return text[:draw(st.integers(0, len(text) - 1))]
    if how == "flipped" and text:
        at = draw(st.integers(0, len(text) - 1))
        return text[:at] + bytes([text[at] ^ draw(st.integers(1, 255))]) + text[at + 1:]
    if how == "bad utf-8":
        at = draw(st.integers(0, len(text)))
        return text[:at] + b"\xff\xfe\xc3(" + text[at:]
    if how == "deep":
        return text + DEEP_JSON.encode() + b"\n"
    return text


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` (symlinks not followed) with its size and mtime."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            stat = path.lstat()
            out[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return out


def writes_outside(before: dict, after: dict, inside: Path) -> list[str]:
    """Paths created or changed between two snapshots that are not under ``inside``."""
    return sorted(path for path, value in after.items()
                  if before.get(path) != value and not Path(path).is_relative_to(inside))
