"""One column of a cell's results record: its name, type, unit, meaning and filler.

A leaf module (it imports nothing of edgeprof) so that whatever fills a column, an
engine included, can describe it. The record's own columns, in results.csv's order,
are ``profiler.results_schema``'s; an engine's own are added to them at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

# What a column holds; a list is ``a;b;c`` in results.csv, a map JSON.
KINDS = ("str", "int", "float", "bool", "list", "map")


@dataclass(frozen=True)
class Column:
    """A results column (Glances' ``fields_description``, one record a column).

    ``unit`` is of the value (of each item, for a list or a map's values): ``s``, ``ms``,
    ``MB``, ``%``, ``J``, ``USD``, ... or "" for none. ``filled_by`` is the dotted name of
    the module that computes it; ``group`` what its filler asks the schema for
    (``columns_of("energy")``); ``csv`` False keeps it in results.jsonl only.
    """

    name: str
    kind: str
    unit: str
    description: str
    filled_by: str
    group: str
    csv: bool = True

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name}: kind {self.kind!r} is none of {KINDS}")
        if not self.description or "\n" in self.description:
            raise ValueError(f"column {self.name}: give a one-line description")

    @property
    def help(self) -> str:
        """The description with its unit, as a report's column help shows it."""
        return f"{self.description} ({self.unit})" if self.unit else self.description

    def field_value(self, value) -> float | int | bool | None:
        """``value`` as an InfluxDB field of this column's type, or None when it is none
        (a float column is always a float: a whole number of joules must not make
        InfluxDB refuse the field as an integer after a float one)."""
        if value is None or self.kind not in ("int", "float", "bool"):
            return None
        if self.kind == "bool":
            return value if isinstance(value, bool) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if self.kind == "float" else int(value)
