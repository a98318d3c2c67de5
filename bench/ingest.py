"""Ingest throughput and visibility latency of the sink, with its baselines measured in the same run.

    .venv/bin/python bench/ingest.py [--records 1000000] [--interval-ms 5000] [--quick]
                                     [--sweep 1000,2000,5000,10000] [--profile] [--no-java-sink]
                                     [--sustained-seconds 60] [--sustained-probes 5] [--no-sustained]
    .venv/bin/python bench/ingest.py --format avro|json-schema [--records 200000]
    .venv/bin/python bench/ingest.py --target-lag

With ``--target-lag`` it measures only the commit pace: one sink each with a 1 s interval, a 5 s
interval and ``sinklab.commit.target-lag-ms=2000`` through a step profile (1,000 → 5,000 → 1,000
events/s, 60 s each), p99 visibility and commits per minute per phase.

On the embedded stack, N pizza events go into a fresh topic once; then, one after the other:

- raw consume: one confluent-kafka consumer reads the topic, touching nothing (the broker's limit);
- naive (a drain): what a user would write instead: one Python process, confluent-kafka,
  ``json.loads``, a pyarrow table and a pyiceberg ``append`` (then an offset commit) once per commit
  interval;
- sinklab (a drain): the sink drains the same backlog with the same commit interval, exactly-once,
  into one table and fanned out to three (static routing on ``sauce``). The tables exist beforehand:
  a warm-up cycle creates them (its time is reported as ``auto_create_s``);
- the sustained-rate contract: the highest event rate each sink (sinklab into one table and fanned
  out to three, the naive loop, the Java sink) keeps up with for a window (60 s; ``--quick`` 20 s) at
  the commit interval: lag at the window's close within two intervals of records, p99 visibility
  within three intervals. Pre-encoded pizzas come from a paced producer in its own process
  (``bench/paced_producer.py``), whose ceiling is measured first and never exceeded; the rate is
  searched from the sink's drain rate (``next_rate``). A drain says how fast a backlog goes, which
  the commit timer quantizes; this says what rate a sink keeps up with;
- fixed cost: cycles that carry one record each;
- latency: events are produced at a fixed rate for T seconds while the sink runs in the
  background; each record's visibility latency is the publish time of the first snapshot whose
  ``sinklab.offsets`` pass it minus the record's Kafka timestamp;
- the Java sink (``bench/java_sink.py``; ``--no-java-sink`` skips it): Apache Iceberg's own Kafka
  Connect sink in a standalone Connect worker, ``tasks.max`` = cores, on the same broker, catalog
  and interval: it drains a warm-up topic, then the same backlog into a table with sinklab's
  columns, then goes through the sustained-rate contract on the same worker, then runs the same
  latency measurement (a record is found by its key in the data files
  each snapshot added, as that sink records no source offsets).

With ``--format avro`` (or ``json-schema``) it measures instead the same pizzas as JSON and as
Confluent-framed Avro (or JSON with a JSON Schema; the schema in the stack's schema registry, Apicurio
Registry), each drained by sinklab into one table on the same warm JVM: the JSON figure is the
baseline of the other.

Prints a table, then one JSON object as the last line. Not a test: nothing here asserts a duration.
Run it alone (``flock /tmp/sinklab-spark.lock ...`` on shared machines): the figures are only
comparable with each other.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import java_sink  # bench/java_sink.py, next to this script
import numpy as np
import paced_producer  # bench/paced_producer.py
import pandas as pd
import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition

from sinklab.generators import PizzaGenerator
from sinklab.generators.produce import PRODUCER_DEFAULTS
from sinklab.maintenance import schedule
from sinklab.sink import IcebergSink, load_config, read_control_log
from sinklab.sink.tables import OFFSETS_PROP, SINK_PROP, identifier, load_state
from sinklab.sink.wire import AVRO_CONVERTER, JSON_SCHEMA_CONVERTER, PayloadType, from_property, to_property
from sinklab.stack import Stack
from sinklab.stack.spark import SparkSettings
from sinklab.viz import frames

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from sinklab.sink.cycle import CycleResult

NAMESPACE = "bench"
SINGLE = f"{NAMESPACE}.pizzas"
NAIVE = f"{NAMESPACE}.naive"
FRESH_MS = 1_000  # the short interval whose p99 the contract reports for both sinks
# The Java sink's tables, with sinklab's columns: warm-up, the backlog, and the latency run.
JAVA_WARM, JAVA, JAVA_LATENCY = f"{NAMESPACE}.java_warm", f"{NAMESPACE}.java_pizzas", f"{NAMESPACE}.java_latency"
# Static fan-out on the sauce: each record lands in exactly one of three tables, about a third each.
FANOUT = {f"{NAMESPACE}.sauce_mild": "regular|light", f"{NAMESPACE}.sauce_rich": "extra|none",
          f"{NAMESPACE}.sauce_special": "bbq|alfredo"}
PAGE = os.sysconf("SC_PAGE_SIZE")


# ---- memory: the whole process tree this run starts (driver, Spark JVM and its Python workers, broker, catalog)

def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after the last ')' are fixed.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except OSError:
        return 0


def _kind(pid: int, services: set[int]) -> str:
    if pid == os.getpid():
        return "driver"
    if pid in services:
        return "services"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "other"
    if b"ConnectStandalone" in cmd:
        return "java-sink"
    return "spark" if b"java" in cmd.split(b"\0", 1)[0] or b"pyspark" in cmd else "other"


class RssSampler:
    """Peak RSS of the process tree, overall and per phase, sampled every ``every`` seconds."""

    def __init__(self, services: set[int], every: float = 0.2):
        self.services, self.every = services, every
        self.peak: dict[str, int] = {}
        self.phase_peak: dict[str, int] = {}
        self._phase: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._phase = name
        try:
            yield
        finally:
            self.sample()
            self._phase = None

    def sample(self) -> None:
        kids = _children()
        by_kind: dict[str, int] = {}
        todo = [(os.getpid(), None)]
        while todo:
            pid, parent_kind = todo.pop()
            # A service's children (the REST catalog's JVM) are the service's.
            kind = "services" if parent_kind == "services" else _kind(pid, self.services)
            by_kind[kind] = by_kind.get(kind, 0) + _rss(pid)
            todo.extend((kid, kind) for kid in kids.get(pid, []))
        total = sum(by_kind.values())
        by_kind["total"] = total
        for kind, value in by_kind.items():
            self.peak[kind] = max(self.peak.get(kind, 0), value)
        if self._phase is not None:
            self.phase_peak[self._phase] = max(self.phase_peak.get(self._phase, 0), total)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()


# ---- Spark jobs, from the driver's status store (kept with or without the UI)

@dataclass
class SparkJob:
    id: int
    name: str
    seconds: float
    tasks: int


def spark_jobs(spark: SparkSession, after: int) -> list[SparkJob]:
    """Finished jobs with an id above ``after``, oldest first."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    store = spark.sparkContext._jsc.sc().statusStore()  # type: ignore[union-attr]
    jobs = jvm.scala.collection.JavaConverters.seqAsJavaListConverter(store.jobsList(None)).asJava()
    out = []
    for job in jobs:
        if job.jobId() <= after or job.completionTime().isEmpty() or job.submissionTime().isEmpty():
            continue
        seconds = (job.completionTime().get().getTime() - job.submissionTime().get().getTime()) / 1000
        out.append(SparkJob(job.jobId(), job.name(), seconds, job.numTasks()))
    return sorted(out, key=lambda j: j.id)


def last_job_id(spark: SparkSession) -> int:
    jobs = spark_jobs(spark, -1)
    return jobs[-1].id if jobs else -1


# ---- the backlog and the two baselines

def produce(stack: Stack, topic: str, count: int, partitions: int, seed: int = 1,
            rate: float | None = None, value_format: str = "json") -> float:
    """Produce ``count`` pizzas into a fresh topic; returns events/s."""
    stack.create_topic(topic, partitions=partitions)
    run = PizzaGenerator(seed=seed).produce(stack, topic, count=count, rate=rate, partitions=partitions,
                                            format=value_format).wait()
    assert run.delivered == count, run
    return run.events_per_second


