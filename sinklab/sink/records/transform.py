"""A connector's transform chain as Spark expressions, as Kafka Connect runs it on each record before the
sink sees it: no record goes through Python.

Each step works on the record's parts held as columns: its value (a VARIANT), the value's Connect schema
(a VARIANT, with the envelope) the key (a VARIANT), the topic, the headers, whether it is dropped, and the
error that stops it (a transform that cannot take a record names itself and why: the record is a dead
letter, as Connect's error handling makes it). A step is one projection: the next refers to its columns
by name, so a chain's expressions never nest into each other. A predicate (``negate``) picks the records
a step applies to; the others pass it unchanged.

Values keep JSON's shapes; what Kafka Connect holds as a ``java.util.Date`` (a timestamp after
TimestampConverter, without a schema) becomes ISO-8601 text, which a timestamp column reads as the
timestamp it is. With a schema, timestamps are epoch milliseconds with Connect's logical type, as the
JSON converter writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.config import transforms as tf
from sinklab.sink.records.columns import ERROR, KEY_TEXT, PAYLOAD
from sinklab.sink.records.kinds import NOT_AN_OBJECT, TRANSFORM

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# The record's parts while the chain runs.
VALUE, SCHEMA, KEY, TOPIC, HEADERS, DROPPED, FAILED, ORDER = (f"_sinklab_t_{p}" for p in (
    "value", "schema", "key", "topic", "headers", "dropped", "failed", "order"))
PARTS = (VALUE, SCHEMA, KEY, TOPIC, HEADERS, DROPPED, FAILED, ORDER)
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
ISO = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"


@dataclass(frozen=True)
class Rec:
    """One step's view of the record: a column per part (``side`` is the part the step works on)."""

    value: Column
    schema: Column
    key: Column
    topic: Column
    headers: Column
    dropped: Column
    failed: Column
    # The value's fields in the order the record gave them (a VARIANT object keeps its keys sorted): what an
    # auto-created table's columns follow, as without transforms. Fields a step adds come after them.
    order: Column

    @staticmethod
    def named() -> Rec:
        return Rec(*(F.col(p) for p in PARTS))

    def columns(self) -> list[Column]:
        return [self.value, self.schema, self.key, self.topic, self.headers, self.dropped, self.failed, self.order]

    def side(self, t: tf.Step) -> tuple[Column, Column]:
        """The operating value and its schema (a key has none here: keys are read as text or JSON)."""
        return (self.value, self.schema) if t.side == "value" else (self.key, F.lit(None).cast("variant"))

    def with_side(self, t: tf.Step, value: Column, schema: Column | None = None) -> Rec:
        if t.side == "value":
            return replace(self, value=value, schema=self.schema if schema is None else schema)
        return replace(self, key=value)

    def fail(self, when: Column, why: Column | str) -> Rec:
        """The record fails here ``when`` so, unless an earlier step dropped it (it never got here)."""
        reason = F.lit(why) if isinstance(why, str) else why
        return replace(self, failed=F.coalesce(self.failed, F.when(when & ~self.dropped, reason)))


# ---- VARIANT helpers
def keys_at(path: str) -> Column:
    """The keys of the object at ``path`` of the record's value as it came, in their order there."""
    return F.map_keys(F.from_json(F.get_json_object(F.col(PAYLOAD), path), "map<string,string>"))


def obj(v: Column) -> Column:
    """A VARIANT object as a map (null for anything else)."""
    return F.try_variant_get(v, "$", "map<string,variant>")


def var(c: Column) -> Column:
    """A map, struct or array as a VARIANT object; a scalar as a VARIANT."""
    return F.to_variant_object(c)


def scalar(c: Column) -> Column:
    return c.cast("variant")


def text_of(v: Column) -> Column:
    """A VARIANT as text: a string as itself, anything else as its JSON."""
    return F.when(F.schema_of_variant(v) == "STRING", F.variant_get(v, "$", "string")).otherwise(F.to_json(v))


def kind_of(v: Column) -> Column:
    return F.schema_of_variant(v)


def fields_of(schema: Column) -> Column:
    return F.try_variant_get(schema, "$.fields", "array<variant>")


def name_of(field: Column) -> Column:
    return F.variant_get(field, "$.field", "string")


