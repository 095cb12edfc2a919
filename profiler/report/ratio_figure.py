"""A study's ratios drawn against their bands: ours / study per row, the range of repeats.

One line per judged (numeric) ratio of a study's section (``ratios.Ratio``), on a log
axis of ours / study so that x1.25 above and below the study sit at equal distances: the
band ``[1 / band, band]`` as a grey bar, the median of the repeats as a dot coloured by
its verdict (within, outside, too few steps), and the repeats' range, lowest to highest,
as a line through it. With one run there is no range: the dot alone. Rows that cannot be
drawn (no cell, not comparable, a yes/no finding) are left out and counted in the caption.
"""

from __future__ import annotations

from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

from .figures import Figure, plt, png_bytes
from .ratios import Ratio

COLOURS = {"within": "tab:green", "outside": "tab:red", "too few steps": "tab:grey"}
TICKS = (0.25, 0.33, 0.5, 0.67, 0.8, 0.91, 1, 1.1, 1.25, 1.5, 2, 3, 4)
ROW_HEIGHT_IN = 0.22  # a row's height in the figure (inches): a study has 40 or more


def _drawable(r: Ratio) -> bool:
    return (r.verdict in COLOURS and not isinstance(r.study, bool)
            and bool(r.study) and r.ours is not None and r.ours > 0)


def ratio_figure(rows: list[Ratio]) -> Figure | None:
    """The ratios figure, or None when no row can be drawn."""
    shown = [r for r in rows if _drawable(r)]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + ROW_HEIGHT_IN * len(shown)))
    for y, r in enumerate(shown):
        ax.plot([1 / r.band, r.band], [y, y], color="0.85", linewidth=7,
                solid_capstyle="butt", zorder=1)
        low, high = r.spread  # a single run's: (ours, ours)
        colour = COLOURS[r.verdict]
        if high > low:
            ax.plot([low / r.study, high / r.study], [y, y], color=colour, linewidth=1.5,
                    marker="|", markersize=8, zorder=2)
        ax.scatter([r.ours / r.study], [y], color=colour, s=22, zorder=3)
    ax.axvline(1.0, color="black", linewidth=0.6)
    ax.set_xscale("log")
    # Plain quotients (0.8, 1, 1.25), not powers of ten, at the bands' edges.
    low_x, high_x = ax.get_xlim()
    ticks = [t for t in TICKS if low_x <= t <= high_x]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([f"{t:g}" for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yticks(range(len(shown)),
                  [f"{r.source}: {r.measure}, {r.config}"[:70] for r in shown], fontsize=6)
    ax.invert_yaxis()  # the table's order, top to bottom
    ax.set_xlabel("ours / study (log)")
    ax.grid(axis="x", alpha=0.3, which="both")
    for verdict, colour in COLOURS.items():  # the verdicts drawn, in this order
        if any(r.verdict == verdict for r in shown):
            ax.scatter([], [], color=colour, s=22, label=verdict)
    ax.plot([], [], color="0.85", linewidth=7, label="band")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4,
              frameon=False)  # above the rows: below, it would cover the axis' label
    repeats = max((len(r.values) for r in shown), default=1)
    left_out = len(rows) - len(shown)
    caption = ("Each judged ratio as ours / study on a log axis: the grey bar is its band, "
               "the dot ours (green within, red outside, grey too few steps to judge)"
               + (f", the line the range of its {repeats} repeats (the dot their median)"
                  if repeats > 1 else "")
               + (f". {left_out} rows without a number to draw (no cell, not comparable, "
                  "or a yes/no finding) are left out." if left_out else "."))
    return Figure("fig-study-ratios", "The study's ratios against their bands", caption,
                  png_bytes(fig))
