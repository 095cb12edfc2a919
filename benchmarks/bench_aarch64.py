"""The Pi's install path for real, without a Pi: an arm64 Debian under qemu as a Cortex-A53.

What the Ansible ``trainer`` role installs on an aarch64 node for the torch engines
(edgeprof's wheel with its ``torch`` extra, ``torch==2.9.1`` from PyPI, NumPy < 1.24) is
installed into an arm64 Debian bookworm root (what Raspberry Pi OS is built on), made
from Debian's archive with ``mmdebstrap``, and run through Debian's ``qemu-user-static``
with ``QEMU_CPU=cortex-a53``, the Pi 3B's core (ARMv8.0, as the Pi 4's A72). Then:

1. the inventory host check for the torch engines (``profiler.engines.host_check``:
   torch imported, Gloo there, two matrices multiplied, in a child process);
2. a tiny 2-worker cell of each torch engine (``edgeprof run`` on the local cluster
   inside the root: a parameter server and two workers over Gloo; DDP), and a 2-stage
   ``torch-pipe`` cell of each ``--schedules`` (LeNet-CNN, 4 micro-batches, through that
   torch's ``torch.distributed.pipelining``), which must end ``ok``;
3. ``--torch-refused 2.10.0``: the host check on a torch reported to die with SIGILL on
   ARMv8.0 cores (pytorch#174344, #176993), under each of ``--cpus`` (the Pi 3B's A53,
   the Pi 4's A72, the Pi 5's A76, QEMU's ``max``): refused in one line where qemu's
   CPU model traps it as a board would, with the Python frame that died;
4. PyPI's aarch64 ``mxnet==1.9.1``: the libraries its ``libmxnet.so`` needs that the
   wheel does not ship, whether the binary holds the distributed KVStore (ps-lite,
   ZeroMQ, ``KVStoreDist``; beside the same counts for this machine's MXNet, when it
   has one), and what ``import mxnet`` says in the root.

Run as root (binfmt_misc, chroot, mounts)::

    sudo .venv/bin/python benchmarks/bench_aarch64.py [--root DIR] [--keep]

Without ``--root`` the root is made in a new folder under /var/tmp and removed at the
end unless ``--keep``; a ``--root`` is made if it holds none, reused if it does, and
kept. Every wheel downloaded stays in ``ROOT/var/cache/edgeprof-wheels`` and is not
fetched again (pip's own HTTP cache cannot help where a proxy strips the caching
headers). About 12 minutes on a fresh root on 2 x86 cores, 4 on a reused one, and 1 to
4 more for the two pipeline cells (each imports torch twice under qemu and times every
layer before its split). It
prints a line per step and a summary table; exit status 1 if the torch host check or a
cell fails. The mounts it made are undone, also on failure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
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
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
ROOT_PACKAGES = "python3,python3-venv,python3-pip,ca-certificates"
# Inside the root.
SRC, VENV, WHEELHOUSE = "/opt/edgeprof-src", "/opt/edgeprof-venv", "/var/cache/edgeprof-wheels"
OWN_WHEEL = "/opt/edgeprof-wheel"  # this run's edgeprof wheel, alone
CPU = "cortex-a53"  # the Pi 3B's core; QEMU's default "max" has every newer extension
CPUS = "cortex-a53,cortex-a72,cortex-a76,max"  # Pi 3B, Pi 4, Pi 5, every extension
PIPE_SCHEDULES = "gpipe,1f1b"  # torch-pipe's, each a 2-stage cell
# Host settings pip inside the root gets too (a mirror or a proxy a CI sets).
PASS_ENV = ("PIP_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT", "http_proxy",
            "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
SMOKE = "import torch; a = torch.ones(64, 64); print(torch.__version__, float((a @ a).sum()))"
STARTED = time.monotonic()


def log(line: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.0f} s] {line}", flush=True)


def run(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, text=True, capture_output=True, **kw)


def tail(text: str, lines: int = 1, width: int = 300) -> str:
    kept = [line for line in (text or "").splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-width:] if kept else ""


class Mounts:
    """Mounts made here, undone in reverse order."""

    def __init__(self):
        self.done: list[str] = []

    def mount(self, argv: list[str], target: Path | str) -> None:
        target = str(target)
        if run(["mountpoint", "-q", target]).returncode == 0:
            return
        subprocess.run(["mount", *argv, target], check=True)
        self.done.append(target)

    def undo(self) -> None:
        for target in reversed(self.done):
            # -l detaches the whole tree at once (a busy /dev/pts of a child left behind
            # must not keep /dev mounted inside a root that may be removed next).
            if run(["umount", "-l", target]).returncode != 0:
                log(f"could not unmount {target}")
        self.done.clear()


def mounted_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` (from /proc/self/mountinfo)."""
    prefix = str(root.resolve())
    points = [line.split()[4].encode().decode("unicode_escape")
              for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


def ensure_tools() -> None:
    missing = [p for p in DEBIAN_PACKAGES if "install ok installed" not in
               run(["dpkg-query", "-W", "-f=${Status}", p]).stdout]
    if missing:
        log(f"installing {' '.join(missing)} (apt-get)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
            done = run(argv, env=env)
            if done.returncode != 0:
                sys.exit(f"{' '.join(argv)} failed: {tail(done.stderr, 3)}")


def ensure_binfmt(mounts: Mounts) -> None:
    mounts.mount(["-t", "binfmt_misc", "binfmt_misc"], BINFMT_DIR)
    entry = BINFMT_DIR / "qemu-aarch64"
    if not entry.exists() and BINFMT_CONF.exists():
        (BINFMT_DIR / "register").write_text(BINFMT_CONF.read_text().strip())
    if not entry.exists():
        sys.exit("qemu-aarch64 is not registered with binfmt_misc: reinstall qemu-user-static")
    if "enabled" not in entry.read_text():
        entry.write_text("1")


def ensure_root(root: Path) -> float:
    if (root / "usr/bin/python3").exists():
        return 0.0
    log(f"making an arm64 Debian bookworm root in {root} (mmdebstrap)")
    t0 = time.monotonic()
    done = run(["mmdebstrap", "--arch=arm64", "--variant=apt", f"--include={ROOT_PACKAGES}",
                "bookworm", str(root)])
    if done.returncode != 0:
        sys.exit(f"mmdebstrap failed: {tail(done.stderr, 5, 1500)}")
    return time.monotonic() - t0


def chroot(root: Path, argv: list[str], timeout: float = 1800, cpu: str = CPU,
           env: dict | None = None) -> subprocess.CompletedProcess:
    """``argv`` in the root (working directory /) under QEMU_CPU=``cpu``."""
    base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LANG": "C.UTF-8", "QEMU_CPU": cpu,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1",
            "PIP_ROOT_USER_ACTION": "ignore", "OMP_NUM_THREADS": "1",
            **{k: os.environ[k] for k in PASS_ENV if k in os.environ}}
    chroot_bin = shutil.which("chroot") or "/usr/sbin/chroot"
    try:
        return run([chroot_bin, str(root), *argv], timeout=timeout, env={**base, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {timeout:.0f} s")


def pip(root: Path, python: str, *args: str) -> subprocess.CompletedProcess:
    return chroot(root, [python, "-m", "pip", *args])


def fresh_venv(root: Path, venv: str) -> None:
    shutil.rmtree(root / venv.lstrip("/"), ignore_errors=True)
    done = chroot(root, ["python3", "-m", "venv", venv])
    if done.returncode != 0:
        sys.exit(f"python3 -m venv {venv} failed in the root: {tail(done.stderr, 3)}")


def fetch(root: Path, requirements: list[str], constraints: str | None = None) -> float:
    """Download ``requirements`` (and their dependencies) into the wheelhouse; files there
    already are not fetched again. Returns the seconds taken."""
    t0 = time.monotonic()
    args = ["download", "-q", "--only-binary=:all:", "-d", WHEELHOUSE,
            "--find-links", OWN_WHEEL, "--find-links", WHEELHOUSE]
    if constraints:
        args += ["-c", constraints]
    done = pip(root, "python3", *args, *requirements)
    # This run's edgeprof is installed from OWN_WHEEL only: a copy kept here would carry
    # the same name as the next run's and shadow it.
    for copy in (root / WHEELHOUSE.lstrip("/")).glob("edgeprof-*.whl"):
        copy.unlink()
    if done.returncode != 0:
        raise RuntimeError(tail(done.stderr, 2))
    return time.monotonic() - t0


def install(root: Path, venv: str, requirements: list[str],
            constraints: str | None = None) -> float:
    """Install from the wheelhouse alone into ``venv`` (made anew)."""
    fresh_venv(root, venv)
    t0 = time.monotonic()
    args = ["install", "-q", "--no-index", "--find-links", OWN_WHEEL, "--find-links", WHEELHOUSE]
    if constraints:
        args += ["-c", constraints]
    done = pip(root, f"{venv}/bin/python", *args, *requirements)
    if done.returncode != 0:
        raise RuntimeError(tail(done.stderr, 3))
    return time.monotonic() - t0


def copy_edgeprof(root: Path) -> str:
    """This checkout's committed tree into ROOT/opt/edgeprof-src, and its wheel (built
    here, as the trainer role builds it on the controller) alone in OWN_WHEEL."""
    src, wheel_dir = root / SRC.lstrip("/"), root / OWN_WHEEL.lstrip("/")
    for folder in (src, wheel_dir):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    commit = run(["git", "-C", str(ROOT_DIR), "rev-parse", "--short", "HEAD"]).stdout.strip()
    tar = subprocess.run(["git", "-C", str(ROOT_DIR), "archive", "--format=tar", "HEAD"],
                         capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=tar, check=True)
    isolation = ([] if all(importlib.util.find_spec(m) for m in ("setuptools", "wheel"))
                 else ["--use-pep517"])
    done = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                *(["--no-build-isolation"] if not isolation else []),
                "-w", str(wheel_dir), str(src)])
    if done.returncode != 0:
        sys.exit(f"building edgeprof's wheel failed: {tail(done.stderr, 3)}")
    shutil.rmtree(src / "build", ignore_errors=True)
    (root / WHEELHOUSE.lstrip("/")).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/etc/ssl/certs/ca-certificates.crt", root / "etc/ssl/certs/")
    return commit


def versions(root: Path, venv: str, names: tuple[str, ...]) -> str:
    done = chroot(root, [f"{venv}/bin/python", "-c",
                         "import sys\nfrom importlib.metadata import version\n"
                         "print(' '.join(f'{n}=={version(n)}' for n in sys.argv[1:]))",
                         *names])
    return done.stdout.strip() or tail(done.stderr)


def host_check(root: Path, python: str, cpu: str = CPU) -> tuple[dict, float]:
    """``profiler.engines.host_check(['torch'])`` with ``python`` under ``cpu``."""
    t0 = time.monotonic()
    done = chroot(root, [python, "-c", "import json\nfrom profiler.engines import host_check\n"
                                       "print(json.dumps(host_check(['torch'])))"],
                  cpu=cpu, env={"PYTHONPATH": SRC})
    took = time.monotonic() - t0
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])["torch"], took
    except (ValueError, IndexError, KeyError):
        return {"ok": False, "problem": f"the check failed: {tail(done.stderr, 2)}"}, took


