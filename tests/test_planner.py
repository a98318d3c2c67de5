"""The commit planner's arithmetic and figure, on a calibration with known costs (pure logic: notebook
02 runs it on the real stack)."""

from __future__ import annotations

import pandas as pd
import pytest

from sinklab import viz
from sinklab.exceptions import TargetUnreachable
from sinklab.sink.cycle.pace import fit


def calibration(a: float = 0.3, b: float = 20e-6) -> viz.Calibration:
    records = [50, 50, 500, 500, 2000, 2000, 6000, 6000]
    points = pd.DataFrame({"records": records, "seconds": [a + b * n for n in records], "files": [2] * 8,
                           "bytes": [250 * n for n in records]})
    fitted_a, fitted_b, spread = fit(list(zip(points["records"], points["seconds"], strict=True)))
    return viz.Calibration(points, fitted_a, fitted_b, spread)


def test_the_frontier_stays_within_twice_what_was_measured() -> None:
    cal = calibration()
    plan = viz.frontier(cal, rate=400)
    assert plan["records_per_cycle"].max() == pytest.approx(2 * 6000)
    assert plan["records_per_cycle"].min() >= 25 - 1e-9
    # An interval shorter than a back-to-back cycle gives nothing: the first is at least that.
    assert plan["interval_s"].min() >= cal.a / (1 - cal.b * 400) - 1e-9
    assert plan["latency_s"].is_monotonic_increasing and plan["files_per_day"].is_monotonic_decreasing
    assert (plan["files_per_day_maintained"] < plan["files_per_day"]).all()
    first = plan.iloc[0]
    assert first["latency_s"] == pytest.approx(first["interval_s"] + 0.3 + 20e-6 * 400 * first["interval_s"])
    assert first["files_per_day"] == pytest.approx(86_400 / first["interval_s"] * 2)


def test_recommend_takes_the_longest_interval_that_meets_the_target() -> None:
    plan = viz.frontier(calibration(), rate=400)
    settings = viz.recommend(plan, target_s=2.0)
    interval_s = int(settings["iceberg.control.commit.interval-ms"]) / 1000
    assert settings["latency_s"] <= 2.0
    longer = plan[plan["interval_s"] > interval_s + 0.001]  # the setting is in whole milliseconds
    assert (longer["latency_s"] > 2.0).all() and not longer.empty
    assert settings["sinklab.commit.target-lag-ms"] == "2000"
    with pytest.raises(TargetUnreachable, match="no interval meets 0.2 s here: the best is") as missed:
        viz.recommend(plan, target_s=0.2)
    best = plan["latency_s"].min()
    assert missed.value.best_s == pytest.approx(best) and missed.value.best_s > 0.2
    assert viz.recommend(plan, target_s=missed.value.best_s)["latency_s"] <= missed.value.best_s + 0.01


def test_a_rate_the_sink_cannot_keep_up_with_is_refused() -> None:
    with pytest.raises(ValueError, match="fall behind even back to back"):
        viz.frontier(calibration(b=1e-3), rate=2000)


def test_the_figure_shows_measured_points_and_the_fit_apart() -> None:
    cal = calibration()
    fig = viz.plot_plan(cal, viz.frontier(cal, rate=400), target_s=2.0)
    measured = next(t for t in fig.data if t.name == "measured cycle")
    fitted = next(t for t in fig.data if t.name.startswith("fit"))
    assert measured.mode == "markers" and list(measured.x) == list(cal.points["records"])
    assert fitted.mode == "lines" and max(fitted.x) == pytest.approx(2 * 6000)
    assert any(shape.x0 == 50 and shape.x1 == 6000 for shape in fig.layout.shapes)  # the calibrated range
