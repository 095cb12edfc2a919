"""The hosts of an Ansible inventory, as edgeprof reaches them over SSH.

Hosts are read with Ansible's own parser (``ansible-inventory --list``), so group_vars,
host_vars, ``ansible_host``, ``ansible_port``, ``ansible_user``,
``ansible_ssh_private_key_file`` and ``ansible_ssh_common_args``/``_extra_args`` mean what
they mean to the playbook that provisioned the hosts. Nodes are the ``master`` hosts, then
the ``workers`` (node 0 is the master: the engines put the scheduler and server there).
Commands are argument lists quoted for the remote shell with ``shlex.join``; host keys
are checked (BatchMode: never a prompt).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping, Sequence

from ...errors import ClusterError, ConfigError
from ..base import TIERS, Node, NodeScope, TierLink, child_env

DEFAULT_PYTHON = "/opt/edgeprof/venv/bin/python"
DEFAULT_WORKDIR = "/var/lib/edgeprof/runs"
DEFAULT_INTERFACE = "eth0"
GROUPS = ("master", "workers")
SSH_CONNECT_TIMEOUT_S = 10
INVENTORY_TIMEOUT_S = 60


@dataclass(frozen=True)
class Host:
    """One inventory host as edgeprof reaches it."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    key_file: str | None = None
    ssh_args: tuple[str, ...] = ()
    python: str = DEFAULT_PYTHON
    workdir: str = DEFAULT_WORKDIR
    data_dir: str | None = None
    interface: str = DEFAULT_INTERFACE
    profile: str = "host"
    # The node's tier in a hierarchy (``edgeprof_tier``; None: untiered).
    tier: str | None = None
    # The inventory's links between tiers (``edgeprof_links``, the same on every host:
    # an inventory-wide setting that Ansible hands each host), sorted by link_key.
    links: tuple[tuple[str, TierLink], ...] = ()

    def ssh(self, remote: Sequence[str], options: Sequence[str] = ()) -> list[str]:
        """The local ``ssh`` argv running ``remote`` (an argv) on this host.

        ``options`` (``-o`` pairs: the cluster's connection sharing) come after the
        inventory's own ``ansible_ssh_common_args``/``_extra_args``: ssh takes the first
        value it sees, so what the inventory sets wins.
        """
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=6"]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.user:
            argv += ["-l", self.user]
        if self.key_file:
            argv += ["-i", self.key_file]
        return [*argv, *self.ssh_args, *options, self.address, "--", shlex.join(remote)]

    def node(self) -> Node:
        return Node(name=self.name, address=self.address, profile=self.profile,
                    scope=NodeScope(interfaces=(self.interface,), ssh_host=self.name),
                    tier=self.tier)


def read_inventory(path: Path) -> list[Host]:
    """The ``master`` then ``workers`` hosts of an Ansible inventory; one line on any problem."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"--inventory {path} does not exist: copy "
                          "ansible/inventory.example.ini and list your nodes")
    binary = shutil.which("ansible-inventory") or str(Path(sys.executable).parent /
                                                      "ansible-inventory")
    if not Path(binary).exists():
        raise ClusterError("ansible-inventory not found: install ansible-core "
                           "(scripts/setup.sh does)")
    try:
        done = subprocess.run([binary, "-i", str(path), "--list"], capture_output=True,
                              text=True, timeout=INVENTORY_TIMEOUT_S,
                              env={**plain_env(),
                                   # A file no plugin can parse is an error, not an
                                   # empty inventory with a warning.
                                   "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
                                   "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
                                   "ANSIBLE_LOCALHOST_WARNING": "False"})
    except subprocess.TimeoutExpired:
        raise ConfigError(f"--inventory {path}: ansible-inventory took over "
                          f"{INVENTORY_TIMEOUT_S} s: check the file") from None
    if done.returncode != 0:
        raise ConfigError(f"--inventory {path} cannot be parsed "
                          f"({last_line(done.stderr).removeprefix('[ERROR]: ')}): fix it; "
                          f"`ansible-inventory -i {path} --list` shows the details")
    try:
        data = json.loads(done.stdout)
    except ValueError:
        raise ConfigError(f"--inventory {path} cannot be parsed: fix its syntax") from None
    return hosts_from_inventory(data, str(path))


def hosts_from_inventory(data: Mapping, label: str) -> list[Host]:
    """Hosts from ``ansible-inventory --list`` output (a pure function, tested alone)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"--inventory {label}: ansible-inventory printed no mapping of "
                          "groups: check the file with `ansible-inventory --list`")
    meta = data.get("_meta")
    hostvars = meta.get("hostvars") if isinstance(meta, Mapping) else None
    hostvars = hostvars if isinstance(hostvars, Mapping) else {}
    names: list[str] = []
    for group in GROUPS:
        for name in _group_hosts(data, group):
            if name in names:
                raise ConfigError(f"--inventory {label}: host {name} is listed as master and "
                                  "worker: a node has one role, list it once")
            names.append(name)
    if not names:
        raise ConfigError(f"--inventory {label} has no hosts in the groups master and "
                          "workers: list your nodes under [master] and [workers] (see "
                          "ansible/inventory.example.ini)")
    if not _group_hosts(data, "workers"):
        raise ConfigError(f"--inventory {label} has no [workers] hosts: list the nodes "
                          "that train under [workers]")
    hosts = [_host(name, hostvars.get(name) if isinstance(hostvars.get(name), Mapping)
                   else {}, label) for name in names]
    seen: dict[tuple[str, int | None], str] = {}
    for host in hosts:
        key = (host.address, host.port)
        if key in seen:
            raise ConfigError(f"--inventory {label}: hosts {seen[key]} and {host.name} are "
                              f"the same machine ({host.address}): list each node once")
        seen[key] = host.name
    _check_links(hosts, label)
    return hosts


