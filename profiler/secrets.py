"""Secrets (InfluxDB token, Grafana token or password) from a 0600 file or the environment.

Never from argv: a command line is visible to every user in ``ps``. A file must be
readable by its owner only; the environment variable is the fallback when no file is
given (processes that do not need it never get it: ``cluster.base.SECRET_ENV_VARS``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ConfigError


def read_secret(path: Path | None, env_var: str, option: str) -> str | None:
    """The secret in ``path`` (mode 0600, non-empty), else ``$env_var``, else None."""
    if path is None:
        return os.environ.get(env_var) or None
    path = Path(path)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot read it ({exc.strerror}): "
                          "give a readable file holding the token") from None
    if mode & 0o077:
        raise ConfigError(f"{option} {path} is readable by others "
                          f"(mode {mode:04o}): run chmod 600 {path}")
    if not text:
        raise ConfigError(f"{option} {path} is empty: write the token into it")
    return text