def with_keys(v: Column, entries: dict[str, Column]) -> Column:
    """A VARIANT object with ``entries`` set (replacing keys of the same names)."""
    names = list(entries)
    kept = F.map_filter(obj(v), lambda k, _: ~k.isin(names))
    return var(F.map_concat(kept, F.create_map(*[x for n, c in entries.items() for x in (F.lit(n), c)])))


def with_fields(schema: Column, fields: Column) -> Column:
    return F.when(schema.isNotNull(), with_keys(schema, {"fields": var(fields)}))


def replaced(m: Column, entries: dict[str, Column]) -> Column:
    """The map ``m`` as a VARIANT object, with the values of ``entries`` for those of its keys it has."""
    present = F.map_filter(F.map_from_arrays(F.array(*[F.lit(n) for n in entries]), F.array(*entries.values())),
                           lambda k, _: F.map_contains_key(m, k))
    return var(F.map_concat(F.map_filter(m, lambda k, _: ~k.isin(list(entries))), present))


def schema_field(name: str, kind: str, optional: bool = True, logical: str | None = None) -> Column:
    parts = [F.lit("field"), F.lit(name), F.lit("type"), F.lit(kind), F.lit("optional"), F.lit(optional)]
    if logical:
        parts += [F.lit("name"), F.lit(logical), F.lit("version"), F.lit(1)]
    return var(F.named_struct(*parts))


def field_schema(schema: Column, name: str) -> Column:
    return F.element_at(F.filter(fields_of(schema), lambda f: name_of(f) == name), 1)


def _why(t: tf.Step, what: str) -> str:
    return f"{TRANSFORM}: transform {t.alias!r} ({type(t).__name__}): {what}"


def need_object(r: Rec, t: tf.Step, v: Column) -> Rec:
    return r.fail(v.isNotNull() & obj(v).isNull(), _why(t, "needs a struct or map, and the record's "
                                                       f"{t.side} is none"))


# ---- Kafka Connect's transforms
def insert_field(t: tf.InsertField, r: Rec, meta: dict[str, Column]) -> Rec:
    v, s = r.side(t)
    millis = meta["millis"]
    # (setting, Connect type, logical type with a schema, value), in Kafka's order. Without a schema Kafka
    # inserts the timestamp as epoch millis too (a Long), so one value serves both.
    wanted = [(t.topic, "string", None, scalar(r.topic)),
              (t.partition, "int32", None, scalar(meta["partition"].cast("int"))),
              (t.offset, "int64", None, scalar(meta["offset"])), (t.timestamp, "int64", TIMESTAMP, scalar(millis)),
              (t.static, "string", None, scalar(F.lit(t.static_value)))]
    entries: dict[str, Column] = {}
    added: list[Column] = []
    out = need_object(r, t, v)
    for setting, kind, logical, value in wanted:
        if not setting:
            continue
        name, required = setting.rstrip("!?"), setting.endswith("!")
        if required:
            out = out.fail(v.isNotNull() & value.isNull(), _why(t, f"{name} is required and the record has none"))
        entries[name] = value
        added.append(schema_field(name, kind, not required, logical))
    fields = F.concat(F.filter(fields_of(s), lambda f: ~name_of(f).isin(list(entries))), F.array(*added))
    return out.with_side(t, F.when(v.isNotNull(), with_keys(v, entries)), with_fields(s, fields))


def replace_field(t: tf.ReplaceField, r: Rec) -> Rec:
    v, s = r.side(t)

    def kept(name: Column) -> Column:
        out = ~name.isin(list(t.exclude)) if t.exclude else F.lit(True)
        return out & name.isin(list(t.include)) if t.include else out

    def renamed(name: Column) -> Column:
        out = name
        for old, new in t.renames:
            out = F.when(name == old, F.lit(new)).otherwise(out)
        return out

    value = var(F.transform_keys(F.map_filter(obj(v), lambda k, _: kept(k)), lambda k, _: renamed(k)))
    fields = F.transform(F.filter(fields_of(s), lambda f: kept(name_of(f))),
                         lambda f: with_keys(f, {"field": scalar(renamed(name_of(f)))}))
    out = need_object(r, t, v).with_side(t, F.when(v.isNotNull(), value), with_fields(s, fields))
    return replace(out, order=F.transform(r.order, renamed)) if t.side == "value" else out


