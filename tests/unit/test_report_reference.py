"""The report's copy of the study's numbers is the project's shared reference.

``profiler/report/park2019.yaml`` is copied from ``shared/reference/park2019.yaml`` (beside
the repository, as CI clones it) so that the package carries it; a fix to one that does
not reach the other would set wrong numbers beside every sweep.
"""

from __future__ import annotations

import yaml

from profiler.report.study import REFERENCE
from tests.conftest import ROOT, need

SHARED = ROOT.parent / "shared" / "reference" / "park2019.yaml"


def test_the_reports_copy_holds_the_shared_references_data():
    need(f"the shared reference {SHARED} (CI clones shared/ beside the repository)",
         SHARED.is_file())
    # Parsed, so the copy's header comment (and any other comment or layout) may differ.
    copy, shared = yaml.safe_load(REFERENCE.read_text()), yaml.safe_load(SHARED.read_text())
    assert isinstance(shared, dict) and shared, SHARED
    assert copy == shared, sorted(k for k in shared.keys() | copy.keys()
                                  if copy.get(k) != shared.get(k))
