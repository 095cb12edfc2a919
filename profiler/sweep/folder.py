"""A sweep's folder: created or reopened, its ``sweep.json``, and what ``--resume`` compares.

``sweep.json`` keeps the sweep's id, its cells, what ran it (``versions``) and its
*identity* (``SweepSettings.identity``: the cell format, the provider's ``identity``,
data, threads, seed, validation set), which a resumed sweep must match: otherwise its
results would mix two setups. Each run of a cell is an attempt with a folder of its own
(``cells/<cell_id>/attempt-<N>/``, ``next_attempt``).

``--resume`` rewrites ``sweep.json`` (``resumed_meta``): its id, creation time, identity
and first ``versions`` stay; the run's own settings (timeout, sampling interval,
shipping, inputs) become the resumed run's, ``extra`` takes the resumed run's keys over
the earlier ones, the grid's new cells are added after the recorded ones, and
``resumed`` lists each resumed run (when, its versions and settings). It also removes the
temporary files a killed controller left (``remove_stale_temps``): nothing else writes
the folder while its sweep runs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Protocol, Sequence

from ..cluster import declared_options
from ..engines import ENGINES, distributions
from ..errors import ConfigError
from ..fsutil import atomic_write_text, remove_matching, remove_stale_temps

log = logging.getLogger(__name__)


class SweepFolderSettings(Protocol):
    """What this module reads of a sweep's settings (``sweep.sweep.SweepSettings``, which
    imports this module: a protocol here keeps the import one way)."""

    out_dir: Path | None
    resume: bool
    cells: Sequence
    timeout_s: float | None
    interval_s: float | None
    extra: dict
    user_files: Sequence
    ship_target: object | None

    def identity(self) -> dict: ...


def new_sweep_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def check_sweep_dir(settings: SweepFolderSettings) -> dict | None:
    """Refuse an ``--out`` (and ``--resume``) that cannot work, writing nothing.

    Returns the earlier sweep's ``sweep.json`` when resuming, else None. The CLI calls it
    before it prints anything; ``prepare_sweep_dir`` calls it again (the Python API).
    """
    out = settings.out_dir
    if settings.resume:
        if out is None or not (Path(out) / "sweep.json").is_file():
            where = "" if out is None else f" ({out} has no sweep.json)"
            raise ConfigError(f"--resume needs --out DIR of an earlier sweep{where}: give "
                              "the folder that sweep wrote, e.g. --out runs/<sweep_id>")
        meta = read_sweep_meta(Path(out))
        check_resume(meta, settings)
        _check_links_inside(Path(out))
        return meta
    if out is not None:
        out = Path(out)
        if (out / "results.jsonl").exists():
            raise ConfigError(f"--out {out} already holds a sweep: add --resume to continue "
                              "it, or choose another --out")
        existing = next((p for p in (out, *out.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise ConfigError(f"--out {out} cannot be created ({existing} is a file): "
                              "choose another --out")
    return None


def prepare_sweep_dir(settings: SweepFolderSettings) -> tuple[str, Path]:
    """Create (or, with ``resume``, reopen and check) the sweep folder; check it is writable."""
    meta = check_sweep_dir(settings)
    if meta is not None:
        out = Path(settings.out_dir)
        _check_writable(out)
        removed = remove_stale_temps_of_sweep(out)
        if removed:
            log.info("--resume: removed %d temporary file(s) a stopped run left in %s",
                     removed, out)
        atomic_write_text(out / "sweep.json",
                          json.dumps(resumed_meta(meta, settings), indent=1, sort_keys=True))
        return meta["sweep_id"], out
    sweep_id = new_sweep_id()
    out = Path(settings.out_dir) if settings.out_dir is not None else Path("runs") / sweep_id
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out} cannot be created ({exc.strerror}): "
                          "choose a writable folder") from None
    _check_writable(out)
    meta = {"sweep_id": sweep_id, "created": time.time(), "identity": settings.identity(),
            "cells": _cells(settings), "versions": _versions(), **_run_settings(settings)}
    atomic_write_text(out / "sweep.json", json.dumps(meta, indent=1, sort_keys=True))
    return sweep_id, out


def _cells(settings: SweepFolderSettings) -> list[dict]:
    """The grid's cells as sweep.json keeps them (JSON's own types: pairs as lists)."""
    return json.loads(json.dumps([asdict(c) for c in settings.cells]))


def _run_settings(settings: SweepFolderSettings) -> dict:
    """What one run of the sweep was given besides its identity and grid."""
    return {"timeout_s": settings.timeout_s, "interval_s": settings.interval_s,
            **({"extra": settings.extra} if settings.extra else {}),
            # Where metrics were shipped and how (TLS verified or --influx-insecure).
            **({"shipping": settings.ship_target.recorded()} if settings.ship_target else {}),
            # The user's files the cells train with: where they came from, what they hold.
            **({"inputs": [{"kind": f.kind, "source": str(f.source), "sha256": f.digest,
                            "staged": f.staged_name} for f in settings.user_files]}
               if settings.user_files else {})}


def resumed_meta(meta: dict, settings: SweepFolderSettings) -> dict:
    """``sweep.json`` after ``--resume`` with ``settings`` (module docstring): what
    ``check_resume`` compared, the id and the first run's versions kept."""
    now = _run_settings(settings)
    recorded = meta.get("cells") if isinstance(meta.get("cells"), list) else []
    seen = {json.dumps(c, sort_keys=True) for c in recorded}
    added = [c for c in _cells(settings) if json.dumps(c, sort_keys=True) not in seen]
    extra = {**(meta.get("extra") if isinstance(meta.get("extra"), dict) else {}),
             **now.pop("extra", {})}
    runs = meta.get("resumed") if isinstance(meta.get("resumed"), list) else []
    return {**meta, **now, "cells": recorded + added, **({"extra": extra} if extra else {}),
            "resumed": [*runs, {"at": time.time(), "versions": _versions(),
                                "cells_added": len(added), **now}]}


