"""``ansible/site.yml``'s swarm role for real, over SSH into emulated nodes.

Two emulated nodes (network namespaces on this host, Debian's sshd in each:
``tests.support.sshd``) make the inventory's ``[swarm]`` group, n0 the manager
(``edgeprof_swarm_manager``), n0 a ``pi4`` and n1 a ``pi3b`` (``edgeprof_swarm_profile``,
whatever the emulated profile: the label is the inventory's), n0 an ``edge`` and n1 an
``end`` device (``edgeprof_tier``, as ``--cluster inventory`` reads it). The playbook installs
Debian's docker.io on them (already on this host: the apt task finds it), starts their
engines, forms the Swarm, labels the nodes and loads the image; a second run changes
nothing; a third, after a new image under the same tag and n1's profile and tier taken
out of the inventory, reloads the image and drains n1 without those labels, nothing else;
an image the controller does not hold, and a tier that is not one, stop the play with one
message.

The image: not ``edgeprof image build``'s (minutes to build), but a tiny one, a tar of
one small file ``docker import``ed into "the controller's engine": a third emulated
node's dockerd (``tests.support.swarm``), which the controller reaches at its socket as
``edgeprof image build --docker-host`` would leave it. What is checked is how it travels
(saved once per image id on the controller, copied over SSH, loaded, skipped where the
node holds the same id), which does not depend on its size.

What this machine makes the test do differently from a box of Pis, and so cannot check:
- PID 1 is not systemd: the role's engine is its own dockerd per node
  (``edgeprof_swarm_dockerd_root``: data-root, exec-root, socket, pidfile and log in a
  folder of the test's, started with start-stop-daemon in the node's namespace through
  its sshd), not Debian's docker service, whose task is skipped here;
- the nodes share this host's filesystem and packages: every path the play writes is
  in the test's folder, and the common role (run here: the nodes are in no other play)
  installs nothing new and leaves the hostname and /etc/hosts alone;
- both engines run on one kernel, amd64: the architecture check passes, it is not shown
  refusing an arm64 image.

The host is left as found: the test stops the role's daemons (their pidfiles) and
removes their folders, and this host's iptables (FORWARD policy ACCEPT) are compared
before and after (each dockerd changed its own namespace's only).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, need, need_binary, sshd_nodes
from tests.support.playbook import BIN, play_recap, playbook_env, task_output

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
IMAGE = "edgeprof-tiny:test"
PROFILES = {"n0": "pi4", "n1": "pi3b"}
TIERS = {"n0": "edge", "n1": "end"}
ADDRESS_POOL = "10.199.0.0/16"   # the overlays' subnets, away from the nodes' 10.213.x
DAEMON_STOP_TIMEOUT_S = 20
LOAD_TASK = "swarm : Load it into the node's engine"


def _tiny_image_tar(path: Path, text: str) -> Path:
    """A root of one small file: ``docker import`` makes a one-layer image of it."""
    data = text.encode()
    with tarfile.open(path, "w") as tar:
        member = tarfile.TarInfo("edgeprof-tiny.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return path


def _reimport(engine, text: str, folder: Path) -> str:
    """``IMAGE`` in the controller's engine, made anew from ``text``: its new id."""
    with engine.client() as client:
        with contextlib.suppress(Exception):
            client.images.remove(IMAGE, force=True)
    engine.import_image(_tiny_image_tar(folder / f"tiny-{text}.tar", text), IMAGE)
    with engine.client() as client:
        return client.images.get(IMAGE).id


def _image_ids(daemons: Path) -> dict[str, str | None]:
    """The id of ``IMAGE`` in each node's engine (None: not there)."""
    import docker
    ids = {}
    for name in PROFILES:
        with contextlib.closing(docker.DockerClient(
                base_url=f"unix://{daemons / name / 'docker.sock'}")) as client:
            try:
                ids[name] = client.images.get(IMAGE).id
            except docker.errors.ImageNotFound:
                ids[name] = None
    return ids


def _stop_role_daemon(root: Path, node) -> None:
    """Stop the dockerd the role started under ``root`` (SIGTERM, SIGKILL after
    ``DAEMON_STOP_TIMEOUT_S``) and remove what it left."""
    from tests.support.swarm import remove_leftovers

    pid_file = root / "docker.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + DAEMON_STOP_TIMEOUT_S
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            os.kill(pid, signal.SIGKILL)
    remove_leftovers(root, node)


