"""Kafka Connect's own transforms (``org.apache.kafka.connect.transforms``), each as its class runs on a
record: schemaless values (maps) and values with the JSON converter's schema (Structs) alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.config import transforms as tf
from sinklab.sink.records.columns import ERROR
from sinklab.sink.records.transform.parts import (
    DATE,
    ISO,
    TIME,
    TIMESTAMP,
    Rec,
    Side,
    entry,
    field_schema,
    fields_of,
    is_null,
    keys_at,
    kind_of,
    name_of,
    need_object,
    no_map,
    obj,
    ordered,
    scalar,
    schema_field,
    set_keys,
    text_of,
    unique_keys,
    var,
    why,
    with_fields,
    with_keys,
    with_values,
)


def insert_field(t: tf.InsertField, r: Rec, meta: dict[str, Column]) -> Rec:
    s = r.side(t)
    # (setting, Connect type, logical type with a schema, value), in Kafka's order. Without a schema Kafka
    # inserts the timestamp as epoch millis too (a Long), so one value serves both.
    wanted = [(t.topic, "string", None, scalar(r.topic)),
              (t.partition, "int32", None, scalar(meta["partition"].cast("int"))),
              (t.offset, "int64", None, scalar(meta["offset"])),
              (t.timestamp, "int64", TIMESTAMP, scalar(meta["millis"])),
              (t.static, "string", None, scalar(F.lit(t.static_value)))]
    entries: dict[str, Column] = {}
    added: list[Column] = []
    out = need_object(r, t, s)
    for setting, kind, logical, value in wanted:
        if not setting:
            continue
        name, required = setting.rstrip("!?"), setting.endswith("!")
        if required:
            out = out.fail(s.m.isNotNull() & value.isNull(), why(t, f"{name} is required and the record has none"))
        entries[name] = value
        added.append(schema_field(name, kind, not required, logical))
    fields = F.concat(F.filter(fields_of(s.schema), lambda f: ~name_of(f).isin(list(entries))), F.array(*added))
    return out.with_side(t, with_keys(s.m, entries), s.bare, with_fields(s.schema, fields))


def replace_field(t: tf.ReplaceField, r: Rec) -> Rec:
    s = r.side(t)

    def kept(name: Column) -> Column:
        out = ~name.isin(list(t.exclude)) if t.exclude else F.lit(True)
        return out & name.isin(list(t.include)) if t.include else out

    def renamed(name: Column) -> Column:
        out = name
        for old, new in t.renames:
            out = F.when(name == old, F.lit(new)).otherwise(out)
        return out

    out = need_object(r, t, s)
    value = F.map_filter(s.m, lambda k, _: kept(k))
    if t.renames:
        names = F.transform(F.map_keys(value), renamed)
        out = out.fail(s.m.isNotNull() & ~unique_keys(names), why(t, "its renames give two fields one name"))
        value = F.when(unique_keys(names), F.map_from_arrays(names, F.map_values(value)))
    fields = F.transform(F.filter(fields_of(s.schema), lambda f: kept(name_of(f))),
                         lambda f: set_keys(f, {"field": scalar(renamed(name_of(f)))}))
    return out.with_side(t, value, s.bare, with_fields(s.schema, fields))


def tombstone_refused(r: Rec, t: tf.Step) -> Rec:
    """Kafka's classes that require a map (``requireMap``) fail on a tombstone's null value, as here."""
    null = F.col("value").isNull() if t.side == "value" else F.col("key").isNull()
    return r.fail(F.col(ERROR).isNull() & null, why(t, f"needs a struct or map, and the record's {t.side} is null"))


def _masked(replacement: str | None) -> Callable[[Column], Column]:
    def masked(x: Column) -> Column:
        kind = kind_of(x)
        numeric = (kind.startswith("BIGINT") | kind.startswith("INT") | kind.startswith("DECIMAL")
                   | kind.isin("DOUBLE", "FLOAT") | kind.startswith("SMALLINT") | kind.startswith("TINYINT"))
        if replacement is None:
            out = (F.when(kind == "STRING", scalar(F.lit(""))).when(kind == "BOOLEAN", scalar(F.lit(False)))
                   .when(kind.startswith("ARRAY"), F.parse_json(F.lit("[]")))
                   .when(kind.startswith("OBJECT"), F.parse_json(F.lit("{}")))
                   .when(numeric, scalar(F.lit(0))))
        else:
            as_number = F.lit(replacement).try_cast("double")
            out = F.when(kind == "STRING", scalar(F.lit(replacement))).when(
                numeric & as_number.isNotNull(), F.try_parse_json(F.lit(replacement)))
        return F.when(is_null(x), x).otherwise(out)
    return masked


def mask_field(t: tf.MaskField, r: Rec) -> Rec:
    s = r.side(t)
    masked = _masked(t.replacement)
    out = tombstone_refused(need_object(r, t, s), t)
    if t.replacement is not None:
        for name in t.fields:
            x = s.m[name]
            out = out.fail(x.isNotNull() & masked(x).isNull(), why(t, f"cannot mask {name} with {t.replacement!r}"))
    return out.with_side(t, with_values(s.m, dict.fromkeys(t.fields, masked)), s.bare)


_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_CAST_SQL = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint", "float32": "float",
             "float64": "double", "boolean": "boolean", "string": "string"}


def cast_value(x: Column, kind: str) -> Column:
    """A VARIANT cast as Kafka's Cast casts a value (a string parsed, a number narrowed, a boolean 1 or 0)."""
    source = kind_of(x)
    if kind == "string":
        out = scalar(text_of(x))
    elif kind == "boolean":
        out = scalar(F.when(source == "STRING", F.lower(F.variant_get(x, "$", "string")) == "true").otherwise(
            F.try_variant_get(x, "$", "double") != 0))
    else:
        as_int = F.variant_get(x, "$", "boolean").cast("int")
        if kind.startswith("float"):
            number = F.when(source == "BOOLEAN", as_int).otherwise(F.try_variant_get(x, "$", "double"))
        else:
            # As Java's Number.byteValue() and the like: a double is truncated, saturating at an int's range (a
            # long's for int64; NaN is 0), and an integer keeps the low bits of the narrower type (300 is 44
            # as int8): sign-extended shifts, which cannot overflow.
            bits = _BITS[kind]
            double = F.try_variant_get(x, "$", "double")
            top = 2.0 ** 63 if bits == 64 else 2.0 ** 31
            whole = F.when(F.isnan(double), F.lit(0.0)).otherwise(F.greatest(F.least(double, F.lit(top - 1)),
                                                                             F.lit(-top))).cast("bigint")
            number = F.when(source == "BOOLEAN", as_int).when(
                source.startswith("DECIMAL") | source.isin("DOUBLE", "FLOAT"), whole).otherwise(
                F.try_variant_get(x, "$", "bigint"))
            if bits < 64:
                number = F.shiftright(F.shiftleft(number.cast("bigint"), 64 - bits), 64 - bits)
        out = scalar(number.try_cast(_CAST_SQL[kind]))
    return F.when(is_null(x), x).otherwise(out)


