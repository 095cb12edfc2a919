"""Writing profiles files: the counterpart of ``cluster/profiles.py``'s parser.

``write_profile`` adds a calibration's result (``calibrate``) to a profiles file,
``write_user_profile`` a re-calibrated profile (``calibrate.check``); both read the file
as it is, change one profile and write it back atomically, then read the whole catalog
back through the parser, so that a file written here always loads.
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict
from pathlib import Path

import yaml

from ..cluster.profiles import USER_PROFILES, Profile, load_catalog, profile_files
from ..errors import ConfigError
from ..fsutil import atomic_write_text
from .result import Calibration


def write_profile(result: Calibration, path: Path | None = None) -> Path:
    """Add (or replace) the calibrated profile in ``path`` (default: the user's file).

    A model quota (``result.model``) goes into the profile's ``cpu_cores_by_model``,
    the profile otherwise kept as it is (copied into ``path`` if it came from another
    file); a fresh ``cpu_cores`` makes a new profile from the base's link and memory.
    """
    path = Path(path or USER_PROFILES).expanduser()
    doc = read_profiles_file(path, "give another --to FILE")
    note = _calibration_note(result)
    measured = _measured(result)
    dilated = {float(k): round(m.quota_cores, 5) for k, m in sorted(result.dilations.items())}
    dilated_model = result.model or _model_of(result.workload)
    if result.model is not None:
        entry = _with_model_quota(doc, result, path, measured, dilated)
    else:
        entry = _calibrated_profile(result, note, measured, dilated, dilated_model)
    doc.setdefault("profiles", {})[result.profile] = entry
    save_profiles_file(path, doc)
    return path


def _calibration_note(result: Calibration) -> str:
    """The calibration in a line, for a new profile's description: its rate against its
    target, and its check's when it has one."""
    note = (f"{result.workload} at {result.samples_per_s:.1f} samples/s (target "
            f"{result.target_samples_per_s:g})")
    if result.check_ratio is not None:
        note += (f"; {result.check_workload} {result.check_samples_per_s:.2f} samples/s, "
                 f"{result.check_ratio:.2f} x its reference {result.check_target_samples_per_s:g}")
    return note


def _measured(result: Calibration) -> dict:
    """What the profile's ``calibration`` records of a calibration: where and when, its
    figures, and the quotas found for each time dilation."""
    measured = {"host": platform.node(), "date": time.strftime("%Y-%m-%d"),
                **{k: v for k, v in asdict(result).items()
                   if k not in ("steps", "model", "dilations", "board_rate")}}
    if result.dilations:
        measured["dilations"] = {k: {"quota_cores": round(m.quota_cores, 5),
                                     "samples_per_s": m.samples_per_s}
                                 for k, m in sorted(result.dilations.items())}
    return measured


def _with_model_quota(doc: dict, result: Calibration, path: Path, measured: dict,
                      dilated: dict) -> dict:
    """The existing profile (``path``'s, else the known one) with the model's quota,
    calibration, board rate and dilated quotas added (or replaced)."""
    entry = dict((doc.get("profiles") or {}).get(result.profile) or
                 profile_to_extend(result.profile, path).as_spec())
    entry["cpu_cores_by_model"] = {**(entry.get("cpu_cores_by_model") or {}),
                                   result.model: round(result.quota_cores, 5)}
    entry["calibration"] = {**_calibrations_by_model(entry.get("calibration")),
                            result.model: measured}
    entry["board_rates"] = {**(entry.get("board_rates") or {}),
                            result.model: result.board_rate.as_spec()}
    if dilated:
        entry["cpu_cores_dilated"] = {**(entry.get("cpu_cores_dilated") or {}),
                                      result.model: dilated}
    return entry


def _calibrations_by_model(calibration) -> dict:
    """A profile's ``calibration`` as a mapping by quota (``cpu_cores`` or a model)."""
    if not isinstance(calibration, dict) or "workload" in calibration:
        # An older profile kept one calibration, its cpu_cores'.
        calibration = {"cpu_cores": calibration} if calibration else {}
    return calibration


def _calibrated_profile(result: Calibration, note: str, measured: dict, dilated: dict,
                        dilated_model: str) -> dict:
    """A new profile: the base's link and memory (and board cores, environment) with
    the calibrated ``cpu_cores``."""
    base = named_base_profile(result.base)
    return {"description": f"{base.description or base.name}, CPU calibrated ({note})",
            "link_mbit": base.link_mbit, "memory_mb": base.memory_mb,
            "cpu_cores": round(result.quota_cores, 5),
            **({"board_cores": base.board_cores} if base.board_cores else {}),
            **({"env_by_model": base.as_spec()["env_by_model"]}
               if base.env_by_model else {}),
            **({"cpu_cores_dilated": {dilated_model: dilated}} if dilated else {}),
            "board_rates": {dilated_model: result.board_rate.as_spec()},
            "calibration": {"cpu_cores": measured}}


def read_profiles_file(path: Path, fix: str) -> dict:
    """The profiles file at ``path`` as a mapping ({} if there is none yet); ``fix``
    ends the one line that refuses a file that is not one."""
    if not path.exists():
        return {}
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{path} cannot be read as YAML ({type(exc).__name__}): "
                          f"{fix}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path} is not a profiles file (no mapping at the top): {fix}")
    if doc.get("profiles") is None:
        doc.pop("profiles", None)  # `profiles:` with nothing under it: none yet
    elif not isinstance(doc["profiles"], dict):
        raise ConfigError(f"{path}: its profiles are not a mapping of names to profiles: "
                          f"{fix}")
    return doc


def save_profiles_file(path: Path, doc: dict) -> None:
    """Write ``doc`` to ``path`` atomically; it must read back as profiles."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False))
    load_catalog()  # the file just written must read back (raises one line if not)


def _model_of(label: str) -> str:
    """The model of a workload label (``resnet-32 batch 32`` -> ``resnet``: a model with
    a depth rule carries its depth after a dash)."""
    from workloads.models import with_depth

    name = label.split()[0]
    base, _, layers = name.rpartition("-")
    return base if base in with_depth() and layers.isdigit() else name


def profile_to_extend(name: str, to_file: Path | None) -> Profile:
    """The profile a model quota is added to: from ``to_file`` if it has it, else known."""
    files = None
    if to_file is not None and Path(to_file).expanduser().is_file():
        files = [*profile_files(), Path(to_file).expanduser()]
    catalog = load_catalog(files)
    if name not in catalog.profiles:
        raise ConfigError(f"--model-quota adds to an existing profile, and {name!r} is none: "
                          "calibrate its cpu_cores first (the same command without "
                          "--model-quota)")
    return catalog.profiles[name]


def named_base_profile(name: str) -> Profile:
    catalog = load_catalog()
    if name not in catalog.profiles:
        raise ConfigError(f"unknown base profile {name!r}: use one of "
                          f"{', '.join(sorted(catalog.profiles))} (its link and memory are kept)")
    return catalog.profiles[name]


def write_user_profile(profile: Profile, path: Path | None = None) -> Path:
    """Write ``profile`` whole into the user's profiles file (replacing one of its name)."""
    path = Path(path or USER_PROFILES).expanduser()
    doc = read_profiles_file(path, "move it away or fix it")
    doc.setdefault("profiles", {})[profile.name] = profile.as_spec()
    save_profiles_file(path, doc)
    return path