def watermarks(stack: Stack, topic: str) -> dict[int, tuple[int, int]]:
    """(low, high) offsets of every partition of ``topic``."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "bench-watermarks"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
    finally:
        consumer.close()


def assign_all(stack: Stack, topic: str, **conf: Any) -> tuple[Consumer, int]:
    """A consumer assigned to every partition of ``topic`` from the start, and how many records it holds."""
    marks = watermarks(stack, topic)
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, **conf})
    consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in marks.items()])
    return consumer, sum(high - low for low, high in marks.values())


def spark_alone(stack: Stack, topic: str, workdir: Path) -> float:
    """Records/s of Spark alone on these cores: the topic's values, from local text files (one per
    core), parsed into the sink's table columns and written as zstd Parquet. No Kafka, no type checks,
    no Iceberg commit, no exactly-once: what any Spark pipeline here spends at the least."""
    from pyspark.sql import functions as F

    spark = stack.spark
    consumer, total = assign_all(stack, topic)
    cores = spark.sparkContext.defaultParallelism
    texts = workdir / "values"
    texts.mkdir(parents=True, exist_ok=True)
    files = [(texts / f"part-{i}.json").open("wb") for i in range(cores)]
    seen = 0
    while seen < total:
        for m in consumer.consume(10_000, timeout=1.0):
            files[seen % cores].write(m.value() + b"\n")
            seen += 1
    consumer.close()
    for f in files:
        f.close()
    schema = spark.table(f"sinklab.{SINGLE}").schema
    best = float("inf")
    for _ in range(2):  # the better of two: the first run also warms up the text and Parquet code paths
        started = time.monotonic()
        (spark.read.text(str(texts)).select(F.from_json("value", schema).alias("r")).select("r.*")
         .write.mode("overwrite").option("compression", "zstd").parquet(str(workdir / "parquet")))
        best = min(best, time.monotonic() - started)
    return seen / best


def raw_consume(stack: Stack, topic: str) -> float:
    consumer, total = assign_all(stack, topic)
    seen = 0
    started = time.monotonic()
    while seen < total:
        seen += len(consumer.consume(10_000, timeout=1.0))
    elapsed = time.monotonic() - started
    consumer.close()
    return seen / elapsed


@dataclass
class NaiveResult:
    rps: float
    appends: int
    files_per_append: float
    append_at_s: list[float] = field(default_factory=list)  # seconds from the start to each append's commit


def naive_pyiceberg(stack: Stack, topic: str, table: Table, interval_s: float) -> NaiveResult:
    """The loop a user writes without a sink: consume, json.loads, pyarrow, pyiceberg append per interval,
    draining the backlog of ``topic``.

    At-least-once (append, then commit offsets): cheaper than the sink's protocol, never dearer.
    """
    consumer, total = assign_all(stack, topic)
    return naive_loop(consumer, table, interval_s, lambda seen: seen >= total)


def naive_loop(consumer: Consumer, table: Table, interval_s: float, done: Callable[[int], bool],
               sink_name: str | None = None) -> NaiveResult:
    """The naive loop until ``done(records seen)``; a drain (no ``sink_name``) appends what is left at the
    end. With ``sink_name`` it runs under the sustained-rate contract: each append's snapshot records
    the next offset of every partition it covers, as sinklab's do (``sinklab.sink``, ``sinklab.offsets``),
    so that its visibility is read from the table by the same code; what is left at the end is dropped."""
    schema = table.schema().as_arrow()
    rows: list[dict[str, Any]] = []
    ends: dict[str, dict[int, int]] = {}
    seen = appends = files = 0
    append_at: list[float] = []
    started = last = time.monotonic()

    def flush() -> None:
        nonlocal rows, appends, files, last
        if rows:
            before = table.current_snapshot()
            props = {SINK_PROP: sink_name, OFFSETS_PROP: to_property(ends)} if sink_name else {}
            table.append(pa.Table.from_pylist(rows, schema=schema), snapshot_properties=props)
            consumer.commit(asynchronous=False)
            snap = table.current_snapshot()
            if snap is not None and snap != before and snap.summary is not None:
                files += int(snap.summary.additional_properties.get("added-data-files", 0))
            appends += 1
            append_at.append(time.monotonic() - started)
            rows = []
        last = time.monotonic()

    try:
        while not done(seen):
            batch = consumer.consume(10_000, timeout=1.0)
            for m in batch:
                if m.error() is None and m.value() is not None:
                    rows.append(json.loads(m.value()))
                    seen += 1
            if sink_name:
                for m in batch:
                    if m.error() is None:
                        ends.setdefault(m.topic(), {})[m.partition()] = m.offset() + 1
            if time.monotonic() - last >= interval_s:
                flush()
        if not sink_name:
            flush()
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    return NaiveResult(seen / elapsed, appends, files / max(appends, 1), append_at)


# ---- sinklab

# The converter of each value format the bench produces (the registry's URL is the stack's).
CONVERTERS = {"json": {"value.converter.schemas.enable": "false"}, "avro": {"value.converter": AVRO_CONVERTER},
              "json-schema": {"value.converter": JSON_SCHEMA_CONVERTER}}
FORMAT_NAMES = {"json": "JSON", "avro": "Avro", "json-schema": "JSON Schema"}


def sink_config(name: str, topic: str, tables: list[str], interval_ms: int, value_format: str = "json",
                routes: dict[str, str] | None = None, **extra: str) -> dict[str, Any]:
    """A sinklab sink; into more than one table, routed on the sauce by ``routes`` (table: regex; ``FANOUT``)."""
    config: dict[str, Any] = {**extra,
        "name": name, "topics": topic, "iceberg.tables": ",".join(tables), "iceberg.catalog": "sinklab",
        "iceberg.tables.auto-create-enabled": "true", "iceberg.control.commit.interval-ms": str(interval_ms),
        **CONVERTERS[value_format],
    }
    if len(tables) > 1:
        config["iceberg.tables.route-field"] = "sauce"
        config.update({f"iceberg.table.{t}.route-regex": (routes or FANOUT)[t] for t in tables})
    return config


@dataclass
class DrainResult:
    records: int
    seconds: float
    cycles: list[CycleResult]
    jobs: list[list[SparkJob]]

    @property
    def rps(self) -> float:
        return self.records / self.seconds

    @property
    def files_per_table_commit(self) -> int:
        return max((len(s.data_files) for c in self.cycles for s in c.tables.values()), default=0)


def drain(stack: Stack, name: str, topic: str, tables: list[str], interval_ms: int, expected: int,
          value_format: str = "json", **extra: str) -> DrainResult:
    """Cycles as the running sink makes them (one per interval, or back to back when a cycle takes
    longer), until every record of the backlog is committed."""
    sink = IcebergSink(stack, sink_config(name, topic, tables, interval_ms, value_format, **extra))
    spark = stack.spark
    cycles: list[CycleResult] = []
    jobs: list[list[SparkJob]] = []
    try:
        started = time.monotonic()
        while sum(c.records for c in cycles) < expected:
            began = time.monotonic()
            before = last_job_id(spark)
            result = sink.run_once()
            if result is None:
                time.sleep(0.05)
                continue
            cycles.append(result)
            jobs.append(spark_jobs(spark, before))
            if sum(c.records for c in cycles) < expected:
                time.sleep(max(0.0, interval_ms / 1000 - (time.monotonic() - began)))
        seconds = time.monotonic() - started
    finally:
        sink.stop()
    return DrainResult(sum(c.records for c in cycles), seconds, cycles, jobs)


def warm_up(stack: Stack, records: int, interval_ms: int) -> tuple[float, float]:
    """Create the tables (auto-create, from 2,000 events), then drain ``records`` more through both
    sinks so that the measured drains run on a warm JVM, as a sink that has been running does.
    Returns the seconds creating took, and those of the very first cycle (a fresh JVM's first
    queries and the auto-create of one table)."""
    produce(stack, "bench-create", 2_000, partitions=1, seed=99)
    produce(stack, "bench-warm", records, partitions=6, seed=98)
    started = time.monotonic()
    first = []
    for name, tables in (("bench-create-single", [SINGLE]), ("bench-create-fanout", list(FANOUT))):
        first.append(drain(stack, name, "bench-create", tables, interval_ms, 2_000).cycles[0].duration_ms / 1000)
    created = time.monotonic() - started
    for name, tables in (("bench-warm-single", [SINGLE]), ("bench-warm-fanout", list(FANOUT))):
        drain(stack, name, "bench-warm", tables, interval_ms, records)
    return created, first[0]


def on_cluster(stack: Stack, workers: int, topic: str, interval_ms: int, records: int) -> DrainResult:
    """The backlog drained by a sink whose executors run on a standalone cluster of ``workers``
    one-core workers on this machine (the driver's Spark is restarted against it, then back)."""
    from sinklab.stack.cluster import StandaloneCluster

    local = stack.spark_settings
    with tempfile.TemporaryDirectory(prefix="sinklab-cluster-") as work, \
            StandaloneCluster(Path(work), workers=workers) as cluster:
        stack.stop_spark()
        stack.spark_settings = local.model_copy(update={"master": cluster.master_url, "conf": {
            **local.conf, "spark.executor.memory": "1g", "spark.executor.cores": "1"}})
        try:
            table = f"{NAMESPACE}.cluster_{workers}"
            drain(stack, f"bench-cluster-{workers}-warm", "bench-create", [table], interval_ms, 2_000)
            return drain(stack, f"bench-cluster-{workers}", topic, [table], interval_ms, records)
        finally:
            stack.stop_spark()
            stack.spark_settings = local


def drop_topics(stack: Stack, topics: list[str]) -> None:
    """A sweep's topic goes once measured: the runs that follow find a broker holding only what they
    and the backlog (kept for the cluster drains at the end) need."""
    admin = stack.admin()  # held: a client collected before its futures resolve fails them
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        future.result(30)


def fixed_cost(stack: Stack, topic: str, interval_ms: int, cycles: int = 3) -> tuple[float, float]:
    """Median seconds of a cycle that carries one record (the per-cycle overhead), and of one that
    finds nothing new."""
    stack.create_topic(topic, partitions=1)
    sink = IcebergSink(stack, sink_config("bench-fixed", topic, [SINGLE], interval_ms))
    times = []
    try:
        for i in range(cycles):
            produce(stack, topic, 1, partitions=1, seed=1000 + i)
            began = time.monotonic()
            assert sink.run_once() is not None
            times.append(time.monotonic() - began)
        began = time.monotonic()
        assert sink.run_once() is None
        empty = time.monotonic() - began
    finally:
        sink.stop()
    return statistics.median(times), empty


# ---- visibility latency

@dataclass
class LatencyResult:
    interval_ms: int
    rate: float
    records: int
    p50_s: float
    p99_s: float
    max_s: float
    p99_snapshot_ts_s: float
    commits: int
    files_per_commit: float
    records_per_commit: float
    cycle_s: list[float] = field(default_factory=list)


def topic_timestamps(stack: Stack, topic: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per partition: offsets and Kafka timestamps (ms) of every record."""
    consumer, total = assign_all(stack, topic)
    found: dict[int, tuple[list[int], list[int]]] = {}
    seen = 0
    while seen < total:
        for m in consumer.consume(10_000, timeout=1.0):
            offsets, stamps = found.setdefault(m.partition(), ([], []))
            offsets.append(m.offset())
            stamps.append(m.timestamp()[1])
            seen += 1
    consumer.close()
    return {p: (np.array(o), np.array(t)) for p, (o, t) in found.items()}


def latency(stack: Stack, topic: str, table_name: str, interval_ms: int, rate: float, seconds: float,
            partitions: int, **extra: str) -> LatencyResult:
    name = f"{topic}-sink"  # one sink per topic: its snapshots are the ones this run measures
    count = int(rate * seconds)
    stack.create_topic(topic, partitions=partitions)
    config = load_config(sink_config(name, topic, [table_name], interval_ms, **extra))
    sink = IcebergSink(stack, config, between_cycles=schedule(config)).start()
    try:
        PizzaGenerator(seed=7).produce(stack, topic, count=count, rate=rate, partitions=partitions).wait()
        wait_committed(stack, sink, topic, table_name, interval_ms / 1000 + 120)
    finally:
        sink.stop()
    complete = completed_cycles(stack, name)
    stamps, visible, snapshot_ms, commits = record_visibility(stack, topic, table_name, name, complete)
    lat = (visible - stamps) / 1000
    lat_snap = (snapshot_ms - stamps) / 1000
    with_data = [c for c in commits if c[4] > 0]
    cycle_s = [d / 1000 for d, c in zip(complete["duration_ms"], complete["counters"], strict=True) if c.get("records")]
    return LatencyResult(
        interval_ms, rate, len(lat), float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), float(lat.max()),
        float(np.percentile(lat_snap, 99)), len(with_data),
        statistics.mean(c[3] for c in with_data) if with_data else 0.0,
        statistics.mean(c[4] for c in with_data) if with_data else 0.0, cycle_s)


def wait_committed(stack: Stack, sink: IcebergSink, topic: str, table_name: str, timeout_s: float) -> None:
    """Until the running ``sink`` has committed everything ``topic`` holds now into ``table_name``."""
    highs = {p: high for p, (_, high) in watermarks(stack, topic).items()}
    deadline = time.monotonic() + timeout_s
    while True:
        state = load_state(stack.catalog, table_name, "main", sink.config.name)
        done = state.offsets.get(topic, {})
        if all(done.get(p, 0) >= h for p, h in highs.items()):
            return
        if time.monotonic() > deadline or sink.status().state == "FAILED":
            raise RuntimeError(f"the sink did not commit all of {topic}: {sink.status()}")
        time.sleep(0.2)


# The step profile of --target-lag: events/s for seconds, one phase after the other.
STEPS = [(1_000, 60.0), (5_000, 60.0), (1_000, 60.0)]
TARGET_LAG_MS = 2_000


def step_profile(stack: Stack, label: str, partitions: int, interval_ms: int, steps: list[tuple[int, float]],
                 **extra: str) -> dict[str, Any]:
    """One sink through the rate ``steps``: p99 visibility and commits per minute in each phase (a
    record's phase is when it was produced; a commit's, when it was published)."""
    topic = f"bench-steps-{label}"
    name = f"{topic}-sink"
    stack.create_topic(topic, partitions=partitions)
    sink = IcebergSink(stack, sink_config(name, topic, [SINGLE], interval_ms, **extra))
    bounds = []
    try:
        PizzaGenerator(seed=3).produce(stack, topic, count=10, partitions=partitions).wait()
        sink.run_once()  # the JVM's first cycle of this sink is not part of any phase
        sink.start()
        for rate, seconds in steps:
            began = time.time() * 1000
            PizzaGenerator(seed=int(began) % 10_000).produce(
                stack, topic, count=int(rate * seconds), rate=rate, partitions=partitions).wait()
            bounds.append((began, time.time() * 1000))
        wait_committed(stack, sink, topic, SINGLE, interval_ms / 1000 + 120)
        pace = sink.status().pace
    finally:
        sink.stop()
    stamps, visible, _, commits = record_visibility(stack, topic, SINGLE, name, completed_cycles(stack, name))
    lat = (visible - stamps) / 1000
    phases = []
    for (rate, _), (begin, end) in zip(steps, bounds, strict=True):
        mine = (stamps >= begin) & (stamps < end)
        published = [c for c in commits if begin <= c[0] < end and c[4] > 0]
        phases.append({"rate": rate, "records": int(mine.sum()), "p50_s": float(np.percentile(lat[mine], 50)),
                       "p99_s": float(np.percentile(lat[mine], 99)),
                       "commits_per_min": len(published) / ((end - begin) / 60_000)})
    return {"label": label, "phases": phases, "pace": pace}


def target_lag(partitions: int, steps: list[tuple[int, float]]) -> None:
    """``--target-lag``: the step profile at a 2 s target, beside the fixed intervals of 1 s and 5 s."""
    runs = []
    with Stack.embedded(connect=False) as stack:
        stack.spark  # noqa: B018 - the JVM's start is no part of any figure
        for label, interval, extra in (("interval-1s", 1_000, {}), ("interval-5s", 5_000, {}),
                                       ("target-2s", 60_000, {"sinklab.commit.target-lag-ms": str(TARGET_LAG_MS)})):
            runs.append(step_profile(stack, label, partitions, interval, steps, **extra))
    header = " / ".join(f"{rate:,}/s" for rate, _ in steps)
    print(f"\nstep profile {header}, {steps[0][1]:.0f} s each; p99 visibility (s) and commits per minute per phase")
    for run in runs:
        cells = "  ".join(f"p99 {p['p99_s']:5.2f} s, {p['commits_per_min']:5.1f}/min" for p in run["phases"])
        print(f"{run['label']:>12}  {cells}")
    print(json.dumps(_rounded({"target_lag_ms": TARGET_LAG_MS, "steps": steps, "runs": runs})))


def completed_cycles(stack: Stack, name: str) -> pd.DataFrame:
    """The ``commit-complete`` events of sink ``name``."""
    log = read_control_log(stack.bootstrap_servers, sink=name)
    return log[log["type"] == PayloadType.COMMIT_COMPLETE]


def record_visibility(stack: Stack, topic: str, table_name: str, name: str, complete: pd.DataFrame
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, dict[int, int], int, int]]]:
    """Each record's Kafka timestamp, when it became readable (the publish of the first commit of sink
    ``name`` past its offset, its ``complete`` cycles standing in for snapshots expired since) and that
    snapshot's own time (all ms); and the commits (publish ms, snapshot ms, offsets, files, records) in
    order."""
    table = stack.catalog.load_table(identifier(table_name))
    published = {e.snapshot_id: e.timestamp_ms for e in table.metadata.snapshot_log}
    commits = []  # (publish ms, snapshot ms, offsets, files, records) in commit order
    for snap in table.metadata.snapshots:
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get(SINK_PROP) != name:
            continue
        offsets = from_property(props[OFFSETS_PROP]).get(topic, {})
        commits.append((published.get(snap.snapshot_id, snap.timestamp_ms), snap.timestamp_ms, offsets,
                        int(props.get("added-data-files", 0)), int(props.get("added-records", 0))))
    # Snapshots that maintenance expired are gone from the metadata; the control log still has their commits
    # (its time is a few ms after the publish).
    live = {s.snapshot_id for s in table.metadata.snapshots}
    for event in complete.itertuples():
        for t in event.tables:
            if t["table"] == table_name and t["snapshot_id"] not in live:
                ts = int(event.ts.timestamp() * 1000)
                offsets = t["offsets"].get(topic, {})
                commits.append((ts, ts, offsets, len(t["data_files"]), t["records"]))
    commits.sort(key=lambda c: c[0])
    all_stamps, visible, stamped = [], [], []
    for partition, (offsets, stamps) in topic_timestamps(stack, topic).items():
        ends = [c[2].get(partition, 0) for c in commits]
        # Offsets recorded per partition never go back, so the first commit past an offset is a bisection.
        idx = np.array([bisect.bisect_right(ends, int(o)) for o in offsets])
        assert (idx < len(commits)).all(), "a record no commit covers"
        all_stamps.append(np.asarray(stamps))
        visible.append(np.array([commits[i][0] for i in idx]))
        stamped.append(np.array([commits[i][1] for i in idx]))
    return np.concatenate(all_stamps), np.concatenate(visible), np.concatenate(stamped), commits


# ---- the run

def create_empty_table(stack: Stack, name: str = NAIVE) -> Table:
    """An empty table (the naive loop's, the Java sink's, each probe's of the sustained-rate contract),
    with the columns the sink inferred for the same events."""
    like = stack.catalog.load_table(identifier(SINGLE))
    if stack.catalog.table_exists(identifier(name)):
        stack.catalog.drop_table(identifier(name))
    return stack.catalog.create_table(identifier(name), schema=like.schema())


# ---- the Java sink (bench/java_sink.py)

@dataclass
class JavaResult:
    drain: java_sink.JavaDrain | None = None
    latency: LatencyResult | None = None
    latency_1s: LatencyResult | None = None  # at FRESH_MS
    sustained: Sustained | None = None
    error: str | None = None


def key_timestamps(stack: Stack, topic: str) -> dict[bytes, int]:
    """Every record's key (the pizza's ``order_id``) and Kafka timestamp (ms)."""
    consumer, total = assign_all(stack, topic)
    found: dict[bytes, int] = {}
    seen = 0
    while seen < total:
        for m in consumer.consume(10_000, timeout=1.0):
            found[m.key()] = m.timestamp()[1]
            seen += 1
    consumer.close()
    return found


def java_drain(stack: Stack, worker: java_sink.ConnectWorker, warm: int, records: int,
               interval_ms: int) -> java_sink.JavaDrain:
    """The Java sink on a warm JVM, as sinklab's drains run: ``warm`` records of the warm-up topic
    first, then the backlog, each by a connector of its own on one worker."""
    create_empty_table(stack, JAVA_WARM)
    create_empty_table(stack, JAVA)
    java_sink.drain(stack, worker, "bench-java-warm", "bench-warm", JAVA_WARM, interval_ms, warm)
    return java_sink.drain(stack, worker, "bench-java", "bench-backlog", JAVA, interval_ms, records)


def java_latency(stack: Stack, topic: str, interval_ms: int, rate: float, seconds: float,
                 partitions: int) -> LatencyResult:
    """The latency run of sinklab's ``latency``, with the Java sink in the background."""
    count = int(rate * seconds)
    stack.create_topic(topic, partitions=partitions)
    create_empty_table(stack, JAVA_LATENCY)
    name = f"{topic}-sink"
    with java_sink.ConnectWorker(stack, java_sink.scratch_dir(stack)) as worker:
        worker.add(java_sink.connector_config(stack, name, topic, JAVA_LATENCY, interval_ms))
        worker.wait_assigned(name, topic)  # the JVM's start and the group's join are no part of it
        PizzaGenerator(seed=7).produce(stack, topic, count=count, rate=rate, partitions=partitions).wait()
        java_sink.wait_for_records(stack, worker, name, JAVA_LATENCY, count, timeout=interval_ms / 1000 + 120)
        worker.remove(name)
    table = stack.catalog.load_table(identifier(JAVA_LATENCY))
    lat, commits = java_sink.visibility(table, key_timestamps(stack, topic))
    # The snapshot's own timestamp: the Java sink publishes the snapshot it makes, so both are one.
    return LatencyResult(
        interval_ms, rate, len(lat), float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), float(lat.max()),
        float(np.percentile(lat, 99)), len(commits), statistics.mean(len(c.files) for c in commits),
        statistics.mean(c.records for c in commits))


