"""Iceberg's transforms (``org.apache.iceberg.connect.transforms``), as Iceberg's classes (1.12) run them."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.config import transforms as tf
from sinklab.sink.records.transform.parts import (
    TIMESTAMP,
    Rec,
    appended,
    field_schema,
    fields_of,
    is_null,
    keys_at,
    kind_of,
    name_of,
    need_object,
    obj,
    ordered,
    scalar,
    schema_field,
    set_keys,
    text_of,
    var,
    why,
    with_fields,
    with_keys,
)


def kafka_metadata(t: tf.KafkaMetadata, r: Rec, meta: dict[str, Column]) -> Rec:
    s = r.side(t)
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
        added = F.array(*[set_keys(f, {"field": scalar(F.concat(F.lit(t.field_name + "_"), name_of(f)))})
                          for f in fields])
    schema = with_fields(s.schema, F.concat(fields_of(s.schema), added))
    return need_object(r, t, s).with_side(t, appended(s.m, entries), s.bare, schema)


def copy_value(t: tf.CopyValue, r: Rec) -> Rec:
    s = r.side(t)
    source = field_schema(s.schema, t.source)
    fields = F.concat(F.filter(fields_of(s.schema), lambda f: name_of(f) != t.target),
                      F.array(set_keys(source, {"field": scalar(F.lit(t.target))})))
    out = need_object(r, t, s).fail(s.schema.isNotNull() & source.isNull(),
                                    why(t, f"the schema has no field {t.source}"))
    return out.with_side(t, with_keys(s.m, {t.target: s.m[t.source]}), s.bare, with_fields(s.schema, fields))


def dms(t: tf.Dms, r: Rec) -> Rec:
    s = r.side(t)
    data, metadata = obj(s.m["data"]), obj(s.m["metadata"])
    operation = F.variant_get(metadata["operation"], "$", "string")
    op = F.when(operation == "update", F.lit("U")).when(operation == "delete", F.lit("D")).otherwise(F.lit("I"))
    text = lambda name: F.coalesce(text_of(metadata[name]), F.lit("null"))  # noqa: E731 - Java's "%s" of a null
    cdc = var(F.named_struct(F.lit("op"), op, F.lit("ts"), metadata["timestamp"], F.lit("source"),
                             F.concat(text("schema-name"), F.lit("."), text("table-name"))))
    out = need_object(r, t, s).fail(s.schema.isNotNull(), why(
        t, "a DMS record has no schema (schemas.enable=false)"))
    # A record without both a data and a metadata object is skipped, as Iceberg's class skips it.
    out = replace(out, dropped=out.dropped | (s.m.isNotNull() & (data.isNull() | metadata.isNull())))
    return out.with_side(t, appended(ordered(data, keys_at("$.data")), {"_cdc": cdc}), s.bare)


DEBEZIUM_OPS = {"c": "I", "r": "I", "u": "U", "d": "D"}


def debezium(t: tf.Debezium, r: Rec, meta: dict[str, Column]) -> Rec:
    s = r.side(t)
    op = F.try_variant_get(s.m["op"], "$", "string")
    deleted = op == "d"
    image_name = F.when(deleted, F.lit("before")).otherwise(F.lit("after"))
    image = obj(F.when(deleted, s.m["before"]).otherwise(s.m["after"]))
    db, table = (F.try_variant_get(s.m["source"], f"$.{n}", "string") for n in ("db", "table"))
    source_name = F.when(db.isNotNull() & table.isNotNull(), F.concat(db, F.lit("."), table)).otherwise(table)
    if t.target_pattern:
        target = F.replace(F.replace(F.lit(t.target_pattern), F.lit("{db}"), F.coalesce(db, F.lit("None"))),
                           F.lit("{table}"), F.coalesce(table, F.lit("None")))
    else:
        target = source_name
    mapped = F.create_map(*[x for k, c in DEBEZIUM_OPS.items() for x in (F.lit(k), F.lit(c))])
    cdc = var(F.named_struct(F.lit("op"), mapped[op], F.lit("ts"), F.try_variant_get(s.m["ts_ms"], "$", "bigint"),
                             F.lit("offset"), meta["offset"], F.lit("source"), source_name, F.lit("target"), target,
                             F.lit("key"), meta.get("key_text", text_of(r.key))))
    out = r.fail(s.present & ~F.coalesce(op.isin(list(DEBEZIUM_OPS)), F.lit(False)), F.concat(
        F.lit(why(t, "not a Debezium change event: op is ")), F.coalesce(op, F.lit("missing")),
        F.lit(", expected one of c, r, u, d")))
    out = out.fail(s.present & image.isNull(), F.concat(F.lit(why(t, "the event has no ")), image_name,
                                                        F.lit(" row image")))
    image_schema = F.element_at(F.filter(fields_of(s.schema), lambda f: name_of(f) == image_name), 1)
    out = out.fail(s.schema.isNotNull() & image_schema.isNull(), F.concat(
        F.lit(why(t, "the envelope's schema has no ")), image_name, F.lit(" field")))
    cdc_fields = F.array(schema_field("op", "string"), schema_field("ts", "int64", logical=TIMESTAMP),
                         schema_field("offset", "int64"), schema_field("source", "string"),
                         schema_field("target", "string"), schema_field("key", "string"))
    cdc_field = var(F.named_struct(F.lit("field"), F.lit("_cdc"), F.lit("type"), F.lit("struct"), F.lit("optional"),
                                   F.lit(True), F.lit("fields"), cdc_fields))
    schema = F.when(s.schema.isNotNull(), var(F.named_struct(
        F.lit("type"), F.lit("struct"), F.lit("optional"), F.lit(False),
        F.lit("fields"), F.concat(fields_of(image_schema), F.array(cdc_field)))))
    row = ordered(image, F.when(deleted, keys_at("$.before")).otherwise(keys_at("$.after")))
    return out.with_side(t, appended(row, {"_cdc": cdc}), None, schema)


# Connect schemas as JSON text, as Iceberg's JsonToMapUtils gives them to a JSON value's kind.
_OPTIONAL = {kind: f'{{"type":"{kind}","optional":true}}' for kind in ("string", "boolean", "int32", "int64",
                                                                       "float64")}
_TEXTS = '{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"string","optional":false}'
_JSON_TO_MAP = {**_OPTIONAL, "map": _TEXTS + ',"optional":true}',
                "decimal": '{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal",'
                           '"version":1,"parameters":{"scale":"0"}}'}
_ARRAY_OF = {kind: f'{{"type":"array","items":{text},"optional":true}}' for kind, text in _JSON_TO_MAP.items()}
_UNSUPPORTED = "!"


def _lookup(table: dict[str, str], name: Column) -> Column:
    return F.element_at(F.create_map(*[F.lit(x) for k, v in table.items() for x in (k, v)]), name)


def _json_kind(x: Column) -> Column:
    """The kind Jackson's node class gives a JSON value: string, boolean, int32 (an IntNode), int64, decimal
    (an integer beyond a long's range), float64, map (any object), array, or null."""
    kind = kind_of(x)
    whole = F.try_variant_get(x, "$", "bigint")
    return (F.when(is_null(x), F.lit("null")).when(kind == "STRING", F.lit("string"))
            .when(kind == "BOOLEAN", F.lit("boolean"))
            .when(kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT"),
                  F.when(whole.between(-(2 ** 31), 2 ** 31 - 1), F.lit("int32")).otherwise(F.lit("int64")))
            .when(kind.startswith("DECIMAL") & kind.endswith(",0)"), F.lit("decimal"))
            .when(kind.startswith("DECIMAL") | kind.isin("DOUBLE", "FLOAT"), F.lit("float64"))
            .when(kind.startswith("OBJECT"), F.lit("map")).when(kind.startswith("ARRAY"), F.lit("array")))


def _json_schema(x: Column) -> Column:
    """A field's Connect schema as JSON text, as JsonToMapUtils.schemaFromNode gives it; null: the field is
    left out (a null, an empty object or array); ``_UNSUPPORTED`` for an array of arrays."""
    kind = _json_kind(x)
    elements = F.array_distinct(F.transform(F.try_variant_get(x, "$", "array<variant>"), _json_kind))
    array = (F.when(F.size(elements) == 0, F.lit(None)).when(F.size(elements) > 1, F.lit(_ARRAY_OF["string"]))
             .when(elements[0] == "null", F.lit(_ARRAY_OF["string"])).when(elements[0] == "array", F.lit(_UNSUPPORTED))
             .otherwise(_lookup(_ARRAY_OF, elements[0])))
    return (F.when(kind == "null", F.lit(None)).when(kind == "array", array)
            .when(kind == "map", F.when(F.size(obj(x)) > 0, F.lit(_JSON_TO_MAP["map"])))
            .otherwise(_lookup(_JSON_TO_MAP, kind)))


def json_to_map(t: tf.JsonToMap, r: Rec) -> Rec:
    """The value keeps its JSON: a table's map and array-of-text columns read an object and an array as texts,
    as Iceberg's class makes them. What changes is the schema a table is created and evolved by."""
    s = r.side(t)
    if t.root:
        schema = F.parse_json(F.lit(f'{{"type":"struct","optional":false,"fields":[{{"field":"payload",'
                                    f'{_TEXTS[1:]},"optional":true}}]}}'))
        return need_object(r, t, s).with_side(t, F.when(s.m.isNotNull(), F.create_map(F.lit("payload"), s.whole())),
                                              s.bare, F.when(s.m.isNotNull(), schema))
    # Each field's schema once, in a projection before the step's: its fields and its check both read them.
    typed = "_sinklab_t_json_schemas"
    out = replace(need_object(r, t, s), pre=((typed, F.transform_values(s.m, lambda _, x: _json_schema(x))),))
    schemas = F.col(typed)
    fields = F.filter(F.transform(F.map_entries(schemas), lambda e: F.when(
        e["value"].isNotNull(), F.concat(F.lit('{"field":'), F.to_json(scalar(e["key"])), F.lit(","),
                                         F.substring(e["value"], 2, 1 << 20)))),
        lambda f: f.isNotNull())
    unsupported = F.exists(F.map_values(schemas), lambda x: F.coalesce(x == _UNSUPPORTED, F.lit(False)))
    out = out.fail(s.m.isNotNull() & unsupported, why(
        t, "an array of arrays, which sinklab does not type as Iceberg's class does"))
    schema = F.parse_json(F.concat(F.lit('{"type":"struct","optional":false,"fields":['), F.concat_ws(",", fields),
                                   F.lit("]}")))
    return out.with_side(t, s.m, s.bare, F.when(s.m.isNotNull() & ~unsupported, schema))
