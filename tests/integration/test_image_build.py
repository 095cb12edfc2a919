"""``edgeprof image build`` for real: the torch image for amd64, built into a dockerd of
the test's own, runs the workloads in a container; a rebuild with nothing changed
reuses it in seconds.

The daemon is the test's alone (its data-root, exec-root, socket and pidfile under the
test's temporary folder; no bridge, no iptables, no IP forwarding, its containers under
a cgroup of their own) and is stopped and removed after. The image is built once for
the module (about 2.5 minutes on an idle 2-core host, 7 on one loaded by other runs:
docs/image.md); Debian packages come from Debian's mirror, the wheels from pip's
configuration and cache, as ``edgeprof image build`` gets them for a user.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.image.steps import remove_tree
from tests.conftest import ROOT, need, need_binary, need_root

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

DOCKERD_START_S = 60
TAG = re.compile(r"^(edgeprof-test-node:torch-amd64-[0-9a-f]{12}): (built|up to date)",
                 re.MULTILINE)


@pytest.fixture(scope="module")
def docker_host(tmp_path_factory):
    """A dockerd of the test's own; its URL. Stopped and its folders removed after."""
    need_root()
    dockerd = need_binary("dockerd")
    need("the Docker SDK for Python (pip install docker)", _has("docker"))
    import docker

    base = tmp_path_factory.mktemp("dockerd")
    socket = base / "docker.sock"
    cgroup_parent = f"edgeprof-image-test-{os.getpid()}"
    argv = [dockerd, "--data-root", str(base / "data"), "--exec-root", str(base / "exec"),
            "-H", f"unix://{socket}", "--pidfile", str(base / "pid"), "--iptables=false",
            "--ip-forward=false", "--ip-masq=false", "--bridge=none",
            "--cgroup-parent", cgroup_parent]
    with open(base / "dockerd.log", "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"unix://{socket}"
    try:
        deadline = time.monotonic() + DOCKERD_START_S
        while not _answers(docker, url):
            assert process.poll() is None and time.monotonic() < deadline, (
                (base / "dockerd.log").read_text()[-2000:])
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        remove_tree(base)
        _remove_cgroups(cgroup_parent)


def _remove_cgroups(name: str) -> None:
    """The daemon's cgroup parent in each hierarchy (dockerd leaves them, empty)."""
    for top in Path("/sys/fs/cgroup").glob(f"*/{name}"):
        for folder, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(folder)
            except OSError:  # still in use: left for the machine's owner to see
                pass


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _answers(docker, url: str) -> bool:
    try:
        return docker.DockerClient(base_url=url, timeout=5).ping()
    except Exception:  # noqa: BLE001 - not up yet, whatever the SDK says
        return False


def _build(docker_host: str, work: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "profiler.cli", "image", "build", "--flavour", "torch",
         "--arch", "amd64", "--docker-host", docker_host, "--tag-prefix", "edgeprof-test-node",
         "--work-dir", str(work)],
        cwd=ROOT, capture_output=True, text=True, timeout=1400,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done, time.monotonic() - started


@pytest.fixture(scope="module")
def built(docker_host, tmp_path_factory):
    need_binary("mmdebstrap")
    work = tmp_path_factory.mktemp("image-work")
    done, elapsed_s = _build(docker_host, work)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"\ncold build: {elapsed_s:.0f} s\n{done.stdout}")
    return done, work


def _tag(stdout: str) -> tuple[str, str]:
    found = TAG.search(stdout)
    assert found, stdout
    return found.group(1), found.group(2)


def test_the_torch_image_runs_the_workloads(docker_host, built):
    import docker

    done, _ = built
    tag, how = _tag(done.stdout)
    assert how == "built"
    for phase in ("root: mmdebstrap", "wheels: pip install", "layer:", "load:"):
        assert phase in done.stderr, done.stderr
    assert "Lerat et al.: 143.34 MB" in done.stdout and "torch 2.13.0+cpu" in done.stdout
    client = docker.DockerClient(base_url=docker_host, timeout=300)
    out = client.containers.run(
        tag, ["python3", "-c", "import torch, workloads.train, profiler.agent.cli; "
              "print(torch.__version__, (torch.ones(8, 8) @ torch.ones(8, 8)).sum().item())"],
        network_mode="none", remove=True)
    assert out.decode().split() == ["2.13.0+cpu", "512.0"]
    # The image's own command is the workloads' entry point; the agent's module runs.
    assert b"--framework" in client.containers.run(tag, network_mode="none", remove=True)
    assert b"--interval" in client.containers.run(
        tag, ["python3", "-m", "profiler.agent", "--help"], network_mode="none", remove=True)


def test_nothing_of_the_build_is_left_in_its_work_folder(built):
    _, work = built
    assert list(work.iterdir()) == []


def test_a_rebuild_with_nothing_changed_reuses_the_image(docker_host, built, tmp_path):
    import docker

    first, _ = built
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    images = {image.id for image in client.images.list()}
    again, elapsed_s = _build(docker_host, tmp_path)
    assert again.returncode == 0, again.stderr
    assert _tag(again.stdout) == (_tag(first.stdout)[0], "up to date")
    assert elapsed_s < 30, elapsed_s
    assert "root: mmdebstrap" not in again.stderr
    assert {image.id for image in client.images.list()} == images


def _as_from_a_shell() -> None:
    """The child's Ctrl-C as a user's shell starts it: handled (not ignored, not blocked,
    whatever this test process inherited), so that the SIGINT below is heard."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_build_interrupted_leaves_nothing_behind(docker_host, tmp_path):
    """Ctrl-C while mmdebstrap makes the root: exit 130, no work folder, no process,
    no mount, no image. (Interrupted in the import, the daemon never tags the image:
    docs/image.md.)"""
    import docker

    from profiler.image.steps import mounted_under

    client = docker.DockerClient(base_url=docker_host, timeout=60)
    images = {image.id for image in client.images.list()}
    process = subprocess.Popen(
        [sys.executable, "-m", "profiler.cli", "image", "build", "--arch", "amd64",
         "--docker-host", docker_host, "--tag-prefix", "edgeprof-test-interrupted",
         "--work-dir", str(tmp_path)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_as_from_a_shell)
    for line in process.stderr:
        if "root: mmdebstrap" in line:
            break
    time.sleep(5)  # mmdebstrap is at work: downloading, unpacking
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=300) == 130, rest
    assert "edgeprof: interrupted: no image edgeprof-test-interrupted:" in rest, rest
    assert "Traceback" not in rest
    assert list(tmp_path.iterdir()) == [] and mounted_under(tmp_path) == []
    assert {image.id for image in client.images.list()} == images
    leftovers = subprocess.run(["pgrep", "-f", f"mmdebstrap.*{tmp_path}"], capture_output=True)
    assert leftovers.stdout == b""
