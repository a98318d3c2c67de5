"""What a cycle reads: every source partition from where it resumes (``recovery.start_offsets``) up
to the broker's end at planning, at most ``sinklab.cycle.max-records`` in all."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from sinklab.exceptions import TopicMissing
from sinklab.security import denied
from sinklab.sink.cycle.recovery import start_offsets
from sinklab.sink.wire import offsets as off
from sinklab.sink.wire.group import group_call
from sinklab.sink.wire.offsets import Lag, OffsetRange, Offsets, TopicPartition

if TYPE_CHECKING:
    from collections.abc import Iterable

    from confluent_kafka import Consumer

    from sinklab.sink.config.sink_config import SinkConfig
    from sinklab.sink.tables.state import TableState


@dataclass(frozen=True)
class Plan:
    ranges: list[OffsetRange]  # the partitions with something to read
    ends: Offsets  # every partition's end: where the group's offsets go when the cycle commits
    highs: Offsets  # the broker's end of each partition at planning
    planned_at_ms: int

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)

    def caught_up(self, tp: TopicPartition) -> bool:
        return off.get(self.ends, tp) >= off.get(self.highs, tp)

    def lag(self) -> Lag:
        """Records each partition had past the plan's end when it was made."""
        return {tp: off.get(self.highs, tp) - end for tp, end in off.entries(self.ends)}


class Planner:
    """Plans cycles against Kafka through the sink's group consumer (its committed offsets are the
    last complete cycle's), and remembers the last plan for the sink's lag and triggers."""

    def __init__(self, config: SinkConfig, group: Consumer, bootstrap: str, timeout_s: float):
        self.config = config
        self.group = group
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.last: Plan | None = None

    def source_partitions(self) -> list[TopicPartition]:
        topics = self.group.list_topics(timeout=10).topics
        c = self.config
        missing = [t for t in c.topics if t not in topics]
        for topic in missing:  # the cluster lists only the topics a principal may describe
            found = self.group.list_topics(topic, timeout=10).topics.get(topic)
            if found is not None and found.error is not None and (
                    refusal := denied(found.error, {"bootstrap.servers": self.bootstrap}, topic, c.name)):
                raise refusal
        if missing:
            raise TopicMissing(f"topics: {', '.join(missing)} not found on {self.bootstrap}", topics=missing,
                               sink=c.name)
        return [TopicPartition(name, p) for name, meta in sorted(topics.items())
                if c.reads_topic(name)
                for p in sorted(meta.partitions)]

    def plan(self, tables: Iterable[TableState]) -> Plan:
        partitions = self.source_partitions()
        planned_at = int(time.time() * 1000)
        low, high = {}, {}
        for tp in partitions:
            low[tp], high[tp] = self.group.get_watermark_offsets(KafkaPartition(*tp), timeout=10)
        group = self.group_offsets(partitions)
        # Dead letters live in Kafka only: with them, only the group's offsets say what was done, and
        # falling back to the tables' offsets would skip letters whose transaction never committed.
        recorded = [t.offsets for t in tables if t.exists] if self.config.errors_tolerance == "none" else []
        starts = start_offsets(partitions, group, recorded, off.of(low), off.of(high), self.config.auto_offset_reset)
        budget = self.config.max_records_per_cycle
        ranges, ends = [], {}
        for tp in partitions:
            start = off.get(starts, tp)
            take = max(min(high[tp] - start, budget), 0)
            budget -= take
            ends[tp] = start + take
            if take:
                ranges.append(OffsetRange(tp.topic, tp.partition, start, start + take))
        self.last = Plan(ranges, off.of(ends), off.of(high), planned_at)
        return self.last

    def group_offsets(self, partitions: list[TopicPartition] | None = None) -> Offsets:
        """The group's committed offset of each source partition that has one: where the last complete
        cycle ended."""
        committed = self._committed([KafkaPartition(*tp) for tp in partitions or self.source_partitions()])
        return off.of((TopicPartition(c.topic, c.partition), c.offset) for c in committed if c.offset >= 0)

    def _committed(self, partitions: list[KafkaPartition]) -> list[KafkaPartition]:
        """The group's committed offsets. librdkafka does not retry this call when the group's coordinator
        moves or is still loading (a broker just started or restarted): it is tried again here, within
        the sink's timeout, as a Java consumer would."""
        try:
            return group_call(lambda: self.group.committed(partitions, timeout=10), self.timeout_s)
        except KafkaException as exc:
            refusal = denied(exc, {"bootstrap.servers": self.bootstrap}, self.config.group_id, self.config.name)
            if refusal is not None:
                raise refusal from None
            raise

    def waiting(self) -> int:
        """Records in the source partitions past where the last cycle read to (0 before the first
        cycle): what a cycle starting now would carry."""
        if self.last is None:
            return 0
        total = 0
        for tp, end in off.entries(self.last.ends):
            _, high = self.group.get_watermark_offsets(KafkaPartition(*tp), timeout=self.timeout_s, cached=False)
            total += max(0, high - end)
        return total

    def lag(self) -> Lag:
        return self.last.lag() if self.last is not None else {}
