"""The suite's own layout: every test module's file name is its own.

The test folders are not packages, so pytest imports each module by its file name
(rootdir-based ``prepend`` import mode) and refuses a second module of the same name at
collection ("import file mismatch"): a unit and an integration ``test_zhang2018_study.py``
failed the whole run that way. Checked here, in a second, instead of in CI.
"""

from __future__ import annotations

from collections import defaultdict

from tests.conftest import ROOT


def test_no_two_test_modules_share_a_file_name():
    where = defaultdict(list)
    for path in (ROOT / "tests").rglob("test_*.py"):
        where[path.name].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"rename one of each: {shared}"
