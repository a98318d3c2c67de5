"""Plotly figures over the frames of ``sinklab.readings``: pure functions, frame in, figure out."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sinklab.sink.records import DEAD_LETTER_TABLE, DEAD_LETTERED, KEY_CONVERTER_FAILED

TEMPLATE = "plotly_white"
# A latency scatter of millions of records would make a notebook of hundreds of megabytes.
MAX_POINTS = 5_000


# One colour per series (a table, a partition, an interval), the same in every panel that shows it.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
WARMUP_COLOR = "#b0b0b0"


def colors(names: Any) -> dict[str, str]:
    """A colour for each series, by its place among the sorted names: frames that hold the same tables
    give each table the same colour in every figure."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(sorted({str(n) for n in names}))}


def series(frame: pd.DataFrame) -> pd.Series:
    """The name a row's series is drawn under: a readable ``series`` column when the frame has one
    (the explorer's ``interval 1 s``), else its ``table``."""
    return frame["series"] if "series" in frame.columns else frame["table"]


def integer_axis(fig: go.Figure, values: Any, axis: str = "y", **where: Any) -> None:
    """Counts get whole-number ticks: no 0.2 records. ``values`` are the counts drawn on that axis."""
    array = np.asarray(values, dtype=float)
    top = float(np.nanmax(array)) if array.size and not np.isnan(array).all() else 0.0
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    update(tickformat=",d", rangemode="tozero", **({"dtick": 1} if top <= 5 else {}), **where)


def _figure(title: str, x: str, y: str, **layout: Any) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title=title, xaxis_title=x, yaxis_title=y, legend_title_text="",
                      hovermode="closest", margin={"t": 60, "r": 20, "b": 50, "l": 60}, **layout)
    return fig


def _offsets_text(offsets: dict[str, dict[int, int]] | None) -> str:
    if not offsets:
        return "—"
    return "<br>".join(f"{t}: " + ", ".join(f"{p}→{o}" for p, o in sorted(parts.items()))
                       for t, parts in sorted(offsets.items()))


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def plot_snapshots(snaps: pd.DataFrame, title: str = "Snapshot history", fresh: pd.DataFrame | None = None
                   ) -> go.Figure:
    """Rows in each table over time, one marker per snapshot (hover: records, files, bytes, offsets).

    Sink commits are circles; other writers' snapshots (compaction, a user's DELETE) are crosses. With
    ``fresh`` (``at``, ``table``, ``rows``: counts of fresh reads, ``sinklab.fresh``), a dotted line per
    table beside its steps: what a fresh read returned at each moment.
    """
    fig = _figure(title, "visible at (UTC)", "rows in the table")
    palette = colors(sorted({*series(snaps), *(fresh["table"] if fresh is not None else [])}))
    for table, group in snaps.groupby(series(snaps), sort=True):
        by_sink = group["sink"].notna().to_numpy()
        custom = np.column_stack([
            group["snapshot_id"].astype(str), group["operation"].fillna(""), group["added_records"],
            group["added_files"], group["added_bytes"].map(_kib), group["offsets"].map(_offsets_text),
            group["commit_id"].fillna("—"), group["sink"].fillna("another writer"),
        ])
        fig.add_trace(go.Scatter(
            x=group["visible_at"], y=group["total_records"], mode="lines+markers", name=str(table),
            # A step: the table holds what its last snapshot holds until the next one.
            legendgroup=str(table), line={"color": palette[str(table)], "shape": "hv"},
            marker={"symbol": np.where(by_sink, "circle", "x"), "size": 9, "color": palette[str(table)]},
            customdata=custom,
            hovertemplate=("<b>%{fullData.name}</b> snapshot %{customdata[0]} (%{customdata[1]})<br>"
                           "%{x}<br>rows %{y:,} (+%{customdata[2]:,} records, %{customdata[3]} files, "
                           "%{customdata[4]})<br>by %{customdata[7]}, commit %{customdata[6]}<br>"
                           "offsets:<br>%{customdata[5]}<extra></extra>"),
        ))
    if fresh is not None:
        for table, group in fresh.groupby("table", sort=True):
            fig.add_trace(go.Scatter(
                x=group["at"], y=group["rows"], mode="lines", name=f"{table} (fresh read)", legendgroup=str(table),
                line={"color": palette[str(table)], "dash": "dot"},
                hovertemplate="<b>%{fullData.name}</b><br>%{x}<br>rows %{y:,}<extra></extra>"))
    integer_axis(fig, [*snaps["total_records"], *(fresh["rows"] if fresh is not None else [])])
    return fig