def tombstone_refused(r: Rec, t: tf.Step) -> Rec:
    """Kafka's classes that require a map (``requireMap``) fail on a tombstone's null value, as here."""
    null = F.col("value").isNull() if t.side == "value" else F.col("key").isNull()
    return r.fail(F.col(ERROR).isNull() & null, _why(t, f"needs a struct or map, and the record's {t.side} is null"))


def mask_field(t: tf.MaskField, r: Rec) -> Rec:
    v, _ = r.side(t)
    m = obj(v)
    entries, out = {}, tombstone_refused(need_object(r, t, v), t)
    for name in t.fields:
        x = m[name]
        kind = kind_of(x)
        numeric = kind.startswith("BIGINT") | kind.startswith("INT") | kind.startswith("DECIMAL") | (kind == "DOUBLE") \
            | (kind == "FLOAT") | kind.startswith("SMALLINT") | kind.startswith("TINYINT")
        if t.replacement is None:
            masked = (F.when(kind == "STRING", scalar(F.lit(""))).when(kind == "BOOLEAN", scalar(F.lit(False)))
                      .when(kind.startswith("ARRAY"), F.parse_json(F.lit("[]")))
                      .when(kind.startswith("OBJECT"), F.parse_json(F.lit("{}")))
                      .when(numeric, scalar(F.lit(0))))
        else:
            as_number = F.lit(t.replacement).try_cast("double")
            masked = F.when(kind == "STRING", scalar(F.lit(t.replacement))).when(
                numeric & as_number.isNotNull(), F.try_parse_json(F.lit(t.replacement)))
            out = out.fail(x.isNotNull() & ~F.is_variant_null(x) & masked.isNull(), _why(
                t, f"cannot mask {name} with {t.replacement!r}"))
        entries[name] = F.when(x.isNull() | F.is_variant_null(x), x).otherwise(masked)
    return out.with_side(t, F.when(v.isNotNull(), replaced(m, entries)))


_CAST_SQL = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint", "float32": "float",
             "float64": "double", "boolean": "boolean", "string": "string"}


def cast_value(x: Column, kind: str) -> Column:
    """A VARIANT cast as Kafka's Cast casts a value (a string parsed, a number narrowed, a boolean 1 or 0)."""
    source = kind_of(x)
    if kind == "string":
        return scalar(text_of(x))
    if kind == "boolean":
        return scalar(F.when(source == "STRING", F.lower(F.variant_get(x, "$", "string")) == "true").otherwise(
            F.try_variant_get(x, "$", "double") != 0))
    as_int = F.variant_get(x, "$", "boolean").cast("int")
    if kind.startswith("float"):
        number = F.when(source == "BOOLEAN", as_int).otherwise(F.try_variant_get(x, "$", "double"))
    else:
        # Java narrows 1.9 to 1: a cast of a double to an integer truncates too.
        number = F.when(source == "BOOLEAN", as_int).when(
            source.startswith("DECIMAL") | source.isin("DOUBLE", "FLOAT"),
            F.try_variant_get(x, "$", "double").try_cast("bigint")).otherwise(F.try_variant_get(x, "$", "bigint"))
    return scalar(number.try_cast(_CAST_SQL[kind]))


def cast(t: tf.Cast, r: Rec) -> Rec:
    v, s = r.side(t)
    if t.spec[0][0] is None:
        kind = t.spec[0][1]
        value = F.when(v.isNull() | F.is_variant_null(v), v).otherwise(cast_value(v, kind))
        schema = F.when(s.isNotNull(), with_keys(s, {"type": scalar(F.lit(kind))}))
        out = r.fail(v.isNotNull() & value.isNull(), _why(t, f"cannot cast the {t.side} to {kind}"))
        return out.with_side(t, value, schema)
    m = obj(v)
    entries, out = {}, need_object(r, t, v)
    types = dict(t.spec)
    for name, kind in types.items():
        assert name is not None
        x = m[name]
        casted = F.when(x.isNull() | F.is_variant_null(x), x).otherwise(cast_value(x, kind))
        out = out.fail(x.isNotNull() & casted.isNull(), F.concat(F.lit(_why(t, f"cannot cast {name} to {kind}: ")),
                                                                 F.substring(F.to_json(x), 1, 100)))
        entries[name] = casted
    value = F.when(v.isNotNull(), replaced(m, entries))
    fields = F.transform(fields_of(s), lambda f: F.coalesce(*[
        F.when(name_of(f) == n, with_keys(f, {"type": scalar(F.lit(k))})) for n, k in types.items()], f))
    return out.with_side(t, value, with_fields(s, fields))


