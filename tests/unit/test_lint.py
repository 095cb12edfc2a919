"""The lints CI runs here: ruff on the Python (ruff.toml), yamllint and ansible-lint
(production profile) on the Ansible tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, need

BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    need(f"{tool} (scripts/setup.sh installs it into .venv)", (BIN / tool).exists())
    return subprocess.run([str(BIN / tool), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": "/root",
                                            "ANSIBLE_NOCOLOR": "1", "NO_COLOR": "1"})


def test_yamllint_passes():
    done = _run("yamllint", "-s", "ansible", ".yamllint", ".ansible-lint")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ansible_lint_production_profile_passes():
    done = _run("ansible-lint", "--profile", "production", "ansible/")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Profile 'production' was required, and it passed" in done.stdout + done.stderr


def test_ruff_passes():
    """Every Python file of the repository (profiler, workloads, tests, benchmarks,
    examples, dashboards, edgeprof_hooks.py): pyflakes, pycodestyle, blind excepts."""
    done = _run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout + done.stderr
    checked = _run("ruff", "check", "--no-cache", "--show-files", ".").stdout
    for folder in ("profiler/", "workloads/", "tests/", "benchmarks/", "examples/"):
        assert f"/{folder}" in checked, folder
