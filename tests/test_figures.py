"""Unit tests of sinklab.viz's pure logic on small hand-made frames (no stack): the warm-up rule, the
explorer's not-enough-data rule, integer ticks, one colour and one legend entry per series, and the
offline picture of every figure."""

from __future__ import annotations

import base64

import pandas as pd
import plotly.graph_objects as go

from sinklab import viz
from sinklab.viz import explorer, figures, render


def stamps(*seconds: float) -> pd.Series:
    return pd.to_datetime(pd.Series(seconds) * 1000, unit="ms", utc=True)


def test_latency_statistics_leave_the_warm_up_cycle_out() -> None:
    vis = pd.DataFrame({
        "table": ["t"] * 5, "latency_s": [30.0, 29.0, 1.0, 2.0, float("nan")],
        "warmup": [True, True, False, False, False]})
    pct = viz.latency_percentiles(vis, quantiles=(0.5,)).iloc[0]
    assert (pct["records"], pct["p50"], pct["max"], pct["warmup_records"]) == (2, 1.5, 2.0, 2)
    assert viz.latency_percentiles(vis, quantiles=(0.5,), warmup=True).iloc[0]["records"] == 4
    assert viz.steady(vis)["latency_s"].tolist() == [1.0, 2.0]


def snaps_frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"visible_at": stamps(*range(10, 10 + n)), "added_files": [2] * n,
                         "added_bytes": [2048] * n, "commit_id": [f"c{i}" for i in range(n)]})


def test_the_explorer_projects_nothing_from_fewer_than_five_commits() -> None:
    vis = pd.DataFrame({"produced_at": stamps(0, 1), "latency_s": [1.0, 3.0]})
    cycles = pd.DataFrame({"commit_id": ["c0"], "duration_ms": [500]})
    few = explorer._measure(4000, snaps_frame(explorer.MIN_COMMITS - 1), vis, cycles)
    assert pd.isna(few["snapshots_per_hour"]) and pd.isna(few["files_per_table_per_hour"])
    assert few["note"] == "not enough data: 4 commits (< 5)" and few["p50_s"] == 2.0  # measured, not projected
    enough = explorer._measure(1000, snaps_frame(explorer.MIN_COMMITS), vis, cycles)
    assert enough["note"] == "" and enough["window_s"] == 14.0  # first produced (0 s) to last visible (14 s)
    assert enough["snapshots_per_hour"] == 5 / 14 * 3600 and enough["mean_file_kib"] == 1.0

    results = pd.DataFrame([enough, few], columns=explorer.RESULT_COLUMNS)
    fig = figures.plot_tradeoff(results)
    assert {len(t.x) for t in fig.data} == {1}  # only the interval with enough commits is drawn
    assert fig.layout.annotations[-1].text == "4 s: not enough data (4 commits)"
    p50 = {t.marker.color for t in fig.data if t.legendgroup == "p50_s"}
    p99 = {t.marker.color for t in fig.data if t.legendgroup == "p99_s"}
    assert len(p50) == len(p99) == 1 and p50 != p99  # one colour per series in all three panels
    # One latency axis title, on the first panel: three side by side fit a docs page's width.
    assert [fig.layout[f"yaxis{i}"].title.text for i in ("", "2", "3")] == ["visibility latency (s)", None, None]


def test_counts_get_whole_ticks_and_series_one_colour_and_one_legend_entry() -> None:
    snaps = pd.DataFrame({
        "table": ["b.t", "a.t", "a.t"], "visible_at": stamps(1, 2, 3), "total_records": [1, 2, 3],
        "added_records": [1, 2, 1], "added_files": [1, 1, 1], "added_bytes": [10, 10, 10],
        "snapshot_id": [1, 2, 3], "operation": ["append"] * 3, "offsets": [None] * 3, "commit_id": ["c"] * 3,
        "sink": ["s"] * 3})
    history = figures.plot_snapshots(snaps)
    assert (history.layout.yaxis.dtick, history.layout.yaxis.tickformat) == (1, ",d")
    files = figures.plot_files(snaps)
    assert files.layout.yaxis.dtick == 1 and files.layout.yaxis.title.text == "data files added (bars)"
    colour = {t.name: t.line.color for t in history.data}
    assert colour == {"a.t": figures.PALETTE[0], "b.t": figures.PALETTE[1]}
    assert {t.legendgroup: t.marker.color for t in files.data if t.type == "bar"} == colour

    grid = figures.combine([history, files])
    legend = sorted(t.name for t in grid.data if t.showlegend)
    assert legend == ["a.t", "b.t"]  # drawn in both panels, named once
    assert history.data[0].name == "a.t" and files.data[0].name == "a.t: files"  # the panels keep their names
    assert grid.layout.yaxis.title.text == "rows in the table"

    # Fresh counts beside the committed steps: a dotted line per table, in the table's colour.
    counts = pd.DataFrame({"at": stamps(1, 2, 3), "table": ["a.t"] * 3, "rows": [2, 40, 70]})
    both = figures.plot_snapshots(snaps, fresh=counts)
    dotted = [t for t in both.data if t.line.dash == "dot"]
    assert [(t.name, t.line.color, list(t.y)) for t in dotted] == [
        ("a.t (fresh read)", figures.PALETTE[0], [2, 40, 70])]
    assert both.layout.yaxis.dtick is None  # 70 rows: no tick per row
    # The committed rows are a step (flat until the next snapshot), the fresh count a line.
    assert [t.line.shape for t in both.data] == ["hv", "hv", None]