_PER_SECOND = {"seconds": 1, "milliseconds": 1_000, "microseconds": 1_000_000, "nanoseconds": 1_000_000_000}


def timestamp_converter(t: tf.TimestampConverter, r: Rec) -> Rec:
    v, s = r.side(t)
    x = v if t.field is None else obj(v)[t.field]
    own = s if t.field is None else field_schema(s, t.field)
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
    converted = schemaless if typed is None else F.when(s.isNotNull(), typed).otherwise(schemaless)
    converted = F.when(x.isNull() | F.is_variant_null(x), x).otherwise(converted)
    out = r.fail(x.isNotNull() & ~F.is_variant_null(x) & instant.isNull(), F.concat(F.lit(_why(
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
        return out.with_side(t, converted, F.when(s.isNotNull(), retyped(s)))
    out = need_object(out, t, v)
    value = F.when(v.isNotNull(), with_keys(v, {t.field: converted}))
    fields = F.transform(fields_of(s), lambda f: F.when(name_of(f) == t.field, retyped(f)).otherwise(f))
    return out.with_side(t, value, with_fields(s, fields))


def extract_field(t: tf.ExtractField, r: Rec) -> Rec:
    v, s = r.side(t)
    value, schema = v, s
    for name in t.field:
        value, schema = obj(value)[name], field_schema(schema, name)
    out = need_object(r, t, v)
    if t.side == "value":
        # A record whose value is now null is one the sink skips, as Apache's sink skips a null value.
        out = replace(out, dropped=out.dropped | (v.isNotNull() & (value.isNull() | F.is_variant_null(value))))
    out = out.with_side(t, F.when(v.isNotNull(), value), schema)
    return replace(out, order=keys_at("$." + ".".join(t.field))) if t.side == "value" else out


def hoist_field(t: tf.HoistField, r: Rec) -> Rec:
    v, s = r.side(t)
    field = F.when(s.isNotNull(), with_keys(s, {"field": scalar(F.lit(t.field))}))
    schema = F.when(s.isNotNull(), var(F.named_struct(F.lit("type"), F.lit("struct"), F.lit("optional"),
                                                      F.lit(False), F.lit("fields"), F.array(field))))
    out = r.with_side(t, F.when(v.isNotNull(), var(F.create_map(F.lit(t.field), v))), schema)
    return replace(out, order=F.array(F.lit(t.field))) if t.side == "value" else out


def value_to_key(t: tf.ValueToKey, r: Rec) -> Rec:
    m = obj(r.value)
    key = var(F.create_map(*[x for n in t.fields for x in (F.lit(n), m[n])]))
    out = tombstone_refused(need_object(r, t, r.value), t)
    for n in t.fields:
        out = out.fail(r.value.isNotNull() & ~F.map_contains_key(m, n), _why(t, f"the value has no field {n}"))
    return replace(out, key=F.when(r.value.isNotNull(), key).otherwise(r.key))


def flatten(t: tf.Flatten, r: Rec, depth: int = 8) -> Rec:
    """Nested objects flattened one level per round, ``depth`` rounds: a record nested deeper is an error
    naming the limit, never left half flat."""
    v, s = r.side(t)
    m = obj(v)
    fields = fields_of(s)
    for _ in range(depth):
        m = F.map_from_entries(F.flatten(F.transform(F.map_entries(m), lambda e: F.coalesce(
            F.transform(F.map_entries(obj(e["value"])),
                        lambda x: F.struct(F.concat(e["key"], F.lit(t.delimiter), x["key"]).alias("key"),
                                           x["value"].alias("value"))),
            F.array(e)))))
        fields = F.flatten(F.transform(fields, lambda f: F.when(
            (F.variant_get(f, "$.type", "string") == "struct") & F.variant_get(f, "$.name", "string").isNull(),
            F.transform(fields_of(f), lambda x: with_keys(x, {
                "field": scalar(F.concat(name_of(f), F.lit(t.delimiter), name_of(x))),
                # A field under an optional struct can be missing however required it is itself.
                "optional": scalar(F.coalesce(F.variant_get(f, "$.optional", "boolean"), F.lit(True))
                                   | F.coalesce(F.variant_get(x, "$.optional", "boolean"), F.lit(True)))}))
        ).otherwise(F.array(f))))
    deeper = F.exists(F.map_values(m), lambda x: obj(x).isNotNull())
    out = need_object(r, t, v).fail(v.isNotNull() & deeper, _why(t, f"the {t.side} nests deeper than {depth + 1} "
                                                                   "levels, which sinklab flattens at most"))
    return out.with_side(t, F.when(v.isNotNull(), var(m)), with_fields(s, fields))


def regex_router(t: tf.RegexRouter, r: Rec) -> Rec:
    whole = f"^(?:{t.regex})$"
    return replace(r, topic=F.when(r.topic.rlike(whole), F.regexp_replace(r.topic, F.lit(whole),
                                                                          F.lit(t.replacement))).otherwise(r.topic))


def timestamp_router(t: tf.TimestampRouter, r: Rec, meta: dict[str, Column]) -> Rec:
    stamp = F.date_format(F.timestamp_millis(meta["millis"]), t.timestamp_format)
    topic = F.replace(F.replace(F.lit(t.topic_format), F.lit("${topic}"), r.topic), F.lit("${timestamp}"), stamp)
    out = r.fail(meta["millis"].isNull(), _why(t, "the record has no timestamp"))
    return replace(out, topic=topic)


def header_entry(name: str, value: Column) -> Column:
    return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))


def header_from(t: tf.HeaderFrom, r: Rec) -> Rec:
    v, s = r.side(t)
    m = obj(v)
    added = [header_entry(h, F.when(m[f].isNotNull() & ~F.is_variant_null(m[f]), text_of(m[f])))
             for f, h in zip(t.fields, t.headers, strict=True)]
    out = replace(need_object(r, t, v), headers=F.concat(F.coalesce(r.headers, F.array()), F.array(*added)))
    if not t.move:
        return out
    value = F.when(v.isNotNull(), var(F.map_filter(m, lambda k, _: ~k.isin(list(t.fields)))))
    fields = F.filter(fields_of(s), lambda f: ~name_of(f).isin(list(t.fields)))
    return out.with_side(t, value, with_fields(s, fields))


def set_schema_metadata(t: tf.SetSchemaMetadata, r: Rec) -> Rec:
    v, s = r.side(t)
    entries = {}
    if t.name is not None:
        entries["name"] = scalar(F.lit(t.name))
    if t.version is not None:
        entries["version"] = scalar(F.lit(t.version))
    return r.with_side(t, v, F.when(s.isNotNull(), with_keys(s, entries)) if entries else s)


# ---- Iceberg's
def kafka_metadata(t: tf.KafkaMetadata, r: Rec, meta: dict[str, Column]) -> Rec:
    v, s = r.side(t)
    values = {"topic": scalar(r.topic), "partition": scalar(meta["partition"].cast("int")),
              "offset": scalar(meta["offset"]), "timestamp": scalar(meta["millis"])}
    # As Iceberg's class (1.12) names and types them: the timestamp is plain epoch millis, the rest required.
    fields = [schema_field("topic", "string", False), schema_field("partition", "int32", False),
              schema_field("offset", "int64", False), schema_field("timestamp", "int64")]
    if t.external_field:
        values[t.external_field[0]] = scalar(F.lit(t.external_field[1]))
        fields.append(schema_field(t.external_field[0], "string"))
    if t.nested:
        entries = {t.field_name: var(F.create_map(*[x for n, c in values.items() for x in (F.lit(n), c)]))}
        added = F.array(var(F.named_struct(F.lit("field"), F.lit(t.field_name), F.lit("type"), F.lit("struct"),
                                           F.lit("optional"), F.lit(True), F.lit("fields"), F.array(*fields))))
    else:
        entries = {f"{t.field_name}_{n}": c for n, c in values.items()}
        added = F.array(*[with_keys(f, {"field": scalar(F.concat(F.lit(t.field_name + "_"), name_of(f)))})
                          for f in fields])
    schema = with_fields(s, F.concat(fields_of(s), added))
    return need_object(r, t, v).with_side(t, F.when(v.isNotNull(), with_keys(v, entries)), schema)


def copy_value(t: tf.CopyValue, r: Rec) -> Rec:
    v, s = r.side(t)
    source = field_schema(s, t.source)
    fields = F.concat(F.filter(fields_of(s), lambda f: name_of(f) != t.target),
                      F.array(with_keys(source, {"field": scalar(F.lit(t.target))})))
    out = need_object(r, t, v).fail(s.isNotNull() & source.isNull(), _why(t, f"the schema has no field {t.source}"))
    return out.with_side(t, F.when(v.isNotNull(), with_keys(v, {t.target: obj(v)[t.source]})), with_fields(s, fields))


def dms(t: tf.Dms, r: Rec) -> Rec:
    v, s = r.side(t)
    data, metadata = obj(obj(v)["data"]), obj(obj(v)["metadata"])
    operation = F.variant_get(metadata["operation"], "$", "string")
    op = F.when(operation == "update", F.lit("U")).when(operation == "delete", F.lit("D")).otherwise(F.lit("I"))
    text = lambda name: F.coalesce(text_of(metadata[name]), F.lit("null"))  # noqa: E731 - Java's "%s" of a null
    cdc = var(F.named_struct(F.lit("op"), op, F.lit("ts"), metadata["timestamp"], F.lit("source"),
                             F.concat(text("schema-name"), F.lit("."), text("table-name"))))
    out = need_object(r, t, v).fail(s.isNotNull(), _why(t, "a DMS record has no schema (schemas.enable=false)"))
    # A record without both a data and a metadata object is skipped, as Iceberg's class skips it.
    out = replace(out, dropped=out.dropped | (v.isNotNull() & (data.isNull() | metadata.isNull())))
    return replace(out.with_side(t, F.when(v.isNotNull(), with_keys(var(data), {"_cdc": cdc}))),
                   order=keys_at("$.data"))


def unwrap(t: tf.ExtractNewRecordState, r: Rec) -> Rec:
    """Debezium's ExtractNewRecordState; a record that is no change event (no ``op``) passes as it is."""
    v, s = r.side(t)
    op = F.try_variant_get(v, "$.op", "string")
    change = op.isNotNull()
    delete = op == "d"
    source = obj(obj(v)["source"])
    row = F.when(delete, obj(v)["before"]).otherwise(obj(v)["after"])
    added: dict[str, Column] = {}
    for name in t.add_fields:
        inner = name.removeprefix("source.")
        # As Debezium: a field of the envelope, else of its source block.
        added[t.prefix + name.replace(".", "_")] = (source[inner] if name.startswith("source.") else
                                                     F.coalesce(obj(v)[name], source[name]))
    if t.delete_handling == "rewrite":
        added[t.prefix + "deleted"] = scalar(F.when(delete, F.lit("true")).otherwise(F.lit("false")))
    value = with_keys(row, added) if added else row
    tombstone = F.col("value").isNull()
    dropped = r.dropped | (tombstone & F.lit(t.drop_tombstones)) | (change & delete & F.lit(
        t.delete_handling == "drop"))
    if t.delete_handling == "none":  # the delete passes as a record without a value: skipped by the sink
        dropped = dropped | (change & delete)
    row_schema = F.element_at(F.filter(fields_of(s), lambda f: name_of(f) == F.when(delete, F.lit("before"))
                                       .otherwise(F.lit("after"))), 1)
    extra = [schema_field(n, "string") for n in added]  # the envelope's fields, typed as their text
    # The row's schema is the record's now: without the name it had as a field of the envelope.
    row_only = var(F.map_filter(obj(row_schema), lambda k, _: k != "field"))
    schema = F.when(s.isNotNull() & change, with_keys(row_only, {
        "fields": var(F.concat(fields_of(row_schema), F.array(*extra)))}))
    out = replace(r, dropped=dropped).fail(v.isNotNull() & change & obj(row).isNull() & ~delete, _why(
        t, "the change event has no after row"))
    out = replace(out, order=F.when(change, F.when(delete, keys_at("$.before")).otherwise(keys_at("$.after")))
                  .otherwise(r.order))
    return out.with_side(t, F.when(change, value).otherwise(v), F.when(change, schema).otherwise(s))


DEBEZIUM_OPS = {"c": "I", "r": "I", "u": "U", "d": "D"}


def debezium(t: tf.Debezium, r: Rec, meta: dict[str, Column]) -> Rec:
    v, s = r.side(t)
    op = F.try_variant_get(v, "$.op", "string")
    image_name = F.when(op == "d", F.lit("before")).otherwise(F.lit("after"))
    image = F.when(op == "d", obj(v)["before"]).otherwise(obj(v)["after"])
    db, table = F.try_variant_get(v, "$.source.db", "string"), F.try_variant_get(v, "$.source.table", "string")
    source_name = F.when(db.isNotNull() & table.isNotNull(), F.concat(db, F.lit("."), table)).otherwise(table)
    if t.target_pattern:
        target = F.replace(F.replace(F.lit(t.target_pattern), F.lit("{db}"), F.coalesce(db, F.lit("None"))),
                           F.lit("{table}"), F.coalesce(table, F.lit("None")))
    else:
        target = source_name
    mapped = F.create_map(*[x for k, c in DEBEZIUM_OPS.items() for x in (F.lit(k), F.lit(c))])
    cdc = var(F.named_struct(F.lit("op"), mapped[op], F.lit("ts"), F.try_variant_get(v, "$.ts_ms", "bigint"),
                             F.lit("offset"), meta["offset"], F.lit("source"), source_name, F.lit("target"), target,
                             F.lit("key"), meta.get("key_text", text_of(r.key))))
    out = r.fail(v.isNotNull() & ~F.coalesce(op.isin(list(DEBEZIUM_OPS)), F.lit(False)), F.concat(
        F.lit(_why(t, "not a Debezium change event: op is ")), F.coalesce(op, F.lit("missing")),
        F.lit(", expected one of c, r, u, d")))
    out = out.fail(v.isNotNull() & obj(image).isNull(), F.concat(F.lit(_why(t, "the event has no ")), image_name,
                                                                 F.lit(" row image")))
    image_schema = F.element_at(F.filter(fields_of(s), lambda f: name_of(f) == image_name), 1)
    out = out.fail(s.isNotNull() & image_schema.isNull(), F.concat(F.lit(_why(t, "the envelope's schema has no ")),
                                                                   image_name, F.lit(" field")))
    cdc_fields = F.array(schema_field("op", "string"), schema_field("ts", "int64", logical=TIMESTAMP),
                         schema_field("offset", "int64"), schema_field("source", "string"),
                         schema_field("target", "string"), schema_field("key", "string"))
    cdc_field = var(F.named_struct(F.lit("field"), F.lit("_cdc"), F.lit("type"), F.lit("struct"), F.lit("optional"),
                                   F.lit(True), F.lit("fields"), cdc_fields))
    schema = F.when(s.isNotNull(), var(F.named_struct(
        F.lit("type"), F.lit("struct"), F.lit("optional"), F.lit(False),
        F.lit("fields"), F.concat(fields_of(image_schema), F.array(cdc_field)))))
    out = replace(out, order=F.when(op == "d", keys_at("$.before")).otherwise(keys_at("$.after")))
    return out.with_side(t, F.when(v.isNotNull(), with_keys(image, {"_cdc": cdc})), schema)


# ---- predicates and the chain
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


def step(t: tf.Step, r: Rec, meta: dict[str, Column], tombstone: Column) -> Rec:
    runs: dict[type, Callable[..., Rec]] = {
        tf.InsertField: lambda: insert_field(t, r, meta), tf.TimestampRouter: lambda: timestamp_router(t, r, meta),
        tf.KafkaMetadata: lambda: kafka_metadata(t, r, meta), tf.Debezium: lambda: debezium(t, r, meta),
        tf.Filter: lambda: replace(r, dropped=F.lit(True))}
    own = {tf.ReplaceField: replace_field, tf.MaskField: mask_field, tf.Cast: cast,
           tf.TimestampConverter: timestamp_converter, tf.ExtractField: extract_field, tf.HoistField: hoist_field,
           tf.ValueToKey: value_to_key, tf.Flatten: flatten, tf.RegexRouter: regex_router,
           tf.HeaderFrom: header_from, tf.SetSchemaMetadata: set_schema_metadata, tf.CopyValue: copy_value,
           tf.Dms: dms, tf.ExtractNewRecordState: unwrap,
           tf.DropHeaders: lambda t, r: replace(r, headers=F.filter(r.headers, lambda h: ~h["key"].isin(
               list(t.headers)))),
           tf.InsertHeader: lambda t, r: replace(r, headers=F.concat(F.coalesce(r.headers, F.array()), F.array(
               header_entry(t.header, F.lit(t.literal)))))}
    done = runs[type(t)]() if type(t) in runs else own[type(t)](t, r)
    when = applies(t.predicate, t.negate, r, tombstone)
    if when is None:
        return done
    when = F.coalesce(when, F.lit(False))
    return Rec(*(F.when(when, a).otherwise(b) for a, b in zip(done.columns(), r.columns(), strict=True)))


def in_order(value: Column, order: Column) -> Column:
    """An object's fields as a map in ``order``, then the others (sorted); null for a value that is no object."""
    m = obj(value)
    known = F.filter(F.coalesce(order, F.array().cast("array<string>")), lambda k: F.map_contains_key(m, k))
    names = F.concat(known, F.filter(F.map_keys(m), lambda k: ~F.array_contains(known, k)))
    return F.map_from_arrays(names, F.transform(names, lambda k: m[k]))


def barrier(c: Column) -> Column:
    """``c`` as it is, made non-deterministic: the optimizer then neither merges a step's projection into the
    next nor pushes a filter (ERROR, dropped) down through it, either of which writes each step's
    expressions into the next as often as it refers to them, exponentially in the chain's length (10 steps
    ran the driver out of memory planning). A partition's id is never negative: the branch never runs."""
    return F.coalesce(c, F.when(F.spark_partition_id() < 0, F.lit("unreachable")))


def apply_chain(records: DataFrame, chain: list[tf.Step], key_text: Column) -> DataFrame:
    """``records`` (META, key, value, headers, PAYLOAD, _schema, ERROR) with ``chain`` applied: PAYLOAD and
    _schema are the transformed value and schema, KEY_TEXT the key as the chain left it, a record a step
    could not take has ERROR, and a dropped record is gone (Filter, or a value extracted to null)."""
    columns = records.columns
    good = F.col(ERROR).isNull()
    tombstone = F.col("value").isNull()
    key = F.coalesce(F.try_parse_json(key_text), key_text.cast("variant"))
    start = Rec(value=F.when(good & ~tombstone, F.try_parse_json(F.col(PAYLOAD))),
                schema=F.try_parse_json(F.col("_schema")), key=key, topic=F.col("topic"),
                headers=F.col("headers"), dropped=F.lit(False), failed=F.lit(None).cast("string"),
                order=F.when(good & ~tombstone, keys_at("$")))
    out = records.withColumns(dict(zip(PARTS, start.columns(), strict=True)))
    meta = {c: F.col(c) for c in ("partition", "offset")}
    # The record's timestamp in epoch milliseconds (the cycle's reader keeps it so).
    stamp = F.col("timestamp")
    meta["millis"] = F.unix_millis(stamp) if records.schema["timestamp"].dataType.typeName() == "timestamp" else stamp
    # The key's text as it came, until a step changes the key (a JSON key read back is normalized).
    meta["key_text"] = key_text
    for t in chain:
        if t.side == "key" or isinstance(t, tf.ValueToKey):
            meta.pop("key_text", None)
        done = step(t, Rec.named(), meta, tombstone)
        out = out.withColumns(dict(zip(PARTS, replace(done, failed=barrier(done.failed)).columns(), strict=True)))
    value = F.col(VALUE)
    not_object = F.lit(f"{NOT_AN_OBJECT}: the value is no struct or map after the transforms")
    finished = {
        PAYLOAD: F.when(obj(value).isNotNull(), F.to_json(in_order(value, F.col(ORDER)))).when(
            value.isNotNull(), F.to_json(value)).otherwise(F.col(PAYLOAD)),
        "_schema": F.to_json(F.col(SCHEMA)),
        ERROR: F.coalesce(F.col(ERROR), F.col(FAILED), F.when(
            value.isNotNull() & ~F.is_variant_null(value) & obj(value).isNull(), not_object)),
    }
    keyed = "key_text" not in meta
    if keyed:
        finished[KEY_TEXT] = text_of(F.col(KEY))
    # A record a step failed is a bad record, even if a later step would have dropped it: it never got there.
    out = out.withColumns(finished).where(~F.col(DROPPED) | F.col(ERROR).isNotNull())
    return out.select(*columns, *([KEY_TEXT] if keyed and KEY_TEXT not in columns else []))
