"""Record values (JSON bytes) to rows of an Iceberg table, in Spark SQL.

The table's schema is the source of truth. Each value is parsed once into the top-level fields, a
number or boolean as itself, anything else as its JSON text that ``convert`` reads by the column's
type (``row_columns``). A record that parse cannot take as it is is parsed again as text, where a
conversion that fails on a value that was there becomes a per-record error naming the column and the
value, never a silent null.
"""

from __future__ import annotations

import base64
import decimal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.sink.columns import (
    CORRUPT,
    ERROR,
    KEY_SCHEMA_ID,
    KEY_TEXT,
    META,
    OP,
    PARSED,
    PAYLOAD,
    ROUTE,
    SCHEMA_ID,
    VARIANT,
)
from sinklab.sink.errors import (
    MALFORMED_JSON,
    MISSING_REQUIRED,
    NOT_AN_OBJECT,
    OUT_OF_RANGE,
    TYPE_MISMATCH,
    UNDECODABLE,
)
from sinklab.sink.keys import VALUE_SCHEMAS_ENABLE
from sinklab.sink.text import utf8_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sinklab.sink.registry import FramedDecoder
    from sinklab.sink.transforms import Transform

INT_RE = r"^\s*-?[0-9]+\s*$"
NUM_RE = r"^\s*-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?\s*$"
INT_BOUNDS = {T.ByteType: 2**7, T.ShortType: 2**15, T.IntegerType: 2**31}
FLOAT_MAX = 3.4028234663852886e38
DOUBLE_MAX = sys.float_info.max
# Spark's timestamps and dates end at year 9999: a larger epoch value is out of range, not an overflow.
MAX_EPOCH_MILLIS = 253402300799999
MAX_EPOCH_DAYS = 2932896


def _err(kind: str, name: str, raw: Column, what: str) -> Column:
    return F.concat(F.lit(f"{kind}: {name}: "), F.substring(raw, 1, 200), F.lit(f" {what}"))


def _connect_decimal_udf(dtype: T.DecimalType) -> Any:
    """Kafka Connect's Decimal logical type arrives as base64 of the unscaled big-endian integer."""
    scale = dtype.scale

    # useArrow named: otherwise Spark 4 guesses the kind of UDF from the type hints, and warns that it cannot.
    @F.udf(returnType=dtype, useArrow=False)
    def decode(text: str | None) -> decimal.Decimal | None:
        if text is None:
            return None
        try:
            unscaled = int.from_bytes(base64.b64decode(text, validate=True), "big", signed=True)
        except ValueError:
            return None
        return decimal.Decimal(unscaled).scaleb(-scale)

    return decode


