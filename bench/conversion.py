"""The conversion of JSON values into a table's columns, three ways, on the same values in one run:

1. **the text path**: every field parsed as its JSON text, then each converted with its type and range
   checks (``convert.convert``), as sinklab converted every record before the one parse;
2. **the one parse** (``convert.to_rows``, what the sink runs): numbers and booleans parsed as
   themselves, a record parsed again as text only when that parse cannot take it;
3. **Spark alone**: ``from_json`` into the table's types, no checks (a bad value becomes a silent null).

Two kinds of values: the pizza events (strings, one integer, a timestamp) and a numeric record (an
id, three integers, two floating-point numbers, a boolean, a string). No Kafka, no write: each way
runs to Spark's ``noop`` sink from cached values, ``local[2]``, best of ``--rounds`` after one untimed.

    .venv/bin/python bench/conversion.py [--records 500000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.generators import PizzaGenerator
from sinklab.sink.records import ERROR, OP, convert, to_rows
from sinklab.sink.wire import utf8_text

SCHEMAS = {
    "pizza": "order_id string, store_id bigint, sauce string, cheese string, meats string, veggies string, "
             "date_ordered timestamp",
    "numeric": "id bigint not null, a double, b int, c boolean, d float, e int, s string",
}


def values(kind: str, n: int) -> list[bytes]:
    if kind == "pizza":
        return [json.dumps(e).encode() for e in itertools.islice(PizzaGenerator(seed=1).events(n), n)]
    r = random.Random(1)
    return [json.dumps({"id": i, "a": r.random() * 100, "b": r.randrange(10**6), "c": r.random() < .5,
                        "d": r.random(), "e": r.randrange(100), "s": f"x{r.randrange(1000)}"}).encode()
            for i in range(n)]


def text_path(records: DataFrame, schema: T.StructType) -> DataFrame:
    text = F.from_json("_payload", T.StructType([T.StructField(f.name, T.StringType()) for f in schema.fields]))
    parsed = records.select("*", F.inline(F.array(F.struct(text.alias("p")))))
    columns: list[Column] = []
    errors: list[Column] = []
    for field in schema.fields:
        value, error = convert(F.col("p")[field.name], field.dataType, field.name)
        columns.append(value.alias(field.name))
        errors.append(error)
    joined = F.concat_ws("; ", *errors)
    return parsed.select(*columns, F.when(joined != "", joined).alias(ERROR))


def timed(df: DataFrame, rounds: int) -> float:
    df.write.format("noop").mode("overwrite").save()
    best = float("inf")
    for _ in range(rounds):
        began = time.monotonic()
        df.write.format("noop").mode("overwrite").save()
        best = min(best, time.monotonic() - began)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = SparkSession.builder.master("local[2]").config("spark.driver.memory", "4g").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    out: dict[str, Any] = {"records": args.records}
    try:
        for kind, ddl in SCHEMAS.items():
            schema = T._parse_datatype_string(ddl)
            assert isinstance(schema, T.StructType)
            raw = spark.createDataFrame([(v,) for v in values(kind, args.records)], "value binary").repartition(6)
            records = raw.select(F.lit("t").alias("topic"), F.lit(0).alias("partition"),
                                 F.monotonically_increasing_id().alias("offset"), F.lit(0).alias("timestamp"),
                                 F.lit(None).cast("binary").alias("key"), "value",
                                 F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
                                 utf8_text(F.col("value")).alias("_payload"), F.lit(None).cast("string").alias(OP)
                                 ).cache()
            records.count()
            ways = {"text path": text_path(records, schema), "one parse": to_rows(records, schema),
                    "Spark alone": records.select(F.from_json("_payload", schema).alias("r")).select("r.*")}
            out[kind] = {name: round(timed(df, args.rounds), 2) for name, df in ways.items()}
            records.unpersist()
            print(f"{kind:8s}" + "".join(f"  {name} {s:.2f} s" for name, s in out[kind].items()), flush=True)
    finally:
        spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
