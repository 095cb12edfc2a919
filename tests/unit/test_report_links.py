"""The report writes its figures in its own folder only, whatever links a sweep folder
from elsewhere holds: a ``report-figures`` link out of the folder is refused, a link
planted under a figure's name is replaced, not written through."""

from __future__ import annotations

import json

import pytest

from profiler.errors import ConfigError
from profiler.report.build import build_report
from tests.unit.test_report_breakdown import RECORDS  # cells that draw figures

@pytest.fixture
def sweep(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "results.jsonl").write_text(
        "".join(json.dumps({**r, "sweep_id": "s"}) + "\n" for r in RECORDS))
    (folder / "sweep.json").write_text(json.dumps({"sweep_id": "s"}))
    return folder


def test_a_figures_link_out_of_the_sweep_folder_is_refused(sweep, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (sweep / "report-figures").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="report-figures is a link to .*elsewhere"):
        build_report(sweep, workers=1)
    assert list(elsewhere.iterdir()) == [] and not (sweep / "report.html").exists()
    # A link that stays inside the folder is the user's own arrangement: kept.
    (sweep / "report-figures").unlink()
    (sweep / "figures-here").mkdir()
    (sweep / "report-figures").symlink_to("figures-here")
    build_report(sweep, workers=1)
    assert list((sweep / "figures-here").glob("*.png"))


def test_a_link_under_a_figures_name_is_replaced_not_written_through(sweep, tmp_path):
    build_report(sweep, workers=1)
    name = sorted((sweep / "report-figures").glob("*.png"))[0]
    victim = tmp_path / "victim.txt"
    victim.write_text("not a figure")
    name.unlink()
    name.symlink_to(victim)
    build_report(sweep, workers=1)
    assert victim.read_text() == "not a figure"
    assert not name.is_symlink() and name.read_bytes().startswith(b"\x89PNG")