def convert(raw: Column, dtype: T.DataType, name: str) -> tuple[Column, Column]:  # noqa: C901 - one case per type
    """(value, error) for one JSON text column converted to ``dtype``; error is null when fine.

    Every cast of a value is a ``try_cast``: under ANSI mode (Spark 4's default) a plain cast of a bad
    value fails the whole job, and a bad value must stay one record's error."""
    present = raw.isNotNull()
    if isinstance(dtype, T.StringType):
        return raw, F.lit(None).cast("string")
    if isinstance(dtype, T.LongType | T.IntegerType | T.ShortType | T.ByteType):
        as_long = F.when(raw.rlike(INT_RE), F.trim(raw).try_cast("long"))
        bound = INT_BOUNDS.get(type(dtype))
        ok = as_long.isNotNull() if bound is None else as_long.between(-bound, bound - 1)
        value = F.when(ok, as_long.cast(dtype))
        kind = dtype.simpleString()
        error = F.when(present & ~raw.rlike(INT_RE), _err(TYPE_MISMATCH, name, raw, f"is not an integer ({kind})")
                       ).when(present & ~ok, _err(OUT_OF_RANGE, name, raw, f"is out of range for {kind}"))
        return value, error
    if isinstance(dtype, T.DoubleType | T.FloatType):
        as_double = F.when(raw.rlike(NUM_RE), F.trim(raw).try_cast("double"))
        ok = as_double.isNotNull()
        if isinstance(dtype, T.FloatType):
            ok = ok & (F.abs(as_double) <= FLOAT_MAX)
        error = F.when(present & as_double.isNull(),
                       _err(TYPE_MISMATCH, name, raw, f"is not a number ({dtype.simpleString()})")
                       ).when(present & ~ok, _err(OUT_OF_RANGE, name, raw, "is out of range for float"))
        return F.when(ok, as_double.cast(dtype)), error
    if isinstance(dtype, T.BooleanType):
        lowered = F.lower(F.trim(raw))
        value = F.when(lowered == "true", F.lit(True)).when(lowered == "false", F.lit(False))
        return value, F.when(present & value.isNull(), _err(TYPE_MISMATCH, name, raw, "is not a boolean"))
    if isinstance(dtype, T.DecimalType):
        value = F.when(raw.rlike(NUM_RE), F.trim(raw).try_cast(dtype)).otherwise(_connect_decimal_udf(dtype)(raw))
        error = F.when(present & ~raw.rlike(NUM_RE) & value.isNull(),
                       _err(TYPE_MISMATCH, name, raw, f"is not a {dtype.simpleString()}")).when(
            present & value.isNull(), _err(OUT_OF_RANGE, name, raw, f"is out of range for {dtype.simpleString()}"))
        return value, error
    if isinstance(dtype, T.TimestampType | T.TimestampNTZType):
        target = "timestamp_ntz" if isinstance(dtype, T.TimestampNTZType) else "timestamp"
        # Epoch millis (Connect's Timestamp), else '2024-01-04 12:28:13' or ISO-8601 with or without zone.
        millis = F.trim(raw).try_cast("long")
        value = F.when(raw.rlike(INT_RE), F.when(F.abs(millis) <= MAX_EPOCH_MILLIS,
                                                 F.timestamp_millis(millis).cast(target))).otherwise(
            F.trim(raw).try_cast(target))
        return value, F.when(present & value.isNull(), _err(TYPE_MISMATCH, name, raw, "is not a timestamp"))
    if isinstance(dtype, T.DateType):
        # Epoch days (Connect's Date), else 'YYYY-MM-DD'.
        days = F.trim(raw).try_cast("int")
        value = F.when(raw.rlike(INT_RE), F.when(F.abs(days) <= MAX_EPOCH_DAYS,
                                                 F.date_add(F.lit("1970-01-01").cast("date"), days))
                       ).otherwise(F.trim(raw).try_cast("date"))
        return value, F.when(present & value.isNull(), _err(TYPE_MISMATCH, name, raw, "is not a date"))
    if isinstance(dtype, T.BinaryType):
        value = F.try_to_binary(raw, F.lit("base64"))
        return value, F.when(present & value.isNull(), _err(TYPE_MISMATCH, name, raw, "is not base64"))
    if isinstance(dtype, T.StructType):
        text_schema = T.StructType([T.StructField(f.name, T.StringType()) for f in dtype.fields])
        inner = F.from_json(raw, text_schema)
        parts = [convert(inner[f.name], f.dataType, f"{name}.{f.name}") for f in dtype.fields]
        required = [F.when(present & inner.isNotNull() & inner[f.name].isNull(),
                           F.lit(f"{MISSING_REQUIRED}: {name}.{f.name}: missing required field"))
                    for f in dtype.fields if not f.nullable]
        value = F.when(inner.isNotNull(), F.struct(*[v.alias(f.name) for (v, _), f in zip(parts, dtype.fields,
                                                                                            strict=True)]))
        errors = [e for _, e in parts] + required
        nested = F.concat_ws("; ", *errors) if errors else F.lit("")
        error = F.when(present & inner.isNull(), _err(TYPE_MISMATCH, name, raw, "is not a JSON object")).when(
            present & (nested != ""), nested)
        return value, error
    if isinstance(dtype, T.ArrayType):
        arr = F.from_json(raw, T.ArrayType(T.StringType()))
        value = F.transform(arr, lambda e: convert(e, dtype.elementType, f"{name}[]")[0])
        bad = F.exists(arr, lambda e: e.isNotNull() & convert(e, dtype.elementType, f"{name}[]")[1].isNotNull())
        error = F.when(present & arr.isNull(), _err(TYPE_MISMATCH, name, raw, "is not a JSON array")).when(
            present & bad,
            _err(TYPE_MISMATCH, name, raw, f"has an element that is not {dtype.elementType.simpleString()}"))
        return value, error
    if isinstance(dtype, T.MapType):
        m = F.from_json(raw, T.MapType(T.StringType(), T.StringType()))
        value = F.transform_values(m, lambda _, v: convert(v, dtype.valueType, f"{name}{{}}")[0])
        bad = F.exists(F.map_values(m), lambda v: v.isNotNull()
                       & convert(v, dtype.valueType, f"{name}{{}}")[1].isNotNull())
        error = F.when(present & m.isNull(), _err(TYPE_MISMATCH, name, raw, "is not a JSON object")).when(
            present & bad, _err(TYPE_MISMATCH, name, raw, f"has a value that is not {dtype.valueType.simpleString()}"))
        return value, error
    raise TypeError(f"column {name}: sinklab cannot write Iceberg columns of Spark type {dtype.simpleString()}")


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

    def apply(self, raw_df: DataFrame) -> DataFrame:
        out = raw_df.select(*self.select)
        if self.transforms:
            from sinklab.sink.transforms import apply_in_spark

            out = apply_in_spark(out, self.transforms)
        out = out.select("*", *self.then)
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
        return _finish(payload, schema, shape, transforms, route_field, cdc_field, tombstone_ids, False,
                       extra, key_text, key_error)
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
    shape = F.coalesce(shape, _not_braced(payload))
    # Records to be cached leave out the payload when it is the value's text (``with_payload`` derives it
    # after the cache, which then holds the value once); uncached, the text is decoded once, here.
    as_came = cached and not schemas_enable and not transforms and tombstone_ids is None
    finished = _finish(payload, schema, shape, transforms, route_field, cdc_field, tombstone_ids, as_came, extra,
                       key_text, key_error)
    if schemas_enable or isinstance(check_objects, bool):
        return finished
    last = F.coalesce(F.col(ERROR), F.when(F.col("value").isNotNull() & ~check_objects, not_an_object(text)))
    return Preparation(finished.select, finished.transforms, finished.then, last)


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