def dying_frame(root: Path, python: str, cpu: str) -> str:
    """Where ``import torch`` and a matrix product die, from Python's faulthandler."""
    done = chroot(root, [python, "-X", "faulthandler", "-c", SMOKE], cpu=cpu)
    fatal = next((line.strip() for line in done.stderr.splitlines()
                  if line.startswith("Fatal Python error")), "")
    frames = [line.strip() for line in done.stderr.splitlines()
              if line.strip().startswith("File ")]
    frame = next((f for f in frames if "site-packages" in f), frames[0] if frames else "")
    frame = re.sub(r'File ".*?/site-packages/', 'File "', frame)
    return f"{fatal}; innermost frame: {frame}" if fatal else f"exit {done.returncode}"


def torch_cell(root: Path, engine: str, model: str = "lenet-mlp",
               extra: tuple[str, ...] = (), name: str = "") -> tuple[str, bool, float]:
    out = f"/tmp/cell-{name or engine}"
    shutil.rmtree(root / out.lstrip("/"), ignore_errors=True)
    t0 = time.monotonic()
    done = chroot(root, [f"{VENV}/bin/edgeprof", "run", "--engine", engine,
                         "--model", model, "--devices", "2", "--batch", "16",
                         "--max-samples", "320", "--val-samples", "100",
                         "--dataset", "synthetic", "--no-agent", "--out", out, *extra])
    took = time.monotonic() - t0
    records = root / out.lstrip("/") / "results.jsonl"
    if not records.exists():
        return f"no result: {tail(done.stderr, 2)}", False, took
    record = json.loads(records.read_text().splitlines()[-1])
    ok = record["status"] == "ok"
    status = record["status"] + (f" ({record['reason']})" if record.get("reason") else "")
    if ok:
        status += (f": val acc {record.get('val_accuracy')}, first step after "
                   f"{record.get('first_step_s', 0):.1f} s, training "
                   f"{record.get('train_s', 0):.2f} s, {record.get('samples_per_s', 0):.0f}"
                   " samples/s" + pipeline_summary(record))
    else:
        for log_file in sorted((root / out.lstrip("/")).glob("cells/*/attempt-*/logs/*.log")):
            log(f"  {log_file.name}: {tail(log_file.read_text(errors='replace'), 5, 800)}")
    return status, ok, took


