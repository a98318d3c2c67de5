"""A transform chain's cost: records/s through the records' preparation with a chain, against the same
preparation without one, per sinklab source tree (``--base`` names an older checkout, which runs in a
process of its own with the same records, so that both are measured in one run).

Each case prepares N pizza orders held in memory in Kafka's frame (binary value, timestamps in epoch
millis, as the cycle's reader gives them) and writes them to Spark's ``noop`` sink: the best of
``--rounds`` after ``--warm`` seconds of warm-up: the steps' expressions are interpreted (Spark does not
generate code for lambdas), and the JIT takes some 10 runs of 50,000 records to compile them (7,063/s on
the first run, 42,000/s from the eighth, measured): a sink's JVM runs warm after its first cycles, and so
is measured. A chain a base cannot run (it refuses the config) is reported as such.

    python bench/transforms.py [--records 200000] [--rounds 3] [--warm 20] [--base /path/to/older/checkout ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

K = "org.apache.kafka.connect.transforms."
CHAINS: dict[str, dict[str, str]] = {
    "none": {},
    "KafkaMetadataTransform": {"transforms": "m", "transforms.m.type":
                               "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"},
    "Flatten": {"transforms": "f", "transforms.f.type": K + "Flatten$Value", "transforms.f.delimiter": "_"},
    "InsertField, ReplaceField, Cast, TimestampConverter": {
        "transforms": "i,r,c,t", "transforms.i.type": K + "InsertField$Value", "transforms.i.topic.field": "src",
        "transforms.r.type": K + "ReplaceField$Value", "transforms.r.exclude": "size",
        "transforms.c.type": K + "Cast$Value", "transforms.c.spec": "price:float32",
        "transforms.t.type": K + "TimestampConverter$Value", "transforms.t.field": "ts",
        "transforms.t.target.type": "unix", "transforms.t.format": "yyyy-MM-dd'T'HH:mm:ss"},
}
# On Debezium MongoDB change events (JSON with schemas): Iceberg's MongoDebeziumTransform against none.
MONGO_CHAINS: dict[str, dict[str, str]] = {
    "none (MongoDB change events)": {},
    "MongoDebeziumTransform": {"transforms": "m", "transforms.m.type":
                               "org.apache.iceberg.connect.transforms.MongoDebeziumTransform"},
}


def _mongo_event(order: str) -> str:
    """A Debezium MongoDB insert of a pizza order, ``order`` standing where its number goes."""
    text = {"type": "string", "optional": True, "name": "io.debezium.data.Json", "version": 1}
    schema = {"type": "struct", "name": "shop.orders.Envelope", "optional": False, "fields": [
        {**text, "field": "before"}, {**text, "field": "after"},
        {"field": "updateDescription", "type": "struct", "optional": True, "fields": [
            {"field": "removedFields", "type": "array", "items": {"type": "string"}, "optional": True},
            {**text, "field": "updatedFields"}]}, {"field": "op", "type": "string", "optional": True}]}
    doc = {"_id": {"$oid": "5f00000000000000000" + order}, "pizza": "margherita", "size": "large",
           "price": 12.5, "qty": {"$numberLong": "2"}, "at": {"$date": 1767225600000},
           "shop": {"city": "Oslo", "zip": "0150"}, "toppings": ["basil", "mozzarella"]}
    return json.dumps({"schema": schema, "payload": {"before": None, "after": json.dumps(doc),
                                                     "updateDescription": None, "op": "c"}})


def measure(records: int, rounds: int, warm: float) -> dict[str, float | str]:
    """Records/s per chain, in this process (its sinklab is whatever PYTHONPATH gives)."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from sinklab.exceptions import ConfigError
    from sinklab.sink.config import load_config
    from sinklab.sink.records.prepare import prepare

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             # Python workers (the base's transforms) import the same sinklab as this process.
             .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", "")).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    value = F.concat(F.lit('{"order_id":"o-'), F.col("id").cast("string"), F.lit(
        '","pizza":"margherita","size":"large","price":12.5,"ts":"2026-01-01T00:00:00",'
        '"shop":{"city":"Oslo","zip":"0150"}}'))
    raw = spark.range(records, numPartitions=2).select(
        F.lit(b"k").alias("key"), value.cast("binary").alias("value"), F.lit("orders").alias("topic"),
        F.lit(0).alias("partition"), F.col("id").alias("offset"), F.lit(1767225600000).alias("timestamp"),
        F.array().cast("array<struct<key:string,value:binary>>").alias("headers")).cache()
    raw.count()
    before, after = _mongo_event("@@@@@").split("@@@@@")
    number = F.lpad(F.col("offset").cast("string"), 5, "0")
    mongo = raw.withColumn("value", F.concat(F.lit(before), number, F.lit(after)).cast("binary")).cache()
    mongo.count()
    out: dict[str, float | str] = {}
    for name, chain in {**CHAINS, **MONGO_CHAINS}.items():
        envelopes = name in MONGO_CHAINS
        try:
            config = load_config({"name": "b", "topics": "orders", "iceberg.tables": "n.t",
                                  "value.converter.schemas.enable": str(envelopes).lower(), **chain})
        except ConfigError as exc:
            out[name] = f"refused ({exc.key})"
            continue
        prepared = prepare(mongo if envelopes else raw, envelopes, config.transforms, None)

        def once(prepared: DataFrame = prepared) -> float:
            started = time.perf_counter()
            prepared.write.format("noop").mode("overwrite").save()
            return time.perf_counter() - started

        warming = time.perf_counter() + warm
        while time.perf_counter() < warming:
            once()
        out[name] = records / min(once() for _ in range(rounds))
    spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=float, default=20.0, help="seconds of warm-up per chain")
    parser.add_argument("--base", action="append", default=[],
                        help="an older sinklab checkout, measured in a process of its own (repeatable)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: print JSON, stop
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.records, args.rounds, args.warm)))
        return
    trees = {"this tree": os.getcwd(), **{os.path.basename(b.rstrip("/")): b for b in args.base}}
    results = {}
    for label, tree in trees.items():
        # The base ran transforms in Python workers: they start this interpreter too, in the tree (their
        # path starts with the working directory, ahead of the editable install).
        env = {**os.environ, "PYTHONPATH": tree, "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run([sys.executable, __file__, "--one", "--records", str(args.records), "--rounds",
                               str(args.rounds), "--warm", str(args.warm)],
                              env=env, cwd=tree, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{label} ({tree}) failed:\n{done.stderr[-3000:]}")
        results[label] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{args.records:,} records, best of {args.rounds} after {args.warm:.0f} s warm, records/s through "
          "preparation (noop write)")
    for name in {**CHAINS, **MONGO_CHAINS}:
        cells = [f"{v:>12,.0f}" if isinstance(v := results[label][name], float) else f"{v:>12}"
                 for label in trees]
        print(f"  {name:55} " + "  ".join(f"{label}: {c}" for label, c in zip(trees, cells, strict=True)))


if __name__ == "__main__":
    main()