def _write_inventory(sshd, work: Path, daemons: Path, profiles: dict[str, str],
                     tiers: dict[str, str]) -> Path:
    """The [swarm] group of n0 and n1, each with its dockerd's folder, its folder for the
    image's copy, its profile in ``profiles`` and its tier in ``tiers`` (none if
    missing)."""
    host_vars = {name: {"edgeprof_swarm_dockerd_root": str(daemons / name),
                        "edgeprof_swarm_image_tmp_dir": str(work / name / "tmp"),
                        **({"edgeprof_swarm_profile": profiles[name]}
                           if name in profiles else {}),
                        **({"edgeprof_tier": tiers[name]} if name in tiers else {})}
                 for name in PROFILES}
    return sshd.write_inventory(work / "inventory.ini", {"swarm": list(PROFILES)},
                                host_vars=host_vars)


def _run(argv: list[str], work: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    # Ansible's log (time-stamped lines) beside the output: where a slow run spent it.
    env = {**playbook_env(work), "ANSIBLE_LOG_PATH": str(work / "ansible.log")}
    done = subprocess.run([*argv, *extra], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=300)
    return done, time.monotonic() - start


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory):
    from tests.support.swarm import SwarmOnNodes, host_iptables

    need("the Docker SDK for Python (scripts/setup.sh)",
         importlib.util.find_spec("docker") is not None)
    for binary in ("dockerd", "docker", "curl", "start-stop-daemon", "iptables"):
        need_binary(binary)
    work = tmp_path_factory.mktemp("ansible-swarm")
    # The engines' folders: short paths, for containerd's sockets in them must stay
    # under 104 bytes (pytest's folders went over).
    daemons = Path(tempfile.mkdtemp(prefix="edgeprof-swarm-"))
    before = host_iptables()
    for sshd in sshd_nodes(work, 3, confine=False,
                           extra_binaries=("python3", str(BIN / "ansible-playbook"))):
        nodes = {node.name: node for node in sshd.nodes}
        engine = SwarmOnNodes([nodes["n2"]], daemons)
        try:
            engine.start(form=False)
            source_id = _reimport(engine, "one", work)
            for name in PROFILES:
                (work / name / "tmp").mkdir(parents=True)
            inventory = _write_inventory(sshd, work, daemons, PROFILES, TIERS)
            settings = work / "test-vars.json"
            settings.write_text(json.dumps({
                "edgeprof_swarm_manager": "n0", "edgeprof_swarm_image": IMAGE,
                "edgeprof_swarm_image_docker_host": engine.manager_url,
                "edgeprof_swarm_image_cache_dir": str(work / "saved-images"),
                "edgeprof_swarm_address_pool": ADDRESS_POOL,
                "edgeprof_swarm_dockerd_args": ["--bridge", "none", "--log-level", "warn"],
                # The common role (the nodes are in no other play): nothing of this host's.
                "edgeprof_user": "root", "edgeprof_packages": ["tar"],
                "edgeprof_apt_cache_valid_s": 10 * 365 * 86400,  # never apt update
                "edgeprof_time_sync": False, "edgeprof_manage_hostname": False,
                "edgeprof_hosts_file": str(work / "hosts"), "edgeprof_swap_mb": 0}))
            argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), "ansible/site.yml",
                    "-e", f"@{settings}"]
            runs = [_run(argv, work) for _ in range(2)]
            yield {"runs": runs, "work": work, "argv": argv, "engine": engine, "sshd": sshd,
                   "daemons": daemons, "source_id": source_id,
                   "manager": f"unix://{daemons / 'n0' / 'docker.sock'}"}
        finally:
            for name in PROFILES:
                _stop_role_daemon(daemons / name, nodes[name])
            engine.stop()
            daemons.rmdir()
    assert host_iptables() == before


def _succeeded(run: tuple[subprocess.CompletedProcess, float], what: str) -> dict:
    """The recap of a run that must have succeeded on both nodes; its time printed."""
    done, seconds = run
    print(f"{what}: {seconds:.1f} s")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    recap = play_recap(done.stdout)
    assert sorted(recap) == ["n0", "n1"], recap
    return recap


