"""Line protocol in the spool: encoding (by influxdb-client), base tags, and reading back.

The spool holds InfluxDB line protocol, so shipping is reading lines and posting them:
no re-encoding on the hot path (influxdb-client's ``Point`` encodes ~19,000 points/s
here; posting ready lines is what reaches the ≥ 50,000 points/s target).

Why not influxdb-client's ``Point`` to encode: importing ``influxdb_client`` costs the
agent ~40 MB of RSS (63 MB in all, over the 60 MB target, on 1 GB Pis that train). The
encoder here is the same escaping rules (measurement, tag and field keys, tag values;
numeric and boolean fields only), and ``tests/unit/test_agent_lineproto.py`` checks it
byte for byte against ``Point.to_line_protocol()``.

Tags that are the same for every point of an agent run (host, node, sweep, cell, the
cell's configuration) are written once per segment in a comment header
(``# tags {json}``; ``#`` lines are comments in line protocol) instead of on every line,
which makes the spool about five times smaller; ``with_base_tags`` puts them back in at
shipping time. The small reader here only parses what this module wrote, for cell summaries computed
without a server.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Mapping, NamedTuple

HEADER_PREFIX = "# tags "
_ESCAPE_MEASUREMENT = str.maketrans({",": r"\,", " ": r"\ ", "\n": r"\n", "\t": r"\t",
                                    "\r": r"\r"})
_ESCAPE_KEY = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ ", "\n": r"\n", "\t": r"\t",
                            "\r": r"\r"})
_UNESCAPED_COMMA = re.compile(r"(?<!\\),")
_UNESCAPED_SPACE = re.compile(r"(?<!\\) ")
_UNESCAPED_EQUALS = re.compile(r"(?<!\\)=")
_ESCAPE = re.compile(r"\\(.)")


def encode(measurement: str, tags: Mapping[str, str], fields: Mapping[str, float | int | bool],
           time_ms: int) -> str:
    """One point as a line of line protocol (millisecond timestamp), or "" if no fields.

    Tags and fields are sorted by key, floats lose a trailing ".0", ints get "i",
    non-finite floats and None are dropped: influxdb-client's ``Point`` output.
    """
    parts = []
    for key in sorted(fields):
        value = fields[key]
        # Exact types first (the agent's fields are plain floats and ints): one type()
        # test each instead of isinstance chains, a tenth of a tick at 1 Hz.
        kind = type(value)
        if kind is float:
            if value - value != 0.0:  # inf or nan: dropped, as Point drops them
                continue
            parts.append(f"{_key(key)}={_float_text(value)}")
        elif kind is int:
            parts.append(f"{_key(key)}={value}i")
        elif value is None:
            continue
        elif isinstance(value, bool):
            parts.append(f"{_key(key)}={str(value).lower()}")
        elif isinstance(value, int):
            parts.append(f"{_key(key)}={int(value)}i")
        else:
            value = float(value)
            if math.isfinite(value):
                parts.append(f"{_key(key)}={_float_text(value)}")
    if not parts:
        return ""
    return f"{_series(measurement, tuple(sorted(tags.items())))} {','.join(parts)} {int(time_ms)}"


def _float_text(value: float) -> str:
    """A float as Point writes it: ``repr`` without a trailing ``.0``."""
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


# An agent writes the same few series and field names every tick: escaping them once
# (not per point) was a third of a tick's CPU. Bounded: a long-lived agent's tags change
# only with its cell.
@functools.lru_cache(maxsize=4096)
def _series(measurement: str, tag_items: tuple[tuple[str, str], ...]) -> str:
    """``measurement,k=v,...`` escaped: the part of a line before its fields."""
    tag_text = _tags(dict(tag_items))
    head = measurement.translate(_ESCAPE_MEASUREMENT)
    return f"{head}{',' if tag_text else ''}{tag_text}"


@functools.lru_cache(maxsize=4096)
def _key(text: str) -> str:
    return str(text).translate(_ESCAPE_KEY)


def _tags(tags: Mapping[str, str]) -> str:
    out = []
    for key, value in sorted(tags.items()):
        if value is None:
            continue
        key_text, value_text = _key(key), _key(value)
        if value_text.endswith("\\"):
            value_text += " "
        if key_text and value_text:
            out.append(f"{key_text}={value_text}")
    return ",".join(out)


def header(base_tags: Mapping[str, str]) -> str:
    """The comment line that opens a segment and carries its base tags."""
    return HEADER_PREFIX + json.dumps(dict(base_tags), sort_keys=True) + "\n"


def parse_header(line: str) -> dict[str, str] | None:
    """The base tags of a header line, or None if ``line`` is not a header (or is a
    damaged one: not a JSON object, nested too deep; tags that are not scalars dropped)."""
    if not line.startswith(HEADER_PREFIX):
        return None
    try:
        tags = json.loads(line[len(HEADER_PREFIX):])
    except (ValueError, RecursionError):
        return None
    if not isinstance(tags, dict):
        return None
    return {k: v for k, v in tags.items() if isinstance(v, (str, int, float))}


def tag_fragment(base_tags: Mapping[str, str]) -> str:
    """The escaped ``k=v,k=v`` text of ``base_tags``."""
    return _tags(base_tags)


def with_base_tags(line: str, fragment: str) -> str:
    """``line`` with the segment's tag fragment inserted after its measurement."""
    if not fragment:
        return line
    # Measurement names are ours (plain identifiers): the first ',' or ' ' ends them.
    end = min((i for i in (line.find(","), line.find(" ")) if i >= 0), default=len(line))
    return f"{line[:end]},{fragment}{line[end:]}"


class ParsedPoint(NamedTuple):
    measurement: str
    tags: dict[str, str]
    fields: dict[str, float | int | bool]
    time_ms: int


def parse(line: str) -> ParsedPoint:
    """Read back one line this module encoded (numeric/boolean fields, ms timestamp)."""
    key, field_text, time_text = _UNESCAPED_SPACE.split(line.rstrip("\n"), maxsplit=2)
    parts = _UNESCAPED_COMMA.split(key)
    tags = {}
    for part in parts[1:]:
        name, value = _UNESCAPED_EQUALS.split(part, maxsplit=1)
        tags[_unescape(name)] = _unescape(value)
    fields = {}
    for part in _UNESCAPED_COMMA.split(field_text):
        name, value = _UNESCAPED_EQUALS.split(part, maxsplit=1)
        fields[_unescape(name)] = _field_value(value)
    return ParsedPoint(_unescape(parts[0]), tags, fields, int(time_text))


def _unescape(text: str) -> str:
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


def _field_value(text: str) -> float | int | bool:
    """A field's value; ``ValueError`` for one ``encode`` never writes (NaN, infinity,
    an integer past InfluxDB's int64), which only a damaged spool holds."""
    if text.endswith("i"):
        value = int(text[:-1])
        if not -2 ** 63 <= value < 2 ** 63:
            raise ValueError(f"integer field out of int64 range: {text[:30]}")
        return value
    if text in ("t", "T", "true", "True", "TRUE"):
        return True
    if text in ("f", "F", "false", "False", "FALSE"):
        return False
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite float field: {text[:30]}")
    return value