def plot_cadence(cad: pd.DataFrame, interval_ms: int | None = None,
                 title: str = "Commit cadence: time between commits", cycle_frame: pd.DataFrame | None = None,
                 ) -> go.Figure:
    """Each gap between two commits of a table, against the configured commit interval (dashed). With
    ``cycle_frame``, each cycle's own time too (gray bars): under the line, the interval sets the pace;
    at or above it, the cycle does."""
    fig = _figure(title, "commit visible at (UTC)", "time since the previous commit (s)")
    if cycle_frame is not None and not cycle_frame.empty:
        fig.add_trace(go.Bar(x=cycle_frame["completed_at"], y=cycle_frame["duration_ms"] / 1000, name="cycle time",
                             marker={"color": "lightgray"}, customdata=cycle_frame["read"],
                             hovertemplate="cycle of %{customdata:,} records: %{y:.2f} s<extra></extra>"))
    palette = colors(series(cad))
    for table, group in cad.groupby(series(cad), sort=True):
        fig.add_trace(go.Scatter(
            x=group["at"], y=group["gap_s"], mode="markers+lines", name=str(table), legendgroup=str(table),
            line={"color": palette[str(table)]},
            customdata=group["snapshot_id"].astype(str),
            hovertemplate="%{fullData.name}<br>%{x}<br>gap %{y:.2f} s<br>snapshot %{customdata}<extra></extra>"))
    interval = interval_ms / 1000 if interval_ms else (cad["interval_s"].dropna().iloc[0]
                                                         if "interval_s" in cad and cad["interval_s"].notna().any()
                                                         else None)
    if interval:
        fig.add_hline(y=interval, line_dash="dash", line_color="gray",
                      annotation_text=f"commit interval {interval:g} s", annotation_position="top left")
    fig.update_yaxes(rangemode="tozero")
    return fig


def plot_fan_out(commit_frame: pd.DataFrame, title: str = "Fan-out: records per table per cycle",
                 cycle_frame: pd.DataFrame | None = None) -> go.Figure:
    """Grouped bars: each cycle's rows per table it wrote. A record routed to two tables is a row in
    each, so the bars of a cycle can add up to more than it read; with ``cycle_frame`` a black tick
    marks what each cycle read from Kafka."""
    fig = _figure(title, "cycle", "rows written per table", barmode="group")
    palette = colors(commit_frame["table"])
    for table, group in commit_frame.groupby("table", sort=True):
        fig.add_trace(go.Bar(
            x=group["cycle"], y=group["records"], name=str(table), legendgroup=str(table),
            marker={"color": palette[str(table)]},
            customdata=np.column_stack([group["data_files"], group["bytes"].map(_kib), group["commit_id"]]),
            hovertemplate=("%{fullData.name}<br>cycle %{x}: %{y:,} records, %{customdata[0]} files, "
                           "%{customdata[1]}<br>commit %{customdata[2]}<extra></extra>")))
    if cycle_frame is not None and not cycle_frame.empty:
        fig.add_trace(go.Scatter(x=cycle_frame["cycle"], y=cycle_frame["read"], mode="markers", name="read from Kafka",
                                 marker={"symbol": "line-ew-open", "size": 28, "color": "black",
                                         "line": {"width": 2}},
                                 hovertemplate="cycle %{x}: %{y:,} records read<extra></extra>"))
    if commit_frame["table"].nunique() > 1:
        fig.add_annotation(text="a record routed to two tables is a row in each", showarrow=False,
                           xref="paper", yref="paper", x=0, y=1.06, xanchor="left", font={"size": 11})
    fig.update_xaxes(dtick=1 if commit_frame["cycle"].nunique() <= 30 else None)
    integer_axis(fig, commit_frame["records"])
    return fig


