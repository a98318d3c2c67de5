"""The chain: each step in turn, where its predicate applies, one projection per step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.config import transforms as tf
from sinklab.sink.records.columns import ERROR, KEY_TEXT, PAYLOAD
from sinklab.sink.records.kinds import MALFORMED_JSON, NOT_AN_OBJECT
from sinklab.sink.records.transform import debezium, iceberg, kafka, mongo
from sinklab.sink.records.transform.parts import (
    BARE,
    DROPPED,
    FAILED,
    KEY,
    PARTS,
    SCHEMA,
    VALUE,
    Rec,
    is_null,
    text_of,
    unique_keys,
)
from sinklab.sink.records.transform.python import run_python

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Meta = dict[str, Column]
# What runs each transform: given the step, the record, and the record's metadata.
STEPS: dict[type, Callable[[tf.Step, Rec, Meta], Rec]] = {
    tf.InsertField: kafka.insert_field, tf.TimestampRouter: kafka.timestamp_router,
    tf.KafkaMetadata: iceberg.kafka_metadata, tf.Debezium: iceberg.debezium, tf.MongoDebezium: mongo.mongo_debezium,
}
OWN: dict[type, Callable[[tf.Step, Rec], Rec]] = {  # those that need nothing but the record
    tf.ReplaceField: kafka.replace_field, tf.MaskField: kafka.mask_field, tf.Cast: kafka.cast,
    tf.TimestampConverter: kafka.timestamp_converter, tf.ExtractField: kafka.extract_field,
    tf.HoistField: kafka.hoist_field, tf.ValueToKey: kafka.value_to_key, tf.Flatten: kafka.flatten,
    tf.RegexRouter: kafka.regex_router, tf.HeaderFrom: kafka.header_from,
    tf.SetSchemaMetadata: kafka.set_schema_metadata, tf.DropHeaders: kafka.drop_headers,
    tf.InsertHeader: kafka.insert_header, tf.Filter: kafka.filter_out,
    tf.CopyValue: iceberg.copy_value, tf.Dms: iceberg.dms, tf.JsonToMap: iceberg.json_to_map,
    tf.ExtractNewRecordState: debezium.unwrap,
}


def applies(p: tf.Predicate | None, negate: bool, r: Rec, tombstone: Column) -> Column | None:
    if p is None:
        return None
    if p.kind == "topic-name-matches":
        yes = r.topic.rlike(f"^(?:{p.pattern})$")
    elif p.kind == "has-header-key":
        yes = F.exists(F.coalesce(r.headers, F.array()), lambda h: h["key"] == p.name)
    else:
        yes = tombstone
    return ~yes if negate else yes


def step(t: tf.Step, r: Rec, meta: Meta, tombstone: Column) -> Rec:
    done = STEPS[type(t)](t, r, meta) if type(t) in STEPS else OWN[type(t)](t, r)
    when = applies(t.predicate, t.negate, r, tombstone)
    if when is None:
        return done
    when = F.coalesce(when, F.lit(False))
    return Rec(*(F.when(when, a).otherwise(b) for a, b in zip(done.columns(), r.columns(), strict=True)),
               pre=done.pre)


def barrier(c: Column) -> Column:
    """``c`` as it is, made non-deterministic: the optimizer then neither merges a step's projection into the
    next nor pushes a filter (ERROR, dropped) down through it, either of which writes each step's
    expressions into the next as often as it refers to them, exponentially in the chain's length (10 steps
    ran the driver out of memory planning). A partition's id is never negative: the branch never runs."""
    return F.coalesce(c, F.when(F.spark_partition_id() < 0, c))


def apply_chain(records: DataFrame, chain: list[tf.Step], key_text: Column) -> DataFrame:
    """``records`` (META, key, value, headers, PAYLOAD, _schema, ERROR) with ``chain`` applied: PAYLOAD and
    _schema are the transformed value and schema, KEY_TEXT the key as the chain left it, a record a step
    could not take has ERROR, and a dropped record is gone (Filter, or a value extracted to null)."""
    columns = records.columns
    good = F.col(ERROR).isNull() & F.col("value").isNotNull()
    tombstone = F.col("value").isNull()
    # One parse, in the record's field order, in a projection of its own (the barrier keeps the optimizer
    # from writing the parse into each of its three uses); anything but an object is a VARIANT beside it.
    records = records.withColumn(VALUE, barrier(F.when(good, F.from_json(F.col(PAYLOAD), "map<string,variant>"))))
    m = F.col(VALUE)
    start = Rec(value=m, bare=F.when(good & m.isNull(), F.try_parse_json(F.col(PAYLOAD))),
                schema=F.try_parse_json(F.col("_schema")),
                key=F.coalesce(F.try_parse_json(key_text), key_text.cast("variant")), topic=F.col("topic"),
                headers=F.col("headers"), dropped=F.lit(False),
                # A JSON object naming a key twice reads as a map that would fail the job at its first change.
                failed=F.when(good & ~unique_keys(F.map_keys(m)), F.lit(
                    f"{MALFORMED_JSON}: value names a field twice")))
    out = records.withColumns(dict(zip(PARTS, start.columns(), strict=True)))
    meta = {c: F.col(c) for c in ("partition", "offset")}
    # The record's timestamp in epoch milliseconds (the cycle's reader keeps it so).
    stamp = F.col("timestamp")
    meta["millis"] = F.unix_millis(stamp) if records.schema["timestamp"].dataType.typeName() == "timestamp" else stamp
    # The key's text as it came, until a step changes the key (a JSON key read back is normalized).
    meta["key_text"] = key_text
    for t in chain:
        if t.side == "key" or isinstance(t, tf.ValueToKey | tf.MongoDebezium):
            meta.pop("key_text", None)
        if isinstance(t, tf.Python):
            meta.pop("key_text", None)  # the function may change the key
            out = run_python(out, t, meta["millis"], applies(t.predicate, t.negate, Rec.named(), tombstone))
            continue
        done = step(t, Rec.named(), meta, tombstone)
        if done.pre:
            out = out.withColumns(dict(done.pre))
        done = replace(done, failed=barrier(done.failed))
        out = out.withColumns(dict(zip(PARTS, done.columns(), strict=True))).drop(*dict(done.pre))
    value, bare = F.col(VALUE), F.col(BARE)
    finished = {
        PAYLOAD: F.when(value.isNotNull(), F.to_json(value)).when(bare.isNotNull(), F.to_json(bare)).otherwise(
            F.col(PAYLOAD)),
        "_schema": F.to_json(F.col(SCHEMA)),
        ERROR: F.coalesce(F.col(ERROR), F.col(FAILED), F.when(~is_null(bare), F.lit(
            f"{NOT_AN_OBJECT}: the value is no struct or map after the transforms"))),
    }
    keyed = "key_text" not in meta
    if keyed:
        finished[KEY_TEXT] = text_of(F.col(KEY))
    # A record a step failed is a bad record, even if a later step would have dropped it: it never got there.
    out = out.withColumns(finished).where(~F.col(DROPPED) | F.col(ERROR).isNotNull())
    return out.select(*columns, *([KEY_TEXT] if keyed and KEY_TEXT not in columns else []))
