"""Workers: Spark tasks that consume exact Kafka offset ranges and yield Arrow batches.

Everything here is shipped to executors: it holds no driver state, only the Kafka client settings
and the ranges it is given.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RAW_DDL = (
    "topic string, partition int, offset long, timestamp long, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)
RANGE_DDL = "topic string, partition int, start long, end long"
RAW_ARROW = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
BATCH_SIZE = 10_000


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


def split_ranges(ranges: list[OffsetRange], parallelism: int, min_split: int = 50_000) -> list[OffsetRange]:
    """Split long ranges so that every core has work, but never into slivers."""
    total = sum(r.size for r in ranges)
    if total == 0:
        return []
    target = max(min_split, -(-total // max(parallelism, 1)))
    out = []
    for r in ranges:
        start = r.start
        while start < r.end:
            end = min(r.end, start + target)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def consume_range(kafka_conf: dict[str, Any], r: OffsetRange, timeout_s: float) -> Iterator[pa.RecordBatch]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        **kafka_conf,
        "group.id": "sinklab-reader",  # required by the client; nothing is ever committed with it
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "isolation.level": "read_committed",
    })
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        deadline = time.monotonic() + timeout_s
        columns: dict[str, list[Any]] = {name: [] for name in RAW_ARROW.names}
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
                err = m.error()
                if err is not None:
                    raise ReadError(f"{r.topic}[{r.partition}] near offset {position}: {err}")
                offset = m.offset()
                if offset >= r.end:
                    position = r.end
                    break
                columns["topic"].append(r.topic)
                columns["partition"].append(r.partition)
                columns["offset"].append(offset)
                columns["timestamp"].append(m.timestamp()[1])
                columns["key"].append(m.key())
                columns["value"].append(m.value())
                headers = m.headers()
                columns["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else None)
                position = offset + 1
            if len(columns["offset"]) >= BATCH_SIZE:
                yield pa.RecordBatch.from_pydict(columns, schema=RAW_ARROW)
                columns = {name: [] for name in RAW_ARROW.names}
            deadline = time.monotonic() + timeout_s
        if columns["offset"]:
            yield pa.RecordBatch.from_pydict(columns, schema=RAW_ARROW)
    finally:
        consumer.close()


def read_ranges(spark: SparkSession, kafka_conf: dict[str, Any], ranges: list[OffsetRange],
                timeout_s: float = 60.0) -> DataFrame:
    """A DataFrame of the raw records in ``ranges``: one Spark task per (split) range."""
    splits = split_ranges(ranges, spark.sparkContext.defaultParallelism)
    conf = dict(kafka_conf)

    def consume(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for row in batch.to_pylist():
                yield from consume_range(conf, OffsetRange(row["topic"], row["partition"], row["start"], row["end"]),
                                         timeout_s)

    rows = [(r.topic, r.partition, r.start, r.end) for r in splits]
    plan = spark.createDataFrame(spark.sparkContext.parallelize(rows, max(len(rows), 1)), RANGE_DDL)
    return plan.mapInArrow(consume, RAW_DDL)
