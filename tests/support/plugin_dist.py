"""Plugin distributions written at test time: a project to install, or one installed.

``write_project`` writes a source tree (``pyproject.toml`` declaring the entry points,
and its modules) that pip installs; ``write_installed`` writes what pip leaves in a
site-packages folder (the modules and ``NAME-VERSION.dist-info`` with ``METADATA`` and
``entry_points.txt``), which ``importlib.metadata`` finds on ``sys.path`` as it finds an
installed one: the unit tests' many small distributions, without pip.
"""

from __future__ import annotations

import re
from pathlib import Path
from textwrap import dedent

# group → {entry point name → "module:attr"}
EntryPoints = dict[str, dict[str, str]]


def write_project(root: Path, name: str, entry_points: EntryPoints,
                  modules: dict[str, str], version: str = "0.1") -> Path:
    """A project ``name`` in ``root`` (setuptools, one module per file); ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    lines = ['[build-system]', 'requires = ["setuptools>=61"]',
             'build-backend = "setuptools.build_meta"', '',
             '[project]', f'name = "{name}"', f'version = "{version}"', '']
    for group, points in entry_points.items():
        lines.append(f'[project.entry-points."{group}"]')
        lines += [f'{point} = "{value}"' for point, value in points.items()]
        lines.append("")
    lines += ["[tool.setuptools]", f"py-modules = {sorted(modules)!r}".replace("'", '"')]
    (root / "pyproject.toml").write_text("\n".join(lines) + "\n")
    for module, text in modules.items():
        (root / f"{module}.py").write_text(dedent(text))
    return root


def write_installed(site: Path, name: str, entry_points: EntryPoints,
                    modules: dict[str, str], version: str = "0.1") -> None:
    """Distribution ``name`` as installed in the folder ``site`` (on ``sys.path``)."""
    info = site / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n"
                                   f"Version: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{point} = {value}\n" for point, value in points.items())
        + "\n" for group, points in entry_points.items()))
    for module, text in modules.items():
        (site / f"{module}.py").write_text(dedent(text))
