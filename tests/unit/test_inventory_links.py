"""An inventory's links between tiers (``edgeprof_links``): read from what Ansible gives
each host (a mapping, or text in JSON or YAML flow style), the same on every host,
between tiers its hosts are in; bad ones refused in one line naming the fix, and the
cluster's ``link_address`` going direct where no link applies (the relay itself is
tests/integration/test_inventory_tier_links.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from profiler.cluster.base import TierLink
from profiler.cluster.inventory.hosts import hosts_from_inventory
from profiler.errors import ConfigError
from tests.conftest import assert_one_line

LINKS = '{"end-cloud": {"delay_ms": 200, "mbit": 20}}'


def _inventory(all_vars: dict, tiers=("end", "cloud", "cloud"), **per_host) -> dict:
    names = ("m", "w1", "w2")
    return {"master": {"hosts": ["m"]}, "workers": {"hosts": ["w1", "w2"]},
            "_meta": {"hostvars": {name: {"ansible_host": f"10.0.0.{i}",
                                          "edgeprof_tier": tier, **all_vars,
                                          **per_host.get(name, {})}
                                   for i, (name, tier) in enumerate(zip(names, tiers), 1)}}}


@pytest.mark.parametrize("value", [
    LINKS,                                                    # INI [all:vars]: text
    "{cloud-end: {delay_ms: 200, mbit: 20}}",                 # YAML flow style, any order
    {"end-cloud": {"delay_ms": 200, "mbit": 20}},             # a YAML inventory: a mapping
])
def test_links_are_read_from_each_form_ansible_hands_over(value):
    from profiler.cluster.inventory.cluster import InventoryCluster

    hosts = hosts_from_inventory(_inventory({"edgeprof_links": value}), "inv.ini")
    assert hosts[0].links == (("end-cloud", TierLink(200.0, 20.0)),)
    cluster = InventoryCluster(hosts)
    try:
        assert cluster.tier_links() == {"end-cloud": TierLink(200.0, 20.0)}
        m, w1, w2 = cluster.nodes()
        # Within one tier, or without a link: the target itself (no relay started).
        assert cluster.link_address(w1, w2, 7000) == (w2.address, 7000)
    finally:
        cluster.close()


def test_without_links_every_node_is_reached_directly():
    from profiler.cluster.inventory.cluster import InventoryCluster

    cluster = InventoryCluster(hosts_from_inventory(_inventory({}), "inv.ini"))
    try:
        m, w1, _ = cluster.nodes()
        assert cluster.tier_links() == {}
        assert cluster.link_address(m, w1, 7000) == (w1.address, 7000)
    finally:
        cluster.close()


@pytest.mark.parametrize("inventory, message", [
    (_inventory({"edgeprof_links": "{end-cloud: [1"}),
     "host m: edgeprof_links cannot be read as a mapping: set it once for all hosts"),
    (_inventory({"edgeprof_links": "[1, 2]"}),
     "host m: edgeprof_links: links must be a mapping"),
    (_inventory({"edgeprof_links": '{"end-fog": {"delay_ms": 1}}'}),
     "link 'end-fog' is not two tiers of end, edge, cloud"),
    (_inventory({"edgeprof_links": '{"end-cloud": {"delay_ms": -1}}'}),
     "link end-cloud: need 0 <= delay_ms <= 60000 and mbit > 0"),
    (_inventory({"edgeprof_links": '{"end-cloud": {"mbit": 5}}'}),
     "link end-cloud needs delay_ms"),
    (_inventory({"edgeprof_links": LINKS}, w2={"edgeprof_links": '{}'}),
     "hosts m and w2 have different edgeprof_links: the links are the inventory's"),
    (_inventory({"edgeprof_links": '{"end-edge": {"delay_ms": 5}}'}),
     "edgeprof_links link end-edge joins tier edge, which no host is in: give a host "
     "edgeprof_tier=edge or drop the link"),
])
def test_bad_links_are_refused_in_one_line_naming_the_fix(inventory, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")
                       ) as raised:
        hosts_from_inventory(inventory, "inv.ini")
    assert str(raised.value).startswith("--inventory inv.ini: ")
    assert "\n" not in str(raised.value)


def test_a_bad_link_in_an_ini_inventory_is_exit_2_from_the_cli(tmp_path):
    """Through Ansible's own parser, as a sweep reads it: one line, exit 2."""
    path = tmp_path / "inventory.ini"
    path.write_text("[master]\nm ansible_host=10.0.0.1 edgeprof_tier=end\n"
                    "[workers]\nw ansible_host=10.0.0.2 edgeprof_tier=cloud\n"
                    "[all:vars]\nedgeprof_links='{\"end-cloud\": {\"delay_ms\": \"soon\"}}'\n")
    done = subprocess.run([sys.executable, "-m", "profiler.cli", "cluster", "status",
                           "--inventory", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert_one_line(done, str(path), "edgeprof_links: link end-cloud: delay_ms and mbit "
                                     "must be numbers")


def test_status_lines_show_the_tiers_and_the_links():
    from profiler.cluster.inventory.status import lines

    links = {"end-cloud": {"delay_ms": 200.0, "mbit": 20.0}, "end-edge": {"delay_ms": 5.0}}
    rows = [{"name": "m", "address": "10.0.0.1", "reachable": False, "problem": "down",
             "tier": "end", "links": links},
            {"name": "w1", "address": "10.0.0.2", "reachable": False, "problem": "down",
             "tier": "cloud", "links": links}]
    out = lines(rows)
    assert out[-3] == "tiers: m=end w1=cloud"
    assert out[-2] == ("link end-cloud: 200 ms one way, 20 Mbit (through a relay on the "
                       "target host, started by the sweep)")
    assert out[-1].startswith("link end-edge: 5 ms one way (")
    # Without tiers or links: no such lines.
    plain = [{**row, "tier": None, "links": {}} for row in rows]
    assert not [line for line in lines(plain) if line.startswith(("tiers:", "link "))]
