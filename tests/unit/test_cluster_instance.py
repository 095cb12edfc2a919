"""``EDGEPROF_CLUSTER_INSTANCE``: each emulated cluster on a host has names of its own, and
a value that names no instance is refused in one line before the host is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, assert_one_line

NAMES = ("from profiler.cluster import cgroups, emulated, instance, netns\n"
         "import json\n"
         "print(json.dumps({'bridge': netns.BRIDGE, 'netns': netns.netns_name('n0'),\n"
         "    'veth': netns.host_veth_name('n249'), 'n0': netns.node_address(0),\n"
         "    'host': netns.HOST_ADDRESS, 'cgroup': cgroups.BASE_NAME,\n"
         "    'state': str(emulated.STATE_FILE)}))")


def _env(value: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("EDGEPROF_CLUSTER_INSTANCE", "EDGEPROF_RUN_DIR")}
    if value is not None:
        env["EDGEPROF_CLUSTER_INSTANCE"] = value
    return env


def _names(value: str | None) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", NAMES], cwd=ROOT, env=_env(value),
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_instance_0_keeps_the_names_every_earlier_release_made():
    assert _names(None) == _names("0") == {
        "bridge": "edgeprof-br0", "netns": "edgeprof-n0", "veth": "edgeprof-n249h",
        "n0": "10.213.0.1", "host": "10.213.0.254", "cgroup": "edgeprof",
        "state": "/run/edgeprof/cluster.json"}


def test_another_instance_shares_no_name_and_fits_the_interface_limit():
    names = _names("9")
    assert names == {
        "bridge": "edgeprof9-br0", "netns": "edgeprof9-n0", "veth": "edgeprof9-n249h",
        "n0": "10.213.9.1", "host": "10.213.9.254", "cgroup": "edgeprof9",
        "state": "/run/edgeprof9/cluster.json"}
    # Linux refuses interface names past 15 bytes (IFNAMSIZ 16 with its NUL).
    assert max(len(names["bridge"]), len(names["veth"])) <= 15


@pytest.mark.parametrize("value", ["10", "x", "-1", "1.5", "²"])
def test_a_value_that_names_no_instance_is_refused_in_one_line(value):
    done = subprocess.run([sys.executable, "-m", "profiler.cli", "cluster", "down"],
                          cwd=ROOT, env=_env(value), capture_output=True, text=True)
    assert_one_line(done, "EDGEPROF_CLUSTER_INSTANCE", "0 to 9")


def test_status_names_the_instance_unless_it_is_0():
    from profiler.cluster.emulated import status_lines
    down = {"up": False, "reason": "no state file", "leftovers": []}
    assert status_lines({**down, "instance": 0}) == ["no cluster up (no state file)"]
    assert status_lines({**down, "instance": 3}) == [
        "no cluster up on instance 3 (no state file)"]
    up = {"up": True, "profile": "pi3b", "cgroup_version": 1, "host_address": "10.213.3.254",
          "cpu_scale": 1.0, "host_cores": 2.0, "nodes": []}
    assert status_lines({**up, "instance": 0})[0].startswith("emulated cluster: 0 x pi3b")
    assert status_lines({**up, "instance": 3})[0].startswith(
        "emulated cluster (instance 3): 0 x pi3b")