@dataclass(frozen=True)
class RowColumns:
    """``to_rows``'s expressions for one table schema. Built once, they serve every cycle that writes
    that schema: building them is some thousand py4j round trips (~50 ms of a one-record cycle,
    measured), using them a few."""

    computed: dict[str, Column]
    select: list[Column]  # the table's columns, the raw record's, and ERROR last
    error: Column  # ERROR's expression: why the record makes no row (null: it makes one)


def parse_type(dtype: T.DataType) -> T.DataType:
    """The type a top-level field is parsed into straight from the JSON: an integer as a long and a
    float as a double (their ranges checked after), a boolean as itself, anything else as its JSON text
    for ``convert`` (which reads dates, timestamps, decimals and nested values from their text)."""
    if isinstance(dtype, T.LongType | T.IntegerType | T.ShortType | T.ByteType):
        return T.LongType()
    if isinstance(dtype, T.DoubleType | T.FloatType):
        return T.DoubleType()
    if isinstance(dtype, T.BooleanType):
        return dtype
    return T.StringType()


def _in_range(value: Column, dtype: T.DataType) -> Column | None:
    """Whether a parsed number fits ``dtype``; None when every parsed value does."""
    bound = INT_BOUNDS.get(type(dtype))
    if bound is not None:
        return value.isNull() | value.between(-bound, bound - 1)
    if isinstance(dtype, T.FloatType | T.DoubleType):
        # 1e400 parses to infinity; as text it is no double at all.
        return value.isNull() | (F.abs(value) <= (FLOAT_MAX if isinstance(dtype, T.FloatType) else DOUBLE_MAX))
    return None


