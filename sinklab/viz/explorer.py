"""The commit-interval explorer: one generated stream through a sink at several intervals, measured.

A short interval makes records readable sooner but writes more snapshots and more, smaller files;
a long one the opposite. For each interval the explorer gives the stream its own topic and table,
runs the sink in the background while the stream is produced at a steady rate, waits until the
sink has committed everything, and measures from Iceberg's metadata and Kafka's timestamps. The sink
is sinklab's or Apache's own (``apache_runs``: the real sink in a Connect worker), or both, with the
same figures: the numbers of one do not transfer to the other (sinklab reads Kafka at each commit,
Apache's writes as records arrive and commits in a round of its own).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from sinklab import readings
from sinklab.sink.config import keys, read_connect_json
from sinklab.viz.figures import plot_tradeoff

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from sinklab.generators import Generator, TrafficProfile
    from sinklab.sink import IcebergSink, RemoteSink
    from sinklab.stack import Stack

SINKS = ("sinklab", "apache")
RESULT_COLUMNS = [
    "sink", "interval_ms", "records", "snapshots", "window_s", "snapshots_per_hour", "files",
    "files_per_table_per_hour", "mean_file_kib", "p50_s", "p90_s", "p99_s", "max_s", "mean_cycle_ms",
    "commit_gap_s", "table", "note",
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
    # Per run: sink_kind (sinklab or apache), interval_ms, topic, table and sink (the connector's name).
    runs: list[dict[str, Any]] = field(default_factory=list)
    cycles: pd.DataFrame = field(default_factory=pd.DataFrame)  # every measured commit, with ``interval_ms``

    def figure(self) -> go.Figure:
        return plot_tradeoff(self.results)

    def __repr__(self) -> str:
        return f"Exploration of {len(self.runs)} intervals:\n{self.results.round(2).to_string(index=False)}"


def explore_intervals(stack: Stack, generator: Generator, intervals_ms: Iterable[int] = (1000, 2000, 4000),
                      count: int = 2000, rate: float = 400.0, partitions: int = 3, namespace: str = "explorer",
                      prime: int = 50, catch_up_s: float = 120.0,
                      config: str | Path | dict[str, Any] | None = None, sink: str | Iterable[str] = "sinklab",
                      worker: dict[str, str] | None = None, traffic: TrafficProfile | None = None,
                      speed: float = 1.0) -> Exploration:
    """Send ``count`` events of ``generator`` at ``rate`` events/s through a sink at each interval.

    ``sink``: ``"sinklab"``, ``"apache"`` (Apache's Iceberg sink in a Kafka Connect worker of the stack's,
    whose ``worker`` properties these are: ``offset.flush.interval.ms``, say), or both, one after the
    other at every interval. ``config``: a connector's config (a JSON file or a dict, either shape) whose
    settings every run takes, the sink's knobs among them (Apache's ``iceberg.control.commit.timeout-ms``,
    ``tasks.max``, ``iceberg.tables.default-partition-by``; sinklab's ``sinklab.*``); its topics, tables,
    name and interval are each run's own.

    ``traffic``: a real topic's traffic profile (``sinklab.generators.profile_topic``): each run's stream
    replays it (``speed`` times faster) instead of ``rate``: its rate curve, its partitions and their
    shares, its value sizes, its hot keys.

    Neither table creation nor a first cycle's warm-up is charged to an interval: sinklab's runs are
    primed by one cycle of a priming sink that writes ``prime`` events of another seed into every run's
    table (the first cycle in a fresh kernel takes several seconds longer than any later one); each of
    Apache's connectors commits ``prime`` events first (its tasks' start, auto-creating its table), and
    only what comes after is measured. Per sink and interval:

    - ``p50_s``/``p99_s``: visibility latency of the stream's records (Kafka timestamp → the commit
      that made them readable, see :func:`sinklab.readings.visibility`);
    - ``snapshots_per_hour``, ``files_per_table_per_hour``: the run's snapshots and data files over
      its window (first record produced → last commit visible), scaled to an hour;
    - ``mean_file_kib``: the mean size of the data files it wrote;
    - ``mean_cycle_ms``: what a commit took: sinklab's cycle (read, convert, write, commit), Apache's
      commit round (start-commit to commit-complete): the floor under any interval;
    - ``commit_gap_s``: the median time between its commits; an interval shorter than a sink can keep
      (its commit round) is said in ``note``, with what it did instead;
    - ``note``: also "not enough data" when a run made fewer than ``MIN_COMMITS`` commits: its per-hour
      figures are left empty rather than projected (send more events, or a longer stream).

    ``snapshots`` and ``visibility`` name each run's series ``interval 1 s`` (``apache, interval 1 s``
    when both sinks run; column ``series``).
    """
    sinks = [sink] if isinstance(sink, str) else list(sink)
    unknown = [s for s in sinks if s not in SINKS]
    if unknown or not sinks:
        raise ValueError(f"sink must be one of {', '.join(SINKS)} (or several), not {unknown or sinks}")
    settings = {k: v for k, v in (read_connect_json(config, name="explorer")[1] if config is not None else {}).items()
                if k != "name"}
    token = uuid.uuid4().hex[:6]
    runs = [{"sink_kind": kind, "interval_ms": interval, "topic": f"{namespace}-{kind}-{interval}ms-{token}",
             "table": f"{namespace}.{kind}_{interval}ms_{token}", "sink": f"{namespace}-{kind}-{interval}ms-{token}"}
            for kind in sinks for interval in intervals_ms]
    measured = {}
    stream: dict[str, Any] = {"rate": rate} if traffic is None else {"traffic": traffic, "speed": speed}
    partitions = partitions if traffic is None else traffic.partition_count
    for kind in sinks:
        mine = [r for r in runs if r["sink_kind"] == kind]
        explore = _explore_sinklab if kind == "sinklab" else _explore_apache
        measured.update(explore(stack, generator, mine, settings, count=count, stream=stream, partitions=partitions,
                                prime=prime, catch_up_s=catch_up_s, worker=worker, namespace=namespace, token=token))
    rows, snaps_all, vis_all, cycles_all = [], [], [], []
    for run in runs:
        snaps, vis, cycle_frame = measured[run["sink"]]
        label = f"interval {run['interval_ms'] / 1000:g} s"
        label = f"{run['sink_kind']}, {label}" if len(sinks) > 1 else label
        snaps = snaps.assign(interval_ms=run["interval_ms"], series=label)
        # The priming took table creation and the warm-up: no commit of a run is a warm-up commit.
        vis = vis.assign(interval_ms=run["interval_ms"], series=label, warmup=False)
        rows.append({"sink": run["sink_kind"], "table": run["table"],
                     **_measure(run["interval_ms"], snaps, vis, cycle_frame)})
        snaps_all.append(snaps)
        vis_all.append(vis)
        cycles_all.append(cycle_frame[cycle_frame["commit_id"].isin(set(snaps["commit_id"]))].assign(
            interval_ms=run["interval_ms"]))
    return Exploration(pd.DataFrame(rows, columns=RESULT_COLUMNS), pd.concat(snaps_all, ignore_index=True),
                       pd.concat(vis_all, ignore_index=True), runs, pd.concat(cycles_all, ignore_index=True))


Measured = dict[str, tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]]  # by run: snapshots, visibility, cycles


def _explore_sinklab(stack: Stack, generator: Generator, runs: list[dict[str, Any]], settings: dict[str, Any], *,
                     count: int, stream: dict[str, Any], partitions: int, prime: int, catch_up_s: float, namespace: str,
                     token: str, **_: Any) -> Measured:
    from sinklab.generators import Generator as GeneratorType
    from sinklab.sink import open_sink

    def config(name: str, topic: str, tables: list[str], interval: int) -> dict[str, Any]:
        return {"name": name, "config": {
            keys.VALUE_SCHEMAS_ENABLE: "false", **settings, keys.TOPICS: topic, keys.TABLES: ",".join(tables),
            keys.CATALOG: stack.info.catalog_name, keys.TABLES_AUTO_CREATE_ENABLED: "true",
            keys.COMMIT_INTERVAL_MS: str(interval)}}

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
    out: Measured = {}
    for run in runs:
        stack.create_topic(run["topic"], partitions=partitions)
        sink = open_sink(stack, config(run["sink"], run["topic"], [run["table"]], run["interval_ms"]))
        try:
            sink.start()
            generator.produce(stack, run["topic"], count=count, partitions=partitions, **stream).wait()
            wait_caught_up(sink, catch_up_s)
        finally:
            sink.stop()
        snaps = readings.snapshots(stack, run["table"])
        snaps = snaps[snaps["sink"] == run["sink"]]
        vis = readings.visibility(snaps, readings.record_times(stack, run["topic"]))
        out[run["sink"]] = (snaps, vis, readings.cycles(stack, sink=run["sink"]))
    return out


def _explore_apache(stack: Stack, generator: Generator, runs: list[dict[str, Any]], settings: dict[str, Any], *,
                    count: int, stream: dict[str, Any], partitions: int, prime: int, catch_up_s: float,
                    worker: dict[str, str] | None, **_: Any) -> Measured:
    from sinklab.generators import Generator as GeneratorType
    from sinklab.viz.apache_runs import ApacheRuns

    def producing(n: int, how: dict[str, Any], seed_offset: int, topic: str) -> Callable[[], int]:
        def send() -> int:
            chosen = GeneratorType(generator.spec, seed=generator.spec.seed + seed_offset) if seed_offset else generator
            chosen.produce(stack, topic, count=n, partitions=partitions, **how).wait()
            return n
        return send

    apache = ApacheRuns(stack, {"value.converter.schemas.enable": "false", **settings}, worker)
    out: Measured = {}
    try:
        for run in runs:
            stack.create_topic(run["topic"], partitions=partitions)
            out[run["sink"]] = apache.run(run, producing(max(prime, 1), {}, 1, run["topic"]),
                                          producing(count, stream, 0, run["topic"]), catch_up_s)
    finally:
        apache.close()
    return out


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
    gap = float(snaps["visible_at"].sort_values().diff().dt.total_seconds().median()) if n_snaps > 1 else float("nan")
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
        "commit_gap_s": gap,
        "note": "; ".join(n for n in (
            "" if n_snaps >= MIN_COMMITS else f"not enough data: {n_snaps} commits (< {MIN_COMMITS})",
            # Asked for more often than it can commit: said, with what it did instead.
            f"shorter than the sink keeps: commits {gap:.1f} s apart" if gap > 1.5 * interval / 1000 else "") if n),
    }
