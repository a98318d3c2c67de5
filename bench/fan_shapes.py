"""Shapes of a fan-out cycle's write against one table's, on one warm JVM (#41, #59).

Pizzas routed on ``sauce`` to three tables of one schema (``bench/warm_cycles.py``'s fan-out,
``harness.shape_config``), or with ``--distinct`` of three (the second without ``veggies``, the third
without ``meats`` and ``cheese``), each shape reading the same Kafka ranges, converting the records and
writing every table's data files for real (nothing committed):

- ``one_job``: what the sink does (``sinklab.sink.tables.fan_out``): every record converted once per
  schema of the tables it goes to (``records.to_rows_by_schema``), the three tables' rows written by one
  Spark job whose tasks hand Arrow batches to pyiceberg's writer;
- ``job_per_table``: what it did before (for tables of other columns until #59's last item): the
  prepared records cached, then one job per table that parses its records and writes them with
  Iceberg's Spark writer;
- ``one_table``: the same records into one table with Iceberg's Spark writer: the baseline;
- ``one_table_fan_writer``: the same with ``fan_out``'s writer (why one table stays on Iceberg's).

    python bench/fan_shapes.py [--records 300000] [--rounds 3] [--distinct] [--only one_job,one_table]

Prints one JSON line: each shape's seconds per round (after one untimed round of each).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from harness import shape_config
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.generators import PizzaGenerator
from sinklab.sink import IcebergSink, load_config
from sinklab.sink.records import (
    ERROR,
    TABLES,
    BadRows,
    preparation,
    read_ranges,
    route,
    row_columns,
    row_of,
    to_rows,
    to_rows_by_schema,
    with_payload,
)
from sinklab.sink.tables import fan_out, load_state, write_files
from sinklab.sink.wire import OffsetRange
from sinklab.stack import Stack
from sinklab.stack.spark import SINK_SESSION_CONF

PARTITIONS = 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="the shapes to run, comma-separated (default: all)")
    parser.add_argument("--distinct", action="store_true", help="the three tables of three schemas")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Stack.embedded(Path(tmp) / "stack") as stack:
        topic = "fan"
        stack.create_topic(topic, partitions=PARTITIONS)
        configs = []
        for shape in ("fan", "one"):
            settings = shape_config(shape, topic)
            configs.append(load_config({"name": settings.pop("name"), "config": settings}))
        fan, one = configs
        PizzaGenerator(seed=1).produce(stack, topic, count=5000, partitions=PARTITIONS, create_topics=False).wait()
        for config in configs:
            sink = IcebergSink(stack, config)
            try:
                sink.run_once()  # creates the tables from the first records
            finally:
                sink.stop()
        PizzaGenerator(seed=2).produce(stack, topic, count=args.records, partitions=PARTITIONS,
                                       create_topics=False).wait()
        if args.distinct:
            for table, dropped in zip(fan.tables[1:], (["veggies"], ["meats", "cheese"]), strict=True):
                stack.spark.sql(f"ALTER TABLE sinklab.{table} DROP COLUMNS ({', '.join(dropped)})")
        spark = stack.spark.newSession()
        for key, value in SINK_SESSION_CONF.items():
            spark.conf.set(key, value)
        schemas = {t: spark.table(f"sinklab.{t}").schema for t in [*fan.tables, *one.tables]}
        probe = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "fan-shapes-probe"})
        ranges = [OffsetRange(topic, p, *probe.get_watermark_offsets(KafkaPartition(topic, p), timeout=10))
                  for p in range(PARTITIONS)]
        probe.close()
        kafka = stack.kafka_config()
        jvm = spark._jvm  # type: ignore[attr-defined]

        def state(name: str):  # noqa: ANN202 - a TableState
            return load_state(stack.catalog, name, "main", "sinklab")

        fan_states = [state(t) for t in fan.tables]
        one_states = [state(t) for t in one.tables]

        def good(route_field: str | None, check_objects: bool | Column,
                 cached: bool = False) -> tuple[DataFrame, DataFrame]:
            """The prepared records, and those of them a table takes (a value, no error)."""
            prepared = preparation(False, [], route_field, cached=cached, check_objects=check_objects).apply(
                read_ranges(spark, kafka, ranges))
            return prepared, with_payload(prepared).where(F.col("value").isNotNull() & F.col(ERROR).isNull())

        # Each write observes its bad rows on the way, as the sink's do (``records.BadRows``).
        def rows_of(table: str, records: DataFrame) -> DataFrame:
            schema: T.StructType = schemas[table]
            checked = BadRows(to_rows(records, schema), "none").df
            return checked.where(F.col(ERROR).isNull()).select(*schema.fieldNames())

        def observed(rows: DataFrame) -> DataFrame:
            errors = [c for c in rows.columns if c.startswith(ERROR)]
            return BadRows(rows, "none", TABLES, errors=errors).df

        # Each schema's tables as bits, as the sink's worker groups them.
        by_schema: dict[str, int] = {}
        for i, table in enumerate(fan.tables):
            by_schema[schemas[table].json()] = by_schema.get(schemas[table].json(), 0) | 1 << i
        order = list(by_schema)
        parts = [(row_columns(T.StructType.fromJson(json.loads(s))), bits) for s, bits in by_schema.items()]
        fan_targets = [(s, {}, row_of(order.index(schemas[t].json()))) for s, t in zip(fan_states, fan.tables,
                                                                                        strict=True)]

        def iceberg_write(table: str, rows: DataFrame) -> None:
            loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                spark._jsparkSession, f"sinklab.{table}")  # type: ignore[attr-defined]
            write_files(spark, loaded, rows, f"bench-{uuid.uuid4()}")

        def one_job() -> None:
            _, records = good(fan.route_field, route.to_one_table(fan))
            rows = to_rows_by_schema(records.withColumn(TABLES, route.table_bits(fan, fan.tables)), parts, observed)
            fan_out.write_appends(rows, fan_targets)

        def job_per_table() -> None:
            prepared, records = good(fan.route_field, route.to_one_table(fan), cached=True)
            prepared.persist(StorageLevel.MEMORY_AND_DISK)
            for table in fan.tables:
                iceberg_write(table, rows_of(table, route.records_for(fan, records, table)))
            prepared.unpersist()

        def one_table() -> None:
            _, records = good(None, False)
            iceberg_write(one.tables[0], rows_of(one.tables[0], records))

        def one_table_fan_writer() -> None:
            _, records = good(None, False)
            rows = to_rows_by_schema(records.withColumn(TABLES, F.lit(1).cast("long")),
                                     [(row_columns(schemas[one.tables[0]]), 1)], observed)
            fan_out.write_appends(rows, [(one_states[0], {}, row_of(0))])

        shapes = {"one_job": one_job, "job_per_table": job_per_table, "one_table": one_table,
                  "one_table_fan_writer": one_table_fan_writer}
        if args.only:
            shapes = {name: shapes[name] for name in args.only.split(",")}
        for run in shapes.values():
            run()
        seconds: dict[str, list[float]] = {name: [] for name in shapes}
        for _ in range(args.rounds):
            for name, run in shapes.items():
                began = time.monotonic()
                run()
                seconds[name].append(round(time.monotonic() - began, 2))
        print(json.dumps({"records": args.records, "distinct": args.distinct, **seconds}))


if __name__ == "__main__":
    main()
