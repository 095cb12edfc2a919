"""``ansible-playbook ansible/site.yml`` for real, over SSH into emulated nodes.

Three emulated nodes (network namespaces on this host) run Debian's sshd
(``profiler.testing.sshd``): n0 is the master, n1 a worker, n2 the monitor. The playbook
runs twice; the second run must change nothing. Then a sweep runs over SSH on the
virtual environments the playbook built.

What this machine makes the test do differently from a box of Pis, and so cannot check:
- the nodes share this host's filesystem, hostname and packages: every path the play
  writes (venvs, spools, configuration, /etc/hosts, Grafana provisioning) points into
  the test's folder, the hostname task is off, and the package list is what
  scripts/setup.sh already installed (the apt task runs, with its lock timeout, and
  finds them present); chrony is not installed (it would change this machine);
- PID 1 is not systemd: the systemd tasks (agent service, InfluxDB and Grafana
  services, InfluxDB users) are skipped by their guards; the unit file is checked as a
  file only;
- the vendor repositories (InfluxData, Grafana) cannot be reached, so they and the
  Grafana install are switched off; Debian's influxdb (installed) is the fallback;
- the trainer's MXNet is PyPI's x86 wheel (pip's cache), not a Pi build.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, sshd_nodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
BIN = Path(sys.executable).parent
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
VAULT_PASSWORD = "test-vault-password"
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist
SECRETS = {"edgeprof_influx_admin_password": "admin-Secret-1",
           "edgeprof_grafana_admin_password": "grafana-Secret-2",
           "edgeprof_influx_credentials": "agent:agent-Secret-3"}


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory):
    work = tmp_path_factory.mktemp("ansible")
    # sshd outside the nodes' CPU quota: pip installs under 0.3 cores would take minutes.
    for sshd in sshd_nodes(work, 3, confine=False,
                           extra_binaries=("python3", str(BIN / "ansible-playbook"))):
        node_vars = {n: {"edgeprof_venv": str(work / n / "venv"),
                         "edgeprof_workdir": str(work / n / "runs"),
                         "edgeprof_data_dir": str(work / n / "data"),
                         "edgeprof_spool_dir": str(work / n / "spool"),
                         "edgeprof_config_dir": str(work / n / "etc"),
                         "edgeprof_systemd_dir": str(work / n / "systemd")}
                     for n in ("n0", "n1", "n2")}
        inventory = sshd.write_inventory(
            work / "inventory.ini", {"master": ["n0"], "workers": ["n1"], "monitor": ["n2"]},
            host_vars=node_vars)
        settings = work / "test-vars.json"
        settings.write_text(json.dumps({
            "edgeprof_user": "root", "edgeprof_packages": ["python3-venv", "ethtool", "tar"],
            "edgeprof_time_sync": False, "edgeprof_manage_hostname": False,
            "edgeprof_hosts_file": str(work / "hosts"),
            "edgeprof_wheel_dir": str(work / "wheels"), "edgeprof_offline": True,
            "edgeprof_monitor_vendor_repos": False, "edgeprof_monitor_grafana": False,
            "edgeprof_influxdb_conf": str(work / "influxdb.conf"),
            "edgeprof_grafana_user": "root",
            "edgeprof_grafana_provisioning_dir": str(work / "grafana" / "provisioning"),
            "edgeprof_grafana_dashboards_dir": str(work / "grafana" / "dashboards"),
            "edgeprof_grafana_secrets_dir": str(work / "grafana" / "secrets"),
            # Debian's Fashion-MNIST (30 MB) goes to each node's edgeprof_data_dir.
            "edgeprof_datasets": [str(FASHION_DIR)]}))
        secrets = work / "vault.yml"
        secrets.write_text("".join(f"{k}: {v}\n" for k, v in SECRETS.items()))
        password_file = work / "vault-password"
        password_file.write_text(VAULT_PASSWORD)
        password_file.chmod(0o600)
        subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file",
                        str(password_file), str(secrets)], check=True, capture_output=True)
        argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), "ansible/site.yml",
                "-e", f"@{settings}", "-e", f"@{secrets}",
                "--vault-password-file", str(password_file)]
        env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
               "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
               "PATH": f"{BIN}:{os.environ['PATH']}"}
        runs = []
        for _ in range(2):
            start = time.monotonic()
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env,
                                  timeout=600)
            runs.append((done, time.monotonic() - start))
        yield {"runs": runs, "work": work, "inventory": inventory, "sshd": sshd}


def _recap(output: str) -> dict[str, dict[str, int]]:
    hosts = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        hosts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return hosts


def test_playbook_provisions_every_node(provisioned):
    done, seconds = provisioned["runs"][0]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    recap = _recap(done.stdout)
    assert sorted(recap) == ["n0", "n1", "n2"]
    for host, counts in recap.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, (host, counts)
    print(f"first run: {seconds:.1f} s")


def test_second_run_changes_nothing(provisioned):
    done, seconds = provisioned["runs"][1]
    assert done.returncode == 0, done.stdout[-4000:]
    recap = _recap(done.stdout)
    assert sorted(recap) == ["n0", "n1", "n2"]
    assert all(counts["changed"] == 0 for counts in recap.values()), done.stdout[-4000:]
    print(f"second run: {seconds:.1f} s")


def test_nodes_are_ready_and_secrets_stay_in_0600_files(provisioned):
    work = provisioned["work"]
    hosts = (work / "hosts").read_text()
    assert "10.213.0.1 n0" in hosts and "10.213.0.2 n1" in hosts
    for node in ("n0", "n1"):
        token = work / node / "etc" / "influx-credentials"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert token.read_text().strip() == SECRETS["edgeprof_influx_credentials"]
        unit = (work / node / "systemd" / "edgeprof-agent.service").read_text()
        assert f"--influx-token-file {token}" in unit and "Restart=on-failure" in unit
        assert not any(secret in unit for secret in SECRETS.values())
    provisioning = work / "grafana" / "provisioning" / "datasources" / "edgeprof.yaml"
    text = provisioning.read_text()
    assert "$__file{" in text and not any(secret in text for secret in SECRETS.values())
    secret = work / "grafana" / "secrets" / "influx-password"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert "auth-enabled = true" in (work / "influxdb.conf").read_text()
    # The trainers answer the SSH cluster's host check with the provisioned venvs (the
    # inventory names only edgeprof_venv: the SSH cluster derives the python from it).
    inventory = provisioned["inventory"]
    done = subprocess.run([*EDGEPROF, "cluster", "status", "--inventory", str(inventory),
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    from profiler import __version__
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    for node in ("n0", "n1"):
        assert rows[node]["reachable"] and rows[node]["mxnet"], rows[node]
        assert rows[node]["edgeprof"] == __version__


def test_sweep_runs_on_the_provisioned_nodes(provisioned, tmp_path):
    out = tmp_path / "sweep"
    done = subprocess.run(
        [*EDGEPROF, "sweep", "--cluster", "inventory", "--inventory",
         str(provisioned["inventory"]), "--model", "lenet-mlp", "--dataset", "fashion-mnist",
         "--data-dir", str(FASHION_DIR.parent),
         "--devices", "2", "--placement", "colocated", "--batch", "32", "--max-samples",
         "256", "--val-samples", "64", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert record["status"] == "ok", record["reason"]
    assert record["metrics_nodes"] == 2
    # The playbook put the data on each node, where --data-dir points on that host.
    assert record["dataset"] == "fashion-mnist"
    for node in ("n0", "n1"):
        copied = provisioned["work"] / node / "data" / "fashion-mnist"
        assert sorted(p.name for p in copied.iterdir()) == sorted(
            p.name for p in FASHION_DIR.iterdir())
