"""The study's ratios figure (``report/ratio_figure.py``): what it draws and leaves out.

Read back from the PNG: a row outside its band is drawn red and none is when all are
within; the range of repeats is said in the caption; rows without a number are counted.
"""

from __future__ import annotations

import io

import matplotlib.image as mpimg
import numpy as np

from profiler.report.ratio_figure import ratio_figure
from profiler.report.ratios import Ratio


def _row(ours, values=(), **kw) -> Ratio:
    return Ratio("Table 1", "time 4 / 1 devices", "LeNet b64", 2.0, ours, 1.25,
                 values=values, **kw)


def _red_pixels(png: bytes) -> int:
    image = mpimg.imread(io.BytesIO(png))[..., :3]
    red = (image[..., 0] > 0.75) & (image[..., 1] < 0.3) & (image[..., 2] < 0.3)
    return int(np.count_nonzero(red))


def test_outside_rows_are_red_and_the_range_is_in_the_caption():
    rows = [_row(2.1, (1.9, 2.1, 2.3)), _row(3.5, (3.4, 3.5, 3.9)),
            _row(2.0, comparable=False), _row(None)]
    figure = ratio_figure(rows)
    assert figure is not None and figure.name == "fig-study-ratios"
    assert figure.png.startswith(b"\x89PNG") and _red_pixels(figure.png) > 20
    assert "the range of its 3 repeats" in figure.caption
    assert "2 rows without a number to draw" in figure.caption

    within = ratio_figure([_row(2.1), _row(1.9)])
    assert _red_pixels(within.png) == 0 and "repeats" not in within.caption


def test_nothing_to_draw_is_no_figure():
    assert ratio_figure([_row(None), _row(2.0, comparable=False)]) is None
    assert ratio_figure([]) is None