def plot_sankey(flow_frame: pd.DataFrame, title: str = "Fan-out: topics → sink → tables") -> go.Figure:
    """Where the records went: each topic into the sink, the sink into each table (or dead letters)."""
    nodes = list(dict.fromkeys([*flow_frame["source"], *flow_frame["target"]]))
    index = {n: i for i, n in enumerate(nodes)}
    inflow = flow_frame.groupby("target")["records"].sum()
    outflow = flow_frame.groupby("source")["records"].sum()
    # A picture has no hover: every node says how many records reached it (a topic: how many left it).
    labels = [f"{n}: {int(inflow.get(n, outflow.get(n, 0))):,}" for n in nodes]
    fig = go.Figure(go.Sankey(
        node={"label": labels, "pad": 18, "thickness": 16, "customdata": nodes,
              "hovertemplate": "%{customdata}: %{value:,} records<extra></extra>"},
        link={"source": [index[s] for s in flow_frame["source"]], "target": [index[t] for t in flow_frame["target"]],
              "value": flow_frame["records"].tolist(),
              "hovertemplate": "%{source.label} → %{target.label}: %{value:,} records<extra></extra>"},
    ))
    fig.update_layout(template=TEMPLATE, title=title, margin={"t": 60, "r": 20, "b": 20, "l": 20})
    return fig