# What ``fsutil.atomic_write_text`` leaves beside a file when its writer is killed: the
# controller's own files of a sweep folder (its results table and settings; each
# attempt's cell.json, trace.json and agents' pids files). The spools' shipping state is
# the shippers' (``profiler.agent.shipping.ship``, under their lock).
_SWEEP_FILES = ("results.csv", "sweep.json")
_ATTEMPT_TEMPS = (".cell.json.*.tmp", ".trace.json.*.tmp", "pids/.*.json.*.tmp")


def remove_stale_temps_of_sweep(out: Path) -> int:
    """Remove the temporary files a killed controller left in the sweep folder ``out``
    (only with no other run of the sweep under way); how many were removed."""
    removed = sum(remove_stale_temps(out / name) for name in _SWEEP_FILES)
    for attempt in (out / "cells").glob("*/attempt-*"):
        if attempt.is_symlink() or not attempt.is_dir():
            continue
        removed += sum(remove_matching(attempt, pattern) for pattern in _ATTEMPT_TEMPS)
    return removed


def _versions() -> dict:
    """What ran the sweep, for its report (which may be written elsewhere, later).

    From package metadata, not ``import mxnet``: importing MXNet costs the controller
    seconds. Packages that are not installed are left out.
    """
    import platform
    from importlib import metadata

    from .. import __version__

    found = {"edgeprof": __version__, "python": platform.python_version()}
    for package in distributions(ENGINES):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def read_sweep_meta(sweep_dir: Path) -> dict:
    """``sweep.json`` of a sweep folder; ``ConfigError`` (one line) when it is unusable."""
    path = Path(sweep_dir) / "sweep.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror}): check --out") from None
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep
        raise ConfigError(f"{path} is corrupt ({exc}): restore it, or start a new sweep "
                          "with another --out") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("sweep_id"), str):
        raise ConfigError(f"{path} has no sweep_id: it is not an edgeprof sweep; start a new "
                          "sweep with another --out")
    return meta


def check_resume(meta: dict, settings: SweepFolderSettings) -> None:
    """Refuse to resume with settings that change what the cells measure."""
    recorded = meta.get("identity")
    if not isinstance(recorded, dict):
        # A sweep from before identities were kept: older than cell formats too (format 1),
        # so it is refused below like any sweep of another cell format.
        recorded = {}
    now = settings.identity()
    if recorded.get("cell_format") != now["cell_format"]:
        raise ConfigError(
            f"--resume: the sweep in {settings.out_dir} was written by another edgeprof "
            f"version (cell format {recorded.get('cell_format', 1)}, this one "
            f"{now['cell_format']}), whose cells this one cannot match: start a new sweep "
            "with another --out")
    providers = declared_options()
    for key, value in now.items():
        if value is None and key in providers:
            now[key] = recorded.get(key)  # a provider option not given: the sweep's own
        if key in recorded and recorded[key] != now[key]:
            option = providers[key][0].flag if key in providers else RESUME_OPTIONS.get(key, key)
            raise ConfigError(
                f"--resume: {option} {_shown(now[key])} differs from the sweep's "
                f"{_shown(recorded[key])}: resume with {option} {_shown(recorded[key])}, "
                "or start a new sweep with another --out")


# The sweep's own settings in sweep.json's identity; the providers' are their options
# (``ProviderOption.identity``), named from the registry.
RESUME_OPTIONS = {"cluster": "--cluster", "data_dir": "--data-dir", "threads": "--threads",
                  "seed": "seed", "val_samples": "--val-samples"}


def _shown(value) -> str:
    return "(none)" if value is None else str(value)


def _check_links_inside(out: Path) -> None:
    """Refuse a folder whose results or cells are links leading out of it: a resumed
    sweep appends to ``results.jsonl`` and writes new attempts under ``cells/``."""
    root = out.resolve()
    cells = out / "cells"
    for path in (out / "results.jsonl", cells, *cells.glob("*"), *cells.glob("*/attempt-*")):
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            raise ConfigError(f"--resume: {path} is a link to {path.resolve()}, outside "
                              f"the sweep folder, where the sweep would write: copy it into "
                              "the folder, or start a new sweep with another --out")


def next_attempt(cell_root: Path) -> int:
    """The number of the next attempt of a cell: one more than the last one started."""
    numbers = [int(path.parent.name.split("-", 1)[1])
               for path in cell_root.glob("attempt-*/cell.json")
               if path.parent.name.split("-", 1)[1].isdigit()]
    return max(numbers, default=0) + 1


def _check_writable(path: Path) -> None:
    # os.access says yes to root everywhere; only a real write tells (read-only mounts).
    probe = path / f".write-test-{os.getpid()}"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--out {path} is not writable ({exc.strerror}): "
                          "choose a folder you can write to") from None