def pipeline_summary(record: dict) -> str:
    """A torch-pipe cell's split, step against the pipeline model, bubble and stash."""
    if not record.get("pipe_split"):
        return ""
    got = {key: record.get(key) or 0 for key in ("pipe_step_ms", "pipe_step_ms_predicted",
                                                 "bubble_measured", "bubble_gpipe")}
    return (f"; split {record['pipe_split']}, step {got['pipe_step_ms']:.0f} ms (predicted "
            f"{got['pipe_step_ms_predicted']:.0f}), bubble {got['bubble_measured']:.2f} "
            f"(GPipe's {got['bubble_gpipe']:.2f}), stash MB per stage "
            f"{record.get('stage_stash_mb')}")


def refused_torch(root: Path, version: str, cpus: list[str]) -> list[tuple[str, str, float]]:
    rows = []
    venv = f"/opt/torch-{version}"
    try:
        took = fetch(root, [f"torch=={version}", "numpy<2", "psutil"])
        took += install(root, venv, [f"torch=={version}", "numpy<2", "psutil"])
    except RuntimeError as exc:
        return [(f"torch=={version}: install", f"not installed: {exc}", 0.0)]
    rows.append((f"torch=={version}: pip download + install", "ok (PyPI serves an aarch64 "
                 f"wheel: {versions(root, venv, ('torch',))})", took))
    for cpu in cpus:
        answer, took = host_check(root, f"{venv}/bin/python", cpu)
        if answer.get("ok"):
            outcome = f"ran: torch {answer.get('torch')} imported, Gloo, matrix product"
        else:
            outcome = f"refused: {answer.get('problem')}"
            if "SIGILL" in outcome:
                outcome += f" [{dying_frame(root, f'{venv}/bin/python', cpu)}]"
        rows.append((f"torch=={version}: host check, QEMU_CPU={cpu}", outcome, took))
        log(f"torch {version} under {cpu}: {outcome}")
    return rows


