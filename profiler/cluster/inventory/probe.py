"""Asking inventory hosts whether they can run a sweep, before it starts.

Each host answers over SSH, in parallel: its edgeprof version, CPUs, memory, cgroup v2
(for ``--straggler``) and each engine's own check (``Engine.probe_host``, run there).
The controller's side imports no engine: which engines to ask for and how to judge
their answers come with the grid's ``GridNeeds`` (``profiler.sweep.needs``).
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from ... import __version__
from ...errors import ClusterError
from ..base import GridNeeds
from .hosts import Host, last_line, plain_env

CHECK_TIMEOUT_S = 60  # importing MXNet takes a few seconds on a Pi 3B


# What a host must answer before a sweep uses it: edgeprof's version, and each engine's
# own check (``Engine.probe_host``, run there: the engines the sweep needs are named in
# argv; none: every engine the host knows). A package that exists but does not import
# (MXNet beside NumPy 2, a Horovod built without MXNet or Gloo, a torch that dies with
# SIGILL) is an answer with its problem, not a crash of the check. Importing MXNet or
# torch takes seconds on a Pi; the hosts answer in parallel, so a sweep pays it once.
_PROBE = """\
import json, os, sys
import profiler
answer = {'version': profiler.__version__, 'cpus': os.cpu_count(),
          'memory_mb': os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**20}
try:  # a straggler (--straggler) needs cgroup v2's cpu controller
    with open('/sys/fs/cgroup/cgroup.controllers') as f:
        answer['cgroup_v2_cpu'] = 'cpu' in f.read().split()
except OSError:
    answer['cgroup_v2_cpu'] = False
try:
    from profiler.engines import ENGINES, host_check
    answer['engines'] = host_check(sys.argv[1:] or list(ENGINES))
except Exception as exc:  # another edgeprof version: the version check names it
    answer['engines_error'] = (type(exc).__name__ + ': ' + str(exc))[:200]
print(json.dumps(answer))
"""


def probe(host: Host, engines: Sequence[str] = ()) -> dict:
    """Ask ``host`` for its edgeprof version, CPUs, memory and each of ``engines``' own
    check (``answer['engines'][name]``; none named: every engine it has); raise one line
    when it cannot answer."""
    try:
        done = subprocess.run(host.ssh([host.python, "-c", _PROBE, *sorted(engines)]),
                              capture_output=True, text=True, timeout=CHECK_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env=plain_env())
    except subprocess.TimeoutExpired:
        raise ClusterError(f"host {host.name} ({host.address}) did not answer within "
                           f"{CHECK_TIMEOUT_S} s: check that it is up and reachable") from None
    if done.returncode == 255:
        raise ClusterError(f"host {host.name} ({host.address}) is unreachable over SSH "
                           f"({last_line(done.stderr)}): check ansible_host, ansible_user "
                           f"and your key with `ssh {host.address}`")
    if done.returncode != 0:
        reason = last_line(done.stderr)
        if done.returncode == 127 or "No such file" in reason:
            reason = f"{host.python} not found"
        raise ClusterError(f"host {host.name} has no usable edgeprof ({reason}): provision "
                           "it with `ansible-playbook -i INVENTORY ansible/site.yml`, or set "
                           "edgeprof_python to its venv's python")
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ClusterError(f"host {host.name} answered the edgeprof check with "
                           f"{done.stdout.strip()[:80]!r}: rerun ansible/site.yml") from None


def check_hosts(hosts: Sequence[Host], needs: GridNeeds = GridNeeds(),
                answers: dict[str, dict] | None = None) -> dict[str, dict]:
    """Probe every host in parallel (unless ``answers`` are given); raise one line naming
    the first host that cannot run the grid ``needs`` describes."""
    names = sorted(needs.engines)
    if answers is None:
        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
            futures = {host.name: pool.submit(probe, host, names) for host in hosts}
        answers = {host.name: futures[host.name].result() for host in hosts}
    for host in hosts:
        info = answers[host.name]
        if info.get("version") != __version__:
            raise ClusterError(f"host {host.name} runs edgeprof {info.get('version')}, this "
                               f"controller {__version__}: provision it again with "
                               "ansible/site.yml so that both run the same version")
        for name in names:
            answer = (info.get("engines") or {}).get(name) or {
                "ok": False, "problem": info.get("engines_error", "no answer")}
            problem = needs.engine_problem(name, answer)
            if problem:
                raise ClusterError(f"host {host.name} cannot run --engine {name} in "
                                   f"{host.python}: {problem} (provision it with "
                                   "ansible/site.yml)")
    # Any node a straggler cell uses may be its straggler: each must have cgroup v2.
    for host in hosts[:needs.slowed_nodes]:
        if not answers[host.name].get("cgroup_v2_cpu"):
            raise ClusterError(
                f"host {host.name} has no cgroup v2 with the cpu controller, which "
                "--straggler needs on a real node (cpu.max): boot it with cgroup v2 "
                "(Raspberry Pi OS 11 and later; else add systemd.unified_cgroup_hierarchy=1 "
                "to /boot/cmdline.txt), or drop --straggler")
    return answers
