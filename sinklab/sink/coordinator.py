"""The coordinator: one commit cycle, the whole exactly-once protocol in one place (DESIGN §4).

A cycle reads [start, end) of every source partition and writes each table's rows as data files
and a snapshot that is not committed (``write``); then it opens the Kafka transaction with a
``commit-start`` event (a fenced zombie fails here, before the catalog has heard of the cycle),
publishes each table in one catalog commit that adds the snapshot and moves the branch, asserting
the branch is where the cycle planned (compare-and-swap), then commits the group offsets and a
``commit-complete`` event in the same transaction. A snapshot that is not published leaves no trace
in the table: its files are deleted once the table shows it is not there.

The records take one pass when nothing must be known of them before the write (``_one_pass``):
one Spark job per table reads, converts and writes, and what the cycle reports of its records is
observed on the way. When the pass meets what needs a look first (a writer schema new to the sink,
a field new to a table with evolution on), its stages are dropped and the cycle reads the same
offset ranges again, looking before it writes (``_two_passes``); so do cycles that auto-create,
route dynamically or write row-level changes. Either way nothing reaches a table before the fence.

A publish whose answer is lost is never sent blindly again: the table says whether it landed
(``write.publish``), and the compare-and-swap keeps a second attempt from landing twice.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark import StorageLevel
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.sink import dlq, events, route
from sinklab.sink.columns import ERROR, KEY_SCHEMA_ID, META, OP, ROUTE, SCHEMA_ID
from sinklab.sink.config import ConfigError, SinkConfig
from sinklab.sink.convert import (
    BadRows,
    Observed,
    RowColumns,
    prepare,
    row_columns,
    to_rows,
    with_operation,
    with_payload,
)
from sinklab.sink.errors import (
    NO_TABLE,
    CommitTimeout,
    KafkaUnavailable,
    RecordError,
    SinkError,
    SinkFenced,
    StuckCall,
    TableMissing,
)
from sinklab.sink.evolve import evolve, new_field
from sinklab.sink.progress import Offsets, format_offsets, merge_max, nest, start_offsets
from sinklab.sink.reader import OffsetRange, read_ranges
from sinklab.sink.registry import FramedDecoder, RegistryClient, RegistrySettings
from sinklab.sink.tables import (
    COMMIT_ID_PROP,
    OFFSETS_PROP,
    SINK_PROP,
    VTTS_PROP,
    TableState,
    all_optional,
    create_table,
    ensure_wap,
    identifier,
    infer_schema,
    load_state,
    partition_schema,
    quote,
    with_variants,
)
from sinklab.sink.write import (
    ROW_LEVEL_PROPS,
    Staged,
    discard,
    drop_stale_stages,
    lost_sequence_race,
    publish,
    stage_name,
    write_append,
    write_changes,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, Row, SparkSession

    from sinklab.sink.events import Chore

log = logging.getLogger("sinklab.sink")
CRASH_ENV = "SINKLAB_CRASH_AT"
CRASH_POINTS = ("after-data-files", "between-table-commits", "after-table-commits", "inside-kafka-transaction")
MAX_REPLANS = 5
# How long a cycle waits for the metrics a write it ran observed (they come from Spark's listener
# bus, usually within milliseconds); past it, the cycle assumes the worst (two passes, a bad-row lookup).
OBSERVED_WAIT_S = 30.0
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def crash_point(name: str) -> None:
    """Test-only hook: die here, as a killed process would, when SINKLAB_CRASH_AT names this point."""
    if os.environ.get(CRASH_ENV) == name:
        log.error("crash point %s reached: exiting", name)
        os._exit(86)


@dataclass
class Plan:
    ranges: list[OffsetRange]
    starts: dict[tuple[str, int], int]
    ends: dict[tuple[str, int], int]
    highs: dict[tuple[str, int], int]
    planned_at_ms: int

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)


@dataclass
class Cycle:
    """What one cycle carries from reading to committing."""

    plan: Plan
    commit_id: str
    vtts: int
    counters: dict[str, int]
    letters: list[dlq.DeadLetter] = field(default_factory=list)
    states: dict[str, TableState] = field(default_factory=dict)  # the tables written, as planned
    rows: dict[str, DataFrame] = field(default_factory=dict)  # each table's rows (staged again after a CAS loss)
    staged: dict[str, Staged] = field(default_factory=dict)
    published: dict[str, Staged] = field(default_factory=dict)
    cached: DataFrame | None = None  # the prepared records, when the cycle takes two passes
    wrote: set[str] = field(default_factory=set)  # tables whose write ran (their observations will report)
    passes: int = 1

    @property
    def ranges(self) -> list[tuple[str, int, int, int]]:
        return [(r.topic, r.partition, r.start, r.end) for r in self.plan.ranges]

    def wait_s(self, table: str | None = None) -> float:
        """How long to wait for the metrics observed by ``table``'s write (by any, without one):
        only a write that ran reports them."""
        ran = table in self.wrote if table is not None else bool(self.wrote)
        return OBSERVED_WAIT_S if ran else 0.0


class _TwoPasses(Exception):  # noqa: N818 - control flow, never leaves the coordinator
    """A table's records need a look before its write that one pass cannot give."""