def test_first_run_forms_a_labelled_swarm_and_loads_the_image(provisioned):
    recap = _succeeded(provisioned["runs"][0], "first run")
    done = provisioned["runs"][0][0]
    assert all(counts["changed"] > 0 and counts["failed"] == 0 for counts in recap.values())
    for task in ("Start the dockerd unless it runs", "Load it into the node's engine",
                 "Label the node with its profile, name and tier"):
        result = task_output(done.stdout, f"swarm : {task}")
        # The labels are set on the manager: "changed: [n1 -> n0(address)]".
        assert "changed: [n0]" in result and "changed: [n1" in result, (task, result)
    assert "changed: [n0]" in task_output(done.stdout, "swarm : Form the Swarm on the manager")
    assert "changed: [n1]" in task_output(done.stdout, "swarm : Join the Swarm")
    # The provider reads the Swarm as the role left it: both nodes, their profiles and
    # tiers from the inventory, n0 the manager.
    status = subprocess.run([sys.executable, "-m", "profiler.cli", "cluster", "status",
                             "--cluster", "swarm", "--swarm-host", provisioned["manager"],
                             "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert status.returncode == 0, status.stderr
    assert [(n["name"], n["role"], n["profile"], n["tier"])
            for n in json.loads(status.stdout)] == [
        ("n0", "manager", "pi4", "edge"), ("n1", "worker", "pi3b", "end")]
    import docker
    with contextlib.closing(docker.DockerClient(base_url=provisioned["manager"])) as client:
        attrs = client.swarm.attrs
        token = attrs["JoinTokens"]["Worker"]
    assert attrs["DefaultAddrPool"] == [ADDRESS_POOL]
    # Every node holds the controller's image, by id; the join token (no_log, sent on
    # curl's stdin) never reached the controller's output.
    assert _image_ids(provisioned["daemons"]) == {n: provisioned["source_id"] for n in PROFILES}
    for run, _ in provisioned["runs"]:
        assert token not in run.stdout + run.stderr
    saved = sorted(p.name for p in (provisioned["work"] / "saved-images").iterdir())
    assert saved == [f"edgeprof-image-{provisioned['source_id'][7:19]}.tar.gz"], saved
    # The copies on the nodes are removed once loaded.
    assert [list((provisioned["work"] / n / "tmp").iterdir()) for n in PROFILES] == [[], []]


def test_second_run_changes_nothing(provisioned):
    recap = _succeeded(provisioned["runs"][1], "second run")
    done = provisioned["runs"][1][0]
    assert all(counts["changed"] == 0 for counts in recap.values()), done.stdout[-4000:]
    assert "skipping: [n0]" in task_output(done.stdout, LOAD_TASK)
    assert "skipping: [n1]" in task_output(done.stdout, LOAD_TASK)


def test_a_rerun_after_two_changes_makes_exactly_those(provisioned):
    """A new image under the same tag in the controller's engine, and n1's profile and
    tier taken out of the inventory: the swarm role alone (``--tags swarm``, as
    docs/swarm.md says to redeploy the image) reloads the image on both nodes (their
    copies' id is stale) and drains n1 without its profile and tier labels (a host with
    no profile manages or idles, runs no task); nothing else changes."""
    import docker
    work = provisioned["work"]
    new_id = _reimport(provisioned["engine"], "two", work)
    assert new_id != provisioned["source_id"]
    _write_inventory(provisioned["sshd"], work, provisioned["daemons"], {"n0": "pi4"},
                     {"n0": "edge"})
    run = _run(provisioned["argv"], work, "--tags", "swarm")
    recap = _succeeded(run, "--tags swarm after the image and n1's profile changed")
    result = task_output(run[0].stdout, LOAD_TASK)
    assert "changed: [n0]" in result and "changed: [n1]" in result, result
    result = task_output(run[0].stdout, "swarm : Label the node with its profile, name and tier")
    assert "skipping: [n0]" in result and "changed: [n1" in result, result
    # On each node copy, load, remove the copy; on n1 the labels; the save on the
    # controller counts on the first host.
    assert {host: counts["changed"] for host, counts in recap.items()} == {"n0": 4, "n1": 4}
    assert _image_ids(provisioned["daemons"]) == {n: new_id for n in PROFILES}
    with contextlib.closing(docker.DockerClient(base_url=provisioned["manager"])) as client:
        specs = {node.attrs["Spec"]["Labels"]["edgeprof.node"]: node.attrs["Spec"]
                 for node in client.nodes.list()}
    assert specs["n1"]["Labels"] == {"edgeprof.node": "n1"}, specs["n1"]
    assert specs["n0"]["Labels"]["edgeprof.tier"] == "edge"
    assert (specs["n0"]["Availability"], specs["n1"]["Availability"]) == ("active", "drain")


def test_an_image_the_controller_lacks_stops_the_play_naming_it(provisioned):
    done, _ = _run(provisioned["argv"], provisioned["work"], "--tags", "swarm", "--limit",
                   "n0", "-e", "edgeprof_swarm_image=edgeprof-absent:1")
    assert done.returncode != 0
    assert "edgeprof_swarm_image edgeprof-absent:1 is not in the Docker Engine at" in \
        done.stdout, done.stdout[-3000:]
    assert "edgeprof image build --docker-host" in done.stdout


def test_a_tier_that_is_not_one_stops_the_play_before_it_installs(provisioned):
    done, _ = _run(provisioned["argv"], provisioned["work"], "--tags", "swarm", "--limit",
                   "n0", "-e", "edgeprof_tier=fog")
    assert done.returncode != 0
    assert "n0: edgeprof_tier (edgeprof_swarm_tier) is fog, not a tier: use end, edge or " \
        "cloud" in done.stdout, done.stdout[-3000:]
    assert "Install the container engine" not in done.stdout
