"""Kafka as tidy frames: every record's timestamp, the sink's consumer lag (now, and after each cycle),
and the records on a dead-letter topic with their context headers."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sinklab.readings.columns import LAG_COLUMNS, RECORD_COLUMNS, empty
from sinklab.readings.sources import kafka_of, names
from sinklab.sink.wire import Offsets, TopicReader

if TYPE_CHECKING:
    from sinklab.readings.sources import KafkaSource


def record_times(source: KafkaSource, topics: str | Iterable[str], until: Offsets | None = None,
                 timeout: float = 30.0) -> pd.DataFrame:
    """The Kafka timestamp of every record of ``topics`` (up to ``until`` per partition, else the
    end): ``topic, partition, offset, produced_at``. Only offsets and timestamps are kept, so
    millions of records fit; a record's timestamp is its producer's CreateTime unless the topic
    says LogAppendTime. TimeoutError (naming the partitions) after ``timeout`` s without progress."""
    out: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
    with TopicReader(kafka_of(source), topics) as reader:
        for batch in reader.read(until, timeout=timeout, batch=10_000, missing_ok=False):
            # Per partition, as arrays: a batch holds runs of a few partitions' records.
            found: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
            for m in batch:
                offsets, stamps = found.setdefault((m.topic(), m.partition()), ([], []))
                offsets.append(m.offset())
                stamps.append(m.timestamp()[1])
            for (topic, p), (offsets, stamps) in found.items():
                out["topic"].append(np.full(len(offsets), topic, dtype=object))
                out["partition"].append(np.full(len(offsets), p, dtype=np.int64))
                out["offset"].append(np.asarray(offsets, dtype=np.int64))
                out["produced_at"].append(np.asarray(stamps, dtype=np.int64))
    if not out["offset"]:
        return empty(RECORD_COLUMNS)
    frame = pd.DataFrame({c: np.concatenate(v) for c, v in out.items()})
    frame["produced_at"] = pd.to_datetime(frame["produced_at"], unit="ms", utc=True)
    return frame.sort_values(["topic", "partition", "offset"], ignore_index=True)


def consumer_lag(source: KafkaSource, group: str, topics: str | Iterable[str], timeout: float = 10.0) -> pd.DataFrame:
    """Now, per partition: the end offset, the group's committed offset (what the sink's last
    complete cycle reached) and the lag between them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_of(source), "group.id": group, "enable.auto.commit": False})
    try:
        tps = []
        for topic in names(topics):
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is not None and meta.error is None:
                tps.extend(TopicPartition(topic, p) for p in sorted(meta.partitions))
        committed = {(c.topic, c.partition): c.offset for c in consumer.committed(tps, timeout=timeout)} if tps else {}
        at = pd.Timestamp.now(tz="UTC")
        rows = []
        for tp in tps:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
            done = committed.get((tp.topic, tp.partition), -1)
            done = low if done < 0 else done
            rows.append({"at": at, "topic": tp.topic, "partition": tp.partition, "end": high, "committed": done,
                         "lag": max(0, high - done)})
    finally:
        consumer.close()
    return pd.DataFrame(rows, columns=LAG_COLUMNS) if rows else empty(LAG_COLUMNS)


def lag_history(source: KafkaSource, cycle_frame: pd.DataFrame, timeout: float = 10.0) -> pd.DataFrame:
    """The sink's lag per partition right after each completed cycle, reconstructed afterwards.

    At a cycle's ``completed_at`` the topic held every record timestamped before it: Kafka's
    ``offsets_for_times`` gives that end offset, and the cycle's end offset is what was
    committed. Assumes timestamps grow with offsets within a partition (one producer, CreateTime).
    """
    from confluent_kafka import Consumer, TopicPartition

    if cycle_frame.empty:
        return empty(LAG_COLUMNS)
    consumer = Consumer({**kafka_of(source), "group.id": f"sinklab-viz-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    rows = []
    try:
        highs: dict[tuple[str, int], int] = {}
        for cycle in cycle_frame.itertuples(index=False):
            ms = int(cycle.completed_at.timestamp() * 1000)
            tps = [TopicPartition(t, p, ms) for t, parts in cycle.offsets.items() for p in parts]
            for found in consumer.offsets_for_times(tps, timeout=timeout):
                key = (found.topic, found.partition)
                end = found.offset
                if end < 0:  # nothing at or after that time: everything the partition holds was there
                    if key not in highs:
                        highs[key] = consumer.get_watermark_offsets(TopicPartition(*key), timeout=timeout)[1]
                    end = highs[key]
                done = cycle.offsets[found.topic][found.partition]
                rows.append({"at": cycle.completed_at, "topic": found.topic, "partition": found.partition,
                             "end": end, "committed": done, "lag": max(0, end - done)})
    finally:
        consumer.close()
    return pd.DataFrame(rows, columns=LAG_COLUMNS)


def dead_letters(source: KafkaSource, topic: str, timeout: float = 10.0) -> pd.DataFrame:
    """The records on a dead-letter topic: where each sits there (``partition``, ``offset``), its
    ``key`` and ``value`` as the source had them, and — with
    ``errors.deadletterqueue.context.headers.enable`` — where it came from (``source_topic``,
    ``source_partition``, ``source_offset``), its ``kind``, the error ``message`` and the ``table``."""
    columns = ["partition", "offset", "source_topic", "source_partition", "source_offset", "kind", "table", "message",
               "key", "value"]
    rows: list[dict[str, Any]] = []
    with TopicReader(kafka_of(source), topic) as reader:
        for batch in reader.read(timeout=timeout):
            for m in batch:
                headers = {k: (v.decode(errors="replace") if v is not None else None) for k, v in m.headers() or []}
                source_partition = headers.get("__connect.errors.partition")
                source_offset = headers.get("__connect.errors.offset")
                rows.append({
                    "partition": m.partition(), "offset": m.offset(),
                    "source_topic": headers.get("__connect.errors.topic"),
                    "source_partition": int(source_partition) if source_partition is not None else None,
                    "source_offset": int(source_offset) if source_offset is not None else None,
                    "kind": headers.get("__sinklab.errors.kind"), "table": headers.get("__sinklab.errors.table"),
                    "message": headers.get("__connect.errors.exception.message"), "key": m.key(), "value": m.value(),
                })
    frame = pd.DataFrame(rows, columns=columns) if rows else empty(columns)
    for column in ("source_partition", "source_offset"):
        frame[column] = frame[column].astype("Int64")
    return frame.sort_values(["partition", "offset"], ignore_index=True)