# ---- the sustained-rate contract: the highest event rate each sink keeps up with

PAYLOAD_POOL = 100_000  # distinct pre-encoded pizzas the paced producer cycles through, each record numbered
CEILING_S = 5.0  # seconds the producer runs flat out for its ceiling
TOP_SHARE = 0.9  # the highest rate tried, as a share of the producer's ceiling
PRIMING = 100  # records a sinklab sink commits before the window opens (some for each of three tables)


@dataclass
class Contract:
    """Keeping up with a rate: for ``seconds`` at that rate, with a commit every ``interval_ms``, at
    most ``lag_intervals`` intervals of records not yet readable when the window closes, and the 99th
    percentile of the window's records' visibility latency within ``p99_intervals`` intervals. At
    most ``probes`` windows per sink."""

    interval_ms: int
    seconds: float
    probes: int
    lag_intervals: float = 2
    p99_intervals: float = 3

    @property
    def p99_limit_s(self) -> float:
        return self.p99_intervals * self.interval_ms / 1000

    def lag_limit(self, rate: float) -> float:
        return self.lag_intervals * self.interval_ms / 1000 * rate


@dataclass
class Payloads:
    """The pre-encoded pizzas the paced producer sends (``bench/paced_producer.py``)."""

    path: Path
    count: int
    mean_bytes: float  # of a value


