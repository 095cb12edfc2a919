"""Reading ``ansible-playbook``'s output in tests: the recap's counts per host, one task's
result lines, and the environment a test runs the playbook in."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def playbook_env(work: Path) -> dict[str, str]:
    """Colourless output, no retry files, Ansible's temporary files under ``work``, this
    venv's ansible first on PATH, and no PYTHONPATH (nothing of this checkout leaks into
    what the play builds)."""
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
           "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
           "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    return env


def play_recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP's counts: host -> {ok, changed, unreachable, failed, ...}."""
    hosts = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        hosts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return hosts


def task_output(output: str, name: str) -> str:
    """What ansible printed for the task called ``name`` (its result lines)."""
    match = re.search(rf"^TASK \[{re.escape(name)}\].*?$(.*?)"
                      r"(?=^TASK \[|^PLAY |^RUNNING HANDLER)", output, re.M | re.S)
    assert match, f"task {name!r} not in the output"
    return match.group(1)
