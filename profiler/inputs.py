"""The user's files a sweep carries to its nodes: a model file, a dataset, a script, a
checkpoint of trained weights (an engine's setting: ``torch-pipe --weights PATH``).

A ``UserFile`` is checked and digested on the controller before anything runs
(``user_file``); ``run_sweep`` then copies every one into ``<sweep>/inputs/`` under a
name made of its kind and digest (``staged_name``), so that a cell names a file by what
is in it, a resumed sweep finds it again, and a changed file is a new name. Engines put
the staged path in a process's argv (``staged_path``). Local and emulated nodes read the
folder where it is; the inventory cluster copies it to each node before the node's first
process and removes it with the sweep (``profiler.cluster.inventory.cluster``).

Light on purpose (standard library only): the CLI checks files with it before planning.
It sits in the bottom layer, beside ``profiler.errors``: the engines, the inventory
cluster and a worker's dataset code (``workloads.datasets.user``) read it too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .errors import ConfigError

INPUTS_DIR = "inputs"
KINDS = ("model", "dataset", "script", "weights")
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class UserFile:
    """One file of the user's: what it is for, where it is, and the SHA-256 of its bytes."""

    kind: str  # one of KINDS
    source: Path
    digest: str  # sha256, hex

    @property
    def staged_name(self) -> str:
        """Its name in ``<sweep>/inputs/``: ``model-0123456789ab.py``."""
        return staged_name(self.kind, self.digest, self.source.suffix)

    @property
    def label(self) -> str:
        """What results call it: the file's own name."""
        return self.source.name


def staged_name(kind: str, digest: str, suffix: str) -> str:
    return f"{kind}-{digest[:12]}{suffix}"


def staged_path(inputs_dir: Path | None, kind: str, digest: str, suffix: str) -> Path:
    """Where a staged file is, for an engine's argv (``inputs_dir``: ``TrainOptions``')."""
    if inputs_dir is None:
        raise ConfigError(f"a cell needs the user's {kind} file, and the sweep staged none: "
                          "run it through `edgeprof sweep` (or give SweepSettings.user_files)")
    return Path(inputs_dir) / staged_name(kind, digest, suffix)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def user_file(kind: str, path: str | Path, option: str) -> UserFile:
    """``path`` checked (one line naming ``option`` if it is no readable file) and digested."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of user file {kind!r}: one of {KINDS}")
    source = Path(path).expanduser()
    if not source.exists():
        raise ConfigError(f"{option} {path}: no such file: give the path of an existing file")
    if not source.is_file():
        raise ConfigError(f"{option} {path} is not a file: give the path of a file")
    try:
        return UserFile(kind, source.resolve(), sha256_file(source))
    except OSError as exc:
        raise ConfigError(f"{option} {path} cannot be read ({exc.strerror or exc}): "
                          "check its permissions") from None


def stage(files: Iterable[UserFile], sweep_dir: Path) -> Path:
    """Copy each file into ``<sweep_dir>/inputs/`` (once: a staged name is its content)
    and return that folder. A copy is written beside its name and renamed into place, so
    a sweep killed mid-copy never leaves a short file under a digest's name."""
    inputs_dir = Path(sweep_dir) / INPUTS_DIR
    inputs_dir.mkdir(parents=True, exist_ok=True)
    for item in files:
        target = inputs_dir / item.staged_name
        if target.exists():
            continue
        partial = target.with_name(f".{target.name}.partial")
        shutil.copyfile(item.source, partial)
        if sha256_file(partial) != item.digest:
            partial.unlink()
            raise ConfigError(f"{item.source} changed while the sweep started: run it again "
                              "once the file is written")
        os.replace(partial, target)
    return inputs_dir