def cast(t: tf.Cast, r: Rec) -> Rec:
    s = r.side(t)
    if t.spec[0][0] is None:
        kind = t.spec[0][1]
        whole = s.whole()
        value = cast_value(whole, kind)
        schema = F.when(s.schema.isNotNull(), set_keys(s.schema, {"type": scalar(F.lit(kind))}))
        out = r.fail(whole.isNotNull() & value.isNull(), why(t, f"cannot cast the {t.side} to {kind}"))
        return out.with_side(t, no_map(), value, schema)
    out = need_object(r, t, s)
    types = dict(t.spec)
    for name, kind in types.items():
        assert name is not None
        x = s.m[name]
        out = out.fail(x.isNotNull() & cast_value(x, kind).isNull(), F.concat(
            F.lit(why(t, f"cannot cast {name} to {kind}: ")), F.substring(F.to_json(x), 1, 100)))
    value = with_values(s.m, {n: (lambda x, k=k: cast_value(x, k)) for n, k in types.items()})
    fields = F.transform(fields_of(s.schema), lambda f: F.coalesce(*[
        F.when(name_of(f) == n, set_keys(f, {"type": scalar(F.lit(k))})) for n, k in types.items()], f))
    return out.with_side(t, value, s.bare, with_fields(s.schema, fields))