def plot_files(snaps: pd.DataFrame, title: str = "Files per commit and their mean size") -> go.Figure:
    """The small-files view: data files each commit added (bars) and their mean size (line, right axis)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.update_layout(template=TEMPLATE, title=title, barmode="group", legend_title_text="",
                      margin={"t": 60, "r": 60, "b": 50, "l": 60})
    palette = colors(series(snaps))
    written = snaps[snaps["added_files"] > 0]
    for table, group in written.groupby(series(written), sort=True):
        mean = group["added_bytes"] / group["added_files"] / 1024
        color = palette[str(table)]
        fig.add_trace(go.Bar(x=group["visible_at"], y=group["added_files"], name=f"{table}: files",
                             legendgroup=str(table), marker={"color": color, "opacity": 0.55},
                             customdata=np.column_stack([group["added_records"], group["added_bytes"].map(_kib)]),
                             hovertemplate=("%{fullData.name}<br>%{x}<br>%{y} files, %{customdata[0]:,} records, "
                                            "%{customdata[1]}<extra></extra>")), secondary_y=False)
        fig.add_trace(go.Scatter(x=group["visible_at"], y=mean, mode="lines+markers", name=f"{table}: mean KiB",
                                 legendgroup=str(table), line={"color": color}, marker={"symbol": "diamond"},
                                 hovertemplate="%{fullData.name}<br>%{x}<br>%{y:,.1f} KiB per file<extra></extra>"),
                      secondary_y=True)
    fig.update_xaxes(title_text="commit visible at (UTC)")
    fig.update_yaxes(title_text="data files added (bars)", secondary_y=False)
    integer_axis(fig, written["added_files"], secondary_y=False)
    fig.update_yaxes(title_text="mean file size (KiB, line)", secondary_y=True, rangemode="tozero", showgrid=False)
    return fig


def plot_freshness(fresh: pd.DataFrame, title: str = "Freshness: now − VTTS",
                   interval_ms: int | None = None) -> go.Figure:
    """A sawtooth per table: staleness falls at each commit to (commit − VTTS), then grows until the
    next; the commit interval dashed."""
    fig = _figure(title, "time (UTC)", "behind: now − valid-through time (s)")
    palette = colors(series(fresh))
    for table, group in fresh.groupby(series(fresh), sort=True):
        xs: list[Any] = []
        ys: list[float] = []
        for row in group.itertuples(index=False):
            xs += [row.at, row.until]
            ys += [row.fresh_s, row.stale_s]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=str(table), legendgroup=str(table),
                                 line={"color": palette[str(table)]},
                                 hovertemplate="%{fullData.name}<br>%{x}<br>%{y:.2f} s behind<extra></extra>"))
        fig.add_trace(go.Scatter(x=group["at"], y=group["fresh_s"], mode="markers", name=f"{table}: commits",
                                 showlegend=False, marker={"size": 7, "color": palette[str(table)]},
                                 legendgroup=str(table),
                                 customdata=group["vtts"].astype(str),
                                 hovertemplate="commit at %{x}<br>VTTS %{customdata}<br>%{y:.2f} s<extra></extra>"))
    if interval_ms:
        fig.add_hline(y=interval_ms / 1000, line_dash="dash", line_color="gray",
                      annotation_text=f"commit interval {interval_ms / 1000:g} s", annotation_position="top left")
    fig.update_yaxes(rangemode="tozero")
    return fig


def plot_visibility(vis: pd.DataFrame, title: str = "Visibility latency: produced → readable",
                    interval_ms: int | None = None) -> go.Figure:
    """Per record, produce time to commit time: over time (left) and its distribution with p50 and p99
    (right). The warm-up cycle's records (the backlog before the sink started, Spark's warm-up; see
    :func:`sinklab.readings.visibility`) are grey and left out of the distribution and its
    percentiles; the commit interval is dashed."""
    from sinklab.readings import steady

    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1,
                        subplot_titles=("each record", "distribution (warm-up cycle left out)"))
    fig.update_layout(template=TEMPLATE, title=title, legend_title_text="", barmode="overlay",
                      margin={"t": 80, "r": 20, "b": 50, "l": 60})
    done = vis.dropna(subset=["latency_s"])
    kept = steady(vis)
    palette = colors(series(done)) if not done.empty else {}
    warm = done[done["warmup"].astype(bool)] if "warmup" in done.columns else done.iloc[0:0]
    if not warm.empty:
        shown = warm.sample(MAX_POINTS, random_state=0).sort_index() if len(warm) > MAX_POINTS else warm
        fig.add_trace(go.Scattergl(x=shown["produced_at"], y=shown["latency_s"], mode="markers",
                                   name="first cycle (warm-up)", marker={"size": 4, "color": WARMUP_COLOR},
                                   hovertemplate="produced %{x}<br>visible after %{y:.2f} s (warm-up cycle)"
                                                 "<extra></extra>"), row=1, col=1)
    # The distribution as counts in shared bins, not every record's value: a figure of a long stream stays
    # small (notebook 02's four intervals of two sinks carried 1.2 MB of raw values).
    edges = np.histogram_bin_edges(kept["latency_s"], bins=40) if not kept.empty else np.array([0.0, 1.0])
    # At most MAX_POINTS records drawn in all (a sample of each series): every point is text in the notebook.
    most = max(500, MAX_POINTS // max(1, kept.groupby(series(kept)).ngroups if not kept.empty else 1))
    for table, group in kept.groupby(series(kept), sort=True):
        shown = group.sample(most, random_state=0).sort_index() if len(group) > most else group
        color = palette[str(table)]
        fig.add_trace(go.Scattergl(x=shown["produced_at"], y=shown["latency_s"], mode="markers", name=str(table),
                                   marker={"size": 4, "opacity": 0.6, "color": color}, legendgroup=str(table),
                                   hovertemplate="produced %{x}<br>visible after %{y:.2f} s<extra></extra>"),
                      row=1, col=1)
        counts, _ = np.histogram(group["latency_s"], bins=edges)
        fig.add_trace(go.Bar(x=(edges[:-1] + edges[1:]) / 2, y=counts, width=np.diff(edges), name=str(table),
                             legendgroup=str(table), showlegend=False, marker={"color": color}, opacity=0.7,
                             hovertemplate="%{x:.2f} s: %{y:,} records<extra></extra>"), row=1, col=2)
    if not kept.empty:
        for q, dash in ((0.5, "dot"), (0.99, "dash")):
            value = float(kept["latency_s"].quantile(q))
            fig.add_vline(x=value, line_dash=dash, line_color="black", row=1, col=2,
                          annotation_text=f"p{round(q * 100)} {value:.2f} s", annotation_position="top right")
    if interval_ms:
        fig.add_hline(y=interval_ms / 1000, line_dash="dash", line_color="gray", row=1, col=1,
                      annotation_text=f"commit interval {interval_ms / 1000:g} s", annotation_position="top left")
    fig.update_xaxes(title_text="produced at (UTC)", row=1, col=1)
    fig.update_yaxes(title_text="time until readable (s)", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="time until readable (s)", row=1, col=2)
    fig.update_yaxes(title_text="records", tickformat=",d", row=1, col=2)
    return fig


def plot_lag(lag: pd.DataFrame, title: str = "Consumer lag per partition") -> go.Figure:
    """Records produced but not yet committed, per partition, over time. Its peaks depend on when it was
    sampled: the dashboard samples it at every refresh (mid-interval too), ``lag_history`` right after
    each commit — say which in the title."""
    fig = _figure(title, "time (UTC)", "records behind (lag)")
    names = [f"{t}[{p}]" for t, p in zip(lag["topic"], lag["partition"], strict=True)]
    palette = colors(names)
    for (topic, partition), group in lag.groupby(["topic", "partition"], sort=True):
        name = f"{topic}[{partition}]"
        fig.add_trace(go.Scatter(x=group["at"], y=group["lag"], mode="lines+markers", name=name, legendgroup=name,
                                 line={"color": palette[name]},
                                 hovertemplate="%{fullData.name}<br>%{x}<br>lag %{y:,}<extra></extra>"))
    integer_axis(fig, lag["lag"])
    return fig


def plot_counters(cycle_frame: pd.DataFrame, title: str = "What the sink counted, per cycle") -> go.Figure:
    """Stacked bars of each cycle's counters besides the records read: tombstones, records routed to no
    table, bad records by kind. Left out: the totals (all dead letters, those of the dead-letter table,
    those whose key did not convert), which would count them twice, and ``bytes``, no count of records."""
    fig = _figure(title, "cycle", "records", barmode="stack")
    totals = ("records", DEAD_LETTERED, DEAD_LETTER_TABLE, KEY_CONVERTER_FAILED, "bytes")
    kinds = sorted({k for c in cycle_frame["counters"] for k in c if k not in totals})
    palette = colors(kinds)
    top: list[int] = [0]
    for kind in kinds:
        values = [int(c.get(kind, 0)) for c in cycle_frame["counters"]]
        if any(values):
            top.append(sum(values))
            fig.add_trace(go.Bar(x=cycle_frame["cycle"], y=values, name=kind, marker={"color": palette[kind]},
                                 hovertemplate=f"{kind}<br>cycle %{{x}}: %{{y:,}}<extra></extra>"))
    fig.update_xaxes(dtick=1 if cycle_frame["cycle"].nunique() <= 30 else None)
    integer_axis(fig, top)
    return fig


def plot_schemas(schema_frame: pd.DataFrame, title: str = "Schema history: columns by schema version") -> go.Figure:
    """A grid of columns (rows, by field id) and schema versions (columns): each cell shows the column's
    type in that version; new columns and changed types are highlighted."""
    versions = sorted(schema_frame["schema_id"].unique())
    fields = schema_frame.sort_values("field_id").drop_duplicates("field_id", keep="last")
    labels = fields["column"].tolist()
    types = {(r.field_id, r.schema_id): r.type for r in schema_frame.itertuples()}
    # 0: absent, 1: unchanged, 2: new in this version, 3: type changed in this version
    z, text = [], []
    for field_id in fields["field_id"]:
        row_z, row_text = [], []
        previous: str | None = None
        for v in versions:
            kind = types.get((field_id, v))
            row_text.append(kind or "")
            row_z.append(0 if kind is None else 2 if previous is None and v != versions[0] else
                         3 if previous is not None and kind != previous else 1)
            previous = kind if kind is not None else previous
        z.append(row_z)
        text.append(row_text)
    colors = [[0.0, "#f5f5f5"], [0.25, "#f5f5f5"], [0.25, "#e3f2fd"], [0.5, "#e3f2fd"], [0.5, "#a5d6a7"],
              [0.75, "#a5d6a7"], [0.75, "#ffcc80"], [1.0, "#ffcc80"]]
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"schema {v}" for v in versions], y=labels, text=text, texttemplate="%{text}", zmin=0, zmax=3,
        colorscale=colors, showscale=False, xgap=2, ygap=2,
        hovertemplate="%{y} in %{x}: %{text}<extra></extra>"))
    fig.update_layout(template=TEMPLATE, title=title, height=max(300, 28 * len(labels) + 120),
                      margin={"t": 60, "r": 20, "b": 40, "l": 160})
    fig.update_yaxes(autorange="reversed")
    return fig


def plot_tradeoff(results: pd.DataFrame, title: str = "Commit interval trade-off") -> go.Figure:
    """The explorer's runs: visibility latency against snapshots per hour, files per table per hour and
    mean file size, one point per commit interval (p50 and p99 in the same colours in every panel).
    Intervals with too few commits to project from (``per_hour`` is NaN) are named in a note instead."""
    # Short titles: three side by side fit a docs page's width (the axes say the rest).
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08, subplot_titles=(
        "snapshots", "files", "file size"))
    fig.update_layout(template=TEMPLATE, title=title, legend_title_text="", margin={"t": 80, "r": 20, "b": 80, "l": 60})
    # Several sinks (the explorer's sink="sinklab" and "apache"): a line each, named, dashed apart.
    sinks = (results["sink"].dropna().unique().tolist() if "sink" in results.columns else []) or [None]
    panels = (("snapshots_per_hour", "snapshots per hour"), ("files_per_table_per_hour", "files per table per hour"),
              ("mean_file_kib", "mean file size (KiB)"))
    for dash, sink in zip(("solid", "dash", "dot"), sinks, strict=False):
        mine = results if sink is None else results[results["sink"] == sink]
        measured = mine.dropna(subset=["snapshots_per_hour"])
        labels = [f"{ms / 1000:g} s" for ms in measured["interval_ms"]]
        prefix = f"{sink} " if len(sinks) > 1 else ""
        for col, (x, label) in enumerate(panels, start=1):
            for (q, symbol), color in zip((("p50_s", "circle"), ("p99_s", "diamond")), PALETTE, strict=False):
                fig.add_trace(go.Scatter(
                    x=measured[x], y=measured[q], mode="lines+markers+text", text=labels, textposition="top center",
                    name=f"{prefix}{q.removesuffix('_s')} latency", legendgroup=f"{prefix}{q}", showlegend=col == 1,
                    marker={"symbol": symbol, "size": 10, "color": color}, line={"color": color, "dash": dash},
                    hovertemplate=f"{prefix}interval %{{text}}<br>{label} %{{x:,.1f}}<br>{q[:3]} %{{y:.2f}} s"
                                  "<extra></extra>"), row=1, col=col)
    for col, (_, label) in enumerate(panels, start=1):
        fig.update_xaxes(title_text=label, row=1, col=col)
        fig.update_yaxes(title_text="visibility latency (s)" if col == 1 else None, rangemode="tozero", row=1, col=col)
    short = results[results["snapshots_per_hour"].isna()]
    if not short.empty:
        named = short["sink"] + " " if len(sinks) > 1 else pd.Series("", index=short.index)
        note = "; ".join(f"{who}{ms / 1000:g} s: not enough data ({n} commits)"
                         for who, ms, n in zip(named, short["interval_ms"], short["snapshots"], strict=True))
        fig.add_annotation(text=note, showarrow=False, xref="paper", yref="paper", x=0, y=-0.28, xanchor="left",
                           font={"color": "#c62828"})
    return fig


def combine(figures: Sequence[go.Figure], cols: int = 2, title: str | None = None,
            height_per_row: int = 340) -> go.Figure:
    """Several figures as one grid of subplots (each keeps its traces, axis titles and title), for a
    static snapshot. A series drawn in several panels (a table) keeps its colour and has one legend
    entry, which shows or hides it everywhere."""
    rows = -(-len(figures) // cols)
    secondary = [[{"secondary_y": True} for _ in range(cols)] for _ in range(rows)]
    grid = make_subplots(rows=rows, cols=cols, specs=secondary, vertical_spacing=0.5 / rows,
                         horizontal_spacing=0.2, subplot_titles=[f.layout.title.text or "" for f in figures])
    legend: set[str] = set()
    colour: dict[str, str] = {}  # across the grid: a table and a partition never share a colour
    for i, fig in enumerate(figures):
        row, col = divmod(i, cols)
        for original in fig.data:
            trace = type(original)(original)  # a copy: the panel's own figure keeps its names
            on_right = getattr(trace, "yaxis", None) not in (None, "y")
            group = trace.legendgroup or trace.name
            shown = trace.showlegend is not False and group not in legend
            if shown:
                legend.add(group)
            trace.update(legendgroup=group, showlegend=shown, name=group if shown else trace.name)
            _recolor(trace, colour.setdefault(group, PALETTE[len(colour) % len(PALETTE)]))
            grid.add_trace(trace, row=row + 1, col=col + 1, secondary_y=on_right)
        for axis, on_right in (("yaxis", False), ("yaxis2", True)):
            source = getattr(fig.layout, axis, None)
            if source is not None and source.title.text:
                grid.update_yaxes(title_text=source.title.text, title_font={"size": 11}, tickformat=source.tickformat,
                                  dtick=source.dtick, rangemode=source.rangemode, row=row + 1, col=col + 1,
                                  secondary_y=on_right)
        if fig.layout.xaxis.title.text:
            grid.update_xaxes(title_text=fig.layout.xaxis.title.text, title_font={"size": 11}, row=row + 1,
                              col=col + 1)
        for shape in fig.layout.shapes:
            # A horizontal reference line (the commit interval): keep it.
            if str(shape.xref).endswith("domain") and shape.y0 == shape.y1 and shape.yref in (None, "y"):
                grid.add_hline(y=shape.y0, line_dash=shape.line.dash, line_color=shape.line.color, row=row + 1,
                               col=col + 1, exclude_empty_subplots=False)
    grid.update_layout(template=TEMPLATE, title=title, height=height_per_row * rows, showlegend=True,
                       legend={"x": 1.02, "y": 1, "yanchor": "top"}, margin={"t": 110, "r": 170, "b": 40, "l": 60})
    return grid


def _recolor(trace: Any, color: str) -> None:
    """Give a series trace its grid-wide colour; fixed colours (the warm-up's grey, black marks) stay."""
    marker = getattr(trace, "marker", None)
    line = getattr(trace, "line", None)
    if marker is not None and isinstance(marker.color, str) and marker.color in PALETTE:
        marker.color = color
    if line is not None and isinstance(line.color, str) and line.color in PALETTE:
        line.color = color


# ---- maintenance
def plot_file_layout(file_frame: pd.DataFrame, small_bytes: int | None = None,
                     title: str = "Data files: per partition, and their sizes") -> go.Figure:
    """Left: live data files per partition (small ones apart when ``small_bytes`` is given). Right: the
    distribution of their sizes. Many tiny files is the small-files problem; compaction flattens both."""
    data = file_frame[file_frame["content"] == "data"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=["files per partition", "file sizes"],
                        horizontal_spacing=0.12)
    small = data["file_size_in_bytes"] < small_bytes if small_bytes else pd.Series(False, index=data.index)
    for label, part in (("small files", data[small]), ("files", data[~small])):
        if part.empty:
            continue
        counts = part.groupby("partition").size()
        fig.add_trace(go.Bar(x=counts.index.astype(str), y=counts.to_numpy(), name=label,
                             hovertemplate="%{x}<br>%{y} " + label + "<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Histogram(x=data["file_size_in_bytes"] / 1024, name="size", showlegend=False,
                               hovertemplate="%{x} KiB<br>%{y} files<extra></extra>"), row=1, col=2)
    fig.update_layout(template=TEMPLATE, title=title, barmode="stack", legend_title_text="",
                      margin={"t": 80, "r": 20, "b": 50, "l": 60})
    fig.update_xaxes(title_text="partition", row=1, col=1)
    fig.update_xaxes(title_text="file size (KiB)", row=1, col=2)
    fig.update_yaxes(title_text="data files", rangemode="tozero", tick0=0, dtick=None, row=1, col=1)
    fig.update_yaxes(title_text="data files", rangemode="tozero", row=1, col=2)
    return fig


def plot_table_growth(snaps: pd.DataFrame, runs: pd.DataFrame | None = None,
                      title: str = "Live data files and delete files over time") -> go.Figure:
    """Files the table holds after each snapshot: a sawtooth when compaction runs (crosses: snapshots
    of other writers, such as compaction). ``runs`` (``maintenance_runs``) adds a line per scheduled run."""
    fig = _figure(title, "committed at (UTC)", "live files in the table")
    for table, group in snaps.groupby("table", sort=True):
        marker = {"symbol": np.where(group["sink"].notna().to_numpy(), "circle", "x"), "size": 7}
        fig.add_trace(go.Scatter(x=group["committed_at"], y=group["total_files"], mode="lines+markers",
                                 name=f"{table}: data files", marker=marker, line={"shape": "hv"},
                                 customdata=group["operation"].fillna(""),
                                 hovertemplate="%{x}<br>%{y} data files after %{customdata}<extra></extra>"))
        if group["total_delete_files"].any():
            fig.add_trace(go.Scatter(x=group["committed_at"], y=group["total_delete_files"], mode="lines",
                                     name=f"{table}: delete files", line={"shape": "hv", "dash": "dot"}))
    if runs is not None:
        for run in runs.itertuples():
            fig.add_vline(x=run.ts, line={"color": "grey", "dash": "dash", "width": 1})
        if not runs.empty:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="maintenance run",
                                     line={"color": "grey", "dash": "dash", "width": 1}))
    fig.update_yaxes(rangemode="tozero")
    return fig


