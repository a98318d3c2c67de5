"""Shapes of a fan-out cycle's Spark work against one table's, on one warm JVM (#41, item 4).

Pizzas routed on ``sauce`` to three tables of one schema (``bench/warm_cycles.py``'s fan-out,
``harness.shape_config``), each table's rows computed and handed to Spark's ``noop`` sink (every row
computed, nothing written), so the figures are the read, the conversion and the cache, not Parquet or
Iceberg:

- ``cached_prepared``: what the sink does: the prepared records (JSON text, route) cached, then each
  table parses its own records into its columns;
- ``checkpointed_prepared``: the same records kept as a lazy local checkpoint (filled by the first
  table's job) instead of Spark's columnar cache;
- ``typed_cache``: each record parsed once into the tables' shared columns, those rows cached, each
  table a filter of them by its route (taken from the parsed ``sauce``);
- ``one_table``: the same records, one table, no cache: the baseline.

    python bench/fan_shapes.py [--records 300000] [--rounds 3]

Prints one JSON line: each shape's seconds per round (after one untimed round of each).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from harness import shape_config
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sinklab.generators import PizzaGenerator
from sinklab.sink import IcebergSink, load_config
from sinklab.sink.records import ERROR, ROUTE, preparation, read_ranges, route, to_rows, with_payload
from sinklab.sink.wire import OffsetRange
from sinklab.stack import Stack
from sinklab.stack.spark import SINK_SESSION_CONF

PARTITIONS = 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Stack.embedded(Path(tmp) / "stack") as stack:
        topic = "fan"
        stack.create_topic(topic, partitions=PARTITIONS)
        settings = shape_config("fan", topic)
        config = load_config({"name": settings.pop("name"), "config": settings})
        PizzaGenerator(seed=1).produce(stack, topic, count=5000, partitions=PARTITIONS, create_topics=False).wait()
        sink = IcebergSink(stack, config)
        try:
            sink.run_once()  # creates the tables from the first records
        finally:
            sink.stop()
        PizzaGenerator(seed=2).produce(stack, topic, count=args.records, partitions=PARTITIONS,
                                       create_topics=False).wait()
        spark = stack.spark.newSession()
        for key, value in SINK_SESSION_CONF.items():
            spark.conf.set(key, value)
        schema = spark.table(f"sinklab.{config.tables[0]}").schema
        probe = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "fan-shapes-probe"})
        ranges = [OffsetRange(topic, p, *probe.get_watermark_offsets(KafkaPartition(topic, p), timeout=10))
                  for p in range(PARTITIONS)]
        probe.close()
        kafka = stack.kafka_config()

        def good(route_field: str | None, check_objects: bool | Column,
                 cached: bool = False) -> tuple[DataFrame, DataFrame]:
            """The prepared records, and those of them a table takes (a value, no error)."""
            prepared = preparation(False, [], route_field, cached=cached, check_objects=check_objects).apply(
                read_ranges(spark, kafka, ranges))
            return prepared, with_payload(prepared).where(F.col("value").isNotNull() & F.col(ERROR).isNull())

        def noop(df: DataFrame) -> None:
            df.where(F.col(ERROR).isNull()).write.format("noop").mode("overwrite").save()

        def cached_prepared() -> None:
            prepared, records = good(config.route_field, route.to_one_table(config), cached=True)
            prepared.persist(StorageLevel.MEMORY_AND_DISK)
            for table in config.tables:
                noop(to_rows(route.records_for(config, records, table), schema))
            prepared.unpersist()

        def checkpointed_prepared() -> None:
            prepared, _ = good(config.route_field, route.to_one_table(config), cached=True)
            kept = prepared.localCheckpoint(eager=False)
            records = with_payload(kept).where(F.col("value").isNotNull() & F.col(ERROR).isNull())
            for table in config.tables:
                noop(to_rows(route.records_for(config, records, table), schema))
            kept.unpersist()

        def typed_cache() -> None:
            _, records = good(None, False)
            assert config.route_field
            rows = to_rows(records, schema).withColumn(ROUTE, F.col(config.route_field))
            rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
            for table in config.tables:
                noop(route.records_for(config, rows, table))
            rows.unpersist()

        def one_table() -> None:
            _, records = good(None, False)
            noop(to_rows(records, schema))

        shapes = {"cached_prepared": cached_prepared, "checkpointed_prepared": checkpointed_prepared,
                  "typed_cache": typed_cache,
                  "one_table": one_table}
        for run in shapes.values():
            run()
        seconds: dict[str, list[float]] = {name: [] for name in shapes}
        for _ in range(args.rounds):
            for name, run in shapes.items():
                began = time.monotonic()
                run()
                seconds[name].append(round(time.monotonic() - began, 2))
        print(json.dumps({"records": args.records, **seconds}))


if __name__ == "__main__":
    main()
