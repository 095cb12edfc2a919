"""The Pi's install path for real, without a Pi: an arm64 Debian under qemu as a Cortex-A53.

What the Ansible ``trainer`` role installs on an aarch64 node for the torch engines is
installed into an arm64 Debian bookworm root (what Raspberry Pi OS is built on), made
from Debian's archive with ``mmdebstrap``, and run through Debian's ``qemu-user-static``
with ``QEMU_CPU=cortex-a53``, the Pi 3B's core (ARMv8.0, as the Pi 4's A72). Then:

1. the inventory host check for the torch engines (``profiler.engines.host_check``:
   torch imported, Gloo there, two matrices multiplied, in a child process);
2. a tiny 2-worker cell of each torch engine (``edgeprof run``, local cluster inside the
   root: a parameter server and two workers over Gloo; DDP), which must end ``ok``;
3. ``--torch-refused 2.10.0``: the host check on a torch said to die with SIGILL on
   ARMv8.0 cores (pytorch#174344): refused in one line if qemu's Cortex-A53 model traps
   it as the board does, else it says it ran;
4. PyPI's aarch64 ``mxnet==1.9.1``: the libraries its ``libmxnet.so`` needs that the
   wheel does not ship, whether the binary holds the distributed KVStore, and what
   ``import mxnet`` says in the root.

Run as root (binfmt_misc, chroot, mounts); about 10 minutes the first time (the root, two
torch installs under emulation), less with ``--root`` kept from a run before::

    sudo .venv/bin/python benchmarks/bench_aarch64.py [--root /var/tmp/edgeprof-arm64]

It prints one line per check and a summary table; exit status 1 if the torch check or a
cell fails. Downloads are cached in ``ROOT/var/cache/pip``. Mounts it made are undone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[1]
DEBIAN_PACKAGES = ("qemu-user-static", "mmdebstrap", "arch-test")
# qemu-user-static's registration (systemd-binfmt's format, which binfmt_misc takes as is):
# without systemd as PID 1 nobody loads it, so this script does.
BINFMT_CONF = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")
ROOT_PACKAGES = "python3,python3-venv,python3-pip,ca-certificates,binutils"
SRC, VENV = "/opt/edgeprof-src", "/opt/edgeprof-venv"
CPU = "cortex-a53"  # the Pi 3B's core; QEMU's default "max" has every newer extension


def log(line: str) -> None:
    print(line, flush=True)


def run(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, text=True, capture_output=True, **kw)


def ensure_tools() -> None:
    missing = [p for p in DEBIAN_PACKAGES if "install ok installed" not in
               run(["dpkg-query", "-W", "-f=${Status}", p]).stdout]
    if missing:
        log(f"installing {' '.join(missing)}")
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
                       check=True, capture_output=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


class Mounts:
    """Mounts made here, undone in reverse order."""

    def __init__(self):
        self.done: list[str] = []

    def mount(self, argv: list[str], target: str) -> None:
        if run(["mountpoint", "-q", target]).returncode == 0:
            return
        subprocess.run(["mount", *argv, target], check=True)
        self.done.append(target)

    def undo(self) -> None:
        for target in reversed(self.done):
            run(["umount", "-l", target])


def ensure_binfmt(mounts: Mounts) -> None:
    mounts.mount(["-t", "binfmt_misc", "binfmt_misc"], "/proc/sys/fs/binfmt_misc")
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists() and BINFMT_CONF.exists():
        Path("/proc/sys/fs/binfmt_misc/register").write_text(BINFMT_CONF.read_text().strip())
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        sys.exit("qemu-aarch64 is not registered with binfmt_misc: reinstall qemu-user-static")


def ensure_root(root: Path) -> float:
    if (root / "usr/bin/python3").exists():
        return 0.0
    log(f"making an arm64 Debian bookworm root in {root} (mmdebstrap)")
    t0 = time.monotonic()
    subprocess.run(["mmdebstrap", "--arch=arm64", "--variant=apt", f"--include={ROOT_PACKAGES}",
                    "bookworm", str(root)], check=True, capture_output=True)
    return time.monotonic() - t0


def chroot(root: Path, command: str, timeout: float = 1800,
           env: dict | None = None) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "QEMU_CPU": CPU,
            "PIP_CACHE_DIR": "/var/cache/pip", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "OMP_NUM_THREADS": "1"}
    return run(["chroot", str(root), "/bin/sh", "-c", command], timeout=timeout,
               env={**base, **(env or {})})


def install_edgeprof(root: Path) -> float:
    """This checkout's edgeprof with its torch extra, as the trainer role installs it on
    an aarch64 node (constraints.txt picks torch==2.9.1 there)."""
    shutil.rmtree(root / SRC.lstrip("/"), ignore_errors=True)
    (root / SRC.lstrip("/")).mkdir(parents=True)
    tar = subprocess.run(["git", "-C", str(ROOT_DIR), "archive", "--format=tar", "HEAD"],
                         capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root / SRC.lstrip("/"))], input=tar, check=True)
    shutil.copy2("/etc/ssl/certs/ca-certificates.crt", root / "etc/ssl/certs/")
    t0 = time.monotonic()
    done = chroot(root, f"[ -x {VENV}/bin/python ] || python3 -m venv {VENV}; "
                        f"cd {SRC} && {VENV}/bin/python -m pip install -q "
                        f"-c constraints.txt '.[torch]'")
    if done.returncode != 0:
        sys.exit(f"pip install in the arm64 root failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - t0


def host_check(root: Path, python: str) -> tuple[dict, float]:
    t0 = time.monotonic()
    done = chroot(root, f"cd / && {python} -c \"import json; from profiler.engines import "
                        f"host_check; print(json.dumps(host_check(['torch'])))\"",
                  env={"PYTHONPATH": SRC})
    took = time.monotonic() - t0
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])["torch"], took
    except (ValueError, IndexError, KeyError):
        return {"ok": False, "problem": (done.stderr or done.stdout)[-500:]}, took


def torch_cell(root: Path, engine: str) -> tuple[str, float]:
    out = f"/tmp/cell-{engine}"
    t0 = time.monotonic()
    done = chroot(root, f"rm -rf {out}; cd / && {VENV}/bin/edgeprof run --engine {engine} "
                        f"--model lenet-mlp --devices 2 --batch 16 --max-samples 320 "
                        f"--val-samples 100 --dataset synthetic --no-agent --out {out}",
                  timeout=1800)
    took = time.monotonic() - t0
    records = root / out.lstrip("/") / "results.jsonl"
    if not records.exists():
        return f"no record: {done.stderr.strip()[-300:]}", took
    record = json.loads(records.read_text().splitlines()[-1])
    status = record["status"] + (f" ({record['reason']})" if record.get("reason") else "")
    return status + f", {record.get('samples_per_s') or 0:.0f} samples/s", took


def refused_torch(root: Path, version: str) -> tuple[str, float]:
    venv = f"/opt/torch-{version}"
    t0 = time.monotonic()
    done = chroot(root, f"[ -x {venv}/bin/python ] || python3 -m venv {venv}; "
                        f"{venv}/bin/python -m pip install -q 'numpy<2' psutil "
                        f"torch=={version}")
    if done.returncode != 0:
        return f"not installed: {done.stderr.strip().splitlines()[-1][:200]}", 0.0
    answer, _ = host_check(root, f"{venv}/bin/python")
    took = time.monotonic() - t0
    if answer.get("ok"):
        return (f"ran (qemu's {CPU} model does not trap what the board does): "
                f"{answer.get('torch')}"), took
    return f"refused: {answer.get('problem')}", took


def mxnet_wheel(root: Path) -> list[tuple[str, str]]:
    """What PyPI's aarch64 MXNet 1.9.1 needs, holds, and says on import."""
    findings = []
    cache = root / "var/cache/mxnet-wheel"
    cache.mkdir(parents=True, exist_ok=True)
    wheels = list(cache.glob("mxnet-1.9.1-*.whl"))
    if not wheels:
        run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "--platform", "manylinux2014_aarch64", "--python-version", "3.11", "-d", str(cache),
             "mxnet==1.9.1"])
        wheels = list(cache.glob("mxnet-1.9.1-*.whl"))
    if not wheels:
        return [("mxnet wheel", "PyPI served no aarch64 mxnet==1.9.1 here")]
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extract("mxnet/libmxnet.so", tmp)
        lib = Path(tmp) / "mxnet/libmxnet.so"
        needed = [line.split("[")[1].rstrip("]") for line in
                  run(["readelf", "-d", str(lib)]).stdout.splitlines() if "NEEDED" in line]
        shipped = {Path(n).name for n in wheel.namelist()}
        missing = [n for n in needed if n not in shipped and n.startswith(("libarmpl", "libamath",
                                                                          "libastring"))]
        findings.append(("mxnet libmxnet.so needs, not shipped", ", ".join(missing) or "none"))
        symbols = run(["nm", "-D", "--defined-only", str(lib)]).stdout
        strings = run(["strings", str(lib)]).stdout
        dist = sum(1 for s in symbols.splitlines() if "KVStoreDist" in s or "ps5Postoffice" in s)
        findings.append(("mxnet dist KVStore symbols (KVStoreDist, ps::Postoffice)",
                         f"{dist} exported; 'USE_DIST_KVSTORE' message "
                         f"{'present' if 'USE_DIST_KVSTORE' in strings else 'absent'}"))
    done = chroot(root, f"[ -x /opt/mxnet/bin/python ] || python3 -m venv /opt/mxnet; "
                        f"/opt/mxnet/bin/python -m pip install -q --no-deps "
                        f"/var/cache/mxnet-wheel/{wheels[0].name} 'numpy<1.24' "
                        f"&& cd / && /opt/mxnet/bin/python -c 'import mxnet'")
    lines = [l for l in (done.stderr or "").splitlines() if l.strip()]
    findings.append(("import mxnet (arm64 root)",
                     "ok" if done.returncode == 0 else (lines[-1] if lines else "failed")[:200]))
    return findings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/var/tmp/edgeprof-arm64"))
    parser.add_argument("--torch-refused", default="2.10.0",
                        help="a torch said to die with SIGILL on ARMv8.0 ('' to skip)")
    parser.add_argument("--skip-mxnet", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: binfmt_misc, chroot and mounts")
    ensure_tools()
    mounts = Mounts()
    rows: list[tuple[str, str, float]] = []
    failed = False
    try:
        ensure_binfmt(mounts)
        took = ensure_root(args.root)
        rows.append(("arm64 bookworm root (mmdebstrap)", "made" if took else "reused", took))
        for target, fs in (("proc", "proc"), ("sys", "sysfs")):
            mounts.mount(["-t", fs, fs], str(args.root / target))
        mounts.mount(["--rbind", "/dev"], str(args.root / "dev"))  # /dev/shm for torch
        log(f"installing edgeprof[torch] in the root under QEMU_CPU={CPU}")
        took = install_edgeprof(args.root)
        version = chroot(args.root, f"{VENV}/bin/python -m pip show torch | sed -n 2p").stdout
        rows.append((f"pip install edgeprof[torch] ({version.strip()})", "ok", took))
        answer, took = host_check(args.root, f"{VENV}/bin/python")
        rows.append(("host check, torch", "ok" if answer.get("ok") else
                     f"REFUSED: {answer.get('problem')}", took))
        failed |= not answer.get("ok")
        log(f"host check: {answer}")
        for engine in ("torch", "torch-ddp"):
            status, took = torch_cell(args.root, engine)
            rows.append((f"2-worker cell, --engine {engine}", status, took))
            failed |= not status.startswith("ok")
            log(f"{engine}: {status} in {took:.0f} s")
        if args.torch_refused:
            outcome, took = refused_torch(args.root, args.torch_refused)
            rows.append((f"host check, torch=={args.torch_refused}", outcome, took))
            log(f"torch {args.torch_refused}: {outcome}")
        if not args.skip_mxnet:
            for what, outcome in mxnet_wheel(args.root):
                rows.append((what, outcome, 0.0))
                log(f"{what}: {outcome}")
    finally:
        mounts.undo()
    print(f"\narm64 under qemu-user, QEMU_CPU={CPU} (emulated: times are qemu's, not a "
          "board's)")
    for what, outcome, seconds in rows:
        print(f"{what:<58} {seconds:>7.1f} s  {outcome}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