def dist_kvstore_evidence(lib: Path) -> str:
    """Counts, in one libmxnet.so, of what a build with USE_DIST_KVSTORE=1 holds."""
    symbols = run(["nm", "-D", "--defined-only", str(lib)]).stdout.splitlines()
    strings = run(["strings", "-n", "6", str(lib)]).stdout.splitlines()
    exported = sum(1 for s in symbols if "KVStoreDist" in s or re.search(r"\bN?2ps\d", s))
    zmq = sum(1 for s in strings if "zmq" in s.lower())
    env = sum(1 for s in strings if s == "DMLC_PS_ROOT_URI")
    asks = sorted({s.strip() for s in strings if "compile with USE_DIST_KVSTORE=1 to" in s})
    return (f"{exported} exported KVStoreDist/ps:: symbols, {zmq} ZeroMQ strings, "
            f"DMLC_PS_ROOT_URI {'read' if env else 'never read'}"
            + (f"; says: {' / '.join(repr(a) for a in asks)}" if asks else ""))


def debian_package(library: str) -> str:
    """``library``, with the Debian package that ships it where this host has it."""
    found = run(["dpkg", "-S", f"*/{library}"]).stdout.split(":")[0]
    return f"{library} (Debian: {found})" if found else library


def mxnet_wheel(root: Path) -> list[tuple[str, str, float]]:
    """What PyPI's aarch64 MXNet 1.9.1 needs, holds, and says on import."""
    rows = []
    t0 = time.monotonic()
    try:
        fetch(root, ["--no-deps", "mxnet==1.9.1", "numpy>=1.23.5,<1.24"])
    except RuntimeError as exc:
        return [("mxnet==1.9.1 aarch64 wheel", f"not downloaded: {exc}", 0.0)]
    wheel = next((root / WHEELHOUSE.lstrip("/")).glob("mxnet-1.9.1-*aarch64.whl"))
    rows.append(("mxnet==1.9.1: pip download", wheel.name, time.monotonic() - t0))
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        archive.extract("mxnet/libmxnet.so", tmp)
        lib = Path(tmp) / "mxnet/libmxnet.so"
        needed = re.findall(r"\(NEEDED\).*\[(.+?)\]", run(["readelf", "-d", str(lib)]).stdout)
        shipped = {Path(n).name for n in archive.namelist()}
        system = [n for n in needed if (root / "usr/lib/aarch64-linux-gnu" / n).exists()
                  or (root / "lib/aarch64-linux-gnu" / n).exists()]
        missing = [n for n in needed if n not in shipped and n not in system]
        rows.append(("mxnet==1.9.1: libmxnet.so NEEDED, in neither wheel nor root",
                     ", ".join(debian_package(n) for n in missing) or "none", 0.0))
        rows.append(("mxnet==1.9.1 aarch64: distributed KVStore in libmxnet.so",
                     dist_kvstore_evidence(lib), 0.0))
    here = importlib.util.find_spec("mxnet")
    if here and here.submodule_search_locations:
        lib = Path(list(here.submodule_search_locations)[0]) / "libmxnet.so"
        if lib.exists():
            rows.append((f"control: this machine's MXNet ({os.uname().machine})",
                         dist_kvstore_evidence(lib), 0.0))
    t0 = time.monotonic()
    try:
        install(root, "/opt/mxnet", ["--no-deps", f"{WHEELHOUSE}/{wheel.name}",
                                     "numpy>=1.23.5,<1.24"])
        done = chroot(root, ["/opt/mxnet/bin/python", "-c", "import mxnet"])
        outcome = "imports" if done.returncode == 0 else f"fails: {tail(done.stderr, 1, 200)}"
    except RuntimeError as exc:
        outcome = f"not installed: {exc}"
    rows.append(("mxnet==1.9.1: import mxnet in the root", outcome, time.monotonic() - t0))
    return rows