def row_columns(schema: T.StructType, case_insensitive: bool = False, whole_value: str | None = None) -> RowColumns:
    """One parse of each value into the fields' types (``parse_type``). A record that parse cannot take
    as it is (a field of another JSON type, a number out of its column's range) is parsed again as
    text, and only such a record: ``convert`` then names each bad field and why. A clean record is
    parsed once (measured in bench/README.md, "One parse into the table's types")."""
    text_fields = T.StructType([T.StructField(f.name, T.StringType()) for f in schema.fields])
    if case_insensitive:
        parsed = F.transform_keys(F.from_json(PAYLOAD, T.MapType(T.StringType(), T.StringType())),
                                  lambda k, _: F.lower(k))
        raw_of = {f.name: F.col(PARSED)[f.name.lower()] for f in schema.fields}
        computed = {PARSED: parsed}
        typed: dict[str, Column] = {}
        fast_path = F.lit(False)
    else:
        typed_fields = T.StructType([T.StructField(f.name, parse_type(f.dataType)) for f in schema.fields]
                                    + [T.StructField(CORRUPT, T.StringType())])
        # JSON's NaN and Infinity (or their strings) are no number to a table: such records take the text path.
        fast = F.from_json(PAYLOAD, typed_fields, {"columnNameOfCorruptRecord": CORRUPT,
                                                   "allowNonNumericNumbers": "false"})
        fits = [F.col(PARSED)[CORRUPT].isNull()] + [
            ok for f in schema.fields if (ok := _in_range(F.col(PARSED)[f.name], f.dataType)) is not None]
        # Not a computed column of its own: a clean record would pay a second generator's copy for a
        # null (measured); the optimizer repeats the expression per use, and the parse runs only for
        # the records that need it.
        retyped = F.when(~_all(fits), F.from_json(PAYLOAD, text_fields))
        computed = {PARSED: fast}
        raw_of = {f.name: F.when(retyped.isNull(), F.col(PARSED)[f.name]).otherwise(retyped[f.name])
                  for f in schema.fields if isinstance(parse_type(f.dataType), T.StringType)}
        raw_of |= {f.name: retyped[f.name] for f in schema.fields if f.name not in raw_of}
        typed = {f.name: F.col(PARSED)[f.name] for f in schema.fields
                 if not isinstance(parse_type(f.dataType), T.StringType)}
        fast_path = retyped.isNull()
    if any(isinstance(f.dataType, T.VariantType) for f in schema.fields):
        computed[VARIANT] = F.try_parse_json(F.col(PAYLOAD))
    variant = F.col(VARIANT)
    values, errors = [], []
    for field in schema.fields:
        raw = raw_of[field.name]
        present = raw.isNotNull()
        if isinstance(field.dataType, T.VariantType):
            raw = F.col(PAYLOAD) if field.name == whole_value else raw
            value = variant if field.name == whole_value else F.variant_get(variant, variant_path(field.name),
                                                                             "variant")
            error = F.when(F.col("value").isNotNull() & variant.isNull(),
                           _err(TYPE_MISMATCH, field.name, F.col(PAYLOAD), "does not parse as a VARIANT"))
            present = raw.isNotNull()
        else:
            value, error = convert(raw, field.dataType, field.name)
            if field.name in typed:
                # Parsed straight into its type and in range: the text path's value, without its text.
                parsed = typed[field.name]
                value = F.when(fast_path, parsed.cast(field.dataType)).otherwise(value)
                error = F.when(~fast_path, error)
                present = F.when(fast_path, parsed.isNotNull()).otherwise(present)
        values.append(value.alias(field.name))
        errors.append(error)
        if not field.nullable:
            # A tombstone names only its row's ids (with_operation checks those): it deletes, it leaves nothing null.
            errors.append(F.when(~present & F.col("value").isNotNull(),
                                 F.lit(f"{MISSING_REQUIRED}: {field.name}: missing required field")))
    joined = F.concat_ws("; ", *errors)
    error = F.when(joined != "", joined)
    if not case_insensitive:
        # A value the parse could not take at all is malformed or no object: ``prepare`` leaves that to
        # this parse when it is the only one (check_objects=False), so that a record is parsed once.
        error = F.coalesce(F.when(F.col(PARSED)[CORRUPT].isNotNull(), not_an_object(F.col(PAYLOAD))), error)
    # The raw record rides along so that a bad one can be dead-lettered as it came.
    return RowColumns(computed, [*values, *[F.col(c) for c in (*META, "key", "value", "headers", OP)],
                                 error.alias(ERROR)], error)


def _all(conditions: list[Column]) -> Column:
    out = conditions[0]
    for condition in conditions[1:]:
        out = out & condition
    return out


def to_rows(records: DataFrame, schema: T.StructType, case_insensitive: bool = False,
            whole_value: str | None = None, columns: RowColumns | None = None, *,
            prior_error: bool = False) -> DataFrame:
    """Prepared records as rows of ``schema`` (the table's columns in order), plus META and ERROR;
    ``columns`` are ``row_columns`` of the same arguments, when kept from an earlier cycle.
    ``prior_error``: a record that comes with ERROR set (by ``prepare``) keeps it, its columns
    meaningless, so that one pass over the records yields both kinds.

    A VARIANT column takes its field as the JSON it is (an object, a list, a string, ...), or with
    ``whole_value`` naming it, the record's whole value: both from one parse of the value."""
    columns = columns or row_columns(schema, case_insensitive, whole_value)
    select = columns.select
    if prior_error:
        select = [*select[:-1], F.coalesce(F.col(ERROR), columns.error).alias(ERROR)]
    return parse_once(records, columns.computed).select(*select)


def variant_path(name: str) -> str:
    """A top-level field's path in a VARIANT, quoted when the name is not a plain identifier."""
    if name.isidentifier():
        return f"$.{name}"
    return "$['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"


