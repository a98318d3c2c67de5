"""The commit-interval explorer: one generated stream through the sink at several intervals, measured.

A short interval makes records readable sooner but writes more snapshots and more, smaller files;
a long one the opposite. For each interval the explorer gives the stream its own topic and table,
runs the sink in the background while the stream is produced at a steady rate, waits until the
sink has committed everything, and measures from Iceberg's metadata and Kafka's timestamps.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from sinklab import readings
from sinklab.sink.config import keys
from sinklab.viz.figures import plot_tradeoff

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from sinklab.generators import Generator
    from sinklab.sink import IcebergSink, RemoteSink
    from sinklab.stack import Stack

RESULT_COLUMNS = [
    "interval_ms", "records", "snapshots", "window_s", "snapshots_per_hour", "files", "files_per_table_per_hour",
    "mean_file_kib", "p50_s", "p90_s", "p99_s", "max_s", "mean_cycle_ms", "note",
]
HOUR_S = 3600.0
# Fewer commits than this say nothing about a rate per hour: three commits in seven seconds are not
# "36,277 snapshots per day".
MIN_COMMITS = 5


@dataclass
class Exploration:
    """What the explorer measured: ``results`` (one row per interval) and the frames behind it."""

    results: pd.DataFrame
    snapshots: pd.DataFrame  # every measured snapshot, with ``interval_ms``
    visibility: pd.DataFrame  # every measured record, with ``interval_ms``
    runs: list[dict[str, Any]] = field(default_factory=list)  # topic, table and sink name per interval

    def figure(self) -> go.Figure:
        return plot_tradeoff(self.results)

    def __repr__(self) -> str:
        return f"Exploration of {len(self.runs)} intervals:\n{self.results.round(2).to_string(index=False)}"


def explore_intervals(stack: Stack, generator: Generator, intervals_ms: Iterable[int] = (1000, 2000, 4000),
                      count: int = 2000, rate: float = 400.0, partitions: int = 3, namespace: str = "explorer",
                      prime: int = 50, catch_up_s: float = 120.0, extra_config: dict[str, str] | None = None,
                      ) -> Exploration:
    """Send ``count`` events of ``generator`` at ``rate`` events/s through a sink at each interval.

    First one cycle of a priming sink writes ``prime`` events of another seed into every run's table,
    creating them all, so neither table creation nor Spark's warm-up (the first cycle in a fresh
    kernel takes several seconds longer than any later one) is charged to an interval. Per interval:

    - ``p50_s``/``p99_s``: visibility latency of the stream's records (Kafka timestamp → the commit
      that made them readable, see :func:`sinklab.readings.visibility`);
    - ``snapshots_per_hour``, ``files_per_table_per_hour``: the run's snapshots and data files over
      its window (first record produced → last commit visible), scaled to an hour;
    - ``mean_file_kib``: the mean size of the data files it wrote;
    - ``mean_cycle_ms``: how long its cycles took (read, convert, write, commit): the floor under
      any interval;
    - ``note``: "not enough data" when a run made fewer than ``MIN_COMMITS`` commits: its per-hour
      figures are left empty rather than projected (send more events, or a longer stream).

    ``snapshots`` and ``visibility`` name each run's series ``interval 1 s`` (column ``series``).
    """
    from sinklab.generators import Generator as GeneratorType
    from sinklab.sink import open_sink

    token = uuid.uuid4().hex[:6]
    intervals = list(intervals_ms)
    runs = [{"interval_ms": interval, "topic": f"{namespace}-{interval}ms-{token}",
             "table": f"{namespace}.interval_{interval}ms_{token}", "sink": f"{namespace}-{interval}ms-{token}"}
            for interval in intervals]

    def config(name: str, topic: str, tables: list[str], interval: int) -> dict[str, Any]:
        return {"name": name, "config": {
            keys.TOPICS: topic, keys.TABLES: ",".join(tables), keys.CATALOG: stack.info.catalog_name,
            keys.TABLES_AUTO_CREATE_ENABLED: "true", keys.COMMIT_INTERVAL_MS: str(interval),
            keys.VALUE_SCHEMAS_ENABLE: "false", **(extra_config or {})}}

    if prime:
        topic = f"{namespace}-prime-{token}"
        stack.create_topic(topic, partitions=partitions)
        GeneratorType(generator.spec, seed=generator.spec.seed + 1).produce(
            stack, topic, count=prime, partitions=partitions).wait()
        primer = open_sink(stack, config(f"{namespace}-prime-{token}", topic, [r["table"] for r in runs], 1000))
        try:
            primer.run_once()
        finally:
            primer.stop()

    rows, snaps_all, vis_all = [], [], []
    for run in runs:
        stack.create_topic(run["topic"], partitions=partitions)
        sink = open_sink(stack, config(run["sink"], run["topic"], [run["table"]], run["interval_ms"]))
        try:
            sink.start()
            generator.produce(stack, run["topic"], count=count, rate=rate, partitions=partitions).wait()
            wait_caught_up(sink, catch_up_s)
        finally:
            sink.stop()
        snaps = readings.snapshots(stack, run["table"])
        label = f"interval {run['interval_ms'] / 1000:g} s"
        snaps = snaps[snaps["sink"] == run["sink"]].assign(interval_ms=run["interval_ms"], series=label)
        # The priming sink took Spark's warm-up: no cycle of a run is a warm-up cycle.
        vis = readings.visibility(snaps, readings.record_times(stack, run["topic"])).assign(
            interval_ms=run["interval_ms"], series=label, warmup=False)
        rows.append(_measure(run["interval_ms"], snaps, vis, readings.cycles(stack, sink=run["sink"])))
        snaps_all.append(snaps)
        vis_all.append(vis)
    return Exploration(pd.DataFrame(rows, columns=RESULT_COLUMNS), pd.concat(snaps_all, ignore_index=True),
                       pd.concat(vis_all, ignore_index=True), runs)


def wait_caught_up(sink: IcebergSink | RemoteSink, timeout: float = 120.0, poll_s: float = 0.2) -> pd.DataFrame:
    """Block until a running sink has committed every record its topics hold now; returns the lag
    frame (all zeros). Raises if the sink fails, or after ``timeout`` seconds."""
    config = sink.config
    topics = list(config.topics) or sorted(
        t for t in sink.stack.admin().list_topics(timeout=10).topics if config.reads_topic(t))
    deadline = time.monotonic() + timeout
    while True:
        status = sink.status()
        if status.state == "FAILED":
            raise RuntimeError(f"sink {config.name} failed:\n{status.trace}")
        lag = readings.consumer_lag(sink.stack, config.group_id, topics)
        if lag["lag"].sum() == 0:
            return lag
        if time.monotonic() > deadline:
            raise TimeoutError(f"sink {config.name}: {lag['lag'].sum()} records still not committed after "
                               f"{timeout:.0f}s")
        time.sleep(poll_s)


def _measure(interval: int, snaps: pd.DataFrame, vis: pd.DataFrame, cycle_frame: pd.DataFrame) -> dict[str, Any]:
    done = vis.dropna(subset=["latency_s"])
    n_snaps = len(snaps)
    n_files = int(snaps["added_files"].sum())
    window = ((snaps["visible_at"].max() - done["produced_at"].min()).total_seconds()
              if n_snaps >= MIN_COMMITS and not done.empty else float("nan"))
    cycles_in = cycle_frame[cycle_frame["commit_id"].isin(set(snaps["commit_id"]))]
    return {
        "interval_ms": interval, "records": len(done), "snapshots": n_snaps, "window_s": window,
        "snapshots_per_hour": n_snaps / window * HOUR_S if window else float("nan"),
        "files": n_files, "files_per_table_per_hour": n_files / window * HOUR_S if window else float("nan"),
        "mean_file_kib": snaps["added_bytes"].sum() / n_files / 1024 if n_files else float("nan"),
        "p50_s": done["latency_s"].quantile(0.5), "p90_s": done["latency_s"].quantile(0.9),
        "p99_s": done["latency_s"].quantile(0.99), "max_s": done["latency_s"].max(),
        "mean_cycle_ms": cycles_in["duration_ms"].mean() if not cycles_in.empty else float("nan"),
        "note": "" if n_snaps >= MIN_COMMITS else f"not enough data: {n_snaps} commits (< {MIN_COMMITS})",
    }
