"""Routing: which tables a record goes to (all of them, a regex per table, or named by a field)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.records.columns import ROUTE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sinklab.sink.config.sink_config import SinkConfig

MAX_TABLE_BITS = 63  # table_bits' long
TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)+$")


def takes_nothing(config: SinkConfig, table: str) -> bool:
    """As in the Java sink: under static routing, a table without a route regex takes no record."""
    return bool(config.route_field) and not config.dynamic_enabled and table not in config.route_regex


def table_condition(config: SinkConfig, table: str) -> Column:
    """Records of ``table`` under static routing: every record without a route field."""
    if not config.route_field:
        return F.lit(True)
    if takes_nothing(config, table):
        return F.lit(False)
    return F.col(ROUTE).isNotNull() & F.col(ROUTE).rlike(f"^(?:{config.route_regex[table]})$")


def route_counts(config: SinkConfig, records: DataFrame) -> tuple[dict[str, int], int]:
    """Records per destination table and the number that go nowhere, in one Spark job."""
    if config.dynamic_enabled:
        counts: dict[str, int] = {}
        unrouted = 0
        for row in records.groupBy(F.lower(F.trim(F.col(ROUTE))).alias("t")).count().collect():
            if row.t is not None and TABLE_NAME_RE.match(row.t):
                counts[row.t] = int(row["count"])
            else:
                unrouted += int(row["count"])
        return counts, unrouted
    if not config.route_field:
        total = records.count()
        return {t: total for t in config.tables}, 0
    conds = {t: table_condition(config, t) for t in config.tables}
    row = records.select(*[F.sum(c.cast("int")).alias(f"t{i}") for i, c in enumerate(conds.values())],
                         F.sum(nowhere(config).cast("int")).alias("nowhere")).first()
    assert row is not None
    return {t: int(row[f"t{i}"] or 0) for i, t in enumerate(conds)}, int(row["nowhere"] or 0)


def nowhere(config: SinkConfig) -> Column:
    """Whether static routing sends a record to none of the tables."""
    conds = [table_condition(config, t).cast("int") for t in config.tables]
    return ~F.greatest(*conds, F.lit(0)).cast("boolean")


def to_one_table(config: SinkConfig) -> Column:
    """Whether static routing sends a record to exactly one of the tables."""
    conds = [F.coalesce(table_condition(config, t), F.lit(False)).cast("int") for t in config.tables]
    return sum(conds[1:], conds[0]) == 1


def routed_to(config: SinkConfig, table: str) -> Column:
    """Whether a record goes to ``table``, dynamic routing included."""
    if config.dynamic_enabled:
        return F.lower(F.trim(F.col(ROUTE))) == table
    return table_condition(config, table)


def table_bits(config: SinkConfig, tables: list[str]) -> Column:
    """The ``tables`` a record goes to, as bits of a long: ``1 << i`` for ``tables[i]``."""
    assert len(tables) <= MAX_TABLE_BITS
    return sum((F.when(routed_to(config, t), F.lit(1 << i)).otherwise(F.lit(0)).cast("long")
                for i, t in enumerate(tables)), F.lit(0).cast("long"))


def records_for(config: SinkConfig, records: DataFrame, table: str) -> DataFrame:
    if not config.dynamic_enabled and not config.route_field:
        return records
    return records.where(routed_to(config, table))


def unrouted(config: SinkConfig, records: DataFrame, tables: list[str]) -> DataFrame:
    """Records no existing (or creatable) table takes."""
    if config.dynamic_enabled:
        known = F.lower(F.trim(F.col(ROUTE))).isin(tables) if tables else F.lit(False)
        return records.where(~F.coalesce(known, F.lit(False)))
    if not config.route_field:
        return records.where(F.lit(False))
    taken = F.lit(False)
    for t in tables:
        taken = taken | F.coalesce(table_condition(config, t), F.lit(False))
    return records.where(~taken)
