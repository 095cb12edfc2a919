"""A drawn figure as the report shows it: PNG bytes with a name, title and caption.

Below every package that draws (the report, an engine's own report section) so that an
engine can hand the report a figure without importing it. matplotlib is imported when
something is drawn (``pyplot``), never at import: a node plans no figure.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

DPI = 90


@dataclass
class Figure:
    name: str  # file name stem, e.g. "fig-devices-time"
    title: str
    caption: str
    png: bytes


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig) -> bytes:
    """A pyplot figure as PNG bytes at the report's DPI; the figure is closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    pyplot().close(fig)
    return buffer.getvalue()