def test_every_figure_carries_a_picture() -> None:
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
    bundle = render.OfflineRenderer().to_mimebundle(fig.to_plotly_json())
    assert bundle[render.PLOTLY_MIME]["data"][0]["type"] == "bar"
    assert base64.b64decode(bundle[render.PNG_MIME]).startswith(b"\x89PNG")
    assert set(fig._repr_mimebundle_()) >= {render.PLOTLY_MIME, render.PNG_MIME}  # the default renderer


def test_faults_shade_the_time_panels_until_recovery_or_now() -> None:
    faults = [{"at": 100.0, "kind": "retry", "detail": "KafkaUnavailable: broker away"},
              {"at": 102.0, "kind": "retry", "detail": "KafkaUnavailable: broker away"},
              {"at": 110.0, "kind": "recovered", "detail": "after 10.0 s"},
              {"at": 200.0, "kind": "failed", "detail": "RecordError: record t[0]@5"}]
    spans = figures.fault_spans(faults, now=260.0)
    assert [(a.timestamp(), b.timestamp(), kind) for a, b, kind, _ in spans] == [
        (100.0, 110.0, "retry"), (200.0, 260.0, "failed")]
    assert spans[0][3].startswith("2 cycles retried: KafkaUnavailable")
    still = figures.fault_spans(faults[:2], now=105.0)
    assert [(kind, label.split(":")[0]) for _, _, kind, label in still] == [("retry", "retrying (2)")]

    grid = figures.combine([go.Figure(go.Scatter(x=stamps(100, 300), y=[1, 2])) for _ in range(4)])
    figures.mark_faults(grid, faults, cells=[(1, 1), (2, 2)], now=260.0)
    shaded = [s for s in grid.layout.shapes if s.type == "rect"]
    assert len(shaded) == 4 and {s.fillcolor for s in shaded} == {figures.FAULT_COLOURS["retry"],
                                                                  figures.FAULT_COLOURS["failed"]}
    assert {s.xref for s in shaded} == {"x", "x4"}
    # Each span labelled once, on the first panel (plotly labels the others "new text" if asked anything).
    labels = [a.text for a in grid.layout.annotations if "retried" in a.text or "FAILED" in a.text]
    assert len(labels) == 2 and not [a for a in grid.layout.annotations if a.text == "new text"]
    assert figures.mark_faults(go.Figure(), [], cells=[(1, 1)]).layout.shapes == ()
    tuned = {"at": 150.0, "kind": "tuned", "detail": "iceberg.control.commit.interval-ms=1000"}
    moments = figures.mark_moments(figures.combine([go.Figure(go.Scatter(x=stamps(100, 300), y=[1, 2]))
                                                    for _ in range(2)]), [tuned], cells=[(1, 1), (1, 2)])
    assert [s.type for s in moments.layout.shapes] == ["line", "line"]
    assert [a.text for a in moments.layout.annotations if "tuned" in a.text or a.text == "new text"] == [
        "tuned iceberg.control.commit.interval-ms=1000"]


def test_the_trade_off_of_two_sinks_is_a_line_each() -> None:
    vis = pd.DataFrame({"produced_at": stamps(0, 1), "latency_s": [1.0, 3.0]})
    cycles = pd.DataFrame({"commit_id": ["c0"], "duration_ms": [500]})
    rows = [{"sink": sink, **explorer._measure(ms, snaps_frame(explorer.MIN_COMMITS), vis, cycles)}
            for sink in ("sinklab", "apache") for ms in (1000, 4000)]
    rows.append({"sink": "apache", **explorer._measure(9000, snaps_frame(2), vis, cycles)})
    fig = figures.plot_tradeoff(pd.DataFrame(rows, columns=explorer.RESULT_COLUMNS))
    firsts = [t for t in fig.data if t.showlegend]
    assert [t.name for t in firsts] == ["sinklab p50 latency", "sinklab p99 latency", "apache p50 latency",
                                        "apache p99 latency"]
    assert {t.line.dash for t in fig.data if t.name.startswith("apache")} == {"dash"}
    assert all(len(t.x) == 2 for t in fig.data)  # the 9 s run of two commits is named, not drawn
    assert fig.layout.annotations[-1].text == "apache 9 s: not enough data (2 commits)"
