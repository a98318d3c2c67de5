"""Fan-out in one job (``sinklab.sink.tables.fan_out``): the tables of a cycle, whatever their columns,
written by one Spark job, what it writes read back as Iceberg's own writer would have written it, on the
embedded stack."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from helpers import sink_config

from sinklab.generators import produce_json
from sinklab.sink import IcebergSink
from sinklab.stack import Stack

pytestmark = pytest.mark.spark

COLUMNS = "id BIGINT NOT NULL, kind STRING, at TIMESTAMP, price DECIMAL(6,2), tags ARRAY<STRING>, " \
          "size STRUCT<w: INT, h: INT>"


def order(i: int, kind: str) -> dict[str, Any]:
    return {"id": i, "kind": kind, "at": f"2026-11-{1 + i % 3:02d}T10:{i % 60:02d}:00Z", "price": f"{i}.25",
            "tags": [kind, str(i)], "size": {"w": i, "h": 2 * i}}


def jobs_of(stack: Stack, config: dict[str, Any]) -> tuple[Any, int]:
    """One cycle and the Spark jobs it ran."""
    tracker = stack.spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    sink = IcebergSink(stack, config)
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    return result, len(set(tracker.getJobIdsForGroup()) - before)


def test_tables_of_any_columns_are_written_by_one_job(stack: Stack, unique: str) -> None:
    pizza, pasta, menu, extra = (f"{unique}.{t}" for t in ("pizza", "pasta", "menu", "extra"))
    for table in (pizza, pasta, menu):
        stack.spark.sql(f"CREATE TABLE sinklab.{table} ({COLUMNS}) USING iceberg PARTITIONED BY (days(at))")
    stack.spark.sql(f"CREATE TABLE sinklab.{extra} ({COLUMNS}, note STRING) USING iceberg")
    stack.create_topic(unique, partitions=3)
    records = [order(i, ("pizza", "pasta", "salad")[i % 3]) for i in range(60)]
    produce_json(stack.bootstrap_servers, unique, records)
    routes = {pizza: "pizza", pasta: "pasta", menu: ".*"}
    config = sink_config(unique, [pizza, pasta, menu], **{"iceberg.tables.route-field": "kind", **{
        f"iceberg.table.{t}.route-regex": r for t, r in routes.items()}})
    result, jobs = jobs_of(stack, config)
    assert result is not None and result.passes == 1 and result.counters["records"] == 60
    assert jobs == 1  # was one a table, after a cache of the records

    def expected(kinds: set[str]) -> list[tuple[Any, ...]]:
        return sorted((r["id"], r["kind"], datetime.fromisoformat(r["at"]).replace(tzinfo=None), Decimal(r["price"]),
                       r["tags"], (r["size"]["w"], r["size"]["h"])) for r in records if r["kind"] in kinds)

    def rows(table: str, where: str = "true") -> list[tuple[Any, ...]]:
        spark = stack.spark
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        got = spark.table(f"sinklab.{table}").where(where).select("id", "kind", "at", "price", "tags", "size")
        return sorted((r.id, r.kind, r.at, r.price, list(r.tags), (r.size.w, r.size.h)) for r in got.collect())

    assert rows(pizza) == expected({"pizza"})
    assert rows(pasta) == expected({"pasta"})
    assert rows(menu) == expected({"pizza", "pasta", "salad"})  # every record, each also in its own table
    # Partitioned by day as the table says, with the column metrics Iceberg's writer keeps: a day's
    # filter reads that day's files alone, and bounds prune by id.
    table = stack.catalog.load_table(menu)
    files = list(table.scan().plan_files())
    days = [(date(2026, 11, d) - date(1970, 1, 1)).days for d in (1, 2, 3)]
    assert sorted({f.file.partition[0] for f in files}) == days
    assert all(f.file.lower_bounds and f.file.upper_bounds and f.file.null_value_counts for f in files)
    assert rows(menu, "at < '2026-11-02'") == [r for r in expected({"pizza", "pasta", "salad"})
                                                 if r[2].day == 1]
    assert len(list(table.scan(row_filter="id >= 59").plan_files())) < len(files)
    assert table.scan().to_arrow().num_rows == 60

    # A table of other columns joins them: still one job.
    more = [order(60 + i, ("pizza", "pasta", "salad")[i % 3]) for i in range(30)]
    records += more
    produce_json(stack.bootstrap_servers, unique, more)
    config = sink_config(unique, [pizza, pasta, menu, extra], **{"iceberg.tables.route-field": "kind", **{
        f"iceberg.table.{t}.route-regex": r for t, r in {**routes, extra: "salad"}.items()}})
    result, jobs = jobs_of(stack, config)
    assert result is not None and result.passes == 1 and result.counters["records"] == 30
    assert jobs == 1
    assert rows(pizza) == expected({"pizza"}) and rows(menu) == expected({"pizza", "pasta", "salad"})
    assert rows(extra) == [r for r in expected({"salad"}) if r[0] >= 60]
    assert [r.note for r in stack.spark.table(f"sinklab.{extra}").collect()] == [None] * 10


def test_a_record_bad_for_one_schema_is_a_row_of_the_others(stack: Stack, unique: str) -> None:
    # Three schemas in one job: each record converted for the tables it goes to, and dead-lettered only
    # for a table whose columns it does not fit.
    wide, narrow, counted = f"{unique}.wide", f"{unique}.narrow", f"{unique}.counted"
    stack.spark.sql(f"CREATE TABLE sinklab.{wide} ({COLUMNS}) USING iceberg")
    stack.spark.sql(f"CREATE TABLE sinklab.{narrow} (id BIGINT NOT NULL, kind STRING) USING iceberg")
    stack.spark.sql(f"CREATE TABLE sinklab.{counted} (id INT, kind STRING, n INT NOT NULL) USING iceberg")
    stack.create_topic(unique, partitions=2)
    records = [{"id": 1, "kind": "pizza", "n": 5}, {"id": 2, "kind": "pizza", "price": "two"},
               {"id": 3, "kind": "pasta", "n": 7, "price": "3.5"}, {"id": 2**40, "kind": "pasta", "n": 1},
               {"id": 5, "kind": "salad"}]
    produce_json(stack.bootstrap_servers, unique, records)
    config = sink_config(unique, [wide, narrow, counted], **{
        "iceberg.tables.route-field": "kind", f"iceberg.table.{wide}.route-regex": ".*",
        f"iceberg.table.{narrow}.route-regex": "pizza|salad", f"iceberg.table.{counted}.route-regex": "pizza|pasta",
        "errors.tolerance": "all", "errors.deadletterqueue.table.name": f"{unique}.dead"})
    result, jobs = jobs_of(stack, config)
    assert result is not None and result.passes == 1 and jobs == 1

    def ids(table: str) -> list[int]:
        return sorted(r.id for r in stack.spark.table(f"sinklab.{table}").collect())

    assert ids(wide) == [1, 3, 5, 2**40]  # 2's price is no decimal
    assert ids(narrow) == [1, 2, 5]
    assert ids(counted) == [1, 3]  # 2 has no n, 2**40 is no INT
    assert [r.price for r in stack.spark.table(f"sinklab.{wide}").where("id = 3").collect()] == [Decimal("3.50")]
    dead = stack.spark.table(f"sinklab.{unique}.dead").select("source_offset", "target_table", "message").collect()
    reasons = sorted((r.target_table, r.message.split(":")[0]) for r in dead)
    assert reasons == [(counted, "missing-required"), (counted, "out-of-range"), (wide, "type-mismatch")]


def test_a_bad_row_of_tables_written_together_is_a_dead_letter_of_each(stack: Stack, unique: str) -> None:
    first, second = f"{unique}.first", f"{unique}.second"
    for table in (first, second):
        stack.spark.sql(f"CREATE TABLE sinklab.{table} ({COLUMNS}) USING iceberg")
    stack.create_topic(unique, partitions=1)
    produce_json(stack.bootstrap_servers, unique, [order(1, "pizza"), {"id": "two", "kind": "pizza"},
                                                   order(3, "pasta")])
    config = sink_config(unique, [first, second], **{
        "iceberg.tables.route-field": "kind", f"iceberg.table.{first}.route-regex": "pizza|pasta",
        f"iceberg.table.{second}.route-regex": "pizza", "errors.tolerance": "all",
        "errors.deadletterqueue.table.name": f"{unique}.dead"})
    result, _ = jobs_of(stack, config)
    assert result is not None and result.passes == 1
    dead = stack.spark.table(f"sinklab.{unique}.dead").select("source_offset", "target_table").collect()
    assert sorted((r.source_offset, r.target_table) for r in dead) == [(1, first), (1, second)]
    assert sorted(r.id for r in stack.spark.table(f"sinklab.{first}").collect()) == [1, 3]
    assert sorted(r.id for r in stack.spark.table(f"sinklab.{second}").collect()) == [1]


def test_tables_with_a_variant_column_are_each_written_by_icebergs_writer(stack: Stack, unique: str) -> None:
    # pyiceberg shows a VARIANT column as binary: written by the fan-out's writer, it would hold bytes.
    first, second = f"{unique}.first", f"{unique}.second"
    for table in (first, second):
        stack.spark.sql(f"CREATE TABLE sinklab.{table} (id BIGINT, kind STRING, attrs VARIANT) USING iceberg "
                        "TBLPROPERTIES ('format-version'='3')")
    stack.create_topic(unique, partitions=1)
    produce_json(stack.bootstrap_servers, unique, [{"id": i, "kind": ("a", "b")[i % 2], "attrs": {"n": i}}
                                                   for i in range(6)])
    result, jobs = jobs_of(stack, sink_config(unique, [first, second], **{
        "iceberg.tables.route-field": "kind", f"iceberg.table.{first}.route-regex": "a",
        f"iceberg.table.{second}.route-regex": "b", "sinklab.tables.variant-columns": "attrs"}))
    assert result is not None and result.passes == 1 and jobs == 2
    for table, ids in ((first, [0, 2, 4]), (second, [1, 3, 5])):
        got = stack.spark.sql(f"SELECT id, variant_get(attrs, '$.n', 'int') AS n FROM sinklab.{table}").collect()
        assert sorted((r.id, r.n) for r in got) == [(i, i) for i in ids]