def pizza_payloads(folder: Path, count: int = PAYLOAD_POOL) -> Payloads:
    values = (r.value for r in PizzaGenerator(seed=11).records(count) if r.value is not None)
    written, mean = paced_producer.write_payloads(folder / "pizzas.jsonl", values)
    return Payloads(folder / "pizzas.jsonl", written, mean)


def producer_ceiling(stack: Stack, payloads: Payloads, partitions: int,
                     seconds: float = CEILING_S) -> paced_producer.PacedRun:
    """The paced producer flat out for ``seconds`` into a fresh topic, with no sink running: the records/s
    the broker acknowledges (``delivered_rps``). No rate above it is tried."""
    topic = "bench-producer-ceiling"
    stack.create_topic(topic, partitions=partitions)
    try:
        return paced_producer.produce_paced(stack.bootstrap_servers, topic, payloads.path, partitions, seconds,
                                            config=PRODUCER_DEFAULTS)
    finally:
        drop_topics(stack, [topic])


Steps = list[tuple[float, int]]  # per commit, in order: its publish (epoch ms), records of the topic readable from then


def readable_at(steps: Steps, at_ms: float) -> int:
    return max((n for t, n in steps if t <= at_ms), default=0)


def _epoch_ms(times: pd.Series) -> np.ndarray:
    return ((times - pd.Timestamp(0, tz="UTC")).dt.total_seconds() * 1000).to_numpy()


def offsets_readable(stack: Stack, tables: list[str], sink_name: str, topic: str) -> Steps:
    """From the snapshots of ``sink_name`` (their ``sinklab.offsets``): each commit's publish, and the
    records of ``topic`` readable in all of ``tables`` from then on (fanned out: the least of the three)."""
    snaps = frames.snapshots(stack, tables)
    own = snaps[(snaps["sink"] == sink_name) & snaps["offsets"].notna()].sort_values("visible_at")
    latest = dict.fromkeys(tables, 0)
    steps = []
    for row in own.itertuples():
        latest[row.table] = max(latest[row.table], sum(row.offsets.get(topic, {}).values()))
        steps.append((row.visible_at.timestamp() * 1000, min(latest.values())))
    return steps


def offsets_latency(stack: Stack, tables: list[str], sink_name: str, topic: str) -> tuple[np.ndarray, np.ndarray]:
    """Every record of ``topic``: its Kafka timestamp and when it became readable (epoch ms, NaN: not yet), by
    ``frames.visibility`` from the snapshots' offsets; fanned out, when the last of the tables published past
    it (a record is matched against every table, and the three publish in the same cycle)."""
    records = frames.record_times(stack, topic)
    vis = frames.visibility(frames.snapshots(stack, tables), records, sink=sink_name)
    if vis.empty:
        return _epoch_ms(records["produced_at"]), np.full(len(records), np.nan)
    produced = _epoch_ms(vis["produced_at"])
    visible = produced + vis["latency_s"].to_numpy() * 1000
    if len(tables) > 1:
        per = pd.DataFrame({"partition": vis["partition"].to_numpy(), "offset": vis["offset"].to_numpy(),
                            "produced": produced, "visible": np.nan_to_num(visible, nan=np.inf)})
        last = per.groupby(["partition", "offset"], sort=False).agg(produced=("produced", "first"),
                                                                    visible=("visible", "max"))
        produced, visible = last["produced"].to_numpy(), last["visible"].to_numpy()
        visible = np.where(np.isinf(visible), np.nan, visible)
    return produced, visible


