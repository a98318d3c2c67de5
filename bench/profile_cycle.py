"""Where a drain cycle's records spend their time, stage by stage, against Spark alone on the same values.

Each stage is the sink's own code path cut short and run to Spark's ``noop`` sink (every row computed,
nothing written), so the differences between rows are what each stage adds:

1. read: the cycle's exact Kafka ranges through Spark's Kafka source (``reader.read_ranges``)
2. + prepare: UTF-8 decoding, route and operation columns (``convert.prepare``; one table's values are
   checked to be JSON objects by the next stage's parse)
3. + rows: the parse into the table's columns with their type checks (``convert.to_rows``)
4. + Parquet: the same rows as Parquet files (Spark's writer, zstd)
5. + observed: as 3, with the aggregates a cycle's write observes on the way (its figures and its bad
   rows: ``convert.Observed``, ``convert.BadRows``), to ``noop``
6. the sink's write: as 5, written by Iceberg's writer into the table's data files, uncommitted
   (``write.write_files``, as a cycle stages them)
7. Spark alone: the same values from text files, ``from_json`` into the table's types, Parquet

    python bench/profile_cycle.py [--records 500000] [--partitions 6] [--rounds 2]

Prints the best of ``--rounds`` per stage (after one untimed run of every stage), and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from sinklab.generators import PizzaGenerator
from sinklab.sink import IcebergSink, load_config
from sinklab.sink.cycle import Worker
from sinklab.sink.records import ERROR, BadRows, Observed, dead_letters, prepare, read_ranges, to_rows, with_payload
from sinklab.sink.tables import write_files
from sinklab.sink.wire import OffsetRange
from sinklab.stack import Stack


def best(rounds: int, run: object) -> float:
    times = []
    for _ in range(rounds):
        began = time.monotonic()
        run()  # type: ignore[operator]
        times.append(time.monotonic() - began)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Stack.embedded(Path(tmp) / "stack") as stack:
        topic = "profile"
        PizzaGenerator(seed=1).produce(stack, topic, count=args.records, partitions=args.partitions).wait()
        config = load_config({"name": "profile", "config": {
            "topics": topic, "iceberg.tables": "bench.profile", "iceberg.tables.auto-create-enabled": "true",
            "sinklab.cycle.max-records": "1000", "value.converter.schemas.enable": "false"}})
        sink = IcebergSink(stack, config)
        try:
            sink.run_once()  # creates the table from the first records (and warms the JVM)
        finally:
            sink.stop()
        spark = stack.spark
        schema = spark.table("sinklab.bench.profile").schema
        kafka = stack.kafka_config()
        low_high = stack.admin().list_topics(topic, timeout=10).topics[topic].partitions
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as KafkaPartition

        probe = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "profile-probe"})
        ranges = [OffsetRange(topic, p, *probe.get_watermark_offsets(KafkaPartition(topic, p), timeout=10))
                  for p in sorted(low_high)]
        probe.close()
        records = sum(r.end - r.start for r in ranges)

        def raw():  # type: ignore[no-untyped-def]
            return read_ranges(spark, kafka, ranges)

        def prepared():  # type: ignore[no-untyped-def]
            return with_payload(prepare(raw(), False, [], None, check_objects=False))  # as one table's cycle does

        def rows():  # type: ignore[no-untyped-def]
            return to_rows(prepared(), schema)

        def noop(df):  # type: ignore[no-untyped-def]
            return lambda: df().write.format("noop").mode("overwrite").save()

        staged = Path(tmp) / "parquet"

        def write() -> None:
            columns = [f.name for f in schema.fields]
            rows().select(*columns).write.mode("overwrite").option("compression", "zstd").parquet(str(staged))

        metrics = Worker(config, spark, stack.catalog, kafka)._stat_metrics([])  # every partition read whole

        def observed():  # type: ignore[no-untyped-def]
            # The figures a one-pass cycle observes and its write's bad rows, as the sink's Worker builds them.
            stats = Observed(prepared(), *metrics)
            records = stats.df.where(F.col("value").isNotNull()).where(F.col(ERROR).isNull())
            checked = BadRows(to_rows(records, schema), dead_letters.observed(config.errors_tolerance))
            return checked.df.where(F.col(ERROR).isNull())

        jvm = spark._jvm  # type: ignore[attr-defined]
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, "sinklab.bench.profile")
        written = iter(range(10**6))

        def iceberg() -> None:
            columns = [f.name for f in schema.fields]
            write_files(spark, table, observed().select(*columns), f"profile-{next(written)}")

        text = Path(tmp) / "text"
        raw().selectExpr("CAST(value AS STRING) AS value").write.mode("overwrite").text(str(text))
        alone_schema = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)

        def alone() -> None:
            from pyspark.sql import functions as F

            values = spark.read.text(str(text)).select(F.from_json("value", alone_schema).alias("r")).select("r.*")
            values.write.mode("overwrite").option("compression", "zstd").parquet(str(Path(tmp) / "alone"))

        stages = {"read": noop(raw), "+ prepare": noop(prepared), "+ rows": noop(rows), "+ Parquet (zstd)": write,
                  "+ observed": noop(observed), "the sink's write (Iceberg)": iceberg, "Spark alone": alone}
        for run in stages.values():  # once untimed: the JVM's JIT warms to every stage's code first
            run()  # type: ignore[operator]
        out = {}
        for name, run in stages.items():
            seconds = best(args.rounds, run)
            out[name] = {"s": round(seconds, 3), "rps": round(records / seconds)}
            print(f"{name:22s} {seconds:7.2f} s  {records / seconds:10,.0f} records/s", flush=True)
        cores = spark.sparkContext.defaultParallelism
        print(json.dumps({"records": records, "partitions": args.partitions, "cores": cores, "stages": out}))


if __name__ == "__main__":
    main()
