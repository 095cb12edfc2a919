"""The report's "Predicted beyond the measured cells" from hand-made records: a sweep the
step model can fit gets its curve (a figure per configuration, drawn) and a table of
predicted values past its cells; one it cannot fit gets no section and no error; and the
report asks ``profiler.predict`` for it only through the seam it offers."""

from __future__ import annotations

import io

import pytest

from profiler.report import prediction_section as seam

# A ring allreduce (torch-ddp, local cluster): a 100 ms base and 20 ms per extra peer,
# a 1 M-parameter model (the loopback wire adds ~1.6 ms a step at N = 2).
BASE_MS, PEER_MS, PARAMETERS, BATCH = 100.0, 20.0, 1_000_000, 32


def _record(devices: int, step_ms: float, repeat: int = 0) -> dict:
    return {"status": "ok", "cell_id": f"c{devices}-{repeat}", "model": "lenet-mlp",
            "layers": None, "batch": BATCH, "engine": "torch-ddp", "sync": "sync",
            "placement": "master", "data_partition": "replicate", "dataset": "mnist",
            "devices": devices, "steady_step_ms": step_ms, "parameters": PARAMETERS,
            "train_samples": 384, "cluster": "local"}


def _truth(n: int) -> float:
    wire_ms = 2 * PARAMETERS * 4 * (n - 1) / n * 8 / 10_000e6 * 1e3 if n > 1 else 0.0
    return BASE_MS + PEER_MS * (n - 1) + wire_ms


def _sweep(devices=(1, 2, 3, 4)) -> list[dict]:
    # +-1 ms around the truth: residuals, so an interval, but the terms stay close.
    return [_record(n, _truth(n) + (1.0 if r else -1.0), r) for n in devices for r in (0, 1)]


def _not_blank(png: bytes) -> bool:
    import matplotlib.image as mpimg
    pixels = mpimg.imread(io.BytesIO(png), format="png")
    return pixels.shape[0] > 50 and pixels.shape[1] > 50 and float(pixels.std()) > 0.01


def test_a_fittable_sweep_gets_its_curve_and_a_table_past_its_cells():
    from profiler.predict.report_section import section

    shown = section(_sweep())
    assert shown is not None and shown.title == "Predicted beyond the measured cells"
    assert len(shown.figures) == 1 and _not_blank(shown.figures[0].png)
    assert "1 to 20 devices" in shown.figures[0].caption  # max(20, 2 x 4)
    col = {h: i for i, h in enumerate(shown.headings)}
    by_n = {int(row[col["N"]]): row for row in shown.rows}
    assert sorted(by_n) == [4, 8, 20, 50, 100]
    # The model recovers the terms it was made of: 100 + 20 x 19 ms at 20 devices.
    step_20 = float(by_n[20][col["step ms"]].replace(",", ""))
    assert step_20 == pytest.approx(_truth(20), rel=0.03)
    low, high = (float(v.replace(",", "")) for v in by_n[20][col["90% interval"]].split("-"))
    assert low < step_20 < high
    # Measured beside predicted where a cell was run; nothing where none was.
    assert float(by_n[4][col["measured ms"]]) == pytest.approx(_truth(4))
    assert by_n[20][col["measured ms"]] == ""
    assert shown.fits and "peer_ms 20" in shown.fits[0] and not shown.not_fitted


def test_a_study_runs_section_asks_about_the_studys_epoch():
    from profiler.predict.report_section import section

    col = {h: i for i, h in enumerate(section(_sweep()).headings)}
    meta = {"extra": {"study": "park2019", "epoch_samples": {"lenet-mlp": 60000}}}
    for row in section(_sweep(), meta).rows:  # every worker all of it: 1,875 steps of 32
        step_s = float(row[col["step ms"]].replace(",", "")) / 1e3
        assert float(row[col["epoch s"]].replace(",", "")) == pytest.approx(
            1875 * step_s, rel=0.002)


def test_a_sweep_it_cannot_fit_gets_no_section_and_no_error():
    from profiler.predict.report_section import section

    assert section(_sweep(devices=(1, 2))) is None  # one device count above 1
    assert section(_sweep(devices=(2, 3, 4))) is None  # no base: no 1-device cell
    assert section([{**r, "status": "failed"} for r in _sweep()]) is None
    assert section([]) is None
    # A cell an older edgeprof recorded without a step time: no fit, and the report
    # is still written.
    assert section([{k: v for k, v in r.items() if k != "steady_step_ms"}
                    for r in _sweep()]) is None


def test_the_report_gets_the_section_only_once_predict_offers_it(monkeypatch):
    monkeypatch.setattr(seam, "_maker", lambda records, meta: None)
    assert seam.prediction_section(_sweep()) is None  # nothing offered: no section
    from profiler.predict import report_section
    seam.offer_prediction(report_section.section)
    assert seam.prediction_section(_sweep()).figures
