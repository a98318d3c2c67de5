"""The worker, a cycle's data side: read the plan's offset ranges, convert and route the records, and
stage each table's part: its data files and a snapshot no one sees yet (``tables.write``). Nothing here
makes anything visible; the coordinator publishes what this stages. Bad records go to ``letters``,
what the cycle reports of its records to ``counts``, what it carries to the commit to ``commit_state``.

The records take one pass when nothing must be known of them before the write (``_one_pass``): one
Spark job reads, converts and writes the records of a table, or of all the tables ``tables.fan_out``
writes (whatever their columns), and what the cycle reports of its records is observed on the way.
When the pass meets what needs a look first (a writer schema new to the sink, a field new to a table with
evolution on), what it wrote is dropped and the cycle reads the same offset ranges again, looking
before it writes (``_two_passes``); so do cycles that auto-create, route dynamically or write
row-level changes.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Collection
from functools import reduce
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.exceptions import TableMissing, TableUnfit
from sinklab.retry import retrying
from sinklab.sink.config import keys
from sinklab.sink.cycle.commit_state import Cycle, Pass, Replay, TableWrite
from sinklab.sink.cycle.counts import Counts, vtts
from sinklab.sink.cycle.letters import Letters
from sinklab.sink.cycle.recovery import unrecorded
from sinklab.sink.records import framed, route
from sinklab.sink.records.changes import with_operation
from sinklab.sink.records.columns import ERROR, META, OP, TABLES
from sinklab.sink.records.convert import RowColumns, error_of, row_columns, row_of, to_rows, to_rows_by_schema
from sinklab.sink.records.kinds import SUPERSEDED
from sinklab.sink.records.observed import BadRows, Observed
from sinklab.sink.records.prepare import Preparation, preparation, with_payload
from sinklab.sink.records.reader import read_ranges
from sinklab.sink.tables import fan_out
from sinklab.sink.tables.create import auto_create
from sinklab.sink.tables.evolve import evolve, new_field
from sinklab.sink.tables.state import (
    SETTINGS_PREFIX,
    TableState,
    ensure_properties,
    identifier,
    quote,
    replay_landed,
    row_ids,
)
from sinklab.sink.tables.write import (
    ROW_LEVEL_PROPS,
    Staged,
    lost_sequence_race,
    stage_name,
    write_append,
    write_changes,
)
from sinklab.sink.wire import offsets as off

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

    from sinklab.sink.config.sink_config import SinkConfig
    from sinklab.sink.cycle.plan import Plan

log = logging.getLogger("sinklab.sink")
MAX_RESTAGES = 5


class Worker:
    def __init__(self, config: SinkConfig, spark: SparkSession, catalog: Catalog, kafka_conf: dict[str, str],
                 settings: SinkConfig | None = None):
        """``settings``: the config whose shareable settings the tables keep, when it is not ``config`` (a
        replay stages with a narrowed copy of the sink's)."""
        self.config = config
        self.spark = spark
        self.catalog = catalog
        self.kafka_conf = kafka_conf
        self._row_columns: dict[tuple[str, bool, str | None], RowColumns] = {}  # by table schema
        self._spark_schemas: dict[tuple[str, int], T.StructType] = {}  # by (table uuid, schema id)
        self._preparations: dict[tuple[bool, bool | None], Preparation] = {}  # by (cached, check_objects)
        self._shareable = (settings or config).shareable()
        self.framed = framed.decoder(config.value_registry, "value")
        self.framed_key = framed.decoder(config.key_registry, "key")
        self.decoders = [d for d in (self.framed, self.framed_key) if d is not None]
        self.letters = Letters(config, spark)
        self.counts = Counts(config, self.decoders)

    def stage(self, plan: Plan, commit_id: str, configured: dict[str, TableState],
              load: Callable[[str], TableState], replay: Replay | None = None) -> Cycle:
        """Every table's rows of the plan, written and not visible. ``load`` loads a table the records
        name (dynamic routing) or one created on the way. A ``replay`` stages its records instead of
        reading the plan's ranges from Kafka."""
        for decoder in self.decoders:
            decoder.prime({r.topic for r in plan.ranges})
        if replay:
            raw = replay.records
        else:
            cores = self.spark.sparkContext.defaultParallelism
            raw = read_ranges(self.spark, self.kafka_conf, plan.ranges,
                              timeout_s=max(30.0, self.config.commit_timeout_ms / 1000),
                              parallelism=min(cores, self.config.max_tasks_per_cycle or cores))
        cycle = Cycle(plan, commit_id, plan.planned_at_ms, replay=replay)
        try:
            if not (self._one_pass_fits(configured) and self._one_pass(cycle, raw, configured, load)):
                self._two_passes(cycle, raw, configured, load)
            if cycle.letters and self.config.dlq_table and not cycle.replay:  # a replay's stay where they are
                self.letters.table(cycle, load)
        except BaseException:
            self.release(cycle)
            raise
        return cycle

    def restage(self, cycle: Cycle, name: str, state: TableState) -> Staged | None:
        """The table's rows staged again on ``state`` (the table moved since they were staged); None
        when it now holds them all."""
        table = cycle.tables[name]
        table.state, table.staged = state, None  # the caller discarded what was staged before
        table.staged = (self.letters.stage(cycle, state) if table.rows is None
                        else self._stage(Pass(cycle), state, table.rows))
        return table.staged

    def release(self, cycle: Cycle, published: Collection[str] = ()) -> None:
        """The cycle is over: what it staged and did not publish is taken back, its cache dropped."""
        for name, table in cycle.tables.items():
            if table.staged is not None and name not in published:  # a published stage went away in its commit
                self.discard(table.staged)
        if cycle.cached is not None:
            cached, cycle.cached = cycle.cached, None
            try:
                cached.unpersist()
            except Exception as exc:  # noqa: BLE001 - a JVM gone with the cycle's own error: that error is the one to raise
                log.warning("could not drop cycle %s's cache: %s", cycle.commit_id, type(exc).__name__)

    def discard(self, staged: Staged) -> None:
        from sinklab.sink.cycle.publish import discard

        try:
            discard(self.catalog, staged)
        except Exception as exc:  # noqa: BLE001 - a leftover stage is dropped at the next start, files by maintenance
            log.warning("could not take back the unpublished write of cycle snapshot %d to %s: %s",
                        staged.snapshot_id, staged.table, exc)

    # ---- one pass or two
    def _one_pass_fits(self, configured: dict[str, TableState]) -> bool:
        """Whether the cycle can take one pass: every table there, each record's table known from its
        own fields, appends (a MERGE runs its source in several jobs anyway), and schema evolution, when
        on, decidable by a key scan (typed values need their schemas read)."""
        c = self.config
        return (not c.row_level and not c.dynamic_enabled and all(s.exists for s in configured.values())
                and not (c.evolve_schema and c.typed_values))

    def _one_pass(self, cycle: Cycle, raw: DataFrame, configured: dict[str, TableState],
                  load: Callable[[str], TableState]) -> bool:
        """One Spark job per group of tables (``_groups``) reads the cycle's ranges, converts and writes
        them; what the cycle must know of its records (counts, newest timestamps, tombstones, bad
        records, schema ids, new fields) is observed by that job, not computed by one of its own.

        Returns False, with nothing it wrote left staged, when the records need two passes: a writer
        schema new to the sink (they are prepared again, decodable), a field new to a table with
        evolution on (the table evolves before the write). The two passes read the same offset ranges
        again: Kafka replays them. Bad records are looked up after the write, by reading their ranges
        again; a clean cycle (the usual one) never does.
        """
        plan = cycle.plan
        lagging = [tp for tp, _ in off.entries(plan.ends) if not plan.caught_up(tp)]
        c = self.config
        # The tables ``fan_out`` writes are written by one job; when several jobs read the records (a
        # table it cannot write takes a job of its own), the first caches them for the others: reading
        # and preparing them once per job cost 2.3x (measured, 3 tables). A table whose route takes
        # nothing is left out: its write would be a plan Spark optimizes away, and that empties the
        # cycle's observation too, which is in the plan.
        ready = {n: self._ready(s, None, load) for n, s in configured.items() if not route.takes_nothing(c, n)}
        groups = self._groups(ready)
        fanned_out = len(configured) > 1
        # A table's rows parse each value once into its columns, and that parse finds the values that are
        # no JSON object too: prepare need not parse them first (bench/README.md, "One parse"), unless a
        # record goes to no table, or to several (it would be dead-lettered once per table).
        objects: bool | Column = True
        if not c.transforms and not c.schema_case_insensitive and not c.dynamic_enabled:
            objects = route.to_one_table(c) if c.route_field else fanned_out
        cached = len(groups) > 1
        prepared = self._prepare(raw, cached=cached, check_objects=objects)
        cycle.cached = prepared if cached else None
        stats = Observed(prepared, *self.counts.metrics(lagging))
        records = with_payload(stats.df).where(F.col("value").isNotNull())
        good = records.where(F.col(ERROR).isNull())
        one = Pass(cycle)
        checks = self._write(one, groups, ready, good)
        if checks is None:  # only inference tells what its records need
            return self._abandon(cycle)
        seen = stats.result(one.wait_s())

        def new_fields(name: str, fields: Observed | None) -> bool:
            if fields is None or name not in one.wrote:
                return False
            found = fields.result(one.wait_s(name))
            return found is None or bool(found["new_fields"])  # not reported: assume there are

        # No write ran (every table already holds these records: a restart after the publish) or the
        # records need a second look: what the one pass wrote goes, and the cycle takes two passes.
        if seen is None or self._learn({d.side: set(seen[f"{d.side}_ids"]) for d in self.decoders}) or any(
                new_fields(name, fields) for name, (_, fields, _) in checks.items()):
            return self._abandon(cycle)
        cycle.counters.update(records=int(seen["n"]), tombstones=int(seen["tombstones"] or 0),
                              bytes=int(seen["bytes"] or 0))
        cycle.vtts_ms = vtts(plan, {tp: seen[f"max_ts_{i}"] for i, tp in enumerate(lagging)})
        if seen["bad"]:
            self.letters.bad(cycle, records.where(F.col(ERROR).isNotNull()), None, seen["letters"])
        if self.config.route_field and seen["nowhere"]:
            self.letters.nowhere(cycle, good, list(configured), int(seen["nowhere"]))
        for name, (checked, _, bit) in checks.items():
            self.letters.bad_rows(one, name, checked, bit)
        return True

    def _groups(self, tables: dict[str, tuple[TableState, T.StructType]]) -> list[list[str]]:
        """The ``tables`` (ready: with their Spark columns) in their order, those that ``fan_out`` writes
        together in lists of up to ``route.MAX_TABLE_BITS``, every other alone."""
        together: list[list[str]] = [[]]
        alone: list[list[str]] = []
        for name, (state, schema) in tables.items():
            if self.config.row_level or state.table is None or not fan_out.writable(state.table, schema):
                alone.append([name])
                continue
            if len(together[-1]) == route.MAX_TABLE_BITS:
                together.append([])
            together[-1].append(name)
        return [group for group in together if group] + alone

    def _abandon(self, cycle: Cycle) -> bool:
        """Undo a one pass that cannot stand: its files deleted (it committed nothing, so the tables as
        loaded stand), its rows and cache forgotten."""
        self.release(cycle)
        cycle.tables.clear()
        return False

    def _two_passes(self, cycle: Cycle, raw: DataFrame, configured: dict[str, TableState],
                    load: Callable[[str], TableState]) -> None:
        """The records prepared once and cached, looked at (counts, schema ids, destinations, new
        fields), then written: for auto-create, evolution, dynamic routing, row-level changes."""
        cycle.passes = 2
        prepared = cycle.cached = self._prepare(raw, cached=True)
        stats = self.counts.per_partition(prepared)
        if self._learn({d.side: {i for s in stats.values() for i in s[f"{d.side}_ids"]} for d in self.decoders}):
            # Writer schemas new to this sink: the records are prepared again, now decodable (or bad for
            # the reason the registry gives).
            prepared.unpersist()
            prepared = cycle.cached = self._prepare(raw, cached=True)
            stats = self.counts.per_partition(prepared)
        # Records read, not offsets planned: transaction markers and aborted records occupy offsets.
        cycle.counters.update(records=int(sum(s.n for s in stats.values())),
                              tombstones=int(sum(s.tombstones or 0 for s in stats.values())),
                              bytes=int(sum(s.bytes or 0 for s in stats.values())))
        cycle.vtts_ms = vtts(cycle.plan, {tp: s.max_ts for tp, s in stats.items()})
        # Tombstones are skipped and counted, except that row-level tables delete the row they name.
        records = with_payload(prepared)
        records = records if self.config.row_level else records.where(F.col("value").isNotNull())
        if any(s.bad for s in stats.values()):  # counted by the job above: no job of its own when there are none
            self.letters.bad(cycle, records.where(F.col(ERROR).isNotNull()), None)
        good = records.where(F.col(ERROR).isNull())
        two = Pass(cycle)
        ready = {name: self._ready(state, route.records_for(self.config, good, name), load)
                 for name, state in self._destinations(cycle, good, configured, load).items()}
        checks = self._write(two, self._groups(ready), ready, good)
        assert checks is not None  # only one pass stops short
        for name, (checked, _, bit) in checks.items():
            self.letters.bad_rows(two, name, checked, bit)

    # ---- records
    def _prepare(self, raw: DataFrame, cached: bool = False, check_objects: bool | Column = True) -> DataFrame:
        c = self.config
        # A condition is the routing's, which does not change: one kind of key for it.
        key = (cached, check_objects if isinstance(check_objects, bool) else None)
        kept = self._preparations.get(key)
        if kept is None:
            kept = preparation(c.schemas_enable, c.transforms, c.route_field, c.cdc_field,
                               c.default_id_columns if c.row_level else None, self.framed, self.framed_key,
                               c.key_envelope, cached, check_objects)
            # A registry's decoders change their expressions as they learn writer schemas: built anew each time.
            if not self.decoders:
                self._preparations[key] = kept
        prepared = kept.apply(raw)
        return prepared.persist(StorageLevel.MEMORY_AND_DISK) if cached else prepared

    def _learn(self, ids: dict[str, set[int]]) -> bool:
        """Whether the cycle met writer schemas (of values or keys, ``ids`` by side) new to this sink,
        now fetched."""
        return any([d.learn(ids[d.side]) for d in self.decoders])

    # ---- where records go
    def _destinations(self, cycle: Cycle, good: DataFrame, configured: dict[str, TableState],
                      load: Callable[[str], TableState]) -> dict[str, TableState]:
        """The tables this cycle writes; records no table takes are counted (and dead-lettered)."""
        if not self.config.route_field:
            return dict(configured)  # every record to every table
        counts, nowhere = route.route_counts(self.config, good)
        states: dict[str, TableState] = {}
        for name, n in counts.items():
            if n == 0:
                continue
            state = configured.get(name) or load(name)
            if not state.exists and not self.config.auto_create and self.config.dynamic_enabled:
                nowhere += n  # dynamic routing skips a table that is not there, as the Java sink does
                continue
            states[name] = state
        if nowhere:
            self.letters.nowhere(cycle, good, list(states), nowhere)
        return states

    # ---- a table's rows and its write
    def _write(self, one: Pass, groups: list[list[str]], ready: dict[str, tuple[TableState, T.StructType]],
               good: DataFrame) -> dict[str, tuple[BadRows | None, Observed | None, int | None]] | None:
        """Each group of tables (``_groups``) converted and staged by one job: the rows of a table alone
        by Iceberg's writer, of several by ``fan_out``. Returns what each table's write observes (its
        bad rows, its new fields, its bit in TABLES); None when only inference tells what a one pass's
        records need."""
        c, cycle = self.config, one.cycle
        checks: dict[str, tuple[BadRows | None, Observed | None, int | None]] = {}
        for names in groups:
            if len(names) > 1:
                together = self._write_together(one, names, ready, good)
                if together is None:
                    return None
                checks.update(together)
                continue
            state, schema = ready[names[0]]
            converted = self._convert(one, state, schema, route.records_for(c, good, names[0]))
            if converted is None:
                return None
            rows, checked, fields = converted
            cycle.tables[names[0]] = TableWrite(state, rows, self._stage(one, state, rows))
            checks[names[0]] = (checked, fields, None)
        return checks

    def _write_together(self, one: Pass, names: list[str], ready: dict[str, tuple[TableState, T.StructType]],
                        good: DataFrame) -> dict[str, tuple[BadRows | None, Observed | None, int | None]] | None:
        """``_write`` of tables ``fan_out`` writes in one job: each record converted once per schema among
        them, for the tables it goes to (``to_rows_by_schema``), each schema's bad rows and new fields
        observed on the way."""
        c, cycle = self.config, one.cycle
        by_schema: dict[str, list[int]] = {}  # each schema's tables, by their bits in TABLES
        for i, name in enumerate(names):
            by_schema.setdefault(ready[name][1].json(), []).append(i)
        schemas = [ready[names[bits[0]]][1] for bits in by_schema.values()]
        parts = [(self._columns(schema), sum(1 << i for i in bits))
                 for schema, bits in zip(schemas, by_schema.values(), strict=True)]
        flags = [new_field(s, c.schema_case_insensitive) for s in schemas] if (
            c.evolve_schema and cycle.passes == 1) else None
        if flags is not None and any(flag is None for flag in flags):
            return None  # only inference tells
        # One observation for all the schemas: each observed node breaks Spark's generated code.
        checked: BadRows | None = None
        fields: Observed | None = None

        def observe(rows: DataFrame) -> DataFrame:
            nonlocal checked, fields
            if flags is not None:
                new = reduce(operator.or_, [(F.col(TABLES).bitwiseAND(F.lit(bits)) != 0) & flag
                                            for (_, bits), flag in zip(parts, flags, strict=True)])
                fields = Observed(rows, F.max(new.cast("int")).alias("new_fields"))
                rows = fields.df
            checked = BadRows(rows, c.errors_tolerance, TABLES, errors=[error_of(k) for k in range(len(parts))])
            return checked.df

        records = good.withColumn(TABLES, route.table_bits(c, names)).where(F.col(TABLES) != 0)
        rows = to_rows_by_schema(records, parts, observe)
        schema_of = {i: k for k, bits in enumerate(by_schema.values()) for i in bits}
        states = [ready[n][0] for n in names]
        checks: dict[str, tuple[BadRows | None, Observed | None, int | None]] = {}
        staged = self._stage_tables(one, states, rows, [row_of(schema_of[i]) for i in range(len(names))])
        for i, name in enumerate(names):
            k = schema_of[i]
            mine = rows.where(F.col(TABLES).bitwiseAND(F.lit(1 << i)) != 0).select(f"{row_of(k)}.*", *META, OP)
            cycle.tables[name] = TableWrite(states[i], mine, staged[i])
            assert checked is not None
            checks[name] = (checked.part(k), fields, 1 << i)
        return checks

    def _ready(self, state: TableState, records: DataFrame | None,
               load: Callable[[str], TableState]) -> tuple[TableState, T.StructType]:
        """The table, fit for the sink's rows, and its columns: created from ``records`` when missing, the
        sink's properties on it, and evolved for them (two passes; a one pass, ``records`` None, observes
        new fields on its write instead)."""
        c = self.config
        if not state.exists:
            if not c.auto_create:
                raise TableMissing(f"table {state.name} does not exist and {keys.TABLES_AUTO_CREATE_ENABLED} is "
                                   f"false (sink {c.name})", sink=c.name, table=state.name)
            assert records is not None  # a one pass's tables are there
            auto_create(self.spark, c, state.name, records)
            state = load(state.name)
            if not state.exists:
                raise TableMissing(f"table {state.name} was not found after creating it", sink=c.name,
                                   table=state.name)
        assert state.table is not None
        ensure_properties(state.table, {**(ROW_LEVEL_PROPS if c.row_level else {}),
                                        SETTINGS_PREFIX + c.name: self._shareable})
        if c.row_level and state.table.format_version < 2:
            raise TableUnfit(keys.TABLES_UPSERT_MODE_ENABLED if c.upsert_mode else keys.TABLES_CDC_FIELD,
                             f"table {state.name}: upsert/CDC writes row-level deletes, which need Iceberg format "
                             f"version 2 (it is {state.table.format_version}); upgrade it with ALTER TABLE ... SET "
                             f"TBLPROPERTIES ('format-version'='2')", table=state.name, sink=c.name)
        schema = self._spark_schema(state)
        whole = c.variant_value
        if whole and not isinstance(schema[whole].dataType if whole in schema.fieldNames() else None, T.VariantType):
            raise TableUnfit(keys.VARIANT_VALUE, f"table {state.name} has no VARIANT column {whole} "
                             f"(columns: {', '.join(schema.fieldNames())})", table=state.name, sink=c.name)
        # A whole value in one VARIANT has no fields to evolve: that is the point of it.
        if records is not None and c.evolve_schema and not whole and evolve(
                self.spark, c.catalog_name, state.name, schema, records, c.typed_values,
                c.schema_case_insensitive, c.schema_force_optional, c.variant_columns):
            state = load(state.name)
            return state, self._spark_schema(state)
        return state, schema

    def _spark_schema(self, state: TableState) -> T.StructType:
        """The table's columns as Spark gives them, asked once per table schema (an Iceberg schema id never
        changes what it names): asking loads the whole table again, whose metadata grows with its history
        (bench/README.md, "Cost as the work grows")."""
        assert state.table is not None
        metadata = state.table.metadata
        key = (str(metadata.table_uuid), metadata.current_schema_id)
        schema = self._spark_schemas.get(key)
        if schema is None:
            schema = self._spark_schemas[key] = self.spark.table(
                f"{self.config.catalog_name}.{quote(state.name)}").schema
        return schema

    def _columns(self, schema: T.StructType) -> RowColumns:
        """``row_columns`` of the table ``schema``, built once per schema."""
        c = self.config
        key = (schema.json(), c.schema_case_insensitive, c.variant_value)
        if key not in self._row_columns:
            self._row_columns[key] = row_columns(schema, c.schema_case_insensitive, c.variant_value)
        return self._row_columns[key]

    def _convert(self, one: Pass, state: TableState, schema: T.StructType, records: DataFrame
                 ) -> tuple[DataFrame, BadRows | None, Observed | None] | None:
        """The good rows of ``state`` (a table of ``schema``) from its records. Bad rows of a row-level
        table are handled here; an append's are counted by its write (``BadRows``). A one pass observes
        on the write whether any record has a field the table lacks (``new_fields``), and the cycle
        takes two passes if one did; None when only inference tells (the one pass cannot stand)."""
        c = self.config
        whole = c.variant_value
        fields: Observed | None = None
        if c.evolve_schema and not whole and one.cycle.passes == 1:
            flag = new_field(schema, c.schema_case_insensitive)
            if flag is None:
                return None
            fields = Observed(records, F.max(flag.cast("int")).alias("new_fields"))
            records = fields.df
        rows = to_rows(records, schema, c.schema_case_insensitive, whole, self._columns(schema))
        checked: BadRows | None = None
        if c.row_level:
            # A MERGE runs its source in several jobs; only an append is known to count every row in one.
            ids = row_ids(self.config, state)
            rows = with_operation(rows, ids, c.cdc_field)
            if one.cycle.replay is not None and one.cycle.replay.letters is not None:
                rows = self._unsuperseded(one.cycle.replay.letters, rows, ids)
            self.letters.bad(one.cycle, rows.where(F.col(ERROR).isNotNull()), state.name)
        else:
            checked = BadRows(rows, c.errors_tolerance)
            rows = checked.df
        return rows.where(F.col(ERROR).isNull()).select(*schema.fieldNames(), *META, OP), checked, fields

    @staticmethod
    def _unsuperseded(letters: DataFrame, rows: DataFrame, ids: list[str]) -> DataFrame:
        """A replay's dead letters among ``rows`` (the others are the later records of their partitions):
        a letter whose row a later record of its partition changed again is superseded, a bad record
        now, so that it neither overwrites that newer change nor brings back a row it deleted."""
        where, later = ["topic", "partition", "offset"], "_sinklab_later"
        mine = rows.join(letters, where, "left_semi")
        others = rows.where(F.col(ERROR).isNull()).join(letters, where, "left_anti").select(
            *ids, "topic", "partition", F.col("offset").alias(later))
        newer = mine.select(*ids, *where).join(others, [*ids, "topic", "partition"]).where(
            F.col(later) > F.col("offset")).groupBy(*where).agg(F.max(later).alias(later))
        superseded = F.concat(F.lit(f"{SUPERSEDED}: a later record of its partition (offset "),
                              F.col(later).cast("string"), F.lit(") changed its row again"))
        return mine.join(newer, where, "left").withColumn(ERROR, F.when(
            F.col(ERROR).isNull() & F.col(later).isNotNull(), superseded).otherwise(F.col(ERROR))).drop(later)

    def _stage(self, one: Pass, state: TableState, rows: DataFrame) -> Staged | None:
        """The rows the table does not hold yet (``_unrecorded``), written as data files and
        an unpublished snapshot carrying the cycle's ``sinklab.*`` properties; None when it holds them all."""
        cycle = one.cycle
        keep = self._unrecorded(cycle, state)
        if keep is None:
            return None
        fresh = rows if keep is True else rows.where(keep)
        one.wrote.add(state.name)
        properties = cycle.properties(self.config.name, state)
        columns = [c for c in rows.columns if c not in (*META, OP)]
        stage = stage_name(self.config.name, cycle.commit_id)

        def write() -> Staged:
            if self.config.row_level:
                return write_changes(self.spark, self.catalog, self.config.catalog_name, state, fresh,
                                     row_ids(self.config, state), OP, properties, stage)
            return write_append(self.spark, self.config.catalog_name, state, fresh.select(*columns), properties,
                                stage)

        def write_again(exc: BaseException, attempt: int) -> None:
            log.warning("table %s: a concurrent commit (maintenance, another sink) took the sequence number of "
                        "this cycle's staged write; writing it again", state.name)
            self.discard(Staged(state.name, stage, -1, 0, 0, [], [], 0))
            # The loaded table still lists the dropped stage: branching again from it would assert the stage.
            state.table = self.catalog.load_table(identifier(state.name))

        # A MERGE commits to its private branch: a commit on another branch can take its sequence number.
        staged = retrying(write, lost_sequence_race, attempts=MAX_RESTAGES, before_again=write_again)
        if staged.records == 0 and not staged.delete_files:
            self.discard(staged)
            return None
        return staged

    def _stage_tables(self, one: Pass, states: list[TableState], rows: DataFrame,
                      columns: list[str]) -> list[Staged | None]:
        """``_stage`` of several tables from their ``rows`` (TABLES says whose; ``columns`` names the
        struct column of each table's rows), by one job; a table that holds them all, or takes none of
        them, stages None."""
        cycle = one.cycle
        tables = F.lit(0).cast("long")
        for i, state in enumerate(states):
            keep = self._unrecorded(cycle, state)
            if keep is None:
                continue
            one.wrote.add(state.name)
            mine = F.col(TABLES).bitwiseAND(F.lit(1 << i))
            tables = tables.bitwiseOR(mine if keep is True else F.when(keep, mine).otherwise(F.lit(0)))
        if not one.wrote.intersection(s.name for s in states):
            return [None] * len(states)
        return fan_out.write_appends(rows.withColumn(TABLES, tables), [
            (s, cycle.properties(self.config.name, s), column) for s, column in zip(states, columns, strict=True)])

    @staticmethod
    def _unrecorded(cycle: Cycle, state: TableState) -> Column | bool | None:
        """Which of the cycle's records the table does not hold yet (``recovery.unrecorded``): a
        condition, True for all, None for none."""
        # A replay's records lie behind the offsets the table recorded: its own marker tells what it wrote.
        if cycle.replay:
            return None if replay_landed(state, cycle.replay.marker) else True
        return unrecorded(state.offsets, cycle.plan.ranges)
