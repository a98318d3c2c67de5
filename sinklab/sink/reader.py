"""Workers: Spark tasks that consume exact Kafka offset ranges and yield Arrow batches.

Everything here is shipped to executors: it holds no driver state, only the Kafka client settings
and the ranges it is given.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message
    from pyspark.sql import DataFrame, SparkSession

RAW_DDL = (
    "topic string, partition int, offset long, timestamp long, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)
TASK_DDL = "ranges array<struct<topic:string, partition:int, start:long, end:long>>"
RAW_ARROW = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
BATCH_SIZE = 10_000
# Below this many records per task, fewer tasks than cores: a task's overhead outweighs sharing the work.
MIN_TASK_RECORDS = 20_000
QUEUED_MIN_MESSAGES = 2 * BATCH_SIZE


class ReadError(RuntimeError):
    """A range could not be read completely: the partition and offsets are in the message."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # first offset not to read

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_tasks(ranges: list[OffsetRange], parallelism: int, min_task: int = MIN_TASK_RECORDS
               ) -> list[list[OffsetRange]]:
    """The ranges dealt into Spark tasks of equal size: one per core when there is enough to
    share, fewer for a small cycle. A task, not a range, is the unit: each costs about 0.1 s of
    scheduling and Python worker round trips however little it reads (measured), and each task
    of the write is one data file per table."""
    total = sum(r.size for r in ranges)
    if total == 0:
        return []
    count = max(1, min(parallelism, total // max(min_task, 1)))
    per_task = -(-total // count)
    tasks: list[list[OffsetRange]] = [[]]
    room = per_task
    for r in ranges:
        start = r.start
        while start < r.end:
            if room == 0:
                tasks.append([])
                room = per_task
            end = min(r.end, start + room)
            tasks[-1].append(OffsetRange(r.topic, r.partition, start, end))
            room -= end - start
            start = end
    return tasks


def consume_ranges(kafka_conf: dict[str, Any], ranges: list[OffsetRange], timeout_s: float
                   ) -> Iterator[pa.RecordBatch]:
    """Every record of ``ranges``, one after the other, through one consumer."""
    from confluent_kafka import Consumer

    consumer = Consumer({
        # librdkafka prefetches until this many messages wait in its queue (default 100,000). A task
        # held up by Spark downstream kept the broker and the client re-fetching: at 100,000 a
        # backpressured read of 1M records cost 2.8 CPU-s on the broker, at 10,000 0.2 (measured).
        "queued.min.messages": QUEUED_MIN_MESSAGES,
        **kafka_conf,
        "group.id": "sinklab-reader",  # required by the client; nothing is ever committed with it
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "isolation.level": "read_committed",
    })
    try:
        for r in ranges:
            yield from consume_range(consumer, r, timeout_s)
    finally:
        consumer.close()


def consume_range(consumer: Consumer, r: OffsetRange, timeout_s: float) -> Iterator[pa.RecordBatch]:
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
    position = r.start
    deadline = time.monotonic() + timeout_s
    pending: list[Message] = []
    while position < r.end:
        # consume(N) blocks until N messages or the timeout: never ask for more than remain.
        msgs = consumer.consume(num_messages=min(BATCH_SIZE, r.end - position), timeout=1.0)
        if not msgs:
            # Transaction markers and aborted records occupy offsets but are never delivered.
            pos = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
            if pos >= r.end:
                break
            if time.monotonic() > deadline:
                raise ReadError(f"{r.topic}[{r.partition}]: stuck at offset {position} of [{r.start}, {r.end}) "
                                f"after {timeout_s:.0f}s")
            continue
        for m in msgs:
            if m.error() is not None:
                raise ReadError(f"{r.topic}[{r.partition}] near offset {position}: {m.error()}")
        if msgs[-1].offset() >= r.end:
            # Offsets after a transaction marker can lie past the end of the range.
            msgs = msgs[:bisect.bisect_left([m.offset() for m in msgs], r.end)]
            position = r.end
        else:
            position = msgs[-1].offset() + 1
        pending.extend(msgs)
        if len(pending) >= BATCH_SIZE:
            yield to_batch(r, pending)
            pending = []
        deadline = time.monotonic() + timeout_s
    if pending:
        yield to_batch(r, pending)


def to_batch(r: OffsetRange, msgs: list[Message]) -> pa.RecordBatch:
    """The messages as one Arrow batch, a column at a time: per message only the accessor calls
    remain in Python (one loop appending to seven lists ran at half the speed)."""
    n = len(msgs)
    headers = [m.headers() for m in msgs]
    if any(headers):
        header_array = pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
                                RAW_ARROW.field("headers").type)
    else:
        header_array = pa.nulls(n, RAW_ARROW.field("headers").type)
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(r.topic, pa.string()), n),
        pa.repeat(pa.scalar(r.partition, pa.int32()), n),
        pa.array([m.offset() for m in msgs], pa.int64()),
        pa.array([m.timestamp()[1] for m in msgs], pa.int64()),
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        header_array,
    ], schema=RAW_ARROW)


def read_ranges(spark: SparkSession, kafka_conf: dict[str, Any], ranges: list[OffsetRange],
                timeout_s: float = 60.0) -> DataFrame:
    """A DataFrame of the raw records in ``ranges``: one Spark task per group of ranges (``plan_tasks``)."""
    tasks = plan_tasks(ranges, spark.sparkContext.defaultParallelism)
    conf = dict(kafka_conf)

    def consume(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for row in batch.to_pylist():
                yield from consume_ranges(conf, [OffsetRange(**r) for r in row["ranges"]], timeout_s)

    rows = [([(r.topic, r.partition, r.start, r.end) for r in task],) for task in tasks]
    # One row per task and as many slices as rows: parallelize puts each row in its own task.
    plan = spark.createDataFrame(spark.sparkContext.parallelize(rows, max(len(rows), 1)), TASK_DDL)
    return plan.mapInArrow(consume, RAW_DDL)
