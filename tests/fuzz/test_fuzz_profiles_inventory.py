"""Fuzz: the profiles file (``~/.config/edgeprof/profiles.yaml`` or ``$EDGEPROF_PROFILES``,
read by ``cluster.profiles.load_catalog`` and by calibration's ``read_profiles_file``)
and an inventory as ``ansible-inventory --list`` prints it (``hosts_from_inventory``:
the hosts, their addresses, ports, users and node names).

Property: the file is read or refused with one ``EdgeprofError`` line; no other
exception; a node name is a name, never a path (it names folders on the controller and
on the node). ~4 s.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import example, given, settings, strategies as st

from profiler.calibrate.profiles_file import read_profiles_file
from profiler.cluster.inventory.hosts import hosts_from_inventory
from profiler.cluster.profiles import load_catalog
from profiler.errors import EdgeprofError
from tests.fuzz.hostile import FUZZ, TRAVERSALS, corrupted_text, json_values, mutated

PROFILE = {"description": "a board", "link_mbit": 100, "memory_mb": 1024, "cpu_cores": 0.3,
           "board_cores": 4, "cpu_cores_by_model": {"lenet-mlp": 0.05},
           "cpu_cores_dilated": {"lenet-mlp": {10: 0.5}},
           "board_rates": {"lenet-mlp": {"batch": 32, "samples_per_s": 500.0}},
           "power": {"idle_w": 2.0, "full_w": 5.0, "source": "a meter"}, "tier": "end"}
# Its link names a tier no node is in (refused after it is read): the links are fuzzed.
MIX = {"nodes": [{"profile": "board", "count": 2}],
       "links": {"end-edge": {"delay_ms": 250, "mbit": 20}}}
YAML_HOSTILE = [".inf", ".nan", "-.inf", "1e999", "9" * 400, "[" * 600 + "]" * 600,
                "&a [*a]", "!!python/object:os.system ls", "{? [1, 2] : 3}", "~", "'x'",
                "*undefined", "\t"]
INVENTORY = {"_meta": {"hostvars": {
    "m1": {"ansible_host": "10.0.0.1", "ansible_port": 22, "ansible_user": "pi"},
    "w1": {"ansible_host": "10.0.0.2", "ansible_ssh_common_args": "-o Foo=bar",
           "edgeprof_profile": "pi3b", "edgeprof_tier": "edge"}}},
    "all": {"children": ["master", "workers"]},
    "master": {"hosts": ["m1"]}, "workers": {"hosts": ["w1"]}}
CASES = {"profiles": 0, "inventory": 0}


@st.composite
def profiles_text(draw) -> bytes:
    profile = mutated(PROFILE, draw) if draw(st.booleans()) else PROFILE
    doc = {"profiles": {"board": profile}, "mixes": {"mix": mutated(MIX, draw)}}
    text = yaml.safe_dump(doc, sort_keys=False)
    if draw(st.booleans()):  # a hostile YAML scalar where a value was
        lines = text.splitlines()
        at = draw(st.integers(0, len(lines) - 1))
        key = lines[at].split(":", 1)[0]
        lines[at] = f"{key}: {draw(st.sampled_from(YAML_HOSTILE))}"
        text = "\n".join(lines)
    return draw(corrupted_text([text]))


@settings(FUZZ, max_examples=100)
@given(profiles_text())
@example(b"profiles:\n  board:\n    link_mbit: 100\n    memory_mb: .inf\n    cpu_cores: 0.3\n"
         ).via("memory_mb infinite (int() of it overflows)")
@example(b"profiles:\n  board:\n    link_mbit: 100\n    memory_mb: 1024\n    cpu_cores: 0.3\n"
         b"    board_cores: .inf\n").via("board_cores infinite")
@example(("profiles: " + "[" * 600 + "]" * 600 + "\n").encode()).via("YAML nested too deep")
@example(b"profiles: !!python/object:os.system ls\n").via("a Python tag")
@example(b"\xff\xfeprofiles:\n").via("not UTF-8")
@example(b"profiles:\n  board:\n    link_mbit: 100\n    memory_mb: 1024\n    cpu_cores: 0.3\n"
         b"    cpu_cores_dilated: {lenet-mlp: {[1]: 2}}\n").via("a list as a mapping key")
def test_profiles_file_is_read_or_refused_in_one_line(text):
    CASES["profiles"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profiles.yaml"
        path.write_bytes(text)
        for read in (lambda: load_catalog([path]),
                     lambda: read_profiles_file(path, "move it away or fix it")):
            try:
                read()
            except EdgeprofError as exc:
                assert "\n" not in str(exc), str(exc)


@st.composite
def inventory(draw) -> object:
    doc = json.loads(json.dumps(INVENTORY))
    hostvars = doc["_meta"]["hostvars"]
    choice = draw(st.integers(0, 4))
    if choice == 0:
        hostvars["w1"] = mutated(hostvars["w1"], draw)
    elif choice == 1:
        name = draw(st.one_of(st.sampled_from(TRAVERSALS), st.text(max_size=8)))
        doc["workers"]["hosts"].append(name)
        hostvars[name] = {"ansible_host": "10.0.0.9"}
    elif choice == 2:
        doc[draw(st.sampled_from(["master", "workers", "all", "_meta"]))] = draw(json_values)
    elif choice == 3:
        hostvars["m1"][draw(st.sampled_from(["ansible_port", "ansible_host", "ansible_user",
                                             "ansible_ssh_common_args", "edgeprof_workdir"]))
                       ] = draw(json_values)
    else:
        return draw(json_values)
    return doc


@settings(FUZZ, max_examples=150)
@given(inventory())
@example({**INVENTORY, "workers": {"hosts": ["w1", "../../outside"]},
          "_meta": {"hostvars": {**INVENTORY["_meta"]["hostvars"],
                                 "../../outside": {"ansible_host": "10.0.0.9"}}}}
         ).via("a host name with path traversal")
@example({**INVENTORY, "_meta": {"hostvars": {**INVENTORY["_meta"]["hostvars"],
                                              "m1": {"ansible_host": "h", "ansible_port": "ssh"}}}}
         ).via("a port that is not a number")
@example({**INVENTORY, "_meta": {"hostvars": {**INVENTORY["_meta"]["hostvars"],
                                              "m1": {"ansible_host": "h",
                                                     "ansible_ssh_common_args": "-o 'x"}}}}
         ).via("ssh args with an unbalanced quote")
@example({**INVENTORY, "_meta": []}).via("hostvars that are not a mapping")
@example({**INVENTORY, "workers": {"hosts": [["w1"]]}}).via("a host that is a list")
@example([1, 2]).via("not a mapping at all")
def test_inventory_is_read_or_refused_in_one_line(doc):
    CASES["inventory"] += 1
    try:
        hosts = hosts_from_inventory(doc, "inventory.ini")
    except EdgeprofError as exc:
        assert "\n" not in str(exc), str(exc)
        return
    for host in hosts:
        assert isinstance(host.name, str) and "/" not in host.name, host.name
        assert host.name not in ("", ".", ".."), host.name
        assert host.port is None or 0 < host.port < 65536, host.port
        host.ssh(["true"])


def teardown_module() -> None:
    print(f"\nfuzz cases: {json.dumps(CASES)}")