@dataclass
class CycleResult:
    commit_id: str
    records: int
    tables: dict[str, Staged] = field(default_factory=dict)
    offsets: Offsets = field(default_factory=dict)
    vtts_ms: int | None = None
    counters: dict[str, int] = field(default_factory=dict)
    duration_ms: int = 0
    passes: int = 1  # over the records: 2 when the cycle had to look before writing (Coordinator._two_passes)


# librdkafka's transactional calls can block well past their timeout when the broker of a coordinator
# (the transaction's, or the group's for send_offsets_to_transaction) dies: confluentinc/librdkafka
# #3779, #5456, #5511. A sink waiting there neither commits nor fails; one fault-matrix run stalled
# so for minutes. Past twice the call's own timeout and this much more, the cycle fails as Kafka away:
# a call that does give up may take two of its timeouts (measured: 10.7 s for 5 s, the transaction
# coordinator's broker SIGKILLed before send_offsets_to_transaction).
TXN_GRACE_S = 5.0


def bounded(what: str, timeout_s: float, call: Callable[[], Any]) -> Any:
    """``call()`` in a thread of its own, waited for at most 2 x ``timeout_s`` + TXN_GRACE_S; past that,
    ``StuckCall`` (a ``KafkaUnavailable``) and the thread is left where it waits: the producer it is
    in must then never be used again (``Coordinator.stuck``), and a new one fences it."""
    done = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name=f"sinklab-kafka-{what}", daemon=True).start()
    limit = 2 * timeout_s + TXN_GRACE_S
    if not done.wait(limit):
        raise StuckCall(f"Kafka's {what} did not return within {limit:.0f}s (its own timeout {timeout_s:.0f}s): "
                        f"a coordinator's broker is gone and librdkafka waits for it")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


