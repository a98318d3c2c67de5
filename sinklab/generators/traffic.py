"""Your traffic's shape: read from a real topic without reading its data, replayed by the generators.

``profile_topic(kafka, topic)`` asks the broker, for each partition, the first offset at or after each
bucket boundary of a window (``offsets_for_times``): a bucket's records are the difference, so the
per-partition rates come from offsets and timestamps alone. Record sizes and key skew come from a
sample of each partition's newest records, measured and dropped (nothing of them is kept but sizes and
key counts). It reads with the client settings it is given (a secured cluster's too) and commits nothing.

The profile is a small JSON spec (``save``, ``load``) the generators replay: ``Generator.produce(...,
traffic=profile)`` sends at its rate curve (``speed`` times faster), to each partition by its share,
values padded to its sizes, the sample's hot keys as often as there.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from sinklab.generators.produce import RateSchedule
from sinklab.generators.record import Record

QUANTILES = 11  # the sizes kept: p0, p10, ..., p100
HOT_KEYS = 10  # the most frequent keys of the sample kept (those seen more than once)
PAD_FIELD = "_pad"


class HotKey(BaseModel):
    share: float  # of the sample's records
    partition: int  # where the sample met it


class TrafficProfile(BaseModel):
    """A topic's traffic over a window: records per bucket per partition, value sizes, hot keys."""

    topic: str
    start_ms: int
    bucket_s: float = Field(gt=0)
    partitions: dict[int, list[int]]  # records in each bucket, by partition
    value_bytes: list[int] = Field(default_factory=list)  # p0, p10, ..., p100 of the sample's value sizes
    hot_keys: list[HotKey] = Field(default_factory=list)
    sampled: int = 0

    @model_validator(mode="after")
    def _whole(self) -> TrafficProfile:
        lengths = {len(v) for v in self.partitions.values()}
        if len(lengths) != 1 or not lengths.pop():
            raise ValueError("partitions: every partition needs the same number of buckets, at least one")
        if self.records == 0:
            raise ValueError(f"topic {self.topic} had no records in the window: nothing to replay")
        return self

    @property
    def buckets(self) -> int:
        return len(next(iter(self.partitions.values())))

    @property
    def records(self) -> int:
        return sum(sum(v) for v in self.partitions.values())

    @property
    def rates(self) -> list[float]:
        """Records per second in each bucket, all partitions."""
        return [sum(v[i] for v in self.partitions.values()) / self.bucket_s for i in range(self.buckets)]

    @property
    def shares(self) -> dict[int, float]:
        """Each partition's share of the window's records."""
        return {p: sum(v) / self.records for p, v in sorted(self.partitions.items())}

    @property
    def partition_count(self) -> int:
        return max(self.partitions) + 1

    def schedule(self, speed: float = 1.0) -> RateSchedule:
        """The rate curve, its buckets ``speed`` times shorter (the rates as measured), looped."""
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        return RateSchedule(self.records / (self.buckets * self.bucket_s), steps=tuple(self.rates),
                            step_s=self.bucket_s / speed)

    def reshape(self, records: Iterable[Record], seed: int = 7) -> Iterator[Record]:
        """``records`` as this traffic has them: a partition each by its share, JSON values padded to a
        size drawn from its sizes (a ``_pad`` field), a hot key as often as the sample had it."""
        rng = random.Random(seed)
        hot_share = sum(h.share for h in self.hot_keys)
        # What the hot keys take of each partition, the other records take less of it.
        rest = {p: max(0.0, s - sum(h.share for h in self.hot_keys if h.partition == p))
                for p, s in self.shares.items()}
        parts, weights = list(rest), [w or 1e-9 for w in rest.values()]
        hot_up_to = list(itertools.accumulate(h.share for h in self.hot_keys))
        for record in records:
            key, partition = record.key, None
            pick = rng.random()
            if pick < hot_share:
                index = bisect.bisect_right(hot_up_to, pick)
                hot = self.hot_keys[min(index, len(self.hot_keys) - 1)]
                key, partition = f"hot-{index}".encode(), hot.partition
            else:
                partition = rng.choices(parts, weights)[0]
            value = record.value
            if value is not None and self.value_bytes and record.bad is None:
                value = pad(value, _draw(self.value_bytes, rng.random()))
            yield Record(record.index, key, value, record.event, record.bad, record.time, partition)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.model_dump_json(indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> TrafficProfile:
        return cls.model_validate_json(Path(path).read_text())


def profile_topic(kafka: Mapping[str, Any], topic: str, window_s: float = 3600.0, bucket_s: float = 60.0,
                  sample: int = 1000, end_ms: int | None = None, timeout: float = 10.0) -> TrafficProfile:
    """The traffic of ``topic`` over the ``window_s`` seconds before ``end_ms`` (now), in buckets of
    ``bucket_s``, sizes and hot keys from ``sample`` of its newest records. ``kafka``: a librdkafka
    client's settings (``Stack.kafka_config()``, or your cluster's, with its credentials)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaPartition

    if bucket_s <= 0 or window_s < bucket_s:
        raise ValueError(f"need 0 < bucket ({bucket_s:g} s) <= window ({window_s:g} s)")
    end_ms = end_ms if end_ms is not None else int(time.time() * 1000)
    buckets = int(window_s // bucket_s)
    start_ms = end_ms - int(buckets * bucket_s * 1000)
    consumer = Consumer({**kafka, "group.id": "sinklab-traffic", "enable.auto.commit": False, "log_level": 4})
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is not None and meta.error is not None:  # a login not granted to describe it, say
            raise ValueError(f"topic {topic!r} on {kafka.get('bootstrap.servers')}: {meta.error.str()}")
        if meta is None or not meta.partitions:
            raise ValueError(f"topic {topic!r} not found on {kafka.get('bootstrap.servers')}")
        partitions = sorted(meta.partitions)
        highs = {p: consumer.get_watermark_offsets(KafkaPartition(topic, p), timeout=timeout)[1] for p in partitions}
        edges: dict[int, list[int]] = {p: [] for p in partitions}
        for i in range(buckets + 1):
            at = start_ms + int(i * bucket_s * 1000)
            for found in consumer.offsets_for_times([KafkaPartition(topic, p, at) for p in partitions], timeout):
                # -1: no record at or after that time, so the partition's end.
                offset = found.offset if found.offset >= 0 else highs[found.partition]
                previous = edges[found.partition][-1] if edges[found.partition] else offset
                edges[found.partition].append(max(offset, previous))  # timestamps may step back
    finally:
        consumer.close()
    counts = {p: [b - a for a, b in zip(e, e[1:], strict=False)] for p, e in edges.items()}
    sizes, keys = _sample(kafka, topic, max(1, sample // len(partitions)))
    return TrafficProfile(topic=topic, start_ms=start_ms, bucket_s=bucket_s, partitions=counts,
                          value_bytes=_quantiles(sizes), hot_keys=_hot(keys, len(sizes)), sampled=len(sizes))


def pad(value: bytes, size: int) -> bytes:
    """A JSON object's bytes grown to ``size`` by a ``_pad`` field (those already as large, as they are)."""
    body = value.rstrip()
    if not body.endswith(b"}"):
        return value
    body = body[:-1]
    comma = b"" if body.rstrip().endswith(b"{") else b","
    extra = size - len(body) - len(comma) - len(f'"{PAD_FIELD}":""') - 1
    if extra <= 0:
        return value
    return body + comma + json.dumps({PAD_FIELD: "x" * extra}, separators=(",", ":"))[1:-1].encode() + b"}"


def _sample(kafka: Mapping[str, Any], topic: str, per_partition: int) -> tuple[list[int], Counter]:
    """Value sizes and (key, partition) counts of each partition's newest ``per_partition`` records."""
    from sinklab.sink.wire import TopicReader

    sizes: list[int] = []
    keys: Counter = Counter()
    with TopicReader(kafka, topic, tail=per_partition) as reader:
        for batch in reader.read(timeout=30, idle_s=2.0):
            for m in batch:
                if m.value() is not None:
                    sizes.append(len(m.value()))
                if m.key() is not None:
                    keys[(m.key(), m.partition())] += 1
    return sizes, keys


def _quantiles(sizes: list[int]) -> list[int]:
    if not sizes:
        return []
    ordered = sorted(sizes)
    return [ordered[round(q * (len(ordered) - 1) / (QUANTILES - 1))] for q in range(QUANTILES)]


def _hot(keys: Counter, sampled: int) -> list[HotKey]:
    return [HotKey(share=n / sampled, partition=p) for (_, p), n in keys.most_common(HOT_KEYS) if n > 1] \
        if sampled else []


def _draw(quantiles: list[int], u: float) -> int:
    """A size at ``u`` (0-1) between the quantiles, linearly."""
    if len(quantiles) == 1:
        return quantiles[0]
    pos = u * (len(quantiles) - 1)
    i = min(int(pos), len(quantiles) - 2)
    return int(quantiles[i] + (quantiles[i + 1] - quantiles[i]) * (pos - i))
