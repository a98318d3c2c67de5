"""The commit planner: what a latency target costs in files and snapshots, on this stack.

A short calibration run measures what a cycle costs against the records it carries: cycles of
several sizes through a sink of this stack's, each size twice. The fit ``cost = a + b·records`` (the
lag-target controller's own, ``sinklab.sink.pace.fit``) then gives, for an event rate, each
interval's worst visibility latency and the files and snapshots it makes per day, without and with a
maintenance schedule. For Apache's sink (``sink="apache"``) the cycle is its commit round, fitted from
the commits of explorer runs through the real sink (its tasks write records as they come, so the
round, not the records, is what it costs), and the settings recommended are its own keys only.
The figure is honest about what was measured: measured cycles are points, the fit is a line, the
calibration range is shaded, and nothing is computed past twice the largest cycle measured (or below
half the smallest).

    cal = viz.calibrate(stack)
    plan = viz.frontier(cal, rate=400)
    viz.recommend(plan, target_s=2.0)     # the settings with the fewest files that meet the target
    viz.plot_plan(cal, plan, target_s=2.0)
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sinklab.exceptions import TargetUnreachable
from sinklab.sink.config import keys
from sinklab.sink.cycle import fit

if TYPE_CHECKING:
    from sinklab.generators import Generator
    from sinklab.stack import Stack

DAY_S = 86_400.0
COMPACT_EVERY = 10  # the maintenance schedule planned: compaction every this many commits ...
EXPIRE_AFTER_S = 3_600.0  # ... and snapshots expired after an hour
TARGET_FILE_BYTES = 128 * 1024 * 1024  # Iceberg's default write.target-file-size-bytes: what compaction aims for


@dataclass
class Calibration:
    """Measured cycles (``points``: records, seconds, files, bytes per cycle) and the fit over them."""

    points: pd.DataFrame
    a: float  # seconds a cycle costs whatever it carries
    b: float  # seconds per record
    spread: float  # seconds: how far measured cycles fall from the fit
    sink: str = "sinklab"  # or "apache": whose cycles (Apache's: commit rounds) these are

    @property
    def measured(self) -> tuple[int, int]:
        return int(self.points["records"].min()), int(self.points["records"].max())

    def cycle_s(self, records: float) -> float:
        return self.a + self.b * records

    def __repr__(self) -> str:
        low, high = self.measured
        what = "Apache's sink: a commit round" if self.sink == "apache" else "a cycle"
        return (f"Calibration: {what} costs {self.a:.3f} s + {self.b * 1e6:.2f} µs a record (± {self.spread:.3f} s), "
                f"measured from {low:,} to {high:,} records in {len(self.points)} cycles")


def calibrate(stack: Stack, generator: Generator | None = None, sizes: Sequence[int] = (50, 500, 2_000, 6_000),
              repeats: int = 2, partitions: int = 3, namespace: str = "planner", sink: str = "sinklab",
              config: str | Path | dict[str, Any] | None = None, worker: dict[str, str] | None = None) -> Calibration:
    """Run cycles of each of ``sizes`` records (``repeats`` times) through a sink of its own topic and
    table on ``stack`` and fit their cost. A first cycle (creating the table, warming Spark) is not
    measured.

    ``sink="apache"``: Apache's sink itself (``viz.explore_intervals``, with the connector ``config`` and
    ``worker`` properties given), at intervals whose commits carry about the ``sizes`` (at 500 records/s,
    ``repeats`` commits each at least), its commit rounds fitted."""
    from sinklab.generators import PizzaGenerator
    from sinklab.sink import open_sink

    generator = generator or PizzaGenerator(seed=11)
    if sink == "apache":
        return _calibrate_apache(stack, generator, sizes, repeats, partitions, namespace, config, worker)
    token = uuid.uuid4().hex[:6]
    topic, name = f"{namespace}-{token}", f"{namespace}-{token}"
    stack.create_topic(topic, partitions=partitions)
    sink = open_sink(stack, {"name": name, "config": {
        keys.TOPICS: topic, keys.TABLES: f"{namespace}.calibration_{token}",
        keys.CATALOG: stack.info.catalog_name, keys.TABLES_AUTO_CREATE_ENABLED: "true",
        keys.VALUE_SCHEMAS_ENABLE: "false"}})
    rows = []
    try:
        for size in [min(sizes), *[s for s in sizes for _ in range(repeats)]]:
            generator.produce(stack, topic, count=size, partitions=partitions).wait()
            result = sink.run_once()
            if result is None:
                raise RuntimeError(f"calibration: a cycle of {size} records found nothing in {topic}")
            rows.append({"records": result.records, "seconds": result.duration_ms / 1000,
                         "files": sum(len(s.data_files) for s in result.tables.values()),
                         "bytes": sum(s.bytes for s in result.tables.values())})
    finally:
        sink.stop()
    points = pd.DataFrame(rows[1:])  # the first cycle created the table and warmed Spark
    a, b, spread = fit(list(zip(points["records"], points["seconds"], strict=True)))
    return Calibration(points, a, b, spread)


APACHE_RATE = 500.0  # records/s of the stream an Apache calibration runs at each interval


def _calibrate_apache(stack: Stack, generator: Generator, sizes: Sequence[int], repeats: int, partitions: int,
                      namespace: str, config: str | Path | dict[str, Any] | None,
                      worker: dict[str, str] | None) -> Calibration:
    from sinklab.viz.explorer import explore_intervals

    # An interval that gathers a size at the rate; the smallest sizes an interval under its commit round
    # cannot make are left to what the sink does (said in the exploration's notes).
    intervals = sorted({max(1000, int(round(size / APACHE_RATE * 1000, -2))) for size in sizes})
    count = int(APACHE_RATE * max(intervals) / 1000 * (repeats + 1))
    ex = explore_intervals(stack, generator, intervals, count=count, rate=APACHE_RATE, partitions=partitions,
                           namespace=namespace, config=config, sink="apache", worker=worker)
    commits = ex.cycles[ex.cycles["written"] > 0]
    points = pd.DataFrame({"records": commits["written"].astype(int), "seconds": commits["duration_ms"] / 1000,
                           "files": commits["data_files"].astype(int), "bytes": commits["bytes"].astype(int)})
    a, b, spread = fit(list(zip(points["records"], points["seconds"], strict=True)))
    return Calibration(points.reset_index(drop=True), a, b, spread, sink="apache")


def frontier(cal: Calibration, rate: float, points: int = 40, compact_every: int = COMPACT_EVERY,
             expire_after_s: float = EXPIRE_AFTER_S, target_file_bytes: int = TARGET_FILE_BYTES) -> pd.DataFrame:
    """For an event ``rate``, every commit interval the calibration covers: the cycle it makes, the
    worst visibility latency (``latency_s``: a record arriving just after a cycle started waits the
    interval, then the next cycle), and per day the data files and snapshots it makes, and what a
    schedule of compaction every ``compact_every`` commits and expiry after ``expire_after_s`` leaves.

    A cycle that outlasts the interval is followed at once: below ``a/(1 − b·r)`` an interval gives
    nothing more."""
    low, high = cal.measured
    keeping_up = 1 - cal.b * rate
    if keeping_up <= 0:
        raise ValueError(f"at {rate:,.0f} records/s cycles fall behind even back to back "
                         f"({cal.b * 1e6:.2f} µs a record measured)")
    back_to_back = cal.a / keeping_up
    first = max(back_to_back, low / 2 / rate)
    last = 2 * high / rate
    if first >= last:
        raise ValueError(f"at {rate:,.0f} records/s no interval falls in the calibration's range "
                         f"({low:,}–{high:,} records a cycle); calibrate with other sizes")
    measured = cal.points[cal.points["records"] > 0]
    files_per_cycle = float(measured["files"].median())
    bytes_per_record = float((measured["bytes"] / measured["records"]).median())
    rows = []
    for interval in np.geomspace(first, last, points):
        records = rate * interval
        cycle = cal.cycle_s(records)
        commits = DAY_S / interval
        compacted = math.ceil(compact_every * records * bytes_per_record / target_file_bytes)
        rows.append({
            "interval_s": interval, "records_per_cycle": records, "cycle_s": cycle,
            "latency_s": interval + cycle + 2 * cal.spread,
            "commits_per_day": commits, "files_per_day": commits * files_per_cycle,
            "files_per_day_maintained": commits / compact_every * compacted,
            "snapshots_per_day": commits, "snapshots_kept_maintained": min(commits, expire_after_s / interval),
        })
    plan = pd.DataFrame(rows)
    plan.attrs["sink"] = cal.sink  # recommend names that sink's keys
    return plan


def recommend(plan: pd.DataFrame, target_s: float, compact_every: int = COMPACT_EVERY) -> dict[str, Any]:
    """The settings meeting ``target_s`` with the fewest files: the longest interval whose worst
    latency fits. Raises when none does, naming the best the stack can do."""
    fits = plan[plan["latency_s"] <= target_s]
    if fits.empty:
        best = plan.loc[plan["latency_s"].idxmin()]
        raise TargetUnreachable(target_s, best_s=float(best["latency_s"]), interval_s=float(best["interval_s"]),
                                cycle_s=float(best["cycle_s"]))
    row = fits.loc[fits["interval_s"].idxmax()]
    figures = {"latency_s": round(float(row["latency_s"]), 2), "files_per_day": int(row["files_per_day"]),
               "files_per_day_maintained": int(row["files_per_day_maintained"]),
               "snapshots_per_day": int(row["snapshots_per_day"])}
    if plan.attrs.get("sink") == "apache":
        # Apache's sink has no maintenance of its own and no latency target: the interval is its one key
        # here, and the schedule planned runs beside it (docs/maintenance.md).
        return {keys.COMMIT_INTERVAL_MS: str(int(row["interval_s"] * 1000)), **figures,
                "maintenance": f"beside it: compact every {compact_every} commits, expire snapshots after "
                               f"{int(EXPIRE_AFTER_S // 60)} min (sinklab table compact / expire)"}
    return {
        keys.COMMIT_INTERVAL_MS: str(int(row["interval_s"] * 1000)),
        keys.COMPACT_EVERY_COMMITS: str(compact_every),
        keys.EXPIRE_OLDER_THAN: f"{int(EXPIRE_AFTER_S // 60)}m",
        "latency_s": round(float(row["latency_s"]), 2),
        "files_per_day": int(row["files_per_day"]), "files_per_day_maintained": int(row["files_per_day_maintained"]),
        "snapshots_per_day": int(row["snapshots_per_day"]),
        # Or let the sink hold the target itself as the rate changes.
        keys.COMMIT_TARGET_LAG_MS: str(int(target_s * 1000)),
    }


def plot_plan(cal: Calibration, plan: pd.DataFrame, target_s: float | None = None,
              title: str = "Commit planner: what a latency target costs here") -> go.Figure:
    """Left: cycle cost against records, measured points and the fit over the range it may speak for.
    Right: worst latency against files and snapshots per day, without and with maintenance."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cycle cost: measured and fitted",
                                                        "latency against files and snapshots per day"))
    low, high = cal.measured
    fig.add_trace(go.Scatter(x=cal.points["records"], y=cal.points["seconds"], mode="markers", name="measured cycle",
                             marker={"size": 9, "color": "#1565c0"}), row=1, col=1)
    xs = np.linspace(low / 2, 2 * high, 50)
    fig.add_trace(go.Scatter(x=xs, y=cal.a + cal.b * xs, mode="lines", name="fit: a + b·records",
                             line={"color": "#1565c0", "dash": "dot"}), row=1, col=1)
    # After the traces: plotly leaves shapes out of a subplot that has none yet.
    fig.add_vrect(x0=low, x1=high, fillcolor="#90caf9", opacity=0.25, line_width=0, row=1, col=1,
                  annotation_text="calibrated", annotation_position="top left")
    for column, name, color, dash in (
            ("files_per_day", "files/day", "#c62828", "solid"),
            ("files_per_day_maintained", f"files/day, compacted every {COMPACT_EVERY} commits", "#c62828", "dot"),
            ("snapshots_per_day", "snapshots/day", "#2e7d32", "solid"),
            ("snapshots_kept_maintained", "snapshots kept, expired after 1 h", "#2e7d32", "dot")):
        fig.add_trace(go.Scatter(x=plan[column], y=plan["latency_s"], mode="lines", name=name,
                                 line={"color": color, "dash": dash},
                                 customdata=plan[["interval_s"]].to_numpy(),
                                 hovertemplate="interval %{customdata[0]:.2f} s<br>%{x:,.0f}<br>%{y:.2f} s"),
                      row=1, col=2)
    if target_s is not None:
        fig.add_hline(y=target_s, line={"color": "#555", "dash": "dash"}, row=1, col=2,
                      annotation_text=f"target {target_s:g} s")
    fig.update_xaxes(title_text="records per cycle", row=1, col=1)
    fig.update_yaxes(title_text="seconds", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="per day (log)", type="log", row=1, col=2)
    fig.update_yaxes(title_text="worst visibility latency (s)", rangemode="tozero", row=1, col=2)
    fig.update_layout(title=title, height=420, legend={"orientation": "h", "y": -0.25})
    return fig