def remove_root(root: Path) -> None:
    left = mounted_under(root)
    if left:
        log(f"NOT removing {root}: still mounted there: {', '.join(left)}")
        return
    shutil.rmtree(root, ignore_errors=True)
    log(f"removed {root}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path,
                        help="the arm64 root to make or reuse, and keep (default: a new "
                             "folder under /var/tmp, removed at the end unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the root made without --root")
    parser.add_argument("--torch-refused", default="2.10.0",
                        help="a torch reported to die with SIGILL on ARMv8.0 ('' to skip)")
    parser.add_argument("--cpus", default=CPUS,
                        help=f"QEMU CPU models for that torch's host check [{CPUS}]")
    parser.add_argument("--engines", default="torch,torch-ddp",
                        help="the engines of the 2-worker cells [torch,torch-ddp]")
    parser.add_argument("--schedules", default=PIPE_SCHEDULES,
                        help="the schedules of the 2-stage torch-pipe cells, LeNet-CNN in 4 "
                             f"micro-batches ('' to skip) [{PIPE_SCHEDULES}]")
    parser.add_argument("--skip-mxnet", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: binfmt_misc, chroot and mounts")
    root = (args.root or Path(tempfile.mkdtemp(prefix="edgeprof-arm64-", dir="/var/tmp")))
    root = root.resolve()
    remove = args.root is None and not args.keep
    ensure_tools()
    mounts = Mounts()
    rows: list[tuple[str, str, float]] = []
    failed = False
    try:
        ensure_binfmt(mounts)
        took = ensure_root(root)
        rows.append(("arm64 bookworm root (mmdebstrap, Debian's archive)",
                     "made" if took else "reused", took))
        log(f"root {root}: {'made in %.0f s' % took if took else 'reused'}")
        mounts.mount(["-t", "proc", "proc"], root / "proc")
        mounts.mount(["-t", "sysfs", "sysfs"], root / "sys")  # torch's cpuinfo reads it
        mounts.mount(["--rbind", "/dev"], root / "dev")  # /dev/shm for multiprocessing
        # Unmounting it later must not reach the host's /dev/pts on a shared /.
        subprocess.run(["mount", "--make-rslave", str(root / "dev")], check=True)

        commit = copy_edgeprof(root)
        log(f"downloading edgeprof[torch]'s wheels (commit {commit}) under QEMU_CPU={CPU}")
        requirement = ["edgeprof[torch]"]
        constraints = f"{SRC}/constraints.txt"
        try:
            took = fetch(root, requirement, constraints)
            rows.append(("pip download -c constraints.txt edgeprof[torch] (to the wheelhouse)",
                         "ok", took))
            took = install(root, VENV, requirement, constraints)
        except RuntimeError as exc:
            rows.append(("pip install edgeprof[torch]", f"FAILED: {exc}", 0.0))
            failed = True
            return 1
        installed = versions(root, VENV, ("torch", "numpy", "psutil"))
        rows.append(("pip install -c constraints.txt edgeprof[torch] (a new venv)",
                     f"ok: {installed}", took))
        log(f"installed in {took:.0f} s: {installed}")

        answer, took = host_check(root, f"{VENV}/bin/python")
        ok = bool(answer.get("ok"))
        rows.append((f"host check, torch {answer.get('torch', '')}, QEMU_CPU={CPU}",
                     "ok" if ok else f"FAILED: {answer.get('problem')}", took))
        failed |= not ok
        log(f"host check in {took:.1f} s: {answer}")

        for engine in [e for e in args.engines.split(",") if e]:
            log(f"2-worker cell, --engine {engine}")
            status, ok, took = torch_cell(root, engine)
            rows.append((f"2-worker cell, --engine {engine} (lenet-mlp, 320 samples)",
                         status if ok else f"FAILED: {status}", took))
            failed |= not ok
            log(f"--engine {engine}: {status} in {took:.1f} s")

        for schedule in [s for s in args.schedules.split(",") if s]:
            log(f"2-stage cell, --engine torch-pipe --schedule {schedule}")
            status, ok, took = torch_cell(root, "torch-pipe", "lenet-cnn",
                                          ("--microbatches", "4", "--schedule", schedule),
                                          name=f"torch-pipe-{schedule}")
            rows.append((f"2-stage cell, --engine torch-pipe --schedule {schedule} "
                         "(lenet-cnn, 4 micro-batches of 4, 320 samples)",
                         status if ok else f"FAILED: {status}", took))
            failed |= not ok
            log(f"torch-pipe {schedule}: {status} in {took:.1f} s")

        if args.torch_refused:
            log(f"torch=={args.torch_refused} in its own venv, checked under {args.cpus}")
            rows += refused_torch(root, args.torch_refused,
                                  [c for c in args.cpus.split(",") if c])
        if not args.skip_mxnet:
            log("PyPI's aarch64 mxnet==1.9.1")
            rows += mxnet_wheel(root)
    finally:
        mounts.undo()
        print(f"\narm64 Debian bookworm under qemu-user {qemu_version()}, QEMU_CPU={CPU} "
              f"unless said; {os.cpu_count()} x86 cores (emulated: qemu's times, not a board's)")
        print("| check | seconds | result |\n| --- | ---: | --- |")
        for what, outcome, seconds in rows:
            print(f"| {what} | {seconds:.1f} | {outcome} |")
        if remove:
            remove_root(root)
        else:
            print(f"\nthe root is kept: {root} (--root {root} reuses it)")
    return 1 if failed else 0


def qemu_version() -> str:
    done = run(["qemu-aarch64-static", "--version"])
    match = re.search(r"version (\S+)", done.stdout)
    return match.group(1) if match else "?"


if __name__ == "__main__":
    sys.exit(main())
