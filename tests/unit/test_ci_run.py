""".ci/run passes its arguments to the README's pytest, each intact, or refuses them in
one line when the command does not end with pytest. Run on a copy with a stand-in
setup script and pytest (the real command installs everything)."""

from __future__ import annotations

import json
import shutil
import subprocess

from tests.conftest import ROOT


def _ci(tmp_path, readme_command: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "scripts").mkdir()
    for name, text in (("scripts/setup.sh", "#!/bin/sh\ntrue\n"),
                       ("pytest", "#!/usr/bin/env python3\nimport json, sys\n"
                                  "print(json.dumps(sys.argv[1:]))\n")):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    (tmp_path / "README.md").write_text(f"# x\n\n{readme_command}\n")
    return subprocess.run([str(tmp_path / ".ci" / "run"), *args], capture_output=True,
                          text=True, timeout=30)


def test_arguments_reach_pytest_intact(tmp_path):
    done = _ci(tmp_path, "./scripts/setup.sh && ./pytest -q", "-x", "two words", "$HOME")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["-q", "-x", "two words", "$HOME"]


def test_arguments_refused_when_pytest_does_not_end_the_command(tmp_path):
    done = _ci(tmp_path, "./scripts/setup.sh && ./pytest -q && echo done", "-x")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "cannot go to it" in done.stderr
