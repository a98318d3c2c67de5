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
8. one record, read and prepared, back on the driver: a small cycle's read

    python bench/profile_cycle.py [--records 500000] [--partitions 6] [--rounds 2] [--against KEY=VALUE ...]

Prints the best (and the median) of ``--rounds`` per stage (after one untimed run of every stage), and a JSON line.
With ``--against``, each stage also runs with those Spark SQL settings, the two alternating round by
round in the same session: a setting's figures beside its baseline's, from one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from sinklab.generators import PizzaGenerator
from sinklab.sink import IcebergSink, load_config
from sinklab.sink.cycle import Worker
from sinklab.sink.records import ERROR, BadRows, Observed, prepare, read_ranges, to_rows, with_payload
from sinklab.sink.tables import write_files
from sinklab.sink.wire import OffsetRange
from sinklab.stack import Stack


def timed(run: object) -> float:
    began = time.monotonic()
    run()  # type: ignore[operator]
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--against", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark SQL setting to measure against the session's own (repeatable)")
    args = parser.parse_args()
    against = dict(a.split("=", 1) for a in args.against)
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

        metrics = Worker(config, spark, stack.catalog, kafka).counts.metrics([])  # every partition read whole

        def observed():  # type: ignore[no-untyped-def]
            # The figures a one-pass cycle observes and its write's bad rows, as the sink's Worker builds them.
            stats = Observed(prepared(), *metrics)
            records = stats.df.where(F.col("value").isNotNull()).where(F.col(ERROR).isNull())
            checked = BadRows(to_rows(records, schema), config.errors_tolerance)
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

        def one_record() -> None:  # a small cycle's read: planning, a task, one record back on the driver
            first = ranges[0]
            one = [OffsetRange(first.topic, first.partition, first.start, first.start + 1)]
            assert len(with_payload(prepare(read_ranges(spark, kafka, one), False, [], None)).collect()) == 1

        stages = {"read": noop(raw), "+ prepare": noop(prepared), "+ rows": noop(rows), "+ Parquet (zstd)": write,
                  "+ observed": noop(observed), "the sink's write (Iceberg)": iceberg, "Spark alone": alone,
                  "one record, read to the driver": one_record}
        baseline = {key: spark.conf.get(key, None) for key in against}
        variants = {"baseline": baseline, **({"against": against} if against else {})}

        def settings(conf: dict[str, str | None]) -> None:
            for key, value in conf.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)

        for conf in variants.values():  # once untimed: the JVM's JIT warms to every stage's code first
            settings(conf)
            for run in stages.values():
                run()  # type: ignore[operator]
        times: dict[str, dict[str, list[float]]] = {v: {name: [] for name in stages} for v in variants}
        for _ in range(args.rounds):
            for variant, conf in variants.items():
                settings(conf)
                for name, run in stages.items():
                    times[variant][name].append(timed(run))
        settings(baseline)
        out: dict[str, dict[str, dict[str, float]]] = {v: {} for v in variants}
        if against:
            print(f"against: {against} (baseline: {baseline})")
        for name, run in stages.items():
            line = f"{name:28s}"
            carried = 1 if run is one_record else records
            for variant in variants:
                seconds, median = min(times[variant][name]), statistics.median(times[variant][name])
                out[variant][name] = {"s": round(seconds, 3), "rps": round(carried / seconds),
                                      "median_s": round(median, 3)}
                line += f" {seconds:7.2f} s {carried / seconds:10,.0f}/s (median {median:5.2f} s)"
            print(line, flush=True)
        cores = spark.sparkContext.defaultParallelism
        print(json.dumps({"records": records, "partitions": args.partitions, "cores": cores, "against": against,
                          "stages": out["baseline"], **({"against_stages": out["against"]} if against else {})}))


if __name__ == "__main__":
    main()
