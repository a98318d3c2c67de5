"""Reading Kafka topics to their end: the one loop behind the control log, dead letters and record times.

A read takes each partition's end when it starts: the high watermark, or a lower offset asked for
(``until``). A partition is done when the consumer's *position* reaches its end, not when a message at
``end - 1`` arrives: a transaction's commit or abort marker takes an offset no message has, so a
partition can end on one. Reads are read_committed, so another producer's open transaction holds a
partition back until it ends. One timeout rule: ``timeout`` seconds without progress (a message, or a
position that moved) raise TimeoutError naming the partitions still short of their end; with ``idle_s``
a read returns instead, once nothing moved for that long (what an incremental reader needs, which must
not wait on a sink mid-commit).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sinklab.sink.wire.offsets import Offsets, TopicPartition

if TYPE_CHECKING:
    from confluent_kafka import Message

POLL_S = 0.1  # one consume call's longest wait: the idle and timeout clocks keep to within it
# A partition assigned afresh has no position until its first fetch answers, which took over 0.1 s on an
# idle machine (measured) and longer on a busy one: the idle clock starts then, or after this long.
FIRST_FETCH_S = 2.0

Key = tuple[str, int]  # (topic, partition), as plain tuples: what a message or a position gives


class TopicReader:
    """Reads ``topics`` to their end, and again later: each ``read()`` continues where the last one
    stopped, and a partition that appears later is read from its beginning. Close it (or use ``with``)."""

    def __init__(self, kafka: str | Mapping[str, Any], topics: str | Iterable[str], tail: int | None = None,
                 start: Offsets | None = None, **conf: Any):
        """``kafka``: a bootstrap address, or client settings (bootstrap servers and security, librdkafka's
        names); ``conf``: more of them."""
        from confluent_kafka import Consumer

        settings = {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)
        self.bootstrap_servers = str(settings["bootstrap.servers"])
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self._consumer: Any = Consumer({
            **settings, "group.id": f"sinklab-read-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            # It commits nothing: neither group offsets nor (work per message) a stored offset.
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            # Assigned at its low watermark, a partition that retention trimmed since starts at the new one.
            "auto.offset.reset": "earliest", **conf})
        self.tail = tail  # a partition met for the first time starts this many records before its end
        self.start = start or {}  # ... or at this offset, where it has one
        self._next: dict[Key, int] = {}  # per partition, the offset its next read starts at
        # Partitions stay assigned from one read to the next (without ``until``): a partition assigned
        # afresh at a transaction marker has no position until a message follows it, so a read would
        # never see it done; and a consumer kept assigned has fetched what arrived since (measured: the
        # dashboard's refresh fell behind its sink with a fresh assignment per read).
        self._assigned: set[Key] = set()

    def read(self, until: Offsets | None = None, *, timeout: float = 10.0, idle_s: float | None = None,
             batch: int = 1000, missing_ok: bool = True) -> Iterator[list[Message]]:
        """Batches of the messages from where the last read stopped to each partition's end (the high
        watermark now, or ``until`` where that is lower); what lies past the end is left for a later read.
        A topic that does not exist has nothing to read, or raises ValueError unless ``missing_ok``.
        Without ``until``, messages that arrived meanwhile come with the last batches."""
        from confluent_kafka import TopicPartition as KafkaPartition

        active = {key: end for key, end in self._ends(until, timeout, missing_ok).items() if self._next[key] < end}
        if not active:
            return
        new = [key for key in active if key not in self._assigned]
        if new:
            self._consumer.incremental_assign([KafkaPartition(t, p, self._next[(t, p)]) for t, p in new])
            self._assigned.update(new)
        cut = until is not None
        try:
            moved_at = time.monotonic()
            idle_from = moved_at + FIRST_FETCH_S  # until a fetch answers
            while active:
                messages = [m for m in self._consumer.consume(batch, timeout=POLL_S) if m.error() is None]
                # Where each partition got to, from its position rather than message by message (there may
                # be millions): librdkafka moves it past each message it returns, and past markers and
                # aborted records with none. It is negative before the first fetch.
                moved, past = False, {}
                for found in self._consumer.position([KafkaPartition(t, p) for t, p in active]):
                    key, end = (found.topic, found.partition), active[(found.topic, found.partition)]
                    if found.offset >= 0:
                        idle_from = min(idle_from, moved_at)
                    if cut and found.offset > end:
                        past[key] = end
                    reached = min(found.offset, end) if cut else found.offset
                    if reached > self._next[key]:
                        self._next[key], moved = reached, True
                if past:  # what lies past ``until`` is not this read's
                    messages = [m for m in messages if m.offset() < past.get((m.topic(), m.partition()), math.inf)]
                done = [key for key, end in active.items() if self._next[key] >= end]
                if done:
                    if cut:
                        self._unassign(done)
                    for key in done:
                        del active[key]
                if messages:
                    yield messages
                now = time.monotonic()
                if moved:
                    moved_at = idle_from = now
                elif idle_s is not None and now - idle_from >= idle_s:
                    return
                elif now - moved_at >= timeout:
                    raise TimeoutError(f"no progress for {timeout:g} s reading " + ", ".join(
                        f"{TopicPartition(*key)} (at {self._next[key]}, end {end})" for key, end in active.items()))
        finally:
            if cut and active and self._consumer is not None:  # the next read assigns them again where they stopped
                self._unassign(list(active))

    @property
    def positions(self) -> Offsets:
        """Where each partition read so far got to: the offset its next read starts at."""
        out: Offsets = {}
        for (topic, partition), offset in self._next.items():
            out.setdefault(topic, {})[partition] = offset
        return out

    def _unassign(self, keys: list[Key]) -> None:
        from confluent_kafka import TopicPartition as KafkaPartition

        self._consumer.incremental_unassign([KafkaPartition(t, p) for t, p in keys])
        self._assigned.difference_update(keys)

    def _ends(self, until: Offsets | None, timeout: float, missing_ok: bool) -> dict[Key, int]:
        from confluent_kafka import TopicPartition as KafkaPartition

        ends = {}
        for topic in self.topics:
            meta = self._consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None:
                if missing_ok:
                    continue
                raise ValueError(f"topic {topic!r} not found on {self.bootstrap_servers}")
            for p in sorted(meta.partitions):
                low, high = self._consumer.get_watermark_offsets(KafkaPartition(topic, p), timeout=timeout)
                first = low if self.tail is None else high - self.tail
                first = self.start.get(topic, {}).get(p, first)
                self._next[(topic, p)] = max(self._next.get((topic, p), first), low)
                ends[(topic, p)] = high if until is None else min(high, until.get(topic, {}).get(p, high))
        return ends

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
