"""Replay: dead letters back into their tables once their cause is fixed, with the sink's current
config, exactly once (docs/dead-letters.md, "Replay").

1. claim    one UPDATE marks the sink's waiting dead letters (``--where``) with a new replay id R
2. stage    the claimed records, re-converted and routed by the sink's own worker; a record that
            failed for one table goes to that table only. For upsert/CDC, a change whose row a later
            record of its partition changed again is superseded, not written (``Worker._unsuperseded``)
3. publish  each table by compare-and-swap, its snapshot marked with R (``tables.state.REPLAY_PROP``)
4. finish   one MERGE: the records that landed get ``replayed_at``; the others wait again, with the
            error they have now

A replay killed anywhere leaves claimed records without ``replayed_at``: the next replay finishes it
first, and step 3 skips a table whose history already holds R's snapshot. Two replays never claim
one record, since a claim takes only records no replay holds.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from pyspark.sql import functions as F

from sinklab.exceptions import ReplayError
from sinklab.sink.config import keys
from sinklab.sink.cycle.commit_state import Replay
from sinklab.sink.cycle.coordinator import crash_point, publish_table
from sinklab.sink.cycle.plan import Plan
from sinklab.sink.cycle.worker import Worker
from sinklab.sink.records.columns import ERROR
from sinklab.sink.records.dead_letters import REPLAY_ID, REPLAYED_AT, TABLE_SCHEMA, DeadLetter, collect
from sinklab.sink.records.kinds import HISTORY_GONE, field_at_fault
from sinklab.sink.records.reader import read_ranges
from sinklab.sink.tables.state import identifier, load_state, quote
from sinklab.sink.wire import control
from sinklab.sink.wire.offsets import OffsetRange

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

    from sinklab.sink.config.sink_config import SinkConfig
    from sinklab.sink.tables.state import TableState
    from sinklab.sink.tables.write import Staged

log = logging.getLogger("sinklab.sink")
SOURCE = ["source_topic", "source_partition", "source_offset"]
ANYWHERE = "*"  # the group of records that failed before they had a table: routed as the sink routes


@dataclass
class ReplayResult:
    replay_id: str
    claimed: int  # dead letters the replay took
    replayed: int  # of them, now in their tables
    failed: int  # of them, dead letters again, with the error they have now
    tables: dict[str, int] = field(default_factory=dict)  # rows published per table


class Replayer:
    """Replays one sink's dead letters from its dead-letter table (``errors.deadletterqueue.table.name``)."""

    def __init__(self, config: SinkConfig, spark: SparkSession, catalog: Catalog, kafka_conf: dict[str, Any]):
        if not config.dlq_table:
            raise ReplayError(f"sink {config.name} has no dead-letter table ({keys.ERRORS_DLQ_TABLE})",
                              sink=config.name)
        self.config, self.spark, self.catalog, self.kafka_conf = config, spark, catalog, kafka_conf
        self.table = config.dlq_table
        self.target = f"{config.catalog_name}.{quote(self.table)}"

    def run(self, where: str | None = None) -> list[ReplayResult]:
        """Finish the replays a crash left, then replay the waiting dead letters ``where`` picks (a
        Spark SQL condition on the dead-letter table's columns; all of them without it)."""
        if not self.catalog.table_exists(identifier(self.table)):
            return []
        self.spark.catalog.refreshTable(self.target)
        results = [self._replay(r) for r in self._unfinished()]
        replay_id = control.new_commit_id()
        if self._claim(replay_id, where):
            crash_point("replay-after-claim")
            results.append(self._replay(replay_id))
        return results

    def _mine(self) -> DataFrame:
        return self.spark.table(self.target).where(F.col("sink") == self.config.name)

    def _unfinished(self) -> list[str]:
        held = self._mine().where(F.col(REPLAY_ID).isNotNull() & F.col(REPLAYED_AT).isNull())
        return sorted(r[0] for r in held.select(REPLAY_ID).distinct().collect())

    def _claim(self, replay_id: str, where: str | None) -> int:
        condition = f"sink = {_literal(self.config.name)} AND {REPLAY_ID} IS NULL"
        if where:
            try:
                self.spark.table(self.target).where(where).limit(0).collect()  # the condition's error, named
            except Exception as exc:  # noqa: BLE001 - Spark's analysis error, whichever class it came as
                raise ReplayError(f"--where {where!r} is not a condition on {self.table}: "
                                  f"{str(exc).splitlines()[0]}", sink=self.config.name, table=self.table,
                                  where=where) from None
            condition += f" AND ({where})"
        self.spark.sql(f"UPDATE {self.target} SET {REPLAY_ID} = {_literal(replay_id)} WHERE {condition}")
        self.spark.catalog.refreshTable(self.target)
        return self._claimed(replay_id).count()

    def _claimed(self, replay_id: str) -> DataFrame:
        return self._mine().where((F.col(REPLAY_ID) == replay_id) & F.col(REPLAYED_AT).isNull())

    def _replay(self, replay_id: str) -> ReplayResult:
        began = time.monotonic()
        claimed = self._claimed(replay_id).localCheckpoint(eager=True)
        groups = sorted({r.target_table or ANYWHERE for r in claimed.select("target_table").distinct().collect()})
        failed: list[tuple[str, DeadLetter]] = []
        tables: dict[str, int] = {}
        for group in groups:
            records = claimed.where(F.col("target_table").isNull() if group == ANYWHERE
                                    else F.col("target_table") == group)
            for name, staged in self._stage_group(replay_id, group, records, failed).items():
                tables[name] = tables.get(name, 0) + staged.records
        crash_point("replay-after-table-commits")
        self._finish(replay_id, claimed, failed)
        total = claimed.count()
        again = len({(g, *_source(x)) for g, x in failed})
        result = ReplayResult(replay_id, total, total - again, again, tables)
        log.info("sink %s: replay %s of %d dead letters: %d replayed, %d failed again (%s) in %.1f s",
                 self.config.name, replay_id, total, result.replayed, result.failed,
                 ", ".join(f"{t} +{n}" for t, n in tables.items()) or "no rows", time.monotonic() - began)
        return result

    def _stage_group(self, replay_id: str, group: str, records: DataFrame,
                     failed: list[tuple[str, DeadLetter]]) -> dict[str, Staged]:
        """Stage and publish one group's records: those that failed before they had a table are routed as
        the sink routes now; those that failed for a table go to that table alone (the others have them)."""
        c = self.config
        config = c.model_copy(update={"errors_tolerance": "all"} if group == ANYWHERE else {
            "errors_tolerance": "all", "tables": [group], "route_field": None, "route_regex": {},
            "dynamic_enabled": False})
        worker = Worker(config, self.spark, self.catalog, self.kafka_conf, settings=c)
        raw = records.select(F.col("source_topic").alias("topic"), F.col("source_partition").alias("partition"),
                             F.col("source_offset").alias("offset"),
                             F.unix_millis("source_timestamp").alias("timestamp"), "key", "value", "headers")
        ranges = [OffsetRange(r.topic, r.partition, r.low, r.high + 1) for r in raw.groupBy("topic", "partition").agg(
            F.min("offset").alias("low"), F.max("offset").alias("high")).collect()]
        plan = Plan(ranges, {}, {}, int(time.time() * 1000))
        replay = Replay(f"{replay_id}:{group}", raw)
        if config.row_level:
            replay = self._with_later_records(replay, ranges, group, failed)

        def load(name: str) -> TableState:
            return load_state(self.catalog, name, config.table_branch(name), config.name)

        configured = {name: load(name) for name in config.tables}
        # Its own commit id: a row-level write stages on a branch named by it, and a crashed attempt's is left to
        # the sink's next start to drop (recovery.drop_stale_stages); the marker is what makes it once.
        cycle = worker.stage(plan, control.new_commit_id(), configured, load, replay=replay)
        published: dict[str, Staged] = {}
        try:
            for name in [t for t, w in cycle.tables.items() if w.staged is not None]:
                landed = publish_table(self.catalog, worker, cycle, name)
                if landed is not None:
                    published[name] = landed
        finally:
            worker.release(cycle, published)
        failed.extend((group, letter) for letter in cycle.letters)
        return published

    def _with_later_records(self, replay: Replay, ranges: list[OffsetRange], group: str,
                            failed: list[tuple[str, DeadLetter]]) -> Replay:
        """For a row-level table: the letters' partitions from the first letter on, read from Kafka, so that
        a letter whose row changed again later is not replayed (``Worker._unsuperseded``). A letter whose
        partition Kafka no longer holds from there cannot be told: it waits, saying so."""
        consumer = Consumer({**self.kafka_conf, "group.id": f"sinklab-replay-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        try:
            marks = {(r.topic, r.partition): consumer.get_watermark_offsets(KafkaPartition(r.topic, r.partition),
                                                                            timeout=30, cached=False) for r in ranges}
        finally:
            consumer.close()
        gone = [(F.col("topic") == t) & (F.col("partition") == p) & (F.col("offset") + 1 < low)
                for (t, p), (low, _) in marks.items() if low > 0]
        letters = replay.records
        if gone:
            lost = letters.where(reduce(lambda a, b: a | b, gone))
            reason = F.lit(f"{HISTORY_GONE}: Kafka no longer holds its partition after its offset, so whether a "
                           "later change of its row exists cannot be told")
            failed.extend((group, x) for x in collect(lost.withColumn(ERROR, reason),
                                                      None if group == ANYWHERE else group))
            letters = letters.join(lost.select("topic", "partition", "offset"), ["topic", "partition", "offset"],
                                   "left_anti")
        later = [OffsetRange(r.topic, r.partition, max(r.start + 1, marks[(r.topic, r.partition)][0]),
                             marks[(r.topic, r.partition)][1]) for r in ranges]
        later = [r for r in later if r.end > r.start]
        coords = letters.select("topic", "partition", "offset")
        records = letters
        if later:  # the letters themselves are in those ranges too: they come from the table, once
            records = records.unionByName(read_ranges(self.spark, self.kafka_conf, later).join(
                coords, ["topic", "partition", "offset"], "left_anti"))
        return Replay(replay.marker, records, coords)

    def _finish(self, replay_id: str, claimed: DataFrame, failed: list[tuple[str, DeadLetter]]) -> None:
        """One MERGE: failed records wait again with their new error (and table); the others are replayed.
        A record that now fails for several tables keeps its row for the first and gains one per other."""
        ranks: dict[tuple[Any, ...], int] = {}
        outcomes = []
        for group, x in failed:
            key = (*_source(x), group)
            ranks[key] = ranks.get(key, -1) + 1
            outcomes.append((*key, ranks[key] > 0, x.table, x.connect_stage, x.kind, x.reason,
                             field_at_fault(x.reason)))
        outcome = self.spark.createDataFrame(outcomes, (
            "source_topic string, source_partition int, source_offset long, grp string, extra boolean, "
            "new_table string, new_stage string, new_class string, new_message string, new_field string"))
        rows = claimed.withColumn("grp", F.coalesce("target_table", F.lit(ANYWHERE)))
        by = [*SOURCE, "grp"]
        source = rows.join(outcome.where(~F.col("extra")), by, "left").withColumn("extra", F.lit(False)).unionByName(
            rows.join(outcome.where(F.col("extra")), by, "inner"))
        view = f"sinklab_replay_{replay_id.replace('-', '_')}"
        source.createOrReplaceTempView(view)
        on = " AND ".join([f"t.{c} = s.{c}" for c in SOURCE] + [
            f"t.sink = {_literal(self.config.name)}", f"t.{REPLAY_ID} = {_literal(replay_id)}",
            f"t.{REPLAYED_AT} IS NULL", f"coalesce(t.target_table, '{ANYWHERE}') = s.grp", "NOT s.extra"])
        again = {"target_table": "s.new_table", "stage": "s.new_stage", "error_class": "s.new_class",
                 "message": "s.new_message", "field": "s.new_field", REPLAY_ID: "NULL"}
        columns = TABLE_SCHEMA.fieldNames()
        values = [again.get(c, "NULL" if c == REPLAYED_AT else f"s.{c}") for c in columns]
        try:
            self.spark.sql(
                f"MERGE INTO {self.target} t USING {view} s ON {on} "
                f"WHEN MATCHED AND s.new_message IS NOT NULL THEN UPDATE SET "
                + ", ".join(f"t.{c} = {v}" for c, v in again.items())
                + f" WHEN MATCHED THEN UPDATE SET t.{REPLAYED_AT} = current_timestamp() "
                f"WHEN NOT MATCHED AND s.extra THEN INSERT ({', '.join(columns)}) VALUES ({', '.join(values)})")
        finally:
            self.spark.catalog.dropTempView(view)
        self.spark.catalog.refreshTable(self.target)


def _source(letter: DeadLetter) -> tuple[str, int, int]:
    return letter.topic, letter.partition, letter.offset


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