def plot_metadata(meta: pd.DataFrame, title: str = "Table metadata: size and snapshots kept") -> go.Figure:
    """Each metadata file's size (left axis) and the snapshots it lists (right): both grow with every
    commit until snapshots are expired."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.update_layout(template=TEMPLATE, title=title, legend_title_text="", margin={"t": 60, "r": 60, "b": 50, "l": 60})
    for table, group in meta.groupby("table", sort=True):
        fig.add_trace(go.Scatter(x=group["written_at"], y=group["bytes"] / 1024, mode="lines+markers",
                                 name=f"{table}: metadata KiB"), secondary_y=False)
        fig.add_trace(go.Scatter(x=group["written_at"], y=group["snapshots"], mode="lines", line={"dash": "dot"},
                                 name=f"{table}: snapshots"), secondary_y=True)
    fig.update_xaxes(title_text="metadata written at (UTC)")
    fig.update_yaxes(title_text="metadata file (KiB)", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="snapshots listed", rangemode="tozero", showgrid=False, secondary_y=True)
    return fig


FAULT_COLOURS = {"retry": "#ef6c00", "failed": "#c62828"}
MARK_COLOUR = "#6a1b9a"  # a hand on the controls


def fault_spans(faults: Sequence[dict[str, Any]], now: float) -> list[tuple[pd.Timestamp, pd.Timestamp, str, str]]:
    """A sink's ``status().faults`` as spans of time (UTC): from a cycle that failed and was retried to
    the recovery (or ``now``), and from FAILED on; each with its kind and a label."""
    spans = []
    start: dict[str, Any] | None = None
    retries = 0
    for fault in faults:
        if fault["kind"] == "retry":
            start, retries = start or fault, retries + 1
            continue
        if start is not None:
            spans.append((start["at"], fault["at"], "retry", f"{retries} cycles retried: {start['detail']}"))
            start, retries = None, 0
        if fault["kind"] == "failed":
            spans.append((fault["at"], now, "failed", f"FAILED: {fault['detail']}"))
    if start is not None:
        spans.append((start["at"], now, "retry", f"retrying ({retries}): {start['detail']}"))
    return [(pd.Timestamp(a, unit="s", tz="UTC"), pd.Timestamp(max(b, a + 0.5), unit="s", tz="UTC"), kind, label)
            for a, b, kind, label in spans]


def mark_faults(fig: go.Figure, faults: Sequence[dict[str, Any]], cells: Sequence[tuple[int, int]],
                now: float | None = None) -> go.Figure:
    """Shade, in the grid's time panels (``cells``: row, col), when the sink retried failed cycles
    (orange) and when it was FAILED (red), so a broker killed live shows where it hit."""
    for x0, x1, kind, label in fault_spans(faults, now if now is not None else time.time()):
        for i, (row, col) in enumerate(cells):
            fig.add_vrect(x0=x0, x1=x1, row=row, col=col, fillcolor=FAULT_COLOURS[kind], opacity=0.18, line_width=0,
                          layer="below", **_label(label, i, "top left", FAULT_COLOURS[kind]))
    return fig


def mark_moments(fig: go.Figure, marks: Sequence[dict[str, Any]], cells: Sequence[tuple[int, int]]) -> go.Figure:
    """A line, in the grid's time panels, at each moment a person changed the sink (``status().marks``:
    retuned, paused, resumed), labelled with what changed, so the cadence can be seen to follow."""
    for mark in marks:
        at = pd.Timestamp(mark["at"], unit="s", tz="UTC")
        label = f"{mark['kind']} {mark['detail']}".strip()
        for i, (row, col) in enumerate(cells):
            fig.add_vline(x=at, row=row, col=col, line={"color": MARK_COLOUR, "dash": "dash", "width": 1},
                          **_label(label, i, "bottom right", MARK_COLOUR))
    return fig


def _label(text: str, panel: int, position: str, colour: str) -> dict[str, Any]:
    """A shape's label, on the first panel only: given any annotation setting, plotly labels the
    others "new text"."""
    if panel:
        return {}
    return {"annotation_text": text[:60], "annotation_position": position,
            "annotation_font": {"size": 10, "color": colour}}
