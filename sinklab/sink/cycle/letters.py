"""A cycle's records that cannot be written, and those no table takes: the sink stops on the first
(``errors.tolerance=none``) or makes them dead letters (``all``), counted by kind, logged when asked,
and staged to the dead-letter table like any table's rows (docs/dead-letters.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyspark.sql import functions as F

from sinklab.exceptions import RecordError
from sinklab.sink.cycle.commit_state import Cycle, Pass, TableWrite
from sinklab.sink.records import dead_letters, route
from sinklab.sink.records.columns import ERROR, META, ROUTE, TABLES
from sinklab.sink.records.kinds import KEY_CONVERTER_FAILED, NO_TABLE
from sinklab.sink.tables.create import create_table
from sinklab.sink.tables.state import TableState
from sinklab.sink.tables.write import Staged, append_rows
from sinklab.sink.wire import offsets as off
from sinklab.sink.wire.offsets import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

    from sinklab.sink.config.sink_config import SinkConfig
    from sinklab.sink.records.observed import BadRows

log = logging.getLogger("sinklab.sink")


class Letters:
    def __init__(self, config: SinkConfig, spark: SparkSession):
        self.config = config
        self.spark = spark

    def bad(self, cycle: Cycle, bad: DataFrame, table: str | None, seen: list[Row] | Row | None = None) -> None:
        """Records that cannot be written: stop (errors.tolerance=none) or dead-letter them (all).
        ``seen``: what a write observed of them (``dead_letters.observed``); without it they are looked up.

        Every bad record of the cycle's whole range is dead-lettered, even one a table already
        recorded: its earlier dead letter went out in a transaction that never committed.
        """
        rows = dead_letters.observed_rows(seen) if seen is not None else []
        if cycle.replay is not None and cycle.replay.letters is not None:
            bad = bad.join(cycle.replay.letters, ["topic", "partition", "offset"], "left_semi")  # not the later ones
            rows = []
        if self.config.errors_tolerance == "none":
            first = rows[0] if rows else bad.select(*META, ERROR).orderBy("topic", "partition", "offset").first()
            if first is not None:
                raise RecordError(first.topic, first.partition, first.offset, table, first[ERROR],
                                  sink=self.config.name)
            return
        letters = dead_letters.letters(rows, table) if rows else dead_letters.collect(bad, table)
        for letter in letters:
            cycle.counters[letter.kind] = cycle.counters.get(letter.kind, 0) + 1
            if letter.connect_stage == dead_letters.KEY_CONNECT_STAGE:
                cycle.counters[KEY_CONVERTER_FAILED] = cycle.counters.get(KEY_CONVERTER_FAILED, 0) + 1
            if self.config.errors_log:
                dead_letters.log_letter(letter)
        cycle.letters.extend(letters)

    def bad_rows(self, one: Pass, name: str, converted: BadRows | None, bit: int | None = None) -> None:
        """The table's bad rows, as its write observed them; only when it did not run is there a job to
        look for them. ``bit``: the table's in TABLES, when its write was several tables'."""
        if converted is None:
            return
        seen = converted.result(one.wait_s(name))
        if seen is not None and not seen["bad"]:
            return
        bad, letters = converted.bad(), None if seen is None else seen["letters"]
        if bit is not None:
            bad = bad.where(F.col(TABLES).bitwiseAND(F.lit(bit)) != 0)
            if letters is not None:
                letters = [r for r in dead_letters.observed_rows(letters) if r[TABLES] & bit]
                if not letters:
                    return
        self.bad(one.cycle, bad, name, letters)

    def nowhere(self, cycle: Cycle, good: DataFrame, tables: list[str], count: int) -> None:
        """Records no table takes: dead letters (errors.tolerance=all), else counted and skipped."""
        if self.config.errors_tolerance == "all":
            reason = F.concat(F.lit(f"{NO_TABLE}: {self.config.route_field}="), F.coalesce(F.col(ROUTE), F.lit("null")),
                              F.lit(" names no table"))
            self.bad(cycle, route.unrouted(self.config, good, tables).withColumn(ERROR, reason), None)
        else:
            cycle.counters[NO_TABLE] = count
            log.info("sink %s: %d records routed to no table were skipped", self.config.name, count)

    def table(self, cycle: Cycle, load: Callable[[str], TableState]) -> None:
        """The cycle's dead letters, staged to the dead-letter table like any table's rows: published in
        the cycle's commit, and filtered by the offsets the table recorded when a cycle is read again."""
        name = self.config.dlq_table
        assert name is not None
        state = load(name)
        if not state.exists:
            create_table(self.spark, self.config.catalog_name, name, dead_letters.TABLE_SCHEMA, [],
                         dead_letters.TABLE_PROPERTIES)
            log.info("created dead-letter table %s", name)
            state = load(name)
        cycle.tables[name] = TableWrite(state, None, self.stage(cycle, state))

    def stage(self, cycle: Cycle, state: TableState) -> Staged | None:
        """The letters the dead-letter table has not recorded yet (as ``recovery.unrecorded`` keeps a
        table's rows), appended from the driver, which holds them; None when it has them all."""
        assert state.table is not None
        letters = [x for x in cycle.letters if x.offset >= off.get(state.offsets, TopicPartition(x.topic, x.partition))]
        if not letters:
            return None
        rows = dead_letters.arrow_rows(letters, self.config.name, cycle.commit_id,
                                       schema_to_pyarrow(state.table.schema()))
        return append_rows(state, rows, cycle.properties(self.config.name, state))
