"""What the bench scripts share: their tables and sink settings, producing and reading back records,
timing a sink (drains, visibility latency, Spark's jobs), the naive loop (the baseline a user would
write), peak memory of the process tree, and printing a table and its JSON line.

The bench scripts import this (``import harness``: ``bench/`` is on ``sys.path`` when one of them runs);
the sustained-rate contract is in ``bench/sustained.py``, the Java sink's runner in ``bench/java_sink.py``,
the paced producer in ``bench/paced_producer.py``. Nothing here asserts a duration.
"""

from __future__ import annotations

import bisect
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import paced_producer  # bench/paced_producer.py
import pandas as pd
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from sinklab.generators import PizzaGenerator
from sinklab.maintenance import schedule
from sinklab.retry import retrying
from sinklab.sink import IcebergSink, load_config, read_control_log
from sinklab.sink.tables import OFFSETS_PROP, SINK_PROP, identifier, load_state
from sinklab.sink.wire import AVRO_CONVERTER, JSON_SCHEMA_CONVERTER, PayloadType, from_property, to_property
from sinklab.stack import Stack

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from sinklab.sink.cycle import CycleResult

NAMESPACE = "bench"
SINGLE = f"{NAMESPACE}.pizzas"
NAIVE = f"{NAMESPACE}.naive"
# Static fan-out on the sauce: each record lands in exactly one of three tables, about a third each.
FANOUT = {f"{NAMESPACE}.sauce_mild": "regular|light", f"{NAMESPACE}.sauce_rich": "extra|none",
          f"{NAMESPACE}.sauce_special": "bbq|alfredo"}
# The converter of each value format the bench produces (the registry's URL is the stack's).
CONVERTERS = {"json": {"value.converter.schemas.enable": "false"}, "avro": {"value.converter": AVRO_CONVERTER},
              "json-schema": {"value.converter": JSON_SCHEMA_CONVERTER}}
FORMAT_NAMES = {"json": "JSON", "avro": "Avro", "json-schema": "JSON Schema"}
PAYLOAD_POOL = 100_000  # distinct pre-encoded pizzas the paced producer cycles through, each record numbered
PAGE = os.sysconf("SC_PAGE_SIZE")


# ---- memory: the whole process tree a run starts (driver, Spark JVM and its Python workers, broker, catalog)

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


# ---- records: producing them, reading them back

def produce(stack: Stack, topic: str, count: int, partitions: int, seed: int = 1,
            rate: float | None = None, value_format: str = "json") -> float:
    """Produce ``count`` pizzas into a fresh topic; returns events/s."""
    stack.create_topic(topic, partitions=partitions)
    run = PizzaGenerator(seed=seed).produce(stack, topic, count=count, rate=rate, partitions=partitions,
                                            format=value_format).wait()
    assert run.delivered == count, run
    return run.events_per_second


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


# A topic just created: its partitions' leaders may not be known to every broker yet.
LEADER_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                           KafkaError.UNKNOWN_TOPIC_OR_PART})


def watermarks(stack: Stack, topic: str) -> dict[int, tuple[int, int]]:
    """(low, high) offsets of every partition of ``topic``."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "bench-watermarks"})

    def read() -> dict[int, tuple[int, int]]:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}

    try:
        return retrying(read, lambda e: isinstance(e, KafkaException) and e.args[0].code() in LEADER_MOVING,
                        timeout_s=30, delay_s=0.5)
    finally:
        consumer.close()


def assign_all(stack: Stack, topic: str, **conf: Any) -> tuple[Consumer, int]:
    """A consumer assigned to every partition of ``topic`` from the start, and how many records it holds."""
    marks = watermarks(stack, topic)
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, **conf})
    consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in marks.items()])
    return consumer, sum(high - low for low, high in marks.values())


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


def epoch_ms(times: pd.Series) -> np.ndarray:
    """Timestamps (UTC) as epoch milliseconds; NaT as NaN."""
    return ((times - pd.Timestamp(0, tz="UTC")).dt.total_seconds() * 1000).to_numpy()


def drop_topics(stack: Stack, topics: list[str]) -> None:
    """A topic goes once measured: the runs that follow find a broker holding only what they need."""
    admin = stack.admin()  # held: a client collected before its futures resolve fails them
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        future.result(30)


def create_empty_table(stack: Stack, name: str = NAIVE) -> Table:
    """An empty table (the naive loop's, the Java sink's, each probe's of the sustained-rate contract),
    with the columns the sink inferred for the same events."""
    like = stack.catalog.load_table(identifier(SINGLE))
    if stack.catalog.table_exists(identifier(name)):
        stack.catalog.drop_table(identifier(name))
    return stack.catalog.create_table(identifier(name), schema=like.schema())


# ---- the naive loop: what a user writes without a sink

@dataclass
class NaiveResult:
    rps: float
    appends: int
    files_per_append: float
    append_at_s: list[float] = field(default_factory=list)  # seconds from the start to each append's commit


def naive_loop(consumer: Consumer, table: Table, interval_s: float, done: Callable[[int], bool],
               sink_name: str | None = None) -> NaiveResult:
    """consume, json.loads, pyarrow, a pyiceberg append per interval, until ``done(records seen)``; a drain
    (no ``sink_name``) appends what is left at the end. At-least-once (append, then commit offsets): cheaper
    than the sink's protocol, never dearer. With ``sink_name`` it runs under the sustained-rate contract: each
    append's snapshot records the next offset of every partition it covers, as sinklab's do (``sinklab.sink``,
    ``sinklab.offsets``), so that its visibility is read from the table by the same code; what is left at the
    end is dropped."""
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


# ---- sinklab: its settings, and a drain of a backlog

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


def shape_config(shape: str, topic: str) -> dict[str, Any]:
    """``bench/warm_cycles.py``'s sinks (``bench/fan_shapes.py``'s too): ``one`` table, or ``fan`` out to three
    on the sauce (regular, alfredo, the rest); no commit interval (they run cycles by hand)."""
    tables = [f"bench.{shape}_{s}" for s in ("a", "b", "c")] if shape == "fan" else [f"bench.{shape}"]
    out = {"name": f"s-{shape}", "topics": topic, "iceberg.tables": ",".join(tables), "iceberg.catalog": "sinklab",
           "iceberg.tables.auto-create-enabled": "true", "value.converter.schemas.enable": "false"}
    if shape == "fan":
        out |= {"iceberg.tables.route-field": "sauce", f"iceberg.table.{tables[0]}.route-regex": "regular",
                f"iceberg.table.{tables[1]}.route-regex": "alfredo",
                f"iceberg.table.{tables[2]}.route-regex": "(?!regular|alfredo).*"}
    return out


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


# ---- visibility latency: a record is readable from the publish of the first commit past its offset

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


def latency(stack: Stack, topic: str, table_name: str, interval_ms: int, rate: float, seconds: float,
            partitions: int, **extra: str) -> LatencyResult:
    """Events at ``rate`` for ``seconds`` while the sink runs in the background; each record's visibility."""
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


# ---- printing

def failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def print_table(rows: list[tuple[str, str, str]]) -> None:
    """Rows of (what, figure, how and against what), aligned."""
    width = max(len(r[0]) for r in rows)
    for label, value, note in rows:
        print(f"{label:<{width}}  {value:>14}  {note}")


def rounded(value: Any) -> Any:
    """Floats to 3 decimals, in dicts and lists too: the JSON line's numbers."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value
