"""``ansible-playbook ansible/site.yml`` for real, over SSH into emulated nodes.

Three emulated nodes (network namespaces on this host) run Debian's sshd
(``tests.support.sshd``): n0 is the master, n1 a worker, n2 the monitor. The playbook
runs twice (each run its two plays at once, an ansible-playbook limited to each play's
hosts); the second run must change nothing. Then a sweep runs over SSH on the
virtual environments the playbook built, and a change to the controller's code (no
version bump) is deployed by a third run of the trainer role.

- The firewall is on, for a subnet (10.213.k.0/29, k the worker's cluster instance) that
  holds the nodes but not this host's end of the bridge (10.213.k.254, the controller):
  every node, monitor included, must then refuse the controller on a high port and
  still accept another node, and still accept SSH.
- InfluxDB (Debian's influxdb, authentication and HTTPS on) runs inside the monitor's
  namespace, started by the test on that node's port 8086 with the certificate the test
  gives the playbook (edgeprof_influx_tls_*_src: a CA made by the test, as a lab with
  its own CA would), where the monitor role's user tasks reach it over SSH: admin
  (password made on the monitor), database, the agents' write-only user (a password
  with a quote and a backslash, from the Vault) and Grafana's read-only user are made
  by the first run (reported as changes) and found by the second (none). A sweep's
  spool is then shipped from a worker's namespace through TLS, the password and the
  firewall (which drops this host on the same port), and read back as Grafana's user.
  The CA and certificate the monitor role makes itself (openssl on the host) are made
  and checked by the localhost run beside Grafana's provisioning files.

What this machine makes the test do differently from a box of Pis, and so cannot check:
- the nodes share this host's filesystem, hostname and packages: every path the play
  writes (venvs, spools, configuration, /etc/hosts, the saved firewall rules, Grafana
  provisioning) points into the test's folder, the hostname task is off, and the
  package list is what scripts/setup.sh already installed plus iptables (the apt task
  runs, with its lock timeout, but never refreshes the lists: the nodes would refresh
  one lists folder three times over, from namespaces that reach no mirror, which failed
  CI twice when the host's lists were a day old); chrony is not installed (it would
  change this machine);
- the firewall's rules are checked live in each node's namespace and in the file saved
  for netfilter-persistent, but not their reload at boot: no reboot, no systemd, and
  iptables-persistent is left out here (its install would save this machine's own rules
  into /etc/iptables). IPv6 is off on the emulated links: the IPv6 rules are checked as
  rules only;
- PID 1 is not systemd: the systemd tasks (agent service, InfluxDB and Grafana
  services, netfilter-persistent) are skipped by their guards; the unit file is checked
  as a file only, and InfluxDB is started by the test instead of its service;
- the vendor repositories (InfluxData, Grafana) cannot be reached, so they are switched
  off, and so is Grafana (``edgeprof_monitor_grafana: false``): the test checks that
  nothing of Grafana is then written. Grafana's provisioning files are rendered by a
  separate run of those tasks on this host, with root standing in for the ``grafana``
  user that only Grafana's package creates;
- the trainer's MXNet is PyPI's x86 wheel (pip's cache), not a Pi build, and Horovod's
  build (``edgeprof_horovod``, minutes per node) is not run.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from profiler.cluster import netns
from profiler.cluster.base import kill_group, popen_in_group
from tests.support.playbook import play_recap, playbook_env, task_output
from tests.support.servers import influxd_config
from tests.conftest import ROOT, need, need_binary, sshd_nodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
BIN = Path(sys.executable).parent
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
VAULT_PASSWORD = "test-vault-password"
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist
# A quote and a backslash in the agents' password: InfluxQL string literals must escape
# them. InfluxDB's admin password is not given: the monitor role makes it on the host.
SECRETS = {"edgeprof_grafana_admin_password": "grafana-Secret-2",
           "edgeprof_influx_credentials": "agent:agent-Se'c\\ret-3"}
# This worker's emulated cluster (tests/conftest.py): 10.213.<k>.0/24.
NET = netns.SUBNET_PREFIX
SUBNET = f"{NET}.0/29"            # n0-n2 (.1-.3), not the bridge's host end (.254)
SUBNET6 = "fd00:213::/64"
HIGH_PORT = 29876
MONITOR_ADDRESS = f"{NET}.3"      # n2


def _pki(folder: Path) -> dict[str, Path]:
    """A lab's own CA and the monitor's certificate (its address, name and loopback)."""
    # The test extras install it: under CI=true its absence fails the test (need).
    need("trustme (pip install -e .[test])", importlib.util.find_spec("trustme") is not None)
    import trustme
    folder.mkdir()
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", MONITOR_ADDRESS, "n2", "localhost")
    paths = {name: folder / f"{name}.pem" for name in ("ca", "cert", "key", "both")}
    ca.cert_pem.write_to_path(paths["ca"])
    cert.cert_chain_pems[0].write_to_path(paths["cert"])
    cert.private_key_pem.write_to_path(paths["key"])
    cert.private_key_and_cert_chain_pem.write_to_path(paths["both"])
    return paths


def _monitor_secret(work: Path, name: str) -> str:
    """A password the monitor role made on the monitor host (0600, root's)."""
    path = work / "n2" / "monitor-secrets" / name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return path.read_text().strip()


def _in_netns(node, argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["nsenter", f"--net=/run/netns/{node.scope.netns}", "--",
                           *argv], capture_output=True, text=True, timeout=60, **kw)


def _influx(node, query: str, user: str, password: str, ca: Path,
            host: str = "127.0.0.1") -> tuple[int, dict]:
    """An InfluxQL query over HTTPS from inside ``node``'s namespace: (status, answer)."""
    code = ("import json, sys, requests\n"
            "r = requests.post(f'https://{sys.argv[5]}:8086/query', data={'q': sys.argv[1],"
            " 'db': 'edgeprof'}, auth=(sys.argv[2], sys.argv[3]), verify=sys.argv[4],"
            " timeout=10)\n"
            "print(json.dumps([r.status_code, r.json()]))\n")
    done = _in_netns(node, [sys.executable, "-c", code, query, user, password, str(ca), host])
    assert done.returncode == 0, done.stderr
    status, answer = json.loads(done.stdout)
    return status, answer


def _start_influxd(node, folder: Path, pki: dict[str, Path]) -> subprocess.Popen:
    folder.mkdir(parents=True)
    config = folder / "influxdb.conf"
    # In the monitor node's own namespace: its ports are its own. On every address, as
    # the role's configuration has it: the firewall decides who reaches it.
    config.write_text(influxd_config(folder, http_port=8086, rpc_port=8088, auth=True,
                                     tls_pem=pki["both"]).replace('"127.0.0.1:8086"',
                                                                  '":8086"'))
    proc = popen_in_group(["nsenter", f"--net=/run/netns/{node.scope.netns}", "--",
                           need_binary("influxd"), "-config", str(config)], {},
                          folder / "influxd.log")
    ping = ("import requests\n"
            f"requests.get('https://127.0.0.1:8086/ping', verify='{pki['ca']}',"
            " timeout=1).raise_for_status()")
    deadline = time.monotonic() + 30
    while _in_netns(node, [sys.executable, "-c", ping]).returncode != 0:
        log = (folder / "influxd.log").read_text()[-2000:]
        assert proc.poll() is None and time.monotonic() < deadline, log
        time.sleep(0.2)
    return proc


def _remove_firewall(nodes) -> None:
    """Take the playbook's chain out of the nodes' namespaces (the emulated cluster may
    outlive this test, and other tests reach the nodes from this host)."""
    for node in nodes:
        for tool in ("iptables", "ip6tables"):
            if shutil.which(tool):
                for args in (["-D", "INPUT", "-j", "EDGEPROF"], ["-F", "EDGEPROF"],
                             ["-X", "EDGEPROF"]):
                    _in_netns(node, [tool, *args])


def _source_copy(dest: Path) -> Path:
    """The controller's checkout as the playbook sees it (edgeprof_source), copied so that
    a test can change its code without touching this repository."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("profiler", "workloads"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=ignore)
    for name in ("setup.cfg", "pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory):
    work = tmp_path_factory.mktemp("ansible")
    # sshd outside the nodes' CPU quota: pip installs under 0.3 cores would take minutes.
    # Pi 4 nodes: their Gigabit links carry the 300 MB wheelhouse in ~5 s a node, where a
    # Pi 3B's 100 Mbit would hold it to 12 MB/s (25 s).
    for sshd in sshd_nodes(work, 3, confine=False, profile="pi4",
                           extra_binaries=("python3", str(BIN / "ansible-playbook"))):
        source = _source_copy(work / "source")
        pki = _pki(work / "pki")
        node_vars = {n: {"edgeprof_venv": str(work / n / "venv"),
                         "edgeprof_workdir": str(work / n / "runs"),
                         "edgeprof_data_dir": str(work / n / "data"),
                         "edgeprof_spool_dir": str(work / n / "spool"),
                         "edgeprof_config_dir": str(work / n / "etc"),
                         "edgeprof_systemd_dir": str(work / n / "systemd"),
                         "edgeprof_firewall_rules_dir": str(work / n / "iptables")}
                     for n in ("n0", "n1", "n2")}
        inventory = sshd.write_inventory(
            work / "inventory.ini", {"master": ["n0"], "workers": ["n1"], "monitor": ["n2"]},
            host_vars=node_vars)
        settings = work / "test-vars.json"
        settings.write_text(json.dumps({
            "edgeprof_user": "root", "edgeprof_packages": ["python3-venv", "ethtool", "tar"],
            "edgeprof_apt_cache_valid_s": 10 * 365 * 86400,  # the module doc: never apt update
            "edgeprof_time_sync": False, "edgeprof_manage_hostname": False,
            "edgeprof_hosts_file": str(work / "hosts"),
            "edgeprof_source": str(source),
            "edgeprof_wheel_dir": str(work / "wheels"), "edgeprof_offline": True,
            "edgeprof_firewall": True, "edgeprof_cluster_subnet": SUBNET,
            "edgeprof_cluster_subnet6": SUBNET6, "edgeprof_firewall_packages": ["iptables"],
            "edgeprof_monitor_vendor_repos": False, "edgeprof_monitor_grafana": False,
            "edgeprof_influxdb_conf": str(work / "influxdb.conf"),
            "edgeprof_monitor_secrets_dir": str(work / "n2" / "monitor-secrets"),
            "edgeprof_influx_tls_dir": str(work / "n2" / "influx-tls"),
            "edgeprof_influx_tls_ca_src": str(pki["ca"]),
            "edgeprof_influx_tls_cert_src": str(pki["cert"]),
            "edgeprof_influx_tls_key_src": str(pki["key"]),
            # Where Grafana's files would go if its guard failed: not this host's /etc.
            "edgeprof_grafana_provisioning_dir": str(work / "grafana" / "provisioning"),
            "edgeprof_grafana_dashboards_dir": str(work / "grafana" / "dashboards"),
            "edgeprof_grafana_secrets_dir": str(work / "grafana" / "secrets"),
            # Debian's Fashion-MNIST (30 MB) goes to each node's edgeprof_data_dir.
            "edgeprof_datasets": [str(FASHION_DIR)]}))
        secrets = work / "vault.yml"
        secrets.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in SECRETS.items()))
        password_file = work / "vault-password"
        password_file.write_text(VAULT_PASSWORD)
        password_file.chmod(0o600)
        subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file",
                        str(password_file), str(secrets)], check=True, capture_output=True)
        argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), "ansible/site.yml",
                "-e", f"@{settings}", "-e", f"@{secrets}",
                "--vault-password-file", str(password_file)]
        influxd = _start_influxd(sshd.nodes[2], work / "influxdb-n2", pki)
        try:
            runs = []
            for _ in range(2):
                start = time.monotonic()
                done = _both_plays(argv, work)
                runs.append((done, time.monotonic() - start))
            yield {"runs": runs, "work": work, "inventory": inventory, "sshd": sshd,
                   "argv": argv, "source": source, "pki": pki}
        finally:
            kill_group(influxd)
            _remove_firewall(sshd.nodes)


def _both_plays(argv: list[str], work: Path) -> subprocess.CompletedProcess:
    """One run of site.yml, its two plays at once: one ansible-playbook limited to the
    trainers, one to the monitor, their outputs joined. Run as one command, the plays take
    turns (they share no host), and the monitor's waited 22 s of a 115 s first run and
    21 s of a 75 s second; a test suite that must stay under 20 minutes cannot spare it."""
    procs = [subprocess.Popen([*argv, "--limit", hosts], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=playbook_env(work))
             for hosts in ("master:workers", "monitor")]
    try:
        outputs = [proc.communicate(timeout=600) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return subprocess.CompletedProcess(argv, max(proc.returncode for proc in procs),
                                       "".join(out for out, _ in outputs),
                                       "".join(err for _, err in outputs))


def test_playbook_provisions_every_node(provisioned):
    done, seconds = provisioned["runs"][0]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    recap = play_recap(done.stdout)
    assert sorted(recap) == ["n0", "n1", "n2"]
    for host, counts in recap.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, (host, counts)
    print(f"first run: {seconds:.1f} s")


def test_second_run_changes_nothing(provisioned):
    done, seconds = provisioned["runs"][1]
    assert done.returncode == 0, done.stdout[-4000:]
    recap = play_recap(done.stdout)
    assert sorted(recap) == ["n0", "n1", "n2"]
    assert all(counts["changed"] == 0 for counts in recap.values()), done.stdout[-4000:]
    print(f"second run: {seconds:.1f} s")


def test_nodes_are_ready_and_secrets_stay_in_0600_files(provisioned):
    work = provisioned["work"]
    hosts = (work / "hosts").read_text()
    assert f"{NET}.1 n0" in hosts and f"{NET}.2 n1" in hosts
    for node in ("n0", "n1"):
        token = work / node / "etc" / "influx-credentials"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert token.read_text().strip() == SECRETS["edgeprof_influx_credentials"]
        unit = (work / node / "systemd" / "edgeprof-agent.service").read_text()
        assert f"--influx-token-file {token}" in unit and "Restart=on-failure" in unit
        assert not any(secret in unit for secret in SECRETS.values())
        # The agents verify InfluxDB's certificate against the lab's CA, over https.
        ca = work / node / "etc" / "influx-ca.pem"
        assert f"--influx-ca {ca}" in unit and "--influx-url https://n2:8086" in unit, unit
        assert ca.read_text().strip() == provisioned["pki"]["ca"].read_text().strip()
    config = (work / "influxdb.conf").read_text()
    assert "auth-enabled = true" in config and "https-enabled = true" in config
    key = work / "n2" / "influx-tls" / "server-key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    # The passwords made on the monitor never reach the controller's output.
    made = [_monitor_secret(work, name)
            for name in ("influx-admin-password", "influx-reader-password")]
    for done, _ in provisioned["runs"]:
        assert not any(secret in done.stdout + done.stderr
                       for secret in made + list(SECRETS.values()))
    # edgeprof_monitor_grafana is false: no Grafana folder, secret or provisioning file.
    assert not (work / "grafana").exists(), sorted(map(str, (work / "grafana").rglob("*")))
    # The trainers answer the SSH cluster's host check with the provisioned venvs (the
    # inventory names only edgeprof_venv: the SSH cluster derives the python from it).
    inventory = provisioned["inventory"]
    done = subprocess.run([*EDGEPROF, "cluster", "status", "--inventory", str(inventory),
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    from profiler import __version__
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    for node in ("n0", "n1"):
        engines = rows[node]["engines"]
        assert rows[node]["reachable"] and engines["mxnet"]["ok"], rows[node]
        assert engines["torch"] == {"ok": True, "torch": "2.13.0+cpu"}, rows[node]
        assert rows[node]["edgeprof"] == __version__


def test_influxdb_users_are_made_once_with_escaped_passwords(provisioned):
    monitor, ca = provisioned["sshd"].nodes[2], provisioned["pki"]["ca"]
    admin = _monitor_secret(provisioned["work"], "influx-admin-password")
    agent, agent_password = SECRETS["edgeprof_influx_credentials"].split(":", 1)
    status, answer = _influx(monitor, "SHOW USERS", "admin", admin, ca)
    assert status == 200, answer
    assert sorted(answer["results"][0]["series"][0]["values"]) == [
        ["admin", True], [agent, False], ["grafana", False]]
    # The agents' user logs in with the password as written in the Vault, quote and all,
    # and may write the database, nothing else: reading it is refused.
    status, answer = _influx(monitor, "SHOW DATABASES", agent, agent_password, ca)
    assert status == 200, answer
    status, answer = _influx(monitor, "SELECT * FROM cpu", agent, agent_password, ca)
    assert status == 403 and "requires READ" in answer["error"], answer
    for user, grant in ((agent, "WRITE"), ("grafana", "READ")):
        status, answer = _influx(monitor, f'SHOW GRANTS FOR "{user}"', "admin", admin, ca)
        assert answer["results"][0]["series"][0]["values"] == [["edgeprof", grant]], user
    first, second = (done.stdout for done, _ in provisioned["runs"])
    for task in ("Create InfluxDB's admin user", "Create the database",
                 "Create the agents' user", "Grant the agents' user the database",
                 "Create Grafana's reader", "Grant Grafana's reader the database, to read"):
        assert "changed: [n2]" in task_output(first, f"monitor : {task}"), task
        assert "skipping: [n2]" in task_output(second, f"monitor : {task}"), task


def test_firewall_closes_high_ports_to_all_but_the_cluster(provisioned):
    nodes = provisioned["sshd"].nodes
    for node in nodes:  # master, worker and monitor alike
        for tool, subnet, saved in (("iptables", SUBNET, "rules.v4"),
                                    ("ip6tables", SUBNET6, "rules.v6")):
            rules = _in_netns(node, [tool, "-S", "EDGEPROF"]).stdout.splitlines()
            order = [next((i for i, rule in enumerate(rules) if word in rule), None)
                     for word in ("-i lo", "--ctstate", f"-s {subnet}", "-j DROP")]
            assert None not in order and order == sorted(order), (node.name, tool, rules)
            assert "--dport 1024:65535" in rules[order[-1]], rules
            first = _in_netns(node, [tool, "-S", "INPUT"]).stdout.splitlines()[1]
            assert first == "-A INPUT -j EDGEPROF", (node.name, tool, first)
            # Saved for netfilter-persistent: the live rules, without time stamps, and
            # a file iptables-restore accepts.
            text = (provisioned["work"] / node.name / "iptables" / saved).read_text()
            assert "-A INPUT -j EDGEPROF" in text and not re.search("^#", text, re.M)
            restore = _in_netns(node, [f"{tool}-restore", "--test"], input=text)
            assert restore.returncode == 0, restore.stderr
    # Behaviour: a server on a high port of the master answers a worker, not this host
    # (10.213.k.254, outside the subnet), while SSH still answers this host.
    server = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{nodes[0].scope.netns}", "--", sys.executable,
         "-c", "import socket, time\ns = socket.create_server(('0.0.0.0', %d))\n"
         "time.sleep(30)\n" % HIGH_PORT])
    try:
        reach = ("import socket, sys\nsocket.create_connection(('%s', %d), timeout=3)"
                 % (nodes[0].address, HIGH_PORT))
        deadline = time.monotonic() + 10
        while (done := _in_netns(nodes[1], [sys.executable, "-c", reach])).returncode:
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.2)
        with pytest.raises(TimeoutError):  # dropped, not refused: nothing answers at all
            socket.create_connection((nodes[0].address, HIGH_PORT), timeout=3)
        socket.create_connection((nodes[0].address, 22), timeout=3).close()
        # InfluxDB's port on the monitor likewise: a worker reaches it, this host not.
        reach_influx = ("import socket\nsocket.create_connection(('%s', 8086), timeout=3)"
                        % MONITOR_ADDRESS)
        done = _in_netns(nodes[1], [sys.executable, "-c", reach_influx])
        assert done.returncode == 0, done.stderr
        with pytest.raises(TimeoutError):
            socket.create_connection((MONITOR_ADDRESS, 8086), timeout=3)
    finally:
        server.kill()
        server.wait()


def test_grafana_provisioning_files_and_the_tls_made_on_the_host(tmp_path):
    """The monitor role's passwords, TLS and Grafana provisioning tasks, run on this host:
    root stands in for the ``grafana`` and ``influxdb`` users of packages. The CA and the
    certificate are made here by openssl (no CA given); the datasource reads with the
    read-only account. A second run changes nothing."""
    settings = tmp_path / "vars.json"
    settings.write_text(json.dumps({
        "edgeprof_grafana_user": "root", "edgeprof_influx_service_user": "root",
        "edgeprof_monitor_secrets_dir": str(tmp_path / "monitor-secrets"),
        "edgeprof_influx_tls_dir": str(tmp_path / "tls"),
        "edgeprof_grafana_provisioning_dir": str(tmp_path / "provisioning"),
        "edgeprof_grafana_dashboards_dir": str(tmp_path / "dashboards"),
        "edgeprof_grafana_secrets_dir": str(tmp_path / "secrets"),
        "edgeprof_dashboards_src": str(ROOT / "dashboards"),
        "edgeprof_dashboards_boards": str(ROOT / "profiler" / "dashboards"),
        "ansible_python_interpreter": "/usr/bin/python3", **SECRETS}))
    playbook = tmp_path / "grafana.yml"
    playbook.write_text("- name: Grafana provisioning\n  hosts: localhost\n"
                        "  connection: local\n  tasks:\n" + "".join(
                            f"    - name: The monitor role's {name}\n"
                            "      ansible.builtin.include_role:\n        name: monitor\n"
                            f"        tasks_from: {name}.yml\n"
                            for name in ("influx-secrets", "influx-tls",
                                         "grafana-provisioning")))
    env = {**playbook_env(tmp_path), "ANSIBLE_ROLES_PATH": str(ROOT / "ansible" / "roles")}
    runs = [subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook),
                            "-e", f"@{settings}"], cwd=tmp_path, capture_output=True,
                           text=True, env=env, timeout=300) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert play_recap(runs[1].stdout)["localhost"]["changed"] == 0, runs[1].stdout[-3000:]
    text = (tmp_path / "provisioning" / "datasources" / "edgeprof.yaml").read_text()
    made = {name: (tmp_path / "monitor-secrets" / name).read_text().strip()
            for name in ("influx-admin-password", "influx-reader-password")}
    assert "$__file{" in text and not any(secret in text for secret in
                                          [*SECRETS.values(), *made.values()])
    import yaml
    (datasource,) = yaml.safe_load(text)["datasources"]
    assert datasource["user"] == "grafana" and datasource["url"].startswith("https://")
    assert datasource["jsonData"]["tlsAuthWithCACert"] is True
    assert datasource["secureJsonData"]["tlsCACert"] == f"$__file{{{tmp_path}/tls/ca.pem}}"
    secret = tmp_path / "secrets" / "influx-password"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert secret.read_text() == made["influx-reader-password"] != made["influx-admin-password"]
    for name in made:
        assert stat.S_IMODE((tmp_path / "monitor-secrets" / name).stat().st_mode) == 0o600
    # The certificate made here is signed by the CA made here, for loopback and this
    # host's name; only the CA's certificate is readable by others.
    tls = tmp_path / "tls"
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(tls / "ca.pem"),
                             str(tls / "server-cert.pem")], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    names = subprocess.run(["openssl", "x509", "-in", str(tls / "server-cert.pem"), "-noout",
                            "-ext", "subjectAltName"], capture_output=True, text=True).stdout
    assert "IP Address:127.0.0.1" in names and "DNS:localhost" in names, names
    for name, mode in (("ca.pem", 0o644), ("server-cert.pem", 0o644),
                       ("server-key.pem", 0o600), ("ca-key.pem", 0o600)):
        assert stat.S_IMODE((tls / name).stat().st_mode) == mode, name
    boards = sorted(p.name for p in (ROOT / "profiler" / "dashboards").glob("*.json"))
    assert sorted(p.name for p in (tmp_path / "dashboards").iterdir()) == boards and boards


def test_torch_is_a_stock_wheel_installed_without_compiling(provisioned):
    """The trainer role installs torch's CPU build from the wheelhouse (offline: pip
    --no-index), a wheel, so no compiler runs; the node's venv imports it with Gloo."""
    work = provisioned["work"]
    first, _ = provisioned["runs"][0]
    installed = task_output(first.stdout, "trainer : Install edgeprof with its engines "
                                          "(MXNet 1.9.1, torch, NumPy < 1.24)")
    assert "changed: [n0]" in installed and "changed: [n1]" in installed
    for node in ("n0", "n1"):
        node_python = work / node / "venv" / "bin" / "python"
        shown = subprocess.run(
            [str(node_python), "-c", "import torch, torch.distributed as d; "
             "print(torch.__version__, d.is_gloo_available())"],
            capture_output=True, text=True, timeout=120, env=playbook_env(work))
        assert shown.stdout.split() == ["2.13.0+cpu", "True"], shown.stderr[-2000:]
        # Installed from the manylinux wheel PyPI's mirror or PyTorch's index serves (a
        # build on the node would be tagged linux_x86_64): nothing was compiled.
        wheel_tag = next((work / node / "venv").glob(
            "lib/python3*/site-packages/torch-*.dist-info/WHEEL")).read_text()
        assert "Root-Is-Purelib: false" in wheel_tag and "manylinux" in wheel_tag
    wheelhouse = sorted(p.name for p in (work / "wheels").glob("torch-*.whl"))
    assert wheelhouse == ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"], wheelhouse