class RateSink:
    """A sink under the contract, on a fresh topic each probe: running and caught up before the window
    opens, stopped once the window's records are readable or the wait is over."""

    key = ""  # its name in the JSON line: ``{key}_sustained_rps``
    label = ""

    def start(self, topic: str, probe: int) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def check(self) -> None:
        """Raise when the sink has failed."""

    def readable(self, topic: str) -> Steps:
        raise NotImplementedError

    def record_latency(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        """Every record's Kafka timestamp and when it became readable (epoch ms; NaN: not yet)."""
        raise NotImplementedError

    def cycle_s(self) -> list[float]:
        """The durations of the probe's commit cycles, where the sink reports them."""
        return []


class SinklabRate(RateSink):
    """sinklab into one table, or fanned out to three on the sauce (as ``FANOUT``), exactly-once."""

    def __init__(self, stack: Stack, interval_ms: int, partitions: int, fanout: bool):
        self.stack, self.interval_ms, self.partitions, self.fanout = stack, interval_ms, partitions, fanout
        self.key, self.label = ("fanout", "sinklab, fan-out to 3") if fanout else ("sinklab", "sinklab, 1 table")
        self.sink: IcebergSink | None = None
        self.tables: dict[str, str] = {}
        self.name = ""

    def start(self, topic: str, probe: int) -> None:
        # The same tables for every probe (a new sink each time, its records told apart by its name in the
        # snapshots): the first priming cycle creates them, as the sink does.
        base = f"{NAMESPACE}.rate_{self.key}"
        self.tables = ({f"{base}_{t.rsplit('_', 1)[1]}": regex for t, regex in FANOUT.items()} if self.fanout
                       else {base: ""})
        self.name = f"{topic}-sink"
        PizzaGenerator(seed=500 + probe).produce(self.stack, topic, count=PRIMING, partitions=self.partitions).wait()
        self.sink = IcebergSink(self.stack, sink_config(self.name, topic, list(self.tables), self.interval_ms,
                                                        routes=self.tables))
        # This sink's first cycle (its session and consumers; creating its tables, as it does) is no part of it.
        self.sink.run_once()
        self.sink.start()

    def stop(self) -> None:
        if self.sink is not None:
            self.sink.stop()
            self.sink = None

    def check(self) -> None:
        status = self.sink.status() if self.sink is not None else None
        if status is not None and status.state == "FAILED":
            raise RuntimeError(f"sink {self.name} failed: {status.trace}")

    def readable(self, topic: str) -> Steps:
        return offsets_readable(self.stack, list(self.tables), self.name, topic)

    def record_latency(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        return offsets_latency(self.stack, list(self.tables), self.name, topic)

    def cycle_s(self) -> list[float]:
        done = completed_cycles(self.stack, self.name)
        return [d / 1000 for d in done["duration_ms"].iloc[1:]]  # not the priming cycle


class NaiveRate(RateSink):
    """The naive loop (``naive_loop``) in a thread of this process (the producer runs in its own)."""

    key, label = "naive", "naive pyiceberg"

    def __init__(self, stack: Stack, interval_ms: int):
        self.stack, self.interval_ms = stack, interval_ms
        self.table_name = self.name = ""
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, topic: str, probe: int) -> None:
        self.table_name = f"{NAMESPACE}.rate_naive_{probe}"
        table = create_empty_table(self.stack, self.table_name)
        self.name = f"{topic}-naive"
        consumer, _ = assign_all(self.stack, topic)
        self._halt.clear()
        self._error = None

        def run() -> None:
            try:
                naive_loop(consumer, table, self.interval_ms / 1000, lambda _: self._halt.is_set(), self.name)
            except BaseException as exc:  # noqa: BLE001 - check() raises it in the harness's thread
                self._error = exc

        self._thread = threading.Thread(target=run, name=f"naive-{probe}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(120)
            self._thread = None

    def check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the naive loop failed: {failure(self._error)}") from self._error

    def readable(self, topic: str) -> Steps:
        return offsets_readable(self.stack, [self.table_name], self.name, topic)

    def record_latency(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        return offsets_latency(self.stack, [self.table_name], self.name, topic)


class JavaRate(RateSink):
    """Apache Iceberg's Kafka Connect sink, ``tasks.max`` = cores, a connector per probe on one warm worker."""

    key, label = "java_sink", "Java Iceberg sink"

    def __init__(self, stack: Stack, worker: java_sink.ConnectWorker, interval_ms: int):
        self.stack, self.worker, self.interval_ms = stack, worker, interval_ms
        self.table_name = self.name = ""

    def start(self, topic: str, probe: int) -> None:
        self.table_name = f"{NAMESPACE}.rate_java_{probe}"
        create_empty_table(self.stack, self.table_name)
        self.name = f"{topic}-sink"
        self.worker.add(java_sink.connector_config(self.stack, self.name, topic, self.table_name, self.interval_ms))
        self.worker.wait_assigned(self.name, topic)  # the tasks' start and the group's join are no part of it

    def stop(self) -> None:
        self.worker.remove(self.name)

    def check(self) -> None:
        self.worker.check(self.name)

    def readable(self, topic: str) -> Steps:
        # It records no source offsets: a fresh table's total records, as each snapshot made them readable.
        snaps = frames.snapshots(self.stack, self.table_name)
        return [(row.visible_at.timestamp() * 1000, int(row.total_records))
                for row in snaps[snaps["added_records"] > 0].sort_values("visible_at").itertuples()]

    def record_latency(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        table = self.stack.catalog.load_table(identifier(self.table_name))
        produced, visible, _ = java_sink.record_visibility(table, key_timestamps(self.stack, topic))
        return produced, visible


@dataclass
class Probe:
    """One window at ``rate`` records/s."""

    rate: float
    produced: int
    produced_rps: float  # what the producer kept, first record to last
    behind_s: float  # the most the producer fell behind its schedule
    lag_end: int  # records produced by the window's close and not readable then
    lag_limit: float
    committed_rps: float  # records/s the sink made readable inside the window, first commit there to last
    commits: int  # commits published inside the window
    p50_s: float | None  # None: not measured, the lag already failed the contract
    p99_s: float | None
    why: str  # what failed; empty: it kept up
    seconds: float  # the probe's wall time, setup and analysis included
    cycle_s: list[float] = field(default_factory=list)  # sinklab's cycle durations

    @property
    def passed(self) -> bool:
        return not self.why


def committed_rate(steps: Steps, start_ms: float, end_ms: float) -> tuple[float, int]:
    """Records/s the sink made readable inside the window (from its first commit there to its last) and its
    commits there: what it does when it cannot keep up."""
    inside = [(t, n) for t, n in steps if start_ms <= t <= end_ms]
    if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
        return (inside[-1][1] - inside[0][1]) / ((inside[-1][0] - inside[0][0]) / 1000), len(inside)
    return (readable_at(steps, end_ms) - readable_at(steps, start_ms)) / ((end_ms - start_ms) / 1000), len(inside)


def wait_readable(sink: RateSink, topic: str, total: int, deadline: float) -> None:
    """Until ``total`` records of ``topic`` are readable, or the epoch second ``deadline``."""
    while time.time() < deadline:
        sink.check()
        steps = sink.readable(topic)
        if steps and steps[-1][1] >= total:
            return
        time.sleep(0.25)


def keep_up(stack: Stack, sink: RateSink, contract: Contract, payloads: Payloads, rate: float, probe: int,
            partitions: int) -> Probe:
    """One window at ``rate``: a fresh topic, the sink running, the paced producer for ``contract.seconds``.
    Then the lag at the window's close (from the commits' publish times) and, when producer and lag held,
    every record's visibility latency, after waiting for the tail up to the p99 limit past the close (a
    record still not readable then counts as readable at that deadline: a lower bound, above the limit;
    when more than 1% are, the p99 is above the limit without reading a record back)."""
    began = time.monotonic()
    topic = f"bench-rate-{sink.key}-{probe}"
    stack.create_topic(topic, partitions=partitions)
    sink.start(topic, probe)
    try:
        run = paced_producer.produce_paced(stack.bootstrap_servers, topic, payloads.path, partitions,
                                           contract.seconds, rate, PRODUCER_DEFAULTS)
        sink.check()
        total = sum(high - low for low, high in watermarks(stack, topic).values())
        lag_end = total - readable_at(sink.readable(topic), run.last_ms)
        held = run.kept_pace() and lag_end <= contract.lag_limit(rate)
        deadline_ms = run.last_ms + (contract.p99_limit_s + 0.5) * 1000
        if held:
            wait_readable(sink, topic, total, deadline_ms / 1000)
    finally:
        sink.stop()
    steps = sink.readable(topic)
    committed_rps, commits = committed_rate(steps, run.started_ms, run.last_ms)
    late = total - readable_at(steps, deadline_ms) if held else 0
    p50 = p99 = None
    if held and late <= 0.01 * run.produced:
        produced, visible = sink.record_latency(topic)
        latency = (np.where(np.isnan(visible), deadline_ms, visible) - produced) / 1000
        window = latency[produced >= run.started_ms - 100]  # not a priming record
        p50, p99 = (float(q) for q in np.quantile(window, [0.5, 0.99], method="higher"))
    drop_topics(stack, [topic])
    why = []
    if not run.kept_pace():
        why.append(f"producer {run.behind_s:.1f} s behind")
    if lag_end > contract.lag_limit(rate):
        why.append(f"lag {lag_end:,} > {contract.lag_limit(rate):,.0f}")
    if p99 is not None and p99 > contract.p99_limit_s:
        why.append(f"p99 {p99:.1f} s > {contract.p99_limit_s:.0f} s")
    if late > 0.01 * run.produced:
        why.append(f"p99 > {contract.p99_limit_s:.0f} s ({late:,} records not readable {contract.p99_limit_s:.0f} s "
                   "after the close)")
    return Probe(rate, run.produced, run.rps, run.behind_s, lag_end, contract.lag_limit(rate), committed_rps,
                 commits, p50, p99, "; ".join(why), time.monotonic() - began, sink.cycle_s())


@dataclass
class Sustained:
    key: str
    label: str
    rps: float | None  # the highest rate it kept up with; None: none of those tried
    top: float  # the highest rate that could be tried (TOP_SHARE of the producer's ceiling)
    probes: list[Probe]

    @property
    def producer_bound(self) -> bool:
        """It kept up with the highest rate tried: the producer, not the sink, set the figure."""
        return self.rps is not None and self.rps >= self.top * 0.99

    @property
    def below(self) -> float | None:
        """The lowest rate above ``rps`` it did not keep up with: the figure lies between the two."""
        return min((p.rate for p in self.probes if not p.passed and (self.rps is None or p.rate > self.rps)),
                   default=None)


def round_rate(rate: float) -> float:
    return float(f"{rate:.2g}")


def next_rate(probes: list[Probe], top: float) -> float | None:
    """The next rate to try; None once found to within 10%, or when the highest rate that may be tried held.

    - Every rate so far held: twice the highest, at most ``top``.
    - None held yet: 0.9 x what the lowest failure committed per second (the sink's throughput while it
      could not keep up), at most 0.8 x and at least a quarter of that failure's rate.
    - Otherwise the geometric middle of the highest success and the lowest failure above it: a bisection.
    """
    lo = max((p.rate for p in probes if p.passed), default=None)
    above = [p for p in probes if not p.passed and (lo is None or p.rate > lo)]
    if not above:
        assert lo is not None
        return None if lo >= top * 0.99 else round_rate(min(2 * lo, top))
    hi = min(above, key=lambda p: p.rate)
    if lo is None:
        return round_rate(max(min(0.9 * hi.committed_rps, 0.8 * hi.rate), hi.rate / 4))
    return None if hi.rate / lo <= 1.1 else round_rate(math.sqrt(lo * hi.rate))


def sustained_rate(stack: Stack, sink: RateSink, contract: Contract, payloads: Payloads, seed: float, top: float,
                   partitions: int) -> Sustained:
    """The highest rate ``sink`` keeps up with under ``contract``: the first window at ``seed`` (the
    sink's drain rate in this run), each next one at ``next_rate``, ``contract.probes`` windows at most."""
    probes: list[Probe] = []
    rate: float | None = round_rate(min(seed, top))
    while rate is not None and len(probes) < contract.probes:
        probes.append(keep_up(stack, sink, contract, payloads, rate, len(probes), partitions))
        print(f"sustained, {sink.label}: {describe_probe(probes[-1])}", flush=True)
        rate = next_rate(probes, top)
    return Sustained(sink.key, sink.label, max((p.rate for p in probes if p.passed), default=None), top, probes)


def describe_probe(p: Probe) -> str:
    verdict = "kept up" if p.passed else f"no ({p.why})"
    tail = f", p50 / p99 {p.p50_s:.1f} / {p.p99_s:.1f} s" if p.p99_s is not None else ""
    cycles = (f"; cycles {statistics.mean(p.cycle_s):.1f} s mean, {max(p.cycle_s):.1f} s max" if p.cycle_s else "")
    return (f"{p.rate:,.0f}/s: {verdict}; lag at the close {p.lag_end:,}{tail}; committed {p.committed_rps:,.0f}/s "
            f"in {p.commits} commit(s) inside the window{cycles} ({p.seconds:.0f} s)")


def java_seed(drain: java_sink.JavaDrain, interval_ms: int) -> float:
    """The Java sink's drain rate less its commit timer: its first commit comes one interval after its
    coordinator starts, whatever it has read, so a drain of a backlog is mostly that wait."""
    return drain.records / max(drain.seconds - interval_ms / 1000, 1.0)


def failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def print_table(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    for label, value, note in rows:
        print(f"{label:<{width}}  {value:>14}  {note}")


def main() -> None:  # noqa: C901 - one section per measurement
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, help="backlog size (default 1,000,000; --format avro/json-schema: "
                                                    "200,000)")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--interval-ms", type=int, help="commit interval (sink and naive baseline; default 5000, "
                                                        "--maintenance 1000)")
    parser.add_argument("--latency-rate", type=float,
                        help="events/s in latency mode (default 5000, --maintenance 2000)")
    parser.add_argument("--latency-seconds", type=float, help="default 60 (--maintenance 40)")
    parser.add_argument("--sweep", default="", help="comma-separated commit intervals (ms) to measure latency and "
                                                    "the naive baseline at")
    parser.add_argument("--profile", action="store_true", help="print the Spark jobs of each drain cycle")
    parser.add_argument("--master", help="run every Spark part on this master (e.g. spark://host:7077) instead "
                                         "of local[*]")
    parser.add_argument("--cluster", default="", help="comma-separated worker counts: drain the backlog once more on "
                                                      "a local standalone cluster of that many one-core workers")
    parser.add_argument("--quick", action="store_true",
                        help="200k records, 20 s of latency, no sweep; the sustained contract with 20 s windows and "
                             "3 probes per sink")
    parser.add_argument("--sustained-seconds", type=float,
                        help="the sustained-rate contract's window at each rate tried (default 60, --quick 20)")
    parser.add_argument("--sustained-probes", type=int,
                        help="windows per sink at most in the sustained-rate contract (default 5, --quick 3)")
    parser.add_argument("--no-sustained", action="store_true",
                        help="skip the sustained-rate contract (its figures are null)")
    parser.add_argument("--no-java-sink", action="store_true",
                        help="skip the Java Iceberg Kafka Connect sink (its jars are fetched on first use)")
    parser.add_argument("--maintenance", action="store_true",
                        help="only maintenance: compaction throughput, and p99 visibility with and without a schedule")
    parser.add_argument("--target-lag", action="store_true",
                        help=f"only the commit pace: a step profile ({', '.join(f'{r:,}/s' for r, _ in STEPS)}, "
                             f"60 s each) at sinklab.commit.target-lag-ms={TARGET_LAG_MS}, beside fixed intervals "
                             "of 1 s and 5 s")
    parser.add_argument("--format", choices=["json", "avro", "json-schema"], default="json",
                        help="avro / json-schema: only that format (schema registry) vs JSON throughput, on the "
                             "same backlog size")
    args = parser.parse_args()
    if args.target_lag:
        target_lag(args.partitions, STEPS)
        return
    if args.maintenance:
        maintenance(args.records or 200_000, args.partitions, args.interval_ms or 1_000, args.latency_rate or 2_000,
                    args.latency_seconds or 40)
        return
    args.interval_ms = args.interval_ms or 5_000
    args.latency_rate, args.latency_seconds = args.latency_rate or 5_000, args.latency_seconds or 60
    if args.format != "json":
        framed_vs_json(args.format, args.records or 200_000, args.partitions, args.interval_ms)
        return
    args.records = args.records or 1_000_000
    if args.quick:
        args.records, args.latency_seconds, args.sweep = 200_000, 20, ""
    args.sustained_seconds = args.sustained_seconds or (20 if args.quick else 60)
    args.sustained_probes = args.sustained_probes or (3 if args.quick else 5)
    contract = Contract(args.interval_ms, args.sustained_seconds, args.sustained_probes)
    sweep = [int(s) for s in args.sweep.split(",") if s.strip()]
    args.cluster = [int(n) for n in args.cluster.split(",") if n.strip()]
    figures: dict[str, Any] = {"records": args.records, "partitions": args.partitions, "interval_ms": args.interval_ms}
    began = time.monotonic()
    # The Connect REST API is not measured.
    with Stack.embedded(spark=SparkSettings(master=args.master) if args.master else None, connect=False) as stack:
        services = {pid for pid in stack.info.pids.values() if pid}
        with RssSampler(services) as rss, tempfile.TemporaryDirectory(prefix="sinklab-bench-rate-") as rate_dir:
            with rss.phase("produce"):
                figures["produce_rps"] = produce(stack, "bench-backlog", args.records, args.partitions)
            with rss.phase("raw"):
                figures["raw_consume_rps"] = raw_consume(stack, "bench-backlog")
            with rss.phase("warm-up"):
                stack.spark  # noqa: B018 - the JVM's start is no part of any figure
                figures["auto_create_s"], figures["first_cycle_s"] = warm_up(
                    stack, min(args.records // 5, 200_000), args.interval_ms)
            with rss.phase("naive"):
                naive = naive_pyiceberg(stack, "bench-backlog", create_empty_table(stack), args.interval_ms / 1000)
            figures["naive_pyiceberg_rps"] = naive.rps
            with rss.phase("spark-alone"), tempfile.TemporaryDirectory(prefix="sinklab-bench-") as scratch:
                figures["spark_alone_rps"] = spark_alone(stack, "bench-backlog", Path(scratch))
            with rss.phase("sinklab"):
                single = drain(stack, "bench-single", "bench-backlog", [SINGLE], args.interval_ms, args.records)
            with rss.phase("fanout"):
                fanout = drain(stack, "bench-fanout", "bench-backlog", list(FANOUT), args.interval_ms, args.records)
            with rss.phase("fixed"):
                figures["cycle_fixed_s"], figures["empty_cycle_s"] = fixed_cost(stack, "bench-fixed", args.interval_ms)
            # The sustained-rate contract, the same harness for every sink; the Java sink's in its phase below.
            sustained: dict[str, Sustained] = {}
            payloads = ceiling = None
            if not args.no_sustained:
                with rss.phase("sustained"):
                    payloads = pizza_payloads(Path(rate_dir))
                    ceiling = producer_ceiling(stack, payloads, args.partitions)
                    print(f"producer ceiling: {ceiling.delivered_rps:,.0f} records/s", flush=True)
                    # Each sink's first rate is its drain rate of this run.
                    for sink, seed in ((SinklabRate(stack, args.interval_ms, args.partitions, False), single.rps),
                                       (SinklabRate(stack, args.interval_ms, args.partitions, True), fanout.rps),
                                       (NaiveRate(stack, args.interval_ms), naive.rps)):
                        sustained[sink.key] = sustained_rate(stack, sink, contract, payloads, seed,
                                                             TOP_SHARE * ceiling.delivered_rps, args.partitions)
            java = JavaResult(error="skipped (--no-java-sink)" if args.no_java_sink else None)
            if not args.no_java_sink:
                with rss.phase("java-sink"):
                    try:
                        java_sink.require_jars()
                        with java_sink.ConnectWorker(stack, java_sink.scratch_dir(stack)) as worker:
                            java.drain = java_drain(stack, worker, min(args.records // 5, 200_000), args.records,
                                                    args.interval_ms)
                            if payloads is not None and ceiling is not None:
                                java.sustained = sustained_rate(
                                    stack, JavaRate(stack, worker, args.interval_ms), contract, payloads,
                                    java_seed(java.drain, args.interval_ms), TOP_SHARE * ceiling.delivered_rps,
                                    args.partitions)
                    except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is a figure too
                        java.error = f"{'sustained' if java.drain else 'drain'}: {failure(exc)}"
            naive_swept = [naive_pyiceberg(stack, "bench-backlog", stack.catalog.load_table(identifier(NAIVE)),
                                           interval / 1000) for interval in sweep]
            with rss.phase("latency"):
                lat = latency(stack, "bench-latency", SINGLE, args.interval_ms, args.latency_rate,
                              args.latency_seconds, args.partitions)
            # The freshness users pick a short interval for: both sinks at 1 s, the same rate.
            with rss.phase("latency-1s"):
                lat_1s = lat if args.interval_ms == FRESH_MS else latency(
                    stack, "bench-latency-1s", SINGLE, FRESH_MS, args.latency_rate, args.latency_seconds,
                    args.partitions)
            if java.drain is not None:
                with rss.phase("java-sink-latency"):
                    try:
                        java.latency = java_latency(stack, "bench-latency-java", args.interval_ms, args.latency_rate,
                                                    args.latency_seconds, args.partitions)
                        java.latency_1s = java.latency if args.interval_ms == FRESH_MS else java_latency(
                            stack, "bench-latency-java-1s", FRESH_MS, args.latency_rate, args.latency_seconds,
                            args.partitions)
                    except Exception as exc:  # noqa: BLE001 - as above
                        java.error = f"latency: {failure(exc)}"
            swept = []
            for interval, n in zip(sweep, naive_swept, strict=True):
                seconds = max(args.latency_seconds, 4 * interval / 1000)
                topic = f"bench-sweep-{interval}"
                swept.append((n, latency(stack, topic, SINGLE, interval, args.latency_rate, seconds, args.partitions)))
                drop_topics(stack, [topic])
            # Last: each restarts the driver's Spark, and every figure above is taken on a warm one.
            clusters = {n: on_cluster(stack, n, "bench-backlog", args.interval_ms, args.records)
                        for n in args.cluster}
    figures.update(
        sinklab_rps=single.rps, fanout_rps=fanout.rps,
        files_per_table_commit=max(single.files_per_table_commit, fanout.files_per_table_commit),
        write_tasks=_write_tasks(single),
        sinklab_cycles=len(single.cycles), spark_jobs_per_cycle=statistics.mean(len(j) for j in single.jobs),
        jobs_per_cycle=statistics.mean(len(j) for j in single.jobs),
        p99_visibility_1s_s=lat_1s.p99_s, p50_visibility_1s_s=lat_1s.p50_s,
        latency_cycle_s_mean_1s=statistics.mean(lat_1s.cycle_s),
        fanout_spark_jobs_per_cycle=statistics.mean(len(j) for j in fanout.jobs),
        p50_visibility_s=lat.p50_s, p99_visibility_s=lat.p99_s, max_visibility_s=lat.max_s,
        p99_visibility_snapshot_ts_s=lat.p99_snapshot_ts_s, latency_rate=lat.rate, latency_records=lat.records,
        latency_commits=lat.commits, latency_files_per_commit=lat.files_per_commit,
        latency_cycle_s_mean=statistics.mean(lat.cycle_s), latency_cycle_s_max=max(lat.cycle_s),
        peak_rss_mb=rss.peak["total"] / 2**20,
        peak_rss_by_process_mb={k: v / 2**20 for k, v in rss.peak.items() if k != "total"},
        peak_rss_by_phase_mb={k: v / 2**20 for k, v in rss.phase_peak.items()},
        naive_appends=naive.appends, elapsed_s=time.monotonic() - began, reader="spark-sql-kafka",
        master=args.master or "local[*]", cluster_rps={str(n): r.rps for n, r in clusters.items()},
    )
    figures["sinklab_vs_naive"] = figures["sinklab_rps"] / figures["naive_pyiceberg_rps"]
    figures["sinklab_vs_raw"] = figures["sinklab_rps"] / figures["raw_consume_rps"]
    figures["sinklab_vs_spark_alone"] = figures["sinklab_rps"] / figures["spark_alone_rps"]
    jd, jl = java.drain, java.latency
    figures.update(
        java_sink_rps=jd.rps if jd else None, java_sink_files_per_commit=jd.files_per_commit if jd else None,
        java_sink_p99_s=jl.p99_s if jl else None, java_sink_p50_s=jl.p50_s if jl else None,
        java_sink_p99_1s_s=java.latency_1s.p99_s if java.latency_1s else None,
        java_sink_max_visibility_s=jl.max_s if jl else None, java_sink_commits=jd.commits if jd else None,
        java_sink_records=jd.records if jd else None, java_sink_tasks=os.cpu_count(),
        java_sink_commit_at_s=jd.commit_at_s if jd else None,
        java_sink_latency_commits=jl.commits if jl else None,
        java_sink_latency_files_per_commit=jl.files_per_commit if jl else None,
        sinklab_vs_java_sink=figures["sinklab_rps"] / jd.rps if jd else None,
        java_sink_error=java.error,
    )
    # The drains' commit times: a drain is quantized by them (a backlog the Java sink takes in one commit).
    figures.update(sinklab_drain_cycle_s=[c.duration_ms / 1000 for c in single.cycles],
                   fanout_drain_cycle_s=[c.duration_ms / 1000 for c in fanout.cycles],
                   naive_drain_append_at_s=naive.append_at_s)
    if java.sustained is not None:
        sustained["java_sink"] = java.sustained
    figures.update(sustained_figures(contract, sustained, ceiling, payloads))
    if swept:
        figures["sweep"] = [{"interval_ms": lt.interval_ms, "naive_pyiceberg_rps": n.rps, "naive_appends": n.appends,
                             "p50_visibility_s": lt.p50_s, "p99_visibility_s": lt.p99_s, "max_visibility_s": lt.max_s,
                             "commits": lt.commits, "records_per_commit": lt.records_per_commit,
                             "cycle_s_mean": statistics.mean(lt.cycle_s),
                             "files_per_commit": lt.files_per_commit} for n, lt in swept]

    f = figures
    rows = [
        ("records in the backlog", f"{f['records']:,}", f"{f['partitions']} partitions, pizza events"),
        ("produce", f"{f['produce_rps']:,.0f}/s", "generator -> broker (idempotent producer)"),
        ("(a) raw consume of the backlog", f"{f['raw_consume_rps']:,.0f}/s",
         "one confluent-kafka consumer, no parsing"),
        ("drain: (b) naive pyiceberg", f"{f['naive_pyiceberg_rps']:,.0f}/s",
         f"json.loads + pyarrow + append every {f['interval_ms']} ms ({naive.appends} appends, at "
         + ", ".join(f"{t:.1f}" for t in naive.append_at_s) + " s)"),
        ("spark alone", f"{f['spark_alone_rps']:,.0f}/s",
         "JSON text files -> from_json -> zstd Parquet: no Kafka, no checks, no commit"),
        ("drain: (c) sinklab, 1 table", f"{f['sinklab_rps']:,.0f}/s",
         f"{f['sinklab_vs_naive']:.1f}x naive, {f['sinklab_vs_raw']:.2f}x raw; {len(single.cycles)} cycle(s) of "
         + ", ".join(f"{c:.2f}" for c in f["sinklab_drain_cycle_s"])
         + f" s, {f['spark_jobs_per_cycle']:.0f} Spark jobs/cycle"),
        ("drain: (c) sinklab, fan-out to 3", f"{f['fanout_rps']:,.0f}/s",
         f"{len(fanout.cycles)} cycle(s) of " + ", ".join(f"{c:.2f}" for c in f["fanout_drain_cycle_s"])
         + f" s, {f['fanout_spark_jobs_per_cycle']:.0f} Spark jobs/cycle"),
        ("files per table commit", f"{f['files_per_table_commit']}", f"write tasks: {f['write_tasks']}"),
        ("auto-create", f"{f['auto_create_s']:.1f} s", "two sinks creating 1 + 3 tables from 2,000 events (cold JVM)"),
        ("first cycle", f"{f['first_cycle_s']:.1f} s", "a fresh JVM's first cycle, auto-creating its table"),
        *[(f"(c) on a cluster, {n} worker(s)", f"{r:,.0f}/s", "local standalone master + one-core workers, "
           "executors in their own JVMs") for n, r in f["cluster_rps"].items()],
        ("fixed cost per cycle", f"{f['cycle_fixed_s']:.2f} s",
         f"median cycle carrying one record; a cycle with nothing new {f['empty_cycle_s']:.2f} s"),
        ("visibility p50 / p99", f"{f['p50_visibility_s']:.2f} / {f['p99_visibility_s']:.2f} s",
         f"{lat.rate:,.0f} events/s for {args.latency_seconds:.0f} s, interval {f['interval_ms']} ms, "
         f"{lat.commits} commits, {lat.files_per_commit:.1f} files/commit, cycles {f['latency_cycle_s_mean']:.2f} s "
         f"mean / {f['latency_cycle_s_max']:.2f} s max"),
        ("visibility at 1 s, p50 / p99", f"{f['p50_visibility_1s_s']:.2f} / {f['p99_visibility_1s_s']:.2f} s",
         f"interval {FRESH_MS} ms, same rate; cycles {f['latency_cycle_s_mean_1s']:.2f} s mean"
         + (f"; the Java sink's p99 {f['java_sink_p99_1s_s']:.2f} s" if f["java_sink_p99_1s_s"] else "")),
        *_java_rows(java, f),
        ("peak RSS", f"{f['peak_rss_mb']:,.0f} MB",
         ", ".join(f"{k} {v:,.0f}" for k, v in f["peak_rss_by_process_mb"].items())),
    ]
    print_table(rows)
    if sustained or ceiling is not None:
        print()
        print_table(_sustained_rows(contract, sustained, f))
    print("peak RSS by phase (MB): " + ", ".join(f"{k} {v:,.0f}" for k, v in f["peak_rss_by_phase_mb"].items()))
    if swept:
        print(f"\n{'interval ms':>11} {'naive rec/s':>12} {'appends':>8} {'p50 s':>7} {'p99 s':>7} {'max s':>7} "
              f"{'commits':>8} {'rec/commit':>11} {'files/commit':>13} {'cycle s':>8}")
        for s in f["sweep"]:
            print(f"{s['interval_ms']:>11} {s['naive_pyiceberg_rps']:>12,.0f} {s['naive_appends']:>8} "
                  f"{s['p50_visibility_s']:>7.2f} {s['p99_visibility_s']:>7.2f} {s['max_visibility_s']:>7.2f} "
                  f"{s['commits']:>8} {s['records_per_commit']:>11,.0f} {s['files_per_commit']:>13.1f} "
                  f"{s['cycle_s_mean']:>8.2f}")
    if args.profile:
        for label, result in (("1 table", single), ("fan-out", fanout)):
            for i, (cycle, jobs) in enumerate(zip(result.cycles, result.jobs, strict=True)):
                in_jobs = sum(j.seconds for j in jobs)
                total = cycle.duration_ms / 1000
                print(f"\n{label} cycle {i}: {cycle.records:,} records, {total:.2f} s, {len(jobs)} Spark jobs "
                      f"({in_jobs:.2f} s), outside jobs {total - in_jobs:.2f} s")
                for j in jobs:
                    print(f"  job {j.id:>4} {j.seconds:>7.2f} s  {j.name}")
                for s in cycle.tables.values():
                    print(f"  {s.table}: write {s.write_ms} ms, publish {s.commit_ms} ms, {len(s.data_files)} files")
    print(json.dumps(_rounded(figures)))


def framed_vs_json(framed: str, records: int, partitions: int, interval_ms: int) -> None:
    """The same pizzas as JSON and framed by the registry (``framed``: avro or json-schema), each
    drained into its own table by sinklab."""
    figures: dict[str, Any] = {"records": records, "partitions": partitions, "interval_ms": interval_ms}
    formats = ("json", framed)
    tables = {fmt: f"{NAMESPACE}.pizzas_{fmt.replace('-', '_')}" for fmt in formats}
    with Stack.embedded(connect=False, schema_registry=True) as stack:
        for fmt in formats:
            figures[f"produce_{fmt}_rps"] = produce(stack, f"bench-{fmt}", records, partitions, value_format=fmt)
            produce(stack, f"bench-warm-{fmt}", min(records // 5, 50_000), partitions, seed=98, value_format=fmt)
        figures["bytes_per_record"] = {fmt: _topic_bytes(stack, f"bench-{fmt}") / records for fmt in formats}
        stack.spark  # noqa: B018 - the JVM's start is no part of any figure
        for fmt, table in tables.items():  # creates the tables and warms the JVM up for both
            drain(stack, f"bench-warm-{fmt}", f"bench-warm-{fmt}", [table], interval_ms, min(records // 5, 50_000),
                  value_format=fmt)
        results = {fmt: drain(stack, f"bench-{fmt}-sink", f"bench-{fmt}", [table], interval_ms, records,
                              value_format=fmt) for fmt, table in tables.items()}
        figures["table_types"] = {fmt: dict(stack.spark.table(f"sinklab.{t}").dtypes) for fmt, t in tables.items()}
    for fmt, result in results.items():
        figures[f"sinklab_{fmt}_rps"] = result.rps
        figures[f"sinklab_{fmt}_cycles"] = len(result.cycles)
        figures[f"sinklab_{fmt}_cycle_s_mean"] = statistics.mean(c.duration_ms / 1000 for c in result.cycles)
    figures[f"{framed}_vs_json"] = figures[f"sinklab_{framed}_rps"] / figures["sinklab_json_rps"]
    f, name = figures, FORMAT_NAMES[framed]
    print_table([
        ("records in each backlog", f"{records:,}", f"{partitions} partitions, pizza events"),
        ("bytes per value", f"{f['bytes_per_record']['json']:.0f} / {f['bytes_per_record'][framed]:.0f}",
         f"JSON / {name} (Confluent framing)"),
        (f"produce JSON / {name}", f"{f['produce_json_rps']:,.0f} / {f[f'produce_{framed}_rps']:,.0f}/s",
         "framed: encoded + registry (schema registered once)"),
        ("sinklab, JSON (baseline)", f"{f['sinklab_json_rps']:,.0f}/s",
         f"{f['sinklab_json_cycles']} cycle(s), {f['sinklab_json_cycle_s_mean']:.2f} s mean"),
        (f"sinklab, {name} + registry", f"{f[f'sinklab_{framed}_rps']:,.0f}/s",
         f"{f[f'{framed}_vs_json']:.2f}x JSON; {f[f'sinklab_{framed}_cycles']} cycle(s), "
         f"{f[f'sinklab_{framed}_cycle_s_mean']:.2f} s mean"),
    ])
    print("column types: " + "; ".join(f"{fmt}: " + ", ".join(f"{k} {v}" for k, v in types.items())
                                       for fmt, types in f["table_types"].items()))
    print(json.dumps(_rounded(figures)))


MAINTENANCE_SCHEDULE = {"sinklab.maintenance.compact.every-commits": "10",
                        "sinklab.maintenance.expire.older-than": "0s"}


def maintenance(records: int, partitions: int, interval_ms: int, rate: float, seconds: float) -> None:
    """Compaction of a table of many small files, against rewriting the same rows with plain Spark; then
    the sink's visibility latency at a short interval with and without a maintenance schedule."""
    from sinklab.maintenance import Target, compact

    figures: dict[str, Any] = {"records": records, "partitions": partitions, "interval_ms": interval_ms,
                               "latency_rate": rate, "latency_seconds": seconds, "schedule": MAINTENANCE_SCHEDULE}
    small, copy = f"{NAMESPACE}.pizzas_small", f"{NAMESPACE}.pizzas_copy"
    with Stack.embedded(connect=False) as stack:
        produce(stack, "bench-small", records, partitions)
        stack.spark  # noqa: B018 - the JVM's start is no part of any figure
        cycles = 50
        built = drain(stack, "bench-small-sink", "bench-small", [small], 100, records,
                      **{"sinklab.cycle.max-records": str(-(-records // cycles))})
        figures["small_files"] = sum(len(s.data_files) for c in built.cycles for s in c.tables.values())
        began = time.monotonic()
        stack.spark.sql(f"CREATE TABLE sinklab.{copy} USING iceberg AS SELECT * FROM sinklab.{small}")
        figures["spark_rewrite_s"] = time.monotonic() - began
        report = compact(Target.on(stack, small))
        figures["compact_s"] = report.duration_ms / 1000
        figures["compact_rows_per_s"] = report.counts["table_rows"] / figures["compact_s"]
        figures["compact_files_per_s"] = report.counts["rewritten_data_files"] / figures["compact_s"]
        figures["compact_files"] = (report.counts["rewritten_data_files"], report.counts["added_data_files"])
        figures["spark_rewrite_rows_per_s"] = records / figures["spark_rewrite_s"]
        runs = {}
        for label, extra in (("plain", {}), ("scheduled", MAINTENANCE_SCHEDULE)):
            runs[label] = latency(stack, f"bench-lat-{label}", f"{NAMESPACE}.lat_{label}", interval_ms, rate, seconds,
                                  partitions, **extra)
            table = stack.catalog.load_table(identifier(f"{NAMESPACE}.lat_{label}"))
            snap = table.current_snapshot()
            figures[f"{label}_live_files"] = int(snap.summary.additional_properties["total-data-files"]) if snap else 0
            figures[f"{label}_snapshots"] = len(table.metadata.snapshots)
        log = read_control_log(stack.bootstrap_servers, sink="bench-lat-scheduled-sink")
        done = log[log["type"] == PayloadType.MAINTENANCE]
        figures["maintenance_runs"] = len(done)
        figures["maintenance_ms_mean"] = float(done["duration_ms"].mean()) if len(done) else 0.0
        figures["maintenance_delay_ms_mean"] = float(done["counters"].map(lambda c: c.get("delay_ms", 0)).mean()) \
            if len(done) else 0.0
    for label, result in runs.items():
        figures[f"{label}_p50_s"], figures[f"{label}_p99_s"], figures[f"{label}_max_s"] = (
            result.p50_s, result.p99_s, result.max_s)
        figures[f"{label}_commits"] = result.commits
    f = figures
    print_table([
        ("small files to compact", f"{f['small_files']:,}", f"{records:,} rows in {cycles} cycles"),
        ("compaction (rewrite_data_files)", f"{f['compact_rows_per_s']:,.0f} rows/s",
         f"{f['compact_files_per_s']:,.1f} files/s; {f['compact_files'][0]} -> {f['compact_files'][1]} files in "
         f"{f['compact_s']:.1f} s"),
        ("Spark CTAS of the same rows (baseline)", f"{f['spark_rewrite_rows_per_s']:,.0f} rows/s",
         f"{f['spark_rewrite_s']:.1f} s"),
        ("sink p99 visibility, no maintenance", f"{f['plain_p99_s']:.2f} s",
         f"p50 {f['plain_p50_s']:.2f} s, max {f['plain_max_s']:.2f} s; {f['plain_live_files']} live files, "
         f"{f['plain_snapshots']} snapshots after {f['plain_commits']} commits"),
        ("sink p99 visibility, scheduled", f"{f['scheduled_p99_s']:.2f} s",
         f"p50 {f['scheduled_p50_s']:.2f} s, max {f['scheduled_max_s']:.2f} s; {f['scheduled_live_files']} live "
         f"files, {f['scheduled_snapshots']} snapshots; {f['maintenance_runs']} runs of "
         f"{f['maintenance_ms_mean']:.0f} ms, {f['maintenance_delay_ms_mean']:.0f} ms past the interval"),
    ])
    print(json.dumps(_rounded(figures)))


def _topic_bytes(stack: Stack, topic: str) -> int:
    consumer, _ = assign_all(stack, topic)
    total = 0
    try:
        while True:
            msgs = consumer.consume(10_000, timeout=2.0)
            if not msgs:
                return total
            total += sum(len(m.value() or b"") for m in msgs if m.error() is None)
    finally:
        consumer.close()


def _java_rows(java: JavaResult, f: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The Java sink's lines of the table, beside sinklab's; what failed when it could not run."""
    rows = []
    if java.drain is not None:
        d = java.drain
        rows.append(("drain: (d) Java Iceberg sink", f"{d.rps:,.0f}/s",
                     f"Kafka Connect, tasks.max={f['java_sink_tasks']}; sinklab is {f['sinklab_vs_java_sink']:.2f}x "
                     f"this; {d.commits} commit(s), {d.files_per_commit:.1f} files/commit "
                     f"(max {d.max_files_per_commit}); committed at "
                     + ", ".join(f"{t:.1f}" for t in d.commit_at_s) + " s"))
    if java.latency is not None:
        lt = java.latency
        rows.append(("Java sink visibility p50 / p99", f"{lt.p50_s:.2f} / {lt.p99_s:.2f} s",
                     f"same rate and interval; {lt.commits} commits, {lt.files_per_commit:.1f} files/commit, "
                     f"max {lt.max_s:.2f} s"))
    if java.error is not None:
        # The first line and a Java trace's root cause; the JSON line has the whole message and log.
        lines = java.error.splitlines()
        causes = [line.strip() for line in lines if line.startswith("Caused by:")]
        rows.append(("(d) Java Iceberg sink", "not run" if java.drain is None else "failed",
                     lines[0][:200] + (f" ... {causes[-1][:200]}" if causes else "")))
    return rows


SUSTAINED_KEYS = ("sinklab", "fanout", "java_sink", "naive")


def sustained_figures(contract: Contract, found: dict[str, Sustained], ceiling: paced_producer.PacedRun | None,
                      payloads: Payloads | None) -> dict[str, Any]:
    """The contract's figures for the JSON line: ``{key}_sustained_rps`` and ``_mbps_per_core`` beside
    each (null for a sink not measured), the producer's ceiling, and every probe."""
    cores = os.cpu_count() or 1

    def per_core_mbps(rps: float | None) -> float | None:
        return None if rps is None or payloads is None else rps * payloads.mean_bytes / 1e6 / cores

    out: dict[str, Any] = {}
    for key in SUSTAINED_KEYS:
        rps = found[key].rps if key in found else None
        out[f"{key}_sustained_rps"], out[f"{key}_sustained_mbps_per_core"] = rps, per_core_mbps(rps)
    out["producer_ceiling_rps"] = ceiling.delivered_rps if ceiling else None
    out["producer_ceiling_mbps_per_core"] = per_core_mbps(out["producer_ceiling_rps"])
    out["sustained"] = {
        "interval_ms": contract.interval_ms, "window_s": contract.seconds, "max_probes": contract.probes,
        "lag_limit_intervals": contract.lag_intervals, "p99_limit_s": contract.p99_limit_s, "cores": cores,
        "bytes_per_record": payloads.mean_bytes if payloads else None,
        "top_rps": TOP_SHARE * ceiling.delivered_rps if ceiling else None,
        "producer_bound": [k for k, r in found.items() if r.producer_bound],
        "failed_above": {k: r.below for k, r in found.items()},
        "probes": {k: [{**asdict(p), "passed": p.passed} for p in r.probes] for k, r in found.items()},
    }
    return out


def _sustained_rows(contract: Contract, found: dict[str, Sustained], f: dict[str, Any]) -> list[tuple[str, str, str]]:
    cores = f["sustained"]["cores"]
    rows = [(f"sustained rate, {cores} cores", "records/s",
             f"kept up for {contract.seconds:.0f} s at a {contract.interval_ms:,} ms interval: lag at the close "
             f"<= {contract.lag_intervals:g} intervals of records, p99 visibility <= {contract.p99_limit_s:g} s")]
    if f["producer_ceiling_rps"] is not None:
        rows.append(("producer ceiling", f"{f['producer_ceiling_rps']:,.0f}/s",
                     f"{f['producer_ceiling_mbps_per_core']:.1f} MB/s per core; pre-encoded pizzas flat out for "
                     f"{CEILING_S:.0f} s, no sink running; rates tried up to {f['sustained']['top_rps']:,.0f}/s"))
    for key in SUSTAINED_KEYS:
        if key not in found:
            continue
        r = found[key]
        value = f"{r.rps:,.0f}/s" if r.rps is not None else "none"
        figure = (f"{r.rps / cores:,.0f}/s and {f[f'{key}_sustained_mbps_per_core']:.1f} MB/s per core"
                  + (" (the producer bound it)" if r.producer_bound else "") if r.rps is not None
                  else "kept up with none of the rates tried")
        bracket = (f" (not {r.below:,.0f})" if r.below is not None
                   else " (a lower bound: every rate tried held)" if r.rps is not None and not r.producer_bound
                   else "")
        rows.append((r.label, value, figure + bracket + "; tried " + ", ".join(
            f"{p.rate:,.0f} {'yes' if p.passed else 'no'}" for p in r.probes)))
    return rows


def _write_tasks(result: DrainResult) -> int:
    """Tasks of the cycle's widest write (a cycle's data files are written by a job named ``save``)."""
    return max((j.tasks for jobs in result.jobs for j in jobs if j.name.startswith("save")), default=0)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


if __name__ == "__main__":
    main()
