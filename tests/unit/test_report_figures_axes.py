"""The report's figures read as their data: device axes ticked at the counts run (not
1.0, 1.2, ... 2.0), whole epochs, and the epochs figure's legend beside its axes rather
than over the lines of a dozen cells."""

from __future__ import annotations

import pytest

from profiler.report import figures


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figures the builders draw, kept open instead of turned into PNG."""
    kept = []
    monkeypatch.setattr(figures, "png_bytes", lambda fig: kept.append(fig) or b"")
    yield kept
    for fig in kept:
        figures.plt.close(fig)


def _cell(devices: int, batch: int = 32, **kw) -> dict:
    return {"cell_id": f"c{devices}-{batch}", "status": "ok", "engine": "mxnet",
            "model": "lenet-mlp", "layers": None, "batch": batch, "devices": devices,
            "sync": "sync", "epochs": 3, "train_s": 10.0 / devices, "val_accuracy": 0.9,
            "cpu_percent_mean": 50.0, "mem_used_mb_mean": 300.0, "net_sent_kb_per_s": 10.0,
            **kw}


@pytest.mark.parametrize("builder", [figures.time_and_accuracy_vs_devices,
                                     figures.resources_vs_devices])
def test_device_axes_are_ticked_at_the_counts_run(drawn, builder):
    records = [_cell(d, b) for d in (1, 2, 4) for b in (32, 64)] + [_cell(3, 64)]
    assert isinstance(builder(records), figures.Figure)
    for ax in drawn[0].axes:
        assert list(ax.get_xticks()) == [1, 2, 3, 4]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3", "4"]


def test_the_epochs_legend_is_beside_the_axes(drawn):
    records = [_cell(1, batch, val_accuracy_per_epoch=[0.5, 0.7, 0.8])
               for batch in range(16, 16 + 12 * 8, 8)]
    assert isinstance(figures.accuracy_over_epochs(records), figures.Figure)
    fig = drawn[0]
    ax = fig.axes[0]
    fig.canvas.draw()
    legend = ax.get_legend()
    assert len(legend.get_texts()) == 12
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1
    assert all(tick == int(tick) for tick in ax.get_xticks())
