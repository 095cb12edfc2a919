"""docs/columns.md: every column of a cell's record, the engines' own in their place.

``python -m profiler.sweep.columns_doc > docs/columns.md`` writes it from the record's
owner (``profiler.results_schema``) and what each registered engine adds (its settings
after the configuration's, its columns after the record's); tests/unit/
test_results_schema.py fails when the committed file is stale.
"""

from __future__ import annotations

import sys

from .. import engines, results_schema


def markdown() -> str:
    return results_schema.markdown(extra=engines.columns())


if __name__ == "__main__":
    sys.stdout.write(markdown())