_PER_SECOND = {"seconds": 1, "milliseconds": 1_000, "microseconds": 1_000_000, "nanoseconds": 1_000_000_000}


def timestamp_converter(t: tf.TimestampConverter, r: Rec) -> Rec:
    s = r.side(t)
    x = s.whole() if t.field is None else s.m[t.field]
    own = s.schema if t.field is None else field_schema(s.schema, t.field)
    logical = F.variant_get(own, "$.name", "string")
    kind = kind_of(x)
    # The instant as a timestamp, by the schema's type when there is one, else by the value's own.
    unix = F.try_variant_get(x, "$", "bigint")
    per_s = _PER_SECOND[t.unix_precision]
    from_unix = F.timestamp_micros((unix / (per_s // 1_000_000)).cast("long")) if per_s > 1_000_000 else (
        F.timestamp_micros(unix * (1_000_000 // per_s)))
    text = F.try_variant_get(x, "$", "string")
    # SimpleDateFormat's letters for the usual fields (y M d H m s S X Z 'T') are Spark's too.
    parsed = F.try_to_timestamp(text, F.lit(t.format)) if t.format else F.lit(None).cast("timestamp")
    millis_typed = F.timestamp_millis(unix)
    instant = (F.when(logical.isin(TIMESTAMP, TIME), millis_typed)
               .when(logical == DATE, F.timestamp_seconds(unix * 86400))
               .when(own.isNotNull() & (F.variant_get(own, "$.type", "string") == "string"), parsed)
               .when(own.isNotNull(), from_unix)
               .when(kind == "STRING", parsed)
               .when(kind.startswith("BIGINT") | kind.startswith("INT"), from_unix))
    millis = F.unix_millis(instant)
    day = F.unix_millis(F.date_trunc("day", instant))
    if t.target == "string":
        schemaless, typed, out_schema = scalar(F.date_format(instant, t.format or ISO)), None, ("string", None)
    elif t.target == "unix":
        micros = F.unix_micros(instant)
        schemaless = scalar(micros * (per_s // 1_000_000) if per_s >= 1_000_000 else
                            (micros / (1_000_000 // per_s)).cast("long"))
        typed, out_schema = None, ("int64", None)
    elif t.target == "Timestamp":
        schemaless, typed, out_schema = scalar(F.date_format(instant, ISO)), scalar(millis), ("int64", TIMESTAMP)
    elif t.target == "Date":
        schemaless = scalar(F.date_format(F.date_trunc("day", instant), ISO))
        typed, out_schema = scalar((day / 86_400_000).cast("int")), ("int32", DATE)
    else:
        schemaless = scalar(F.date_format(F.timestamp_millis(millis - day), ISO))
        typed, out_schema = scalar((millis - day).cast("int")), ("int32", TIME)
    converted = schemaless if typed is None else F.when(s.schema.isNotNull(), typed).otherwise(schemaless)
    converted = F.when(is_null(x), x).otherwise(converted)
    out = r.fail(~is_null(x) & instant.isNull(), F.concat(F.lit(why(
        t, f"cannot read {t.field or 'the ' + t.side} as a timestamp" + (f" of format {t.format!r}" if t.format
                                                                          else "") + ": ")),
        F.substring(F.to_json(x), 1, 100)))
    parts = {"type": scalar(F.lit(out_schema[0]))}
    if out_schema[1]:
        parts |= {"name": scalar(F.lit(out_schema[1])), "version": scalar(F.lit(1))}

    def retyped(f: Column) -> Column:
        plain = F.map_filter(obj(f), lambda k, _: ~k.isin("name", "version", "type"))
        return var(F.map_concat(plain, F.create_map(*[y for k, c in parts.items() for y in (F.lit(k), c)])))

    if t.field is None:
        return out.with_side(t, no_map(), converted, F.when(s.schema.isNotNull(), retyped(s.schema)))
    out = need_object(out, t, s)
    fields = F.transform(fields_of(s.schema), lambda f: F.when(name_of(f) == t.field, retyped(f)).otherwise(f))
    return out.with_side(t, with_keys(s.m, {t.field: converted}), s.bare, with_fields(s.schema, fields))


def extract_field(t: tf.ExtractField, r: Rec) -> Rec:
    s = r.side(t)
    value, schema = s.m[t.field[0]], field_schema(s.schema, t.field[0])
    for name in t.field[1:]:
        value, schema = obj(value)[name], field_schema(schema, name)
    out = need_object(r, t, s)
    if t.side == "value":
        # A record whose value is now null is one the sink skips, as Apache's sink skips a null value.
        out = replace(out, dropped=out.dropped | (s.m.isNotNull() & is_null(value)))
    m = obj(value)
    if t.side == "value":  # the object's fields in the order the record gave them
        m = ordered(m, keys_at("$." + ".".join(t.field)))
    return out.with_side(t, m, F.when(m.isNull(), value), schema)


def hoist_field(t: tf.HoistField, r: Rec) -> Rec:
    s = r.side(t)
    field = F.when(s.schema.isNotNull(), set_keys(s.schema, {"field": scalar(F.lit(t.field))}))
    schema = F.when(s.schema.isNotNull(), var(F.named_struct(
        F.lit("type"), F.lit("struct"), F.lit("optional"), F.lit(False), F.lit("fields"), F.array(field))))
    return r.with_side(t, F.when(s.present, F.create_map(F.lit(t.field), s.whole())), None, schema)


def value_to_key(t: tf.ValueToKey, r: Rec) -> Rec:
    s = Side(r.value, r.bare, r.schema)
    key = var(F.create_map(*[x for n in t.fields for x in (F.lit(n), s.m[n])]))
    out = tombstone_refused(need_object(r, t, s), t)
    for n in t.fields:
        out = out.fail(s.m.isNotNull() & ~F.map_contains_key(s.m, n), why(t, f"the value has no field {n}"))
    return replace(out, key=F.when(s.m.isNotNull(), key).otherwise(r.key))


def flatten(t: tf.Flatten, r: Rec, depth: int = 8) -> Rec:
    """Nested objects flattened one level per round, ``depth`` rounds: a record nested deeper is an error
    naming the limit, never left half flat. The rounds work on the entries (a map checks each key it
    is built with), and the map is built once at the end."""
    s = r.side(t)

    def nested(entries: Column) -> Column:
        return F.exists(entries, lambda e: obj(e["value"]).isNotNull())

    def one_level(entries: Column, _: Column) -> Column:
        return F.when(nested(entries), F.flatten(F.transform(entries, lambda e: F.coalesce(
            F.transform(F.map_entries(obj(e["value"])),
                        lambda x: entry(F.concat(e["key"], F.lit(t.delimiter), x["key"]), x["value"])),
            F.array(e))))).otherwise(entries)

    # The rounds as aggregate's steps over its accumulator, each skipped once the record is flat.
    entries = F.aggregate(F.sequence(F.lit(1), F.lit(depth)), F.map_entries(s.m), one_level)
    fields = fields_of(s.schema)
    for _ in range(depth):
        fields = F.flatten(F.transform(fields, lambda f: F.when(
            (F.variant_get(f, "$.type", "string") == "struct") & F.variant_get(f, "$.name", "string").isNull(),
            F.transform(fields_of(f), lambda x: set_keys(x, {
                "field": scalar(F.concat(name_of(f), F.lit(t.delimiter), name_of(x))),
                # A field under an optional struct can be missing however required it is itself.
                "optional": scalar(F.coalesce(F.variant_get(f, "$.optional", "boolean"), F.lit(True))
                                   | F.coalesce(F.variant_get(x, "$.optional", "boolean"), F.lit(True)))}))
        ).otherwise(F.array(f))))
    flat = "_sinklab_t_flat"
    out = replace(need_object(r, t, s), pre=((flat, entries),))
    entries = F.col(flat)
    names = F.transform(entries, lambda e: e["key"])
    deeper = nested(entries)
    out = out.fail(s.m.isNotNull() & deeper, why(
        t, f"the {t.side} nests deeper than {depth + 1} levels, which sinklab flattens at most"))
    out = out.fail(s.m.isNotNull() & ~unique_keys(names), why(t, "flattening gives two fields one name"))
    value = F.when(unique_keys(names), F.map_from_entries(entries))
    return out.with_side(t, value, s.bare, with_fields(s.schema, fields))


def regex_router(t: tf.RegexRouter, r: Rec) -> Rec:
    whole = f"^(?:{t.regex})$"
    return replace(r, topic=F.when(r.topic.rlike(whole), F.regexp_replace(r.topic, F.lit(whole),
                                                                          F.lit(t.replacement))).otherwise(r.topic))


def timestamp_router(t: tf.TimestampRouter, r: Rec, meta: dict[str, Column]) -> Rec:
    stamp = F.date_format(F.timestamp_millis(meta["millis"]), t.timestamp_format)
    topic = F.replace(F.replace(F.lit(t.topic_format), F.lit("${topic}"), r.topic), F.lit("${timestamp}"), stamp)
    out = r.fail(meta["millis"].isNull(), why(t, "the record has no timestamp"))
    return replace(out, topic=topic)


def header_entry(name: str, value: Column) -> Column:
    return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))


def header_from(t: tf.HeaderFrom, r: Rec) -> Rec:
    s = r.side(t)
    added = [header_entry(h, F.when(~is_null(s.m[f]), text_of(s.m[f]))) for f, h in zip(t.fields, t.headers,
                                                                                         strict=True)]
    out = replace(need_object(r, t, s), headers=F.concat(F.coalesce(r.headers, F.array()), F.array(*added)))
    if not t.move:
        return out
    value = F.map_filter(s.m, lambda k, _: ~k.isin(list(t.fields)))
    fields = F.filter(fields_of(s.schema), lambda f: ~name_of(f).isin(list(t.fields)))
    return out.with_side(t, value, s.bare, with_fields(s.schema, fields))


def set_schema_metadata(t: tf.SetSchemaMetadata, r: Rec) -> Rec:
    if t.side == "key":  # keys are read without a schema here
        return r
    entries = {}
    if t.name is not None:
        entries["name"] = scalar(F.lit(t.name))
    if t.version is not None:
        entries["version"] = scalar(F.lit(t.version))
    return replace(r, schema=F.when(r.schema.isNotNull(), set_keys(r.schema, entries))) if entries else r


def drop_headers(t: tf.DropHeaders, r: Rec) -> Rec:
    return replace(r, headers=F.filter(r.headers, lambda h: ~h["key"].isin(list(t.headers))))


def insert_header(t: tf.InsertHeader, r: Rec) -> Rec:
    return replace(r, headers=F.concat(F.coalesce(r.headers, F.array()), F.array(
        header_entry(t.header, F.lit(t.literal)))))


def filter_out(t: tf.Filter, r: Rec) -> Rec:
    return replace(r, dropped=F.lit(True))
