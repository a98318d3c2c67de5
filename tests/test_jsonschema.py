"""JSON Schema from a registry, typed as Confluent's JsonSchemaData types it (pure logic)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pyspark.sql import types as T

from sinklab.generators import Generator
from sinklab.generators.avro import stage_schemas
from sinklab.generators.jsonschema import encode, json_schema_of
from sinklab.sink.config.sink_config import from_connect
from sinklab.sink.tables import connect_to_spark
from sinklab.sink.wire.avro import avro_to_connect
from sinklab.sink.wire.jsonschema import JSON_SCHEMA_CONVERTER, json_schema_to_connect

ADDRESS = {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer",
                                                                                   "connect.type": "int32"}},
           "required": ["city"]}
EVERY_TYPE = {
    "type": "object", "title": "Order", "required": ["id", "paid", "address"],
    "definitions": {"Address": ADDRESS},
    "properties": {
        "id": {"type": "integer"},
        "qty": {"type": "integer", "connect.type": "int32"},
        "ratio": {"type": "number", "connect.type": "float32"},
        "price": {"type": "number"},
        "paid": {"type": "boolean"},
        "note": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "state": {"type": "string", "enum": ["NEW", "DONE"]},
        "blob": {"type": "string", "connect.type": "bytes"},
        "at": {"type": "integer", "title": "org.apache.kafka.connect.data.Timestamp", "connect.type": "int64"},
        "day": {"type": "integer", "title": "org.apache.kafka.connect.data.Date", "connect.type": "int32"},
        "amount": {"type": "number", "title": "org.apache.kafka.connect.data.Decimal",
                   "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "address": {"$ref": "#/definitions/Address"},
        "maybe": {"type": ["null", "number"]},
    }}


def test_every_json_schema_type_maps_to_the_iceberg_type_the_java_sink_gives_it() -> None:
    got = {f.name: (f.dataType, f.nullable) for f in connect_to_spark(json_schema_to_connect(EVERY_TYPE)).fields}
    address = T.StructType([T.StructField("city", T.StringType(), False), T.StructField("zip", T.IntegerType(), True)])
    assert got == {
        # integer is int64 and number float64 unless connect.type says otherwise; optional unless required.
        "id": (T.LongType(), False), "qty": (T.IntegerType(), True), "ratio": (T.FloatType(), True),
        "price": (T.DoubleType(), True), "paid": (T.BooleanType(), False), "note": (T.StringType(), True),
        "state": (T.StringType(), True), "blob": (T.BinaryType(), True), "at": (T.TimestampType(), True),
        "day": (T.DateType(), True), "amount": (T.DecimalType(10, 2), True),
        "tags": (T.ArrayType(T.StringType(), True), True),
        "attrs": (T.MapType(T.StringType(), T.LongType(), True), True),
        "address": (address, False), "maybe": (T.DoubleType(), True),
    }


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "string"}, "must be an object"),
    ({"type": "object", "properties": {"x": {}}}, r"value\.x: a schema that allows anything"),
    ({"type": "object", "properties": {"x": {"$ref": "other.json#/X"}}}, "not in this schema"),
    ({"type": "object", "properties": {"x": {"$ref": "#/definitions/Nope"}}}, "names nothing"),
    ({"type": "object", "properties": {"x": {"type": ["string", "integer"]}}}, "no single Connect type"),
])
def test_a_json_schema_without_connect_types_is_refused_naming_the_field(schema: dict, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        json_schema_to_connect(schema)


def test_json_schema_converter_reads_registry_settings_for_values_and_keys() -> None:
    c = from_connect("s", {"topics": "t", "iceberg.tables": "db.t", "value.converter": JSON_SCHEMA_CONVERTER,
                           "value.converter.schema.registry.url": "http://127.0.0.1:8081",
                           "key.converter": JSON_SCHEMA_CONVERTER})
    assert c.value_registry is not None and c.value_registry.format == "json" and c.typed_values
    assert c.key_registry is not None and c.key_registry.format == "json"
    assert c.key_registry.registry_url == "http://127.0.0.1:8081" and not c.schemas_enable


def test_generator_json_schemas_type_the_columns_as_their_avro_schemas_do() -> None:
    gen = Generator("payments", seed=3, drift=[{"after": 5, "add": {"tip": {"kind": "float", "max": 5}},
                                                "widen": {"amount": "long"}}])
    for _, avro, _ in stage_schemas(gen.spec):
        assert connect_to_spark(json_schema_to_connect(json_schema_of(avro))) == \
            connect_to_spark(avro_to_connect(avro))
    _, avro, converters = stage_schemas(gen.spec)[0]
    event = next(iter(gen.events(1)))
    body = json.loads(encode({k: (converters[k](v) if converters[k] else v) for k, v in event.items()}))
    # Connect's Timestamp travels as epoch milliseconds.
    assert body["created_at"] == int(datetime.fromisoformat(event["created_at"]).replace(tzinfo=UTC).timestamp()
                                     * 1000)
