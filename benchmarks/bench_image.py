"""The trainer's images for real, each flavour and architecture: time to build (cold and
reused), sizes beside Lerat et al.'s, and a container of each importing its frameworks.

Starts a dockerd of its own (data-root, exec-root, socket and pidfile in a temporary
folder; no bridge, no iptables, no IP forwarding) unless given ``--docker-host``, and
stops and removes it after. arm64 needs qemu-user-static registered with binfmt_misc
(docs/image.md: the build refuses in one line without it); its container runs under the
same qemu. One run, printed as a table; docs/image.md quotes it.

    python benchmarks/bench_image.py                      # torch/amd64, torch/arm64, full/amd64
    python benchmarks/bench_image.py --only torch-arm64
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT_DIR))

from profiler.image.steps import remove_tree  # noqa: E402

BUILDS = ("torch-amd64", "torch-arm64", "full-amd64")
SMOKE = {"torch": "import torch, workloads.train, profiler.agent.cli; print('torch', "
                  "torch.__version__, float((torch.ones(64, 64) @ torch.ones(64, 64)).sum()))",
         "full": "import torch, mxnet, horovod.mxnet as hvd, workloads.train; "
                 "print('torch', torch.__version__, 'mxnet', mxnet.__version__, "
                 "'horovod', __import__('horovod').__version__, 'gloo', hvd.gloo_built())"}
TAG = re.compile(r"^(\S+): (built|up to date)", re.MULTILINE)
SIZE = re.compile(r"compressed\s+([\d,]+) MB.*\n\s+unpacked\s+([\d,]+) MB")


def start_dockerd(base: Path) -> tuple[subprocess.Popen, str]:
    import docker

    socket = base / "docker.sock"
    argv = ["dockerd", "--data-root", str(base / "data"), "--exec-root", str(base / "exec"),
            "-H", f"unix://{socket}", "--pidfile", str(base / "pid"), "--iptables=false",
            "--ip-forward=false", "--ip-masq=false", "--bridge=none"]
    process = subprocess.Popen(argv, stdout=open(base / "dockerd.log", "wb"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    url = f"unix://{socket}"
    for _ in range(120):
        try:
            if docker.DockerClient(base_url=url, timeout=5).ping():
                return process, url
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.5)
    process.terminate()
    sys.exit("dockerd did not start: see " + str(base / "dockerd.log"))


def build(flavour: str, arch: str, url: str) -> tuple[float, str, str]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "profiler.cli", "image", "build",
                           "--flavour", flavour, "--arch", arch, "--docker-host", url],
                          cwd=ROOT_DIR, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT_DIR)})
    if done.returncode != 0:
        sys.exit(f"{flavour}/{arch}: {done.stderr.strip()[-800:]}")
    return time.monotonic() - started, done.stdout, done.stderr


def smoke(tag: str, flavour: str, arch: str, url: str) -> str:
    done = subprocess.run(["docker", "-H", url, "run", "--rm", "--network", "none",
                           "--platform", f"linux/{arch}", tag, "python3", "-c", SMOKE[flavour]],
                          capture_output=True, text=True)
    return (done.stdout.strip() or done.stderr.strip()[-300:]).replace("\n", " | ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(BUILDS),
                        help=f"comma-separated, of {', '.join(BUILDS)}")
    parser.add_argument("--docker-host", help="a running daemon (else one of our own)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-image-"))
    process, url = (None, args.docker_host) if args.docker_host else start_dockerd(base)
    rows = []
    try:
        for name in args.only.split(","):
            flavour, arch = name.split("-")
            cold_s, out, err = build(flavour, arch, url)
            reused_s, again, _ = build(flavour, arch, url)
            tag = TAG.search(out).group(1)
            compressed, unpacked = SIZE.search(out).groups()
            rows.append((name, TAG.search(out).group(2), cold_s, TAG.search(again).group(2),
                         reused_s, compressed, unpacked, smoke(tag, flavour, arch, url)))
            print(err + out, flush=True)
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=120)
        remove_tree(base)
    print(f"\n{'image':12} {'first':>14} {'again':>18} {'gzip MB':>8} {'unpacked MB':>12}  "
          f"in a container")
    for name, how, cold_s, how_again, reused_s, compressed, unpacked, says in rows:
        print(f"{name:12} {how:>7} {cold_s:5.0f} s {how_again:>11} {reused_s:4.1f} s "
              f"{compressed:>8} {unpacked:>12}  {says}")
    print("Lerat et al.: 143.34 MB compressed; 275.36 MB with their data and script")


if __name__ == "__main__":
    main()