@pytest.mark.parametrize("engine", ["mxnet", "torch,torch-ddp"])
def test_sweep_runs_on_the_provisioned_nodes(provisioned, tmp_path, engine):
    out = tmp_path / "sweep"
    done = subprocess.run(
        [*EDGEPROF, "sweep", "--cluster", "inventory", "--inventory",
         str(provisioned["inventory"]), "--model", "lenet-mlp", "--dataset", "fashion-mnist",
         "--data-dir", str(FASHION_DIR.parent), "--engine", engine,
         "--devices", "2", "--placement", "colocated", "--batch", "32", "--max-samples",
         "256", "--val-samples", "64", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["engine"] for r in records) == sorted(engine.split(","))
    for record in records:
        assert record["status"] == "ok", record["reason"]
        assert record["metrics_nodes"] == 2
    record = records[-1]
    # The playbook put the data on each node, where --data-dir points on that host.
    assert record["dataset"] == "fashion-mnist"
    for node in ("n0", "n1"):
        copied = provisioned["work"] / node / "data" / "fashion-mnist"
        assert sorted(p.name for p in copied.iterdir()) == sorted(
            p.name for p in FASHION_DIR.iterdir())
    if engine == "mxnet":
        _ship_from_a_worker(provisioned, out)


def _ship_from_a_worker(provisioned, out: Path) -> None:
    """The sweep's spools, shipped from n1 (inside the cluster's subnet: the firewall
    drops this host) with the files the playbook left there: the agents' credentials
    and the CA; then read back as Grafana's read-only user."""
    work, nodes = provisioned["work"], provisioned["sshd"].nodes
    etc = work / "n1" / "etc"
    done = _in_netns(nodes[1], [
        str(work / "n1" / "venv" / "bin" / "python"), "-m", "profiler.cli", "ship", str(out),
        "--influx-url", f"https://{MONITOR_ADDRESS}:8086", "--influx-db", "edgeprof",
        "--influx-token-file", str(etc / "influx-credentials"),
        "--influx-ca", str(etc / "influx-ca.pem")], env=playbook_env(work), cwd=str(out.parent))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    shipped = int(re.search(r"shipped (\d+) points", done.stdout).group(1))
    assert shipped > 0, done.stdout
    sweep_id = json.loads((out / "sweep.json").read_text())["sweep_id"]
    status, answer = _influx(nodes[2], f"SELECT count(cpu_percent) FROM cpu WHERE sweep = "
                             f"'{sweep_id}'", "grafana",
                             _monitor_secret(work, "influx-reader-password"),
                             provisioned["pki"]["ca"])
    assert status == 200 and answer["results"][0]["series"][0]["values"][0][1] > 0, answer


def test_code_change_without_version_bump_is_deployed(provisioned, tmp_path):
    """Last: it changes the controller's code (the test's copy) and reruns the trainer
    role on n1 (``--tags trainer``, as docs/cluster.md says to redeploy)."""
    work, mark = provisioned["work"], uuid.uuid4().hex
    init = provisioned["source"] / "profiler" / "__init__.py"
    init.write_text(init.read_text() + f'DEPLOYED_MARK = "{mark}"\n')
    start = time.monotonic()
    done = subprocess.run([*provisioned["argv"], "--limit", "n1", "--tags", "trainer"], cwd=ROOT,
                          capture_output=True, text=True, env=playbook_env(work), timeout=600)
    print(f"third run (--tags trainer on n1, code changed): {time.monotonic() - start:.1f} s")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "changed: [n1]" in task_output(
        done.stdout, "trainer : Reinstall edgeprof from the controller's code")
    node_python = work / "n1" / "venv" / "bin" / "python"
    shown = subprocess.run([str(node_python), "-c",
                            "import profiler; print(profiler.DEPLOYED_MARK)"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60, env=playbook_env(work))
    assert shown.stdout.strip() == mark, shown.stderr