def parse_once(records: DataFrame, computed: dict[str, Column]) -> DataFrame:
    """``records`` with each of ``computed`` (the parsed fields as PARSED, say) as a column, computed
    once per record.

    A projected column is not a computed value to the optimizer: it inlines the expression into
    every projection and filter that uses it (the ERROR filter included), and then prunes each
    ``from_json`` copy to the one field it feeds, so a record was parsed once per reference
    (17 times for a 7-column table, measured 4x slower). A generator's output is a barrier it
    does not cross: ``inline`` of a one-element array yields the row once, with the parse done.
    """
    return records.select("*", F.inline(F.array(F.struct(*[c.alias(name) for name, c in computed.items()]))))


def _b64_bytes(encoded: str) -> bytes:
    return base64.standard_b64decode(encoded)


def fast_py4j_bytes() -> None:
    """py4j hands a JVM ``byte[]`` to Python (an observed row, pickled) decoding it one byte at a time in a
    Python loop: 19 ms for the 270 KB of a cycle's 460 dead letters. The same ``bytes``, decoded in C
    (bench/README.md, "Dead letters"). Installed once, for the whole process."""
    from py4j import protocol

    if protocol.decode_bytearray is not _b64_bytes:
        protocol.decode_bytearray = _b64_bytes


class Observed:
    """A DataFrame (``df``) whose ``metrics`` (aggregates) the next action that runs it computes on the
    way, with no job of their own. Filters above it are not pushed below it: it sees every row."""

    def __init__(self, df: DataFrame, *metrics: Column):
        from pyspark.sql import Observation

        fast_py4j_bytes()
        self._observation = Observation()
        self.df = df.observe(self._observation, *metrics)

    def result(self, wait_s: float = 0.0) -> dict[str, Any] | None:
        """The metrics; None when no action reported them within ``wait_s``. Spark hands them over
        from its listener bus, a moment after the action returns: a caller that knows an action ran
        waits for them. Never blocks for good, unlike ``Observation.get``, which waits forever for
        an action that did not run."""
        future = self._observation._jo.future()  # type: ignore[union-attr]
        deadline = time.monotonic() + wait_s
        while not future.isCompleted():
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.002)
        outcome = future.value().get()
        # Empty when Spark optimized the observed plan away (a table whose route takes nothing): no
        # figures, whatever the action did.
        if not outcome.isSuccess() or outcome.get().size() == 0:
            return None
        return self._observation.get


class BadRows(Observed):
    """A table's converted rows, with their bad ones (ERROR set) counted by the next action that
    runs them: the table's write. A clean write then needs no job of its own to look for bad rows
    (that job parsed every record a second time, measured ~20% of a cycle), and ``letters`` (an
    aggregate of the bad rows, ``dlq.observed``) brings them along, so that a write with some needs
    none either."""

    def __init__(self, rows: DataFrame, letters: Column):
        super().__init__(rows, F.count(F.col(ERROR)).alias("bad"), letters)
        self.source = rows

    def bad(self) -> DataFrame:
        return self.source.where(F.col(ERROR).isNotNull())


def error_kind(error: Column) -> Column:
    return F.substring_index(error, ":", 1)


def with_operation(rows: DataFrame, ids: list[str], cdc_field: str | None) -> DataFrame:
    """Normalise each row's change to I, U or D (upsert mode without a CDC field: U), and make a
    change without its id, or with an operation sinklab cannot read, a bad record."""
    if cdc_field:
        first = F.upper(F.substring(F.trim(F.col(OP)), 1, 1))
        op = F.when(first.isin("I", "C", "R"), F.lit("I")).when(first == "U", F.lit("U")).when(first == "D", F.lit("D"))
        op_error = F.when(op.isNull(), F.concat(F.lit(f"{TYPE_MISMATCH}: {cdc_field}: "),
                                                F.coalesce(F.col(OP), F.lit("null")), F.lit(" is not I, U or D")))
    else:
        op, op_error = F.when(F.col(OP) == "D", F.lit("D")).otherwise(F.lit("U")), F.lit(None).cast("string")
    id_errors = [F.when(F.col(c).isNull(), F.lit(f"{MISSING_REQUIRED}: {c}: the row id is missing")) for c in ids]
    joined = F.concat_ws("; ", F.col(ERROR), op_error, *id_errors)
    return rows.withColumn(OP, op).withColumn(ERROR, F.when(joined != "", joined))


def newest_changes(rows: DataFrame, ids: list[str]) -> DataFrame:
    """Each id's last change of ``rows``, in (partition, offset) order: what a commit applies of them."""
    from pyspark.sql import Window

    newest = Window.partitionBy(*ids).orderBy(F.col("partition").desc(), F.col("offset").desc())
    return rows.withColumn("_sinklab_rank", F.row_number().over(newest)).where("_sinklab_rank = 1").drop(
        "_sinklab_rank")