LINKS_VAR = "edgeprof_links"
_LINKS_FIX = (f"set it once for all hosts, e.g. in [all:vars]: {LINKS_VAR}='{{\"end-cloud\": "
              '{"delay_ms": 200, "mbit": 20}}\' (mbit optional)')


def _links(name: str, hv: Mapping, label: str) -> tuple[tuple[str, TierLink], ...]:
    """``edgeprof_links`` of one host: a mapping (a YAML inventory, or an INI value
    Ansible read as a literal) or its text (JSON or YAML flow style), checked."""
    from ..link_spec import parse_links

    value = hv.get(LINKS_VAR)
    if isinstance(value, str):
        import yaml

        try:
            value = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            raise ConfigError(f"--inventory {label}: host {name}: {LINKS_VAR} cannot be "
                              f"read as a mapping: {_LINKS_FIX}") from None
    links = parse_links(value, f"--inventory {label}: host {name}: {LINKS_VAR}", _LINKS_FIX)
    return tuple(sorted(links.items()))


def _check_links(hosts: list[Host], label: str) -> None:
    """One set of links for the inventory, between tiers its hosts are in."""
    from ..link_spec import missing_tier

    first = hosts[0]
    for host in hosts[1:]:
        if host.links != first.links:
            raise ConfigError(f"--inventory {label}: hosts {first.name} and {host.name} have "
                              f"different {LINKS_VAR}: the links are the inventory's, "
                              f"{_LINKS_FIX}")
    missing = missing_tier(dict(first.links), {host.tier for host in hosts})
    if missing:
        key, tier = missing
        raise ConfigError(f"--inventory {label}: {LINKS_VAR} link {key} joins tier {tier}, "
                          f"which no host is in: give a host edgeprof_tier={tier} or drop "
                          "the link")


def _group_hosts(data: Mapping, group: str) -> list[str]:
    """Hosts of ``group`` and of its child groups, in inventory order."""
    out: list[str] = []
    stack = [group]
    visited: set[str] = set()
    while stack:
        name = stack.pop(0)
        if name in visited:
            continue
        visited.add(name)
        entry = data.get(name)
        if not isinstance(entry, Mapping):
            continue
        # Names are text in what ansible-inventory prints; anything else is not a host.
        out += [h for h in _names(entry.get("hosts")) if h not in out]
        stack += _names(entry.get("children"))
    return out


def _names(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _host(name: str, hv: Mapping, label: str) -> Host:
    # The name names the node's folders (its spool, its files fetched home): not a path.
    if name in ("", ".", "..") or any(c in name for c in "/\\\0"):
        raise ConfigError(f"--inventory {label}: host name {name!r} cannot name a node's "
                          "folder: rename the host (letters, digits, '.', '-', '_')")
    address = str(hv.get("ansible_host") or "").strip()
    if not address:
        raise ConfigError(f"--inventory {label}: host {name} has no ansible_host: give its "
                          f"address, e.g. `{name} ansible_host=192.168.1.21`")
    ssh_args: list[str] = []
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if hv.get(key):
            try:
                ssh_args += shlex.split(str(hv[key]))
            except ValueError as exc:  # an unbalanced quote
                raise ConfigError(f"--inventory {label}: host {name}: {key} cannot be "
                                  f"split ({exc}): fix its quoting") from None
    port = hv.get("ansible_port") or hv.get("ansible_ssh_port")
    try:
        port = int(port) if port else None
    except (TypeError, ValueError):
        port = 0
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"--inventory {label}: host {name}: ansible_port "
                          f"{hv.get('ansible_port') or hv.get('ansible_ssh_port')!r} is not "
                          "a port: give a number from 1 to 65535")
    tier = hv.get("edgeprof_tier") or None
    if tier is not None and tier not in TIERS:
        raise ConfigError(f"--inventory {label}: host {name}: edgeprof_tier {tier!r} is not "
                          f"a tier: give one of {', '.join(TIERS)} (or leave it out)")
    user = hv.get("ansible_user") or hv.get("ansible_ssh_user")
    key_file = hv.get("ansible_ssh_private_key_file")
    return Host(
        name=name, address=address, port=port, user=str(user) if user else None,
        key_file=str(key_file) if key_file else None, ssh_args=tuple(ssh_args),
        python=_python(hv),
        workdir=str(hv.get("edgeprof_workdir") or DEFAULT_WORKDIR),
        data_dir=str(hv["edgeprof_data_dir"]) if hv.get("edgeprof_data_dir") else None,
        interface=str(hv.get("edgeprof_interface") or DEFAULT_INTERFACE),
        profile=str(hv.get("edgeprof_profile") or "host"), tier=tier,
        links=_links(name, hv, label))


def _python(hv: Mapping) -> str:
    """``edgeprof_python``, else ``edgeprof_venv``'s python (``bin/python`` in the venv).

    ``ansible-inventory`` does not render Jinja, so a templated value is derived here.
    """
    python = str(hv.get("edgeprof_python") or "")
    if python and "{{" not in python:
        return python
    venv = str(hv.get("edgeprof_venv") or "")
    if venv and "{{" not in venv:
        return str(PurePosixPath(venv) / "bin" / "python")
    return DEFAULT_PYTHON


def plain_env() -> dict[str, str]:
    """The environment of the local ``ssh`` and ``ansible-inventory``: ours, less secrets."""
    return child_env({})


def last_line(text: str) -> str:
    """The last non-empty line of a tool's output (its error), shortened."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no message"
