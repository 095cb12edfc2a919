"""Draw a dashboard's layout (panels at their gridPos, rows as bands) as a PNG, for docs.

It is a diagram of where each panel sits and what it shows (title, type, first query's
measurement), drawn from the dashboard JSON with matplotlib, not a Grafana screenshot
(no Grafana server runs here).

    python -m dashboards.layout docs/img
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

BOARDS_DIR = Path(__file__).resolve().parents[1] / "profiler" / "dashboards"
COLOURS = {"timeseries": "#dbe9f6", "barchart": "#e3f1df", "table": "#fbeed7"}


def draw(board: dict, path: Path) -> Path:
    panels = board["panels"]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig, ax = plt.subplots(figsize=(12, bottom * 0.32 + 1))
    for panel in panels:
        g = panel["gridPos"]
        if panel["type"] == "row":
            ax.add_patch(Rectangle((0, g["y"]), 24, 1, color="#555555"))
            ax.text(0.3, g["y"] + 0.5, panel["title"], color="white", va="center",
                    fontsize=9, weight="bold")
            continue
        ax.add_patch(Rectangle((g["x"] + 0.1, g["y"] + 0.1), g["w"] - 0.2, g["h"] - 0.2,
                               facecolor=COLOURS.get(panel["type"], "#eeeeee"),
                               edgecolor="#888888"))
        source = re.search(r'FROM "(\w+)"', panel["targets"][0]["query"])
        ax.text(g["x"] + 0.5, g["y"] + 0.9, panel["title"], fontsize=8, va="top", wrap=True)
        ax.text(g["x"] + 0.5, g["y"] + g["h"] - 0.6,
                f"{panel['type']} · {source.group(1) if source else ''}", fontsize=7,
                color="#555555")
    variables = ", ".join(f"${v['name']}" for v in board["templating"]["list"])
    ax.set_title(f"{board['title']} (uid {board['uid']}) · variables: {variables}",
                 fontsize=9, loc="left")
    ax.set_xlim(0, 24)
    ax.set_ylim(bottom, 0)
    ax.axis("off")
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:] or ["docs/img"])[0])
    out.mkdir(parents=True, exist_ok=True)
    for source in sorted(BOARDS_DIR.glob("*.json")):
        board = json.loads(source.read_text())
        print(draw(board, out / f"dashboard-{board['uid']}.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
