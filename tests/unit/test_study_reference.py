"""The package's copy of the study's numbers is the project's shared reference.

``profiler/study/park2019.yaml`` is copied from ``shared/reference/park2019.yaml`` so
that the package carries it; a fix to one that does not reach the other would set wrong
numbers beside every sweep. The shared folder sits beside the repository on the
developers' machines but not on CI's, so the copy is checked against the shared file's
data when it is there, and always against the digest of that data taken when it was
copied (2026-11-23): a change to the copy must come with a new digest, i.e. deliberately.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import yaml

from profiler.study.park2019.reference import REFERENCE
from tests.conftest import ROOT

SHARED = ROOT.parent / "shared" / "reference" / "park2019.yaml"
# sha256 of the shared reference's data (parsed, as sorted JSON: comments and layout aside).
SHARED_DATA_SHA256 = "46287f657f088137c0c75afc4a3c03faf574bd311af09090d4ee35222ca4c2e5"


def _digest(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def test_the_packages_copy_holds_the_shared_references_data():
    copy = yaml.safe_load(REFERENCE.read_text())
    assert isinstance(copy, dict) and copy, REFERENCE
    assert _digest(copy) == SHARED_DATA_SHA256, (
        "profiler/study/park2019.yaml changed: copy it from shared/reference and update "
        "SHARED_DATA_SHA256")
    if SHARED.is_file():  # beside the repository on developers' machines
        shared = yaml.safe_load(SHARED.read_text())
        assert copy == shared, sorted(k for k in shared.keys() | copy.keys()
                                      if copy.get(k) != shared.get(k))
        assert _digest(shared) == SHARED_DATA_SHA256


def test_the_report_imports_nothing_of_the_study():
    """The study imports the report's generic pieces (its ratios, its section); the
    report must not import a study back: the study registry offers its sections to the
    report (``report.study_section.offer_studies``), and ``edgeprof report``
    (report/cli.py) takes the sweep's from them."""
    code = ("import sys, profiler.report.build, profiler.report.html, profiler.report.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith('profiler.study')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