class Coordinator:
    def __init__(self, config: SinkConfig, spark: SparkSession, catalog: Catalog, kafka_conf: dict[str, Any]):
        self.config = config
        self.spark = spark
        self.catalog = catalog
        self.kafka_conf = {**kafka_conf, **config.kafka_properties}
        # Each Kafka step of the commit waits at most the commit timeout: a broker that is down fails
        # the cycle in bounded time instead of holding the transaction open.
        self.kafka_timeout_s = max(5.0, config.commit_timeout_ms / 1000)
        self.group = Consumer({**self.kafka_conf, "group.id": config.group_id, "enable.auto.commit": False,
                               "isolation.level": "read_committed"})
        self.stuck = False  # a transactional call of self.producer never returned (``bounded``)
        self.producer = Producer({
            # A transaction call waits for its request, whose own timeout (librdkafka's socket.timeout.ms,
            # 60 s) overrides the call's: with the broker gone, send_offsets_to_transaction took 60 s (measured).
            "socket.timeout.ms": int(self.kafka_timeout_s * 1000),
            **self.kafka_conf,
            "transactional.id": config.transactional_id,
            # The transaction stays open while tables commit.
            "transaction.timeout.ms": max(60_000, 2 * config.commit_timeout_ms),
        })
        try:
            # A newer instance's init fences every older one with the same transactional id.
            self._txn("init_transactions", 30, self.producer.init_transactions, 30)
        except KafkaException as exc:
            raise self._fenced_or(exc, "(starting)") from exc
        self._ensure_topic(config.control_topic)
        if config.dlq_topic:
            self._ensure_topic(config.dlq_topic)
        self._recovered: set[str] = set()
        self._row_columns: dict[tuple[str, bool, str | None], RowColumns] = {}  # by table schema
        self.last_plan: Plan | None = None
        self.framed = _decoder(config.value_registry, "value")
        self.framed_key = _decoder(config.key_registry, "key")
        self.decoders = [d for d in (self.framed, self.framed_key) if d is not None]

    def close(self) -> None:
        self.group.close()
        if not self.stuck:  # a thread of its own is still inside it
            self.producer.flush(5)
        # A failed cycle's frames hold this coordinator for as long as its exception is kept (a
        # notebook's last error, a test report). Dropped here, the producer goes now, and stops
        # reconnecting to a broker that may be gone; its destructor does not wait for the broker,
        # where Producer.close() blocks for good on a transaction it cannot abort (measured).
        del self.producer

    # ---- planning
    def _ensure_topic(self, topic: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        # Its one informational line at close ("Purging 1 unserved events") is no news to a notebook.
        admin = AdminClient({"log_level": 4, **self.kafka_conf})
        if topic not in admin.list_topics(timeout=10).topics:
            # The broker's default replication (3 on a replicated cluster): the log must outlive a broker.
            futures = admin.create_topics([NewTopic(topic, 1, -1)])
            try:
                futures[topic].result(30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    def source_partitions(self) -> list[tuple[str, int]]:
        topics = self.group.list_topics(timeout=10).topics
        out = []
        for name, meta in sorted(topics.items()):
            if name in (self.config.control_topic, self.config.dlq_topic) or name.startswith("__") \
                    or not self.config.matches_topic(name):
                continue
            out.extend((name, p) for p in sorted(meta.partitions))
        missing = [t for t in self.config.topics if t not in topics]
        if missing:
            raise RuntimeError(f"topics: {', '.join(missing)} not found on {self.kafka_conf['bootstrap.servers']}")
        return out

    def plan(self, states: list[TableState]) -> Plan:
        partitions = self.source_partitions()
        planned_at = int(time.time() * 1000)
        low, high = {}, {}
        for tp in partitions:
            low[tp], high[tp] = self.group.get_watermark_offsets(TopicPartition(*tp), timeout=10)
        committed = self.group.committed([TopicPartition(t, p) for t, p in partitions], timeout=10)
        group = {(c.topic, c.partition): c.offset for c in committed}
        # Dead letters live in Kafka only: with them, only the group's offsets say what was done, and
        # falling back to the tables' offsets would skip letters whose transaction never committed.
        recorded = [s.offsets for s in states if s.exists] if self.config.errors_tolerance == "none" else []
        starts = start_offsets(partitions, group, recorded, low, high, self.config.auto_offset_reset)
        budget = self.config.max_records_per_cycle
        ends = {}
        for tp in partitions:
            take = min(high[tp] - starts[tp], budget)
            ends[tp] = starts[tp] + max(take, 0)
            budget -= max(take, 0)
        ranges = [OffsetRange(t, p, starts[(t, p)], ends[(t, p)]) for t, p in partitions
                  if ends[(t, p)] > starts[(t, p)]]
        plan = Plan(ranges, starts, ends, high, planned_at)
        self.last_plan = plan
        return plan

    def _prepare(self, raw: DataFrame, cached: bool = False) -> DataFrame:
        prepared = prepare(raw, self.config.schemas_enable, self.config.transforms, self.config.route_field,
                           self.config.cdc_field, self.config.default_id_columns if self.config.row_level else None,
                           self.framed, self.framed_key, self.config.key_envelope, cached)
        return prepared.persist(StorageLevel.MEMORY_AND_DISK) if cached else prepared

    def _stats(self, prepared: DataFrame) -> dict[tuple[str, int], Row]:
        """Per partition: records, newest timestamp, tombstones, bad records (and registry schema ids)."""
        ids = [F.collect_set(SCHEMA_ID if d.side == "value" else KEY_SCHEMA_ID).alias(f"{d.side}_ids")
               for d in self.decoders]
        return {(r.topic, r.partition): r for r in prepared.groupBy("topic", "partition").agg(
            F.count(F.lit(1)).alias("n"), F.max("timestamp").alias("max_ts"),
            F.sum(F.col("value").isNull().cast("int")).alias("tombstones"),
            F.count(F.col(ERROR)).alias("bad"), record_bytes().alias("bytes"), *ids).collect()}

    def _learn(self, ids: dict[str, set[int]]) -> bool:
        """Whether the cycle met writer schemas (of values or keys, ``ids`` by side) new to this sink,
        now fetched."""
        learned = [d.learn(ids[d.side]) for d in self.decoders]
        return any(learned)

    def waiting(self) -> int:
        """Records in the source partitions past where the last cycle read to (0 before the first cycle):
        what a cycle starting now would carry."""
        plan = self.last_plan
        if plan is None:
            return 0
        total = 0
        for tp, end in plan.ends.items():
            _, high = self.group.get_watermark_offsets(TopicPartition(*tp), timeout=self.kafka_timeout_s, cached=False)
            total += max(0, high - end)
        return total

    def lag(self) -> dict[str, int]:
        plan = self.last_plan
        if plan is None:
            return {}
        return {f"{t}[{p}]": plan.highs[(t, p)] - plan.ends[(t, p)] for (t, p) in plan.ends}

    # ---- the cycle
    def run_cycle(self) -> CycleResult | None:
        started = time.monotonic()
        configured = {name: self._load(name) for name in self.config.tables}
        plan = self.plan(list(configured.values()))
        if not plan.ranges:
            return None
        for decoder in self.decoders:
            decoder.prime({r.topic for r in plan.ranges})
        raw = read_ranges(self.spark, self.kafka_conf, plan.ranges,
                          timeout_s=max(30.0, self.config.commit_timeout_ms / 1000))
        cycle = Cycle(plan, events.new_commit_id(), plan.planned_at_ms, {})
        try:
            if not (self._one_pass_fits(configured) and self._one_pass(cycle, raw, configured)):
                self._two_passes(cycle, raw, configured)
            crash_point("after-data-files")
            return self._commit(cycle, started)
        finally:
            self._forget_unpublished(cycle)
            if cycle.cached is not None:
                cycle.cached.unpersist()

    def _one_pass_fits(self, configured: dict[str, TableState]) -> bool:
        """Whether the cycle can take one pass: every table there, each record's table known from its
        own fields, appends (a MERGE runs its source in several jobs anyway), and schema evolution, when
        on, decidable by a key scan (typed values need their schemas read)."""
        c = self.config
        return (not c.row_level and not c.dynamic_enabled and all(s.exists for s in configured.values())
                and not (c.evolve_schema and c.typed_values))

    def _one_pass(self, cycle: Cycle, raw: DataFrame, configured: dict[str, TableState]) -> bool:
        """One Spark job per table reads the cycle's ranges, converts and writes them; what the cycle
        must know of its records (counts, newest timestamps, tombstones, bad records, schema ids, new
        fields) is observed by that job, not computed by one of its own.

        Returns False, with nothing it wrote left staged, when the records need two passes: a writer
        schema new to the sink (they are prepared again, decodable), a field new to a table with
        evolution on (the table evolves before the write). The two passes read the same offset ranges
        again: Kafka replays them. Bad records are looked up after the write, by reading their ranges
        again; a clean cycle (the usual one) never does.
        """
        plan = cycle.plan
        lagging = [tp for tp, end in plan.ends.items() if end < plan.highs[tp]]
        # Fanned out, the first table's write caches the prepared records for the others: reading and
        # preparing them once per table cost 2.3x (measured, 3 tables).
        fanned_out = len(configured) > 1
        prepared = self._prepare(raw, cached=fanned_out)
        cycle.cached = prepared if fanned_out else None
        stats = Observed(prepared, *self._stat_metrics(lagging))
        records = with_payload(stats.df).where(F.col("value").isNotNull())
        good = records.where(F.col(ERROR).isNull())
        checks: dict[str, tuple[BadRows | None, Observed | None]] = {}
        try:
            for name, state in configured.items():
                if route.takes_nothing(self.config, name):
                    # Its write would be a plan Spark optimizes away, and that empties the cycle's
                    # observation too, which is in the plan.
                    continue
                state, cycle.rows[name], converted, fields = self._rows(
                    cycle, state, route.records_for(self.config, good, name), one_pass=True)
                cycle.states[name] = state
                checks[name] = (converted, fields)
                self._stage_into(cycle, name)
        except _TwoPasses:
            return self._abandon(cycle)
        seen = stats.result(cycle.wait_s())

        def new_fields(name: str, fields: Observed | None) -> bool:
            if fields is None or name not in cycle.wrote:
                return False
            found = fields.result(cycle.wait_s(name))
            return found is None or bool(found["new_fields"])  # not reported: assume there are

        # No write ran (every table already holds these records: a restart after the publish) or the
        # records need a second look: what the one pass wrote goes, and the cycle takes two passes.
        retry = seen is None or self._learn({d.side: set(seen[f"{d.side}_ids"]) for d in self.decoders}) or any(
            new_fields(name, fields) for name, (_, fields) in checks.items())
        if retry:
            return self._abandon(cycle)
        assert seen is not None
        cycle.counters.update(records=int(seen["n"]), tombstones=int(seen["tombstones"] or 0),
                              bytes=int(seen["bytes"] or 0))
        cycle.vtts = self._vtts(plan, {tp: seen[f"max_ts_{i}"] for i, tp in enumerate(lagging)})
        if seen["bad"]:
            self._bad(cycle, records.where(F.col(ERROR).isNotNull()), None)
        if self.config.route_field and seen["nowhere"]:
            self._nowhere(cycle, good, list(configured), int(seen["nowhere"]))
        for name, (converted, _) in checks.items():
            self._bad_rows(cycle, name, converted)
        return True

    def _abandon(self, cycle: Cycle) -> bool:
        """Undo a one pass that cannot stand: its files deleted (it committed nothing, so the tables as
        loaded stand), its rows and cache forgotten."""
        self._forget_unpublished(cycle)
        cycle.staged.clear()
        cycle.states.clear()
        cycle.rows.clear()
        cycle.wrote.clear()
        if cycle.cached is not None:
            cycle.cached.unpersist()
            cycle.cached = None
        return False

    def _stat_metrics(self, lagging: list[tuple[str, int]]) -> list[Column]:
        """The cycle's figures as aggregates over its prepared records: records, tombstones, bad records,
        writer schema ids, records no table takes, and the newest timestamp of each partition read
        only in part (the others' is the planning time, see ``_vtts``)."""
        def newest(tp: tuple[str, int]) -> Column:
            return F.max(F.when((F.col("topic") == tp[0]) & (F.col("partition") == tp[1]), F.col("timestamp")))

        metrics = [F.count(F.lit(1)).alias("n"), F.sum(F.col("value").isNull().cast("int")).alias("tombstones"),
                   F.count(F.col(ERROR)).alias("bad"), record_bytes().alias("bytes"),
                   *[F.collect_set(SCHEMA_ID if d.side == "value" else KEY_SCHEMA_ID).alias(f"{d.side}_ids")
                     for d in self.decoders],
                   *[newest(tp).alias(f"max_ts_{i}") for i, tp in enumerate(lagging)]]
        if self.config.route_field:
            good = F.col("value").isNotNull() & F.col(ERROR).isNull()
            metrics.append(F.sum((good & route.nowhere(self.config)).cast("int")).alias("nowhere"))
        return metrics

    def _two_passes(self, cycle: Cycle, raw: DataFrame, configured: dict[str, TableState]) -> None:
        """The records prepared once and cached, looked at (counts, schema ids, destinations, new
        fields), then written: for auto-create, evolution, dynamic routing, row-level changes."""
        cycle.passes = 2
        prepared = cycle.cached = self._prepare(raw, cached=True)
        stats = self._stats(prepared)
        if self._learn({d.side: {i for s in stats.values() for i in s[f"{d.side}_ids"]} for d in self.decoders}):
            # Writer schemas new to this sink: the records are prepared again, now decodable (or bad for
            # the reason the registry gives).
            prepared.unpersist()
            prepared = cycle.cached = self._prepare(raw, cached=True)
            stats = self._stats(prepared)
        # Records read, not offsets planned: transaction markers and aborted records occupy offsets.
        cycle.counters.update(records=int(sum(s.n for s in stats.values())),
                              tombstones=int(sum(s.tombstones or 0 for s in stats.values())),
                              bytes=int(sum(s.bytes or 0 for s in stats.values())))
        cycle.vtts = self._vtts(cycle.plan, {tp: s.max_ts for tp, s in stats.items()})
        # Tombstones are skipped and counted, except that row-level tables delete the row they name.
        records = with_payload(prepared)
        records = records if self.config.row_level else records.where(F.col("value").isNotNull())
        if any(s.bad for s in stats.values()):  # counted by the job above: no job of its own when there are none
            self._bad(cycle, records.where(F.col(ERROR).isNotNull()), None)
        good = records.where(F.col(ERROR).isNull())
        states = self._destinations(cycle, good, configured)
        for name in list(states):
            cycle.states[name], cycle.rows[name], converted, _ = self._rows(
                cycle, states[name], route.records_for(self.config, good, name))
            self._stage_into(cycle, name)
            self._bad_rows(cycle, name, converted)

    def _bad_rows(self, cycle: Cycle, name: str, converted: BadRows | None) -> None:
        # The write counted the bad rows; only when it saw some, or did not run, is there a job to look.
        if converted is not None and converted.counted(cycle.wait_s(name)) != 0:
            self._bad(cycle, converted.bad(), name)

    def _stage_into(self, cycle: Cycle, name: str) -> None:
        result = self._stage(cycle, cycle.states[name], cycle.rows[name])
        if result is not None:
            cycle.staged[name] = result

    def _commit(self, cycle: Cycle, started: float) -> CycleResult:
        """The exactly-once order of DESIGN §4: the fence (commit-start flushed), then each table's
        compare-and-swap, then offsets and commit-complete in the one Kafka transaction."""
        in_txn = False
        try:
            commit_started = time.monotonic()
            self._txn("begin_transaction", self.kafka_timeout_s, self.producer.begin_transaction)
            in_txn = True
            self._send(events.COMMIT_START, cycle.commit_id)
            self._flush()  # fencing surfaces here, before any table moves
            if cycle.letters:
                cycle.counters["dead-lettered"] = dlq.produce(self.producer, self.config, cycle.letters)

            for i, name in enumerate(list(cycle.staged)):
                landed = self._publish(cycle, cycle.states[name], cycle.staged[name], cycle.rows[name])
                if landed is not None:
                    cycle.published[name] = landed
                if i == 0:
                    crash_point("between-table-commits")
            crash_point("after-table-commits")
            elapsed_ms = (time.monotonic() - commit_started) * 1000
            if elapsed_ms > self.config.commit_timeout_ms:
                raise CommitTimeout(
                    f"sink {self.config.name}: table commits took {elapsed_ms:.0f} ms, more than "
                    f"iceberg.control.commit.timeout-ms={self.config.commit_timeout_ms}; the Kafka transaction is "
                    f"aborted and the next cycle resumes from the tables' recorded offsets")

            plan = cycle.plan
            offsets = [TopicPartition(t, p, end) for (t, p), end in plan.ends.items()]
            self._txn("send_offsets_to_transaction", self.kafka_timeout_s, self.producer.send_offsets_to_transaction,
                      offsets, self.group.consumer_group_metadata(), self.kafka_timeout_s)
            result = CycleResult(cycle.commit_id, cycle.counters["records"], cycle.published, nest(plan.ends),
                                 cycle.vtts, cycle.counters, int((time.monotonic() - started) * 1000), cycle.passes)
            self._send(events.COMMIT_COMPLETE, cycle.commit_id, result, cycle.states)
            crash_point("inside-kafka-transaction")
            self._txn("commit_transaction", self.kafka_timeout_s, self.producer.commit_transaction,
                      self.kafka_timeout_s)
            in_txn = False
            return result
        except KafkaException as exc:
            raise self._fenced_or(exc, cycle.commit_id) from exc
        finally:
            if in_txn:
                self._abort()

    def _forget_unpublished(self, cycle: Cycle) -> None:
        for name, staged in cycle.staged.items():
            if name not in cycle.published:  # a published stage went away in its commit
                self._discard(staged)

    def _load(self, name: str) -> TableState:
        state = load_state(self.catalog, name, self.config.table_branch(name), self.config.name)
        if state.exists and name not in self._recovered:
            drop_stale_stages(self.catalog, name, self.config.name)
            self._recovered.add(name)
        return state

    def _vtts(self, plan: Plan, newest: dict[tuple[str, int], int | None]) -> int:
        """The cycle's valid-through timestamp, from the newest record timestamp read of each partition."""
        # Caught-up partitions hold everything produced before planning; others up to what was read.
        marks = []
        for tp, end in plan.ends.items():
            if end >= plan.highs[tp]:
                marks.append(plan.planned_at_ms)
            elif newest.get(tp) is not None:
                marks.append(int(newest[tp]))  # type: ignore[arg-type]
        return min(marks) if marks else plan.planned_at_ms

    def _bad(self, cycle: Cycle, bad: DataFrame, table: str | None) -> None:
        """Records that cannot be written: stop (errors.tolerance=none) or dead-letter them (all).

        Every bad record of the cycle's whole range is dead-lettered, even one a table already
        recorded: its earlier dead letter went out in a transaction that never committed.
        """
        if self.config.errors_tolerance == "none":
            first = bad.select(*META, ERROR).orderBy("topic", "partition", "offset").first()
            if first is not None:
                raise RecordError(first.topic, first.partition, first.offset, table, first[ERROR])
            return
        letters = dlq.collect(bad, table)
        for letter in letters:
            cycle.counters[letter.kind] = cycle.counters.get(letter.kind, 0) + 1
            if self.config.errors_log:
                dlq.log_letter(letter)
        cycle.letters.extend(letters)

    def _destinations(self, cycle: Cycle, good: DataFrame, configured: dict[str, TableState]
                      ) -> dict[str, TableState]:
        """The tables this cycle writes; records no table takes are counted (and dead-lettered)."""
        if not self.config.route_field:
            return dict(configured)  # every record to every table
        counts, nowhere = route.route_counts(self.config, good)
        states: dict[str, TableState] = {}
        for name, n in counts.items():
            if n == 0:
                continue
            state = configured.get(name) or self._load(name)
            if not state.exists and not self.config.auto_create and self.config.dynamic_enabled:
                nowhere += n  # dynamic routing skips a table that is not there, as the Java sink does
                continue
            states[name] = state
        if nowhere:
            self._nowhere(cycle, good, list(states), nowhere)
        return states

    def _nowhere(self, cycle: Cycle, good: DataFrame, tables: list[str], count: int) -> None:
        """Records no table takes: dead letters (errors.tolerance=all), else counted and skipped."""
        if self.config.errors_tolerance == "all":
            reason = F.concat(F.lit(f"{NO_TABLE}: {self.config.route_field}="), F.coalesce(F.col(ROUTE), F.lit("null")),
                              F.lit(" names no table"))
            self._bad(cycle, route.unrouted(self.config, good, tables).withColumn(ERROR, reason), None)
        else:
            cycle.counters[NO_TABLE] = count
            log.info("sink %s: %d records routed to no table were skipped", self.config.name, count)

    def _rows(self, cycle: Cycle, state: TableState, records: DataFrame, one_pass: bool = False
              ) -> tuple[TableState, DataFrame, BadRows | None, Observed | None]:
        """The table's good rows from its records: created, evolved and converted. Bad rows of a
        row-level table are handled here; an append's are counted by its write (``BadRows``).

        In ``one_pass`` the table is not evolved: the write observes whether any record has a field
        the table lacks (``new_fields``), and the cycle takes two passes if one did."""
        if not state.exists:
            if not self.config.auto_create:
                raise TableMissing(f"table {state.name} does not exist and iceberg.tables.auto-create-enabled is "
                                   f"false (sink {self.config.name})")
            self._create(state.name, records)
            state = self._load(state.name)
            if not state.exists:
                raise TableMissing(f"table {state.name} was not found after creating it")
        assert state.table is not None
        ensure_wap(state.table, ROW_LEVEL_PROPS if self.config.row_level else {})
        if self.config.row_level and state.table.format_version < 2:
            raise ConfigError(f"table {state.name}: upsert/CDC writes row-level deletes, which need Iceberg format "
                              f"version 2 (it is {state.table.format_version}); upgrade it with ALTER TABLE ... SET "
                              f"TBLPROPERTIES ('format-version'='2')")
        target = f"{self.config.catalog_name}.{quote(state.name)}"
        schema = self.spark.table(target).schema
        whole = self.config.variant_value
        if whole and not isinstance(schema[whole].dataType if whole in schema.fieldNames() else None, T.VariantType):
            raise ConfigError("sinklab.tables.variant-value", f"table {state.name} has no VARIANT column {whole} "
                              f"(columns: {', '.join(schema.fieldNames())})")
        fields: Observed | None = None
        # A whole value in one VARIANT has no fields to evolve: that is the point of it.
        if self.config.evolve_schema and not whole and one_pass:
            flag = new_field(schema, self.config.schema_case_insensitive)
            if flag is None:
                raise _TwoPasses(f"table {state.name}: only inference tells what its records need")
            fields = Observed(records, F.max(flag.cast("int")).alias("new_fields"))
            records = fields.df
        elif self.config.evolve_schema and not whole and evolve(
                self.spark, self.config.catalog_name, state.name, schema, records, self.config.typed_values,
                self.config.schema_case_insensitive, self.config.schema_force_optional, self.config.variant_columns):
            schema = self.spark.table(target).schema
            state = self._load(state.name)
        key = (schema.json(), self.config.schema_case_insensitive, whole)
        if key not in self._row_columns:
            self._row_columns[key] = row_columns(schema, self.config.schema_case_insensitive, whole)
        rows = to_rows(records, schema, self.config.schema_case_insensitive, whole, self._row_columns[key])
        checked: BadRows | None = None
        if self.config.row_level:
            # A MERGE runs its source in several jobs; only an append is known to count every row in one.
            rows = with_operation(rows, self._ids(state), self.config.cdc_field)
            self._bad(cycle, rows.where(F.col(ERROR).isNotNull()), state.name)
        else:
            checked = BadRows(rows)
            rows = checked.df
        return state, rows.where(F.col(ERROR).isNull()).select(*schema.fieldNames(), *META, OP), checked, fields

    def _stage(self, cycle: Cycle, state: TableState, rows: DataFrame) -> Staged | None:
        fresh = route.not_yet_recorded(rows, state.offsets, cycle.ranges)
        if fresh is None:
            return None
        cycle.wrote.add(state.name)
        properties = {
            SINK_PROP: self.config.name,
            COMMIT_ID_PROP: cycle.commit_id,
            OFFSETS_PROP: format_offsets(merge_max(state.offsets, nest(cycle.plan.ends))),
            VTTS_PROP: str(cycle.vtts),
        }
        columns = [c for c in rows.columns if c not in (*META, OP)]
        stage = stage_name(self.config.name, cycle.commit_id)
        for attempt in range(1, MAX_REPLANS + 1):
            try:
                if self.config.row_level:
                    staged = write_changes(self.spark, self.catalog, self.config.catalog_name, state, fresh,
                                           self._ids(state), OP, properties, stage)
                else:
                    staged = write_append(self.spark, self.config.catalog_name, state, fresh.select(*columns),
                                          properties, stage)
                break
            except Exception as exc:
                # A MERGE commits to its private branch: a commit on another branch can take its sequence number.
                if attempt == MAX_REPLANS or not lost_sequence_race(exc):
                    raise
                log.warning("table %s: a concurrent commit (maintenance, another sink) took the sequence number of "
                            "this cycle's staged write; writing it again", state.name)
                self._discard(Staged(state.name, stage, -1, 0, 0, [], [], 0))
                self._reload(state)
        if staged.records == 0 and not staged.delete_files:
            self._discard(staged)
            return None
        return staged

    def _ids(self, state: TableState) -> list[str]:
        """Row identity: the configured id columns, else the table's identifier fields."""
        ids = self.config.table_id_columns(state.name)
        if not ids and state.table is not None:
            ids = list(state.table.schema().identifier_field_names())
        if not ids:
            raise ConfigError("iceberg.tables.default-id-columns", f"table {state.name} has no identifier fields; "
                              f"upsert/CDC needs id columns (iceberg.table.{state.name}.id-columns)")
        return ids

    def _create(self, name: str, records: DataFrame) -> None:
        # A whole value as one VARIANT needs no inference: that job's answer would be thrown away.
        inferred = T.StructType([]) if self.config.variant_value else infer_schema(self.spark, records,
                                                                                    self.config.typed_values)
        schema = with_variants(inferred, self.config.variant_columns, self.config.variant_value)
        if not schema.fields:
            raise TableMissing(f"table {name}: cannot create it from records with no fields")
        if self.config.schema_force_optional:
            schema = all_optional(schema)
        partition_by = self.config.table_partition_by(name)
        schema = partition_schema(records, schema, partition_by, self.config.partition_key(name))
        ids = self.config.table_id_columns(name) if self.config.row_level else []
        props = {**(ROW_LEVEL_PROPS if self.config.row_level else {}), **self.config.table_create_props}
        create_table(self.spark, self.config.catalog_name, name, schema, partition_by, props, ids)
        log.info("created table %s with columns %s", name, ", ".join(schema.fieldNames()))

    def _publish(self, cycle: Cycle, state: TableState, staged: Staged, rows: DataFrame) -> Staged | None:
        """Compare-and-swap; when the table moved, re-plan it against its new state and try again."""
        for _ in range(MAX_REPLANS):
            began = time.monotonic()
            if publish(self.catalog, state, staged):
                staged.commit_ms = int((time.monotonic() - began) * 1000)
                return staged
            self._discard(staged)
            fresh = load_state(self.catalog, state.name, state.branch, self.config.name)
            if fresh.offsets != state.offsets:
                log.warning("table %s: another instance of sink %s committed since planning; re-planning",
                            state.name, self.config.name)
            elif fresh.snapshot_id != state.snapshot_id:  # else only a sequence number was taken (publish says so)
                log.warning("table %s moved since planning (another writer); staging again on top of it", state.name)
            state = fresh
            restaged = self._stage(cycle, state, rows)
            if restaged is None:
                return None  # everything this cycle read is already in the table
            staged = restaged
        raise RuntimeError(f"table {state.name}: gave up after {MAX_REPLANS} concurrent changes while committing")

    def _reload(self, state: TableState) -> None:
        # The loaded table still lists a dropped stage: branching again from it would assert the stage.
        state.table = self.catalog.load_table(identifier(state.name))

    def _discard(self, staged: Staged) -> None:
        try:
            discard(self.catalog, staged)
        except Exception as exc:  # noqa: BLE001 - a leftover stage is dropped at the next start, files by maintenance
            log.warning("could not take back the unpublished write of cycle snapshot %d to %s: %s",
                        staged.snapshot_id, staged.table, exc)

    def record_maintenance(self, reports: Sequence[Chore], delay_ms: int) -> None:
        """Maintenance run between cycles, in the control log; a transaction of its own (the producer is
        transactional), so a fenced instance learns it here too."""
        tables: dict[str, list[Chore]] = {}
        for report in reports:
            tables.setdefault(report.table, []).append(report)
        counters = {"delay_ms": delay_ms}
        for report in reports:
            for key, value in report.counts.items():
                counters[f"{report.operation}.{key}"] = counters.get(f"{report.operation}.{key}", 0) + value
        commit_id = events.new_commit_id()
        try:
            self._txn("begin_transaction", self.kafka_timeout_s, self.producer.begin_transaction)
            self._send(events.MAINTENANCE, commit_id, counters=counters,
                       duration_ms=sum(r.duration_ms for r in reports), tables=[
                           {"table": name, "branch": "main", "snapshot_id": runs[-1].snapshot_id or -1, "records": 0,
                            "data_files": [], "delete_files": [],
                            "bytes": sum(r.counts.get("rewritten_bytes", 0) for r in runs), "offsets": "{}",
                            "vtts_ms": None, "write_ms": sum(r.duration_ms for r in runs), "commit_ms": 0}
                           for name, runs in tables.items()])
            self._txn("commit_transaction", self.kafka_timeout_s, self.producer.commit_transaction,
                      self.kafka_timeout_s)
        except KafkaException as exc:
            self._abort()
            raise self._fenced_or(exc, commit_id) from exc

    # ---- Kafka side
    def _send(self, kind: str, commit_id: str, result: CycleResult | None = None,
              states: dict[str, TableState] | None = None, **fields: Any) -> None:
        event: dict[str, Any] = {"type": kind, "sink": self.config.name, "commit_id": commit_id,
                                 "ts_ms": int(time.time() * 1000), **fields}
        if result is not None and states is not None:
            event.update(vtts_ms=result.vtts_ms, offsets=format_offsets(result.offsets),
                         counters=result.counters, duration_ms=result.duration_ms, tables=[
                             {"table": s.table, "branch": states[s.table].branch, "snapshot_id": s.snapshot_id,
                              "records": s.records, "data_files": s.data_files, "delete_files": s.delete_files,
                              "bytes": s.bytes, "offsets": format_offsets(merge_max(states[s.table].offsets,
                                                                                    result.offsets)),
                              "vtts_ms": result.vtts_ms, "write_ms": s.write_ms, "commit_ms": s.commit_ms}
                             for s in result.tables.values()])
        self.producer.produce(self.config.control_topic, events.encode(event), commit_id.encode())

    def _flush(self) -> None:
        remaining = self.producer.flush(self.kafka_timeout_s)
        if remaining:
            raise KafkaUnavailable(f"sink {self.config.name}: {remaining} control events not delivered to "
                                   f"{self.config.control_topic} within {self.kafka_timeout_s:.0f}s; "
                                   f"is the broker ({self.kafka_conf.get('bootstrap.servers')}) up?")

    def _abort(self) -> None:
        if self.stuck:  # the next coordinator's producer fences this one's transaction
            return
        try:
            self._txn("abort_transaction", self.kafka_timeout_s, self.producer.abort_transaction,
                      self.kafka_timeout_s)
        except (KafkaException, StuckCall) as exc:
            log.warning("aborting the Kafka transaction failed: %s", exc)

    def _txn(self, what: str, timeout_s: float, call: Callable[..., Any], *args: Any) -> Any:
        """A transactional call of the producer, bounded (``bounded``); once one is stuck, the producer
        is this coordinator's no more."""
        try:
            return bounded(what, timeout_s, lambda: call(*args))
        except StuckCall as exc:
            self.stuck = True
            raise StuckCall(f"sink {self.config.name}: {exc}; the cycle is tried again with a new producer, whose "
                            f"start fences this one (transactional.id {self.config.transactional_id})") from None

    def _fenced_or(self, exc: KafkaException, commit_id: str) -> SinkError:
        err = exc.args[0] if exc.args else None
        if err is not None and hasattr(err, "code") and err.code() in FENCED:
            return SinkFenced(f"sink {self.config.name} was fenced: a newer instance with transactional.id "
                              f"{self.config.transactional_id} started; this instance stops ({err.str()})")
        what = err.str() if err is not None and hasattr(err, "str") else str(exc)
        return KafkaUnavailable(
            f"sink {self.config.name}: the Kafka transaction of cycle {commit_id} failed ({what}; broker "
            f"{self.kafka_conf.get('bootstrap.servers')}). Its offsets were not committed: the next run reads the "
            f"cycle again, and each table's recorded sinklab.offsets keep what it already holds from landing twice")


def record_bytes() -> Column:
    """The records' size as the sink reads them from Kafka (keys and values): what sinklab.commit.max-bytes counts."""
    return F.sum(F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("value"), F.lit(0)))


def _decoder(settings: RegistrySettings | None, side: Literal["value", "key"]) -> FramedDecoder | None:
    if settings is None:
        return None
    if not settings.registry_url:
        raise ConfigError(f"{side}.converter.schema.registry.url", f"the converter needs the schema registry's URL "
                          "(or a stack with one: `sinklab stack up --schema-registry`)")
    return FramedDecoder(RegistryClient(settings.registry_url, settings.user_info), settings.format,
                         settings.subject_strategy, side)
