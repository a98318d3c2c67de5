"""Kafka's records to the text a table's rows are read from: the payload's JSON, its Connect schema,
the route value, the row operation, and an ERROR for a record no table could take (undecodable,
malformed, not an object), all in Spark SQL; then the transform chain, when a sink configures one
(``transform``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.config.keys import VALUE_SCHEMAS_ENABLE
from sinklab.sink.records.columns import (
    ERROR,
    KEY_SCHEMA_ID,
    KEY_TEXT,
    META,
    OP,
    PAYLOAD,
    ROUTE,
    SCHEMA_ID,
)
from sinklab.sink.records.kinds import (
    MALFORMED_JSON,
    MISSING_REQUIRED,
    NOT_AN_OBJECT,
    UNDECODABLE,
)
from sinklab.sink.records.transform import apply_chain
from sinklab.sink.wire.text import utf8_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sinklab.sink.config.transforms import Step as Transform
    from sinklab.sink.records.framed import FramedDecoder

def not_an_object(text: Column) -> Column:
    """Why a JSON text is no object (malformed, or another JSON value); null for an object.

    ``json_object_keys`` is null for anything but a JSON object, and the cheaper parse (it skips the
    values that get_json_object copies out): the dearer check runs only for the texts it rejects."""
    return F.when(F.json_object_keys(text).isNull(), F.when(
        F.get_json_object(text, "$").isNull(), F.lit(f"{MALFORMED_JSON}: value is malformed JSON")).otherwise(
        F.coalesce(_not_braced(text), F.lit(f"{NOT_AN_OBJECT}: value is not a JSON object"))))


def _not_braced(text: Column) -> Column:
    return F.when(F.substring(F.ltrim(text), 1, 1) != "{", F.concat(
        F.lit(f"{NOT_AN_OBJECT}: value is not a JSON object: "), F.substring(text, 1, 100)))


def prepare(raw_df: DataFrame, *args: Any, **kwargs: Any) -> DataFrame:
    """``preparation(*args, **kwargs)`` applied to ``raw_df``: the records, prepared."""
    return preparation(*args, **kwargs).apply(raw_df)


@dataclass(frozen=True)
class Preparation:
    """``prepare``'s expressions. Built once, they serve every cycle whose settings they were built for:
    building them is some hundreds of py4j round trips (bench/README.md, "A cheap cycle")."""

    select: list[Column]
    transforms: list[Transform]
    then: list[Column]  # over the selected (and transformed) columns: ROUTE and OP
    last: Column | None = None  # ERROR again, over ROUTE: see ``preparation``'s check_objects
    # ``then`` computed once per record behind a generator (``convert.parse_once``): uncached, the route
    # is read by several conditions, each of which would otherwise scan the JSON for it again
    # (fanned out to 3 tables in one job, 3.8 s against 1.8 s: bench/README.md, "Fan-out in one job").
    once: bool = False

    def apply(self, raw_df: DataFrame) -> DataFrame:
        out = raw_df.select(*self.select)
        if self.transforms:
            key_text = F.col(KEY_TEXT) if KEY_TEXT in out.columns else utf8_text(F.col("key"))
            out = apply_chain(out, self.transforms, key_text)
        out = out.select("*", F.inline(F.array(F.struct(*self.then)))) if self.once else out.select("*", *self.then)
        return out if self.last is None else out.withColumn(ERROR, self.last)


def preparation(schemas_enable: bool, transforms: list[Transform], route_field: str | None,
                cdc_field: str | None = None, tombstone_ids: list[str] | None = None,
                framed: FramedDecoder | None = None, framed_key: FramedDecoder | None = None,
                key_envelope: bool = False, cached: bool = False, check_objects: bool | Column = True) -> Preparation:
    """Record-level parsing, shared by every table: the payload's JSON text, its Connect schema,
    the route value, and ERROR for records no table could take (undecodable, malformed, not an object).

    With ``tombstone_ids`` (row-level tables) a tombstone deletes the row its key names: the key is
    a JSON object of the ids, or the value of the single id column.

    When the payload is the value's text as it came (no envelope, transform or tombstone ids),
    PAYLOAD is left out and ``with_payload`` adds it: a cache of this frame then holds each
    record's text once, not twice (measured: 0.7 s per million records to build).

    With ``framed`` the values are framed by a schema registry (Avro or JSON Schema): the payload is
    each record decoded to JSON text, its schema the Connect schema of its writer schema, and the
    column SCHEMA_ID its id. With ``framed_key`` the keys are: KEY_TEXT holds each decoded,
    KEY_SCHEMA_ID its id, and a record whose key does not decode is bad, as Kafka Connect fails a
    record its key converter cannot read. With ``key_envelope`` a key in Connect's schema/payload
    envelope is its payload (KEY_TEXT); other keys are read as they are.

    ``check_objects`` False leaves to the rows' parse (``row_columns``) to find the values that open
    with a brace and are still no JSON object (malformed): checking them here costs a parse of every
    value. A condition over ROUTE (a record goes to exactly one table) leaves it to the parse of that
    table's rows only for the records it holds; the others are checked here.
    """
    once = bool(route_field) and not cached
    extra: list[Column] = []
    key_text, key_error = utf8_text(F.col("key")), None
    if framed_key is not None:
        key_text, _, key_error, key_id = framed_key.columns()
        extra += [key_id.alias(KEY_SCHEMA_ID), key_text.alias(KEY_TEXT)]
    elif key_envelope and (tombstone_ids is not None or transforms):  # the only readers of a key
        inner = F.get_json_object(key_text, "$.payload")
        key_text = F.when(inner.isNotNull() & F.array_contains(F.json_object_keys(key_text), "schema"), inner
                          ).otherwise(key_text)
        extra.append(key_text.alias(KEY_TEXT))
    if framed is not None:
        payload, schema, shape, schema_id = framed.columns()
        extra.append(schema_id.alias(SCHEMA_ID))
        return replace(_finish(payload, schema, shape, transforms, route_field, cdc_field, tombstone_ids, False,
                               extra, key_text, key_error), once=once)
    text = utf8_text(F.col("value"))
    undecodable = F.col("value").isNotNull() & text.isNull()
    if schemas_enable:
        payload = F.get_json_object(text, "$.payload")
        schema = F.get_json_object(text, "$.schema")
        shape = F.when(undecodable, F.lit(f"{UNDECODABLE}: value is not UTF-8 text")).when(
            F.get_json_object(text, "$").isNull(), F.lit(f"{MALFORMED_JSON}: value is malformed JSON")).when(
            payload.isNull(), F.lit(f"{NOT_AN_OBJECT}: value has no Kafka Connect schema/payload envelope "
                                    f"({VALUE_SCHEMAS_ENABLE}=true)"))
    else:
        payload, schema = text, F.lit(None).cast("string")
        # Unchecked (one table: the rows' parse checks), a value is still checked here when it does not
        # open with a brace, which costs no parse of the others.
        everywhere = check_objects is True
        shape = F.when(undecodable, F.lit(f"{UNDECODABLE}: value is not UTF-8 text")).otherwise(
            not_an_object(text) if everywhere else F.when(_not_braced(text).isNotNull(), not_an_object(text)))
    # A tombstone is no bad record: it is skipped, or deletes the row its key names (``_finish``).
    shape = F.when(F.col("value").isNotNull(), F.coalesce(shape, _not_braced(payload)))
    # Records to be cached leave out the payload when it is the value's text (``with_payload`` derives it
    # after the cache, which then holds the value once); uncached, the text is decoded once, here.
    as_came = cached and not schemas_enable and not transforms and tombstone_ids is None
    finished = _finish(payload, schema, shape, transforms, route_field, cdc_field, tombstone_ids, as_came, extra,
                       key_text, key_error)
    if schemas_enable or isinstance(check_objects, bool):
        return replace(finished, once=once)
    last = F.coalesce(F.col(ERROR), F.when(F.col("value").isNotNull() & ~check_objects, not_an_object(text)))
    return Preparation(finished.select, finished.transforms, finished.then, last, once)


def _finish(payload: Column, schema: Column, shape: Column, transforms: list[Transform],
            route_field: str | None, cdc_field: str | None, tombstone_ids: list[str] | None, as_came: bool,
            extra: list[Column], key: Column, key_error: Column | None) -> Preparation:
    tombstone = F.col("value").isNull()
    if key_error is not None:
        # A tombstone's key matters only to row-level tables (below); other sinks skip tombstones.
        shape = F.coalesce(shape, F.when(~tombstone, key_error))
    if tombstone_ids is not None:
        as_object = F.substring(F.ltrim(key), 1, 1) == "{"
        by_key = F.when(as_object, key)
        if len(tombstone_ids) == 1:
            by_key = by_key.otherwise(F.to_json(F.struct(key.alias(tombstone_ids[0]))))
        payload = F.when(tombstone, by_key).otherwise(payload)
        names_none = F.when(by_key.isNull(), F.lit(
            f"{MISSING_REQUIRED}: a tombstone deletes the row its key names, and this key names none"))
        shape = F.when(tombstone, names_none if key_error is None else F.coalesce(key_error, names_none)
                       ).otherwise(shape)
    select = [*[F.col(c) for c in (*META, "key", "value", "headers")], *([] if as_came else [payload.alias(PAYLOAD)]),
              schema.alias("_schema"), shape.alias(ERROR), *extra]
    if not as_came:
        payload = F.col(PAYLOAD)
    route = F.get_json_object(payload, f"$.{route_field}") if route_field else F.lit(None).cast("string")
    op = F.get_json_object(payload, f"$.{cdc_field}") if cdc_field else F.lit(None).cast("string")
    return Preparation(select, list(transforms), [route.alias(ROUTE),
                                                  F.when(F.col("value").isNull(), F.lit("D")).otherwise(op).alias(OP)])


def with_payload(prepared: DataFrame) -> DataFrame:
    """``prepare``'s records with PAYLOAD, which it leaves out when that is the value's text."""
    if PAYLOAD in prepared.columns:
        return prepared
    return prepared.withColumn(PAYLOAD, utf8_text(F.col("value")))
