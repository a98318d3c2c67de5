"""What a cycle reports of the records it read: records, tombstones, bad records, bytes, writer schema
ids, records no table takes, and its valid-through timestamp; computed by a job of their own
(``per_partition``, two passes) or observed on the way by the writes (``metrics``, one pass)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.records import dead_letters, framed, route
from sinklab.sink.records.columns import ERROR
from sinklab.sink.wire import offsets as off
from sinklab.sink.wire.offsets import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row

    from sinklab.sink.config.sink_config import SinkConfig
    from sinklab.sink.cycle.plan import Plan
    from sinklab.sink.records.framed import FramedDecoder


class Counts:
    def __init__(self, config: SinkConfig, decoders: list[FramedDecoder]):
        self.config = config
        self.decoders = decoders
        self._kept: tuple[tuple[TopicPartition, ...], list[Column]] | None = None  # the last cycle's metrics

    def per_partition(self, prepared: DataFrame) -> dict[TopicPartition, Row]:
        """Per partition: records, newest timestamp, tombstones, bad records (and registry schema ids)."""
        return {TopicPartition(r.topic, r.partition): r for r in prepared.groupBy("topic", "partition").agg(
            F.count(F.lit(1)).alias("n"), F.max("timestamp").alias("max_ts"),
            F.sum(F.col("value").isNull().cast("int")).alias("tombstones"),
            F.count(F.col(ERROR)).alias("bad"), record_bytes().alias("bytes"),
            *framed.id_sets(self.decoders)).collect()}

    def metrics(self, lagging: list[TopicPartition]) -> list[Column]:
        """The cycle's figures as aggregates over its prepared records: records, tombstones, bad records,
        writer schema ids, records no table takes, and the newest timestamp of each partition read
        only in part (the others' is the planning time, see ``vtts``)."""
        if self._kept is not None and self._kept[0] == tuple(lagging):
            return self._kept[1]

        def newest(tp: TopicPartition) -> Column:
            return F.max(F.when((F.col("topic") == tp.topic) & (F.col("partition") == tp.partition),
                                F.col("timestamp")))

        metrics = [F.count(F.lit(1)).alias("n"), F.sum(F.col("value").isNull().cast("int")).alias("tombstones"),
                   F.count(F.col(ERROR)).alias("bad"), dead_letters.observed(self.config.errors_tolerance),
                   record_bytes().alias("bytes"), *framed.id_sets(self.decoders),
                   *[newest(tp).alias(f"max_ts_{i}") for i, tp in enumerate(lagging)]]
        if self.config.route_field:
            good = F.col("value").isNotNull() & F.col(ERROR).isNull()
            metrics.append(F.sum((good & route.nowhere(self.config)).cast("int")).alias("nowhere"))
        self._kept = (tuple(lagging), metrics)
        return metrics


def vtts(plan: Plan, newest: dict[TopicPartition, int | None]) -> int:
    """The cycle's valid-through timestamp, from the newest record timestamp read of each partition."""
    # Caught-up partitions hold everything produced before planning; others up to what was read.
    marks = []
    for tp, _ in off.entries(plan.ends):
        if plan.caught_up(tp):
            marks.append(plan.planned_at_ms)
        elif newest.get(tp) is not None:
            marks.append(int(newest[tp]))  # type: ignore[arg-type]
    return min(marks) if marks else plan.planned_at_ms


def record_bytes() -> Column:
    """The records' size as the sink reads them from Kafka (keys and values): what sinklab.commit.max-bytes counts."""
    return F.sum(F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("value"), F.lit(0)))
