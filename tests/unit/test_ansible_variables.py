"""One owner per Ansible variable: each is defined once, in the defaults of the role that
owns it, and a role uses only its own variables and those of the roles it depends on
(meta/main.yml), so every role also runs alone. group_vars/all.yml holds site settings
only (none of the roles' variables). The inventory's own host variables, which
``--cluster inventory`` reads, belong to no role: a role may read them too."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import yaml

from tests.conftest import ROOT

ANSIBLE = ROOT / "ansible"
ROLES = ANSIBLE / "roles"
# Secrets: no default anywhere, by design (the monitor role asserts they are set).
VAULT_ONLY = {"edgeprof_grafana_admin_password", "edgeprof_influx_admin_password"}
# The inventory's, documented with --cluster inventory (docs/tiers.md): the swarm role's
# edgeprof_swarm_tier defaults to a host's edgeprof_tier, and its refusal names it.
INVENTORY_ONLY = {"edgeprof_tier"}
USED = re.compile(r"\bedgeprof_[a-z0-9_]+")


def _keys(path: Path) -> set[str]:
    return set(yaml.safe_load(path.read_text()) or {}) if path.is_file() else set()


def _defined() -> dict[str, list[str]]:
    where = defaultdict(list)
    for path in [ANSIBLE / "group_vars" / "all.yml", *ROLES.glob("*/defaults/main.yml"),
                 *ROLES.glob("*/vars/main.yml")]:
        for key in _keys(path):
            where[key].append(str(path.relative_to(ANSIBLE)))
    return where


def _dependencies(role: str) -> set[str]:
    meta = yaml.safe_load((ROLES / role / "meta" / "main.yml").read_text()) or {}
    direct = {d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []}
    return direct.union(*(_dependencies(d) for d in direct)) if direct else set()


def _used_by(role: str) -> set[str]:
    used = set()
    for path in (ROLES / role).rglob("*"):
        if path.is_file() and "defaults" not in path.parts:
            # Comments name other roles' settings; only code counts.
            code = "\n".join(line.split("#", 1)[0] if path.suffix == ".yml" else line
                             for line in path.read_text().splitlines())
            used |= set(USED.findall(code))
    if role == "monitor":  # its Grafana provisioning renders the dashboards' templates
        for path in (ROOT / "dashboards" / "provisioning").glob("*.j2"):
            used |= set(USED.findall(path.read_text()))
    return used


def test_every_variable_has_one_owner():
    twice = {key: paths for key, paths in _defined().items() if len(paths) > 1}
    assert not twice, twice


def test_group_vars_hold_no_role_variable():
    # Connection settings only (Ansible's own variables), no role's.
    assert all(key.startswith("ansible_") for key in _keys(ANSIBLE / "group_vars" / "all.yml"))


def test_each_role_uses_its_own_variables_or_its_dependencies():
    defined = _defined()
    for role in sorted(p.name for p in ROLES.iterdir()):
        owners = {role, *_dependencies(role)}
        for name in sorted(_used_by(role) - VAULT_ONLY - INVENTORY_ONLY):
            assert name in defined, f"{role} uses {name}, which no role defines"
            owner = defined[name][0].split("/")[1]
            assert owner in owners, (f"{role} uses {name} of the {owner} role: add "
                                     f"{owner} to roles/{role}/meta/main.yml's dependencies")
