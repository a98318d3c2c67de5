"""Avro's types as the sink maps them (registry schema -> Connect schema -> Iceberg/Spark types), the
converter's config keys, subject naming and the generator's schemas: pure logic, no servers."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest
from pyspark.sql import types as T

from sinklab.generators import Generator
from sinklab.generators.avro import frame, stage_schemas
from sinklab.sink.config.sink_config import ConfigError, from_connect
from sinklab.sink.tables import connect_to_spark
from sinklab.sink.wire.avro import avro_to_connect, key_kind
from sinklab.sink.wire.registry import subject

EVERY_TYPE = {
    "type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "price", "type": "double"},
        {"name": "paid", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "blob", "type": "bytes"},
        {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 4}},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "DONE"]}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}},
        {"name": "previous", "type": ["null", "Address"]},
        {"name": "either", "type": ["null", "long", "string"]},
    ]}


def test_every_avro_type_maps_to_the_iceberg_type_the_java_sink_gives_it() -> None:
    schema = connect_to_spark(avro_to_connect(EVERY_TYPE))
    got = {f.name: (f.dataType, f.nullable) for f in schema.fields}
    address = T.StructType([T.StructField("city", T.StringType(), False), T.StructField("zip", T.IntegerType(), True)])
    assert got == {
        "id": (T.LongType(), False), "qty": (T.IntegerType(), False), "ratio": (T.FloatType(), False),
        "price": (T.DoubleType(), False), "paid": (T.BooleanType(), False), "note": (T.StringType(), True),
        "blob": (T.BinaryType(), False), "code": (T.BinaryType(), False), "state": (T.StringType(), False),
        "uid": (T.StringType(), False), "amount": (T.DecimalType(10, 2), False), "day": (T.DateType(), False),
        "at_ms": (T.TimestampType(), False), "at_us": (T.TimestampType(), True),
        "local": (T.TimestampNTZType(), False),
        # Spark writes no Iceberg time: millis (int) and micros (long) of the day, as for Connect's Time.
        "t_ms": (T.IntegerType(), False), "t_us": (T.LongType(), False),
        "tags": (T.ArrayType(T.StringType(), True), False),
        "attrs": (T.MapType(T.StringType(), T.LongType(), True), False),
        "address": (address, False), "previous": (address, True),
        # A union of several types: Spark's from_avro struct, one optional member per branch.
        "either": (T.StructType([T.StructField("member0", T.LongType(), True),
                                 T.StructField("member1", T.StringType(), True)]), True),
    }


def test_a_value_schema_that_is_not_a_record_is_refused() -> None:
    with pytest.raises(ValueError, match="must be a record"):
        avro_to_connect('"string"')
    with pytest.raises(ValueError, match="unknown Avro type 'Nope'"):
        avro_to_connect({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Nope"}]})


def test_subject_name_strategies() -> None:
    schema = {"type": "record", "name": "Pizza", "namespace": "shop", "fields": []}
    assert subject("TopicNameStrategy", "orders", schema) == "orders-value"
    assert subject("TopicNameStrategy", "orders", schema, is_key=True) == "orders-key"
    assert subject("RecordNameStrategy", "orders", schema) == "shop.Pizza"
    assert subject("TopicRecordNameStrategy", "orders", schema) == "orders-shop.Pizza"


def config(**extra: str):  # type: ignore[no-untyped-def]
    return from_connect("s", {"topics": "t", "iceberg.tables": "db.t",
                              "value.converter": "io.confluent.connect.avro.AvroConverter", **extra})


def test_avro_converter_keys_as_kafka_connect_writes_them() -> None:
    c = config(**{"value.converter.schema.registry.url": "http://127.0.0.1:8081",
                  "value.converter.basic.auth.credentials.source": "USER_INFO",
                  "value.converter.basic.auth.user.info": "fred:secret",
                  "value.subject.name.strategy": "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
                  "key.converter": "io.confluent.connect.avro.AvroConverter",
                  "key.converter.schema.registry.url": "http://127.0.0.1:8081"})
    assert c.value_registry is not None and c.typed_values and not c.schemas_enable
    assert (c.value_registry.registry_url, c.value_registry.user_info, c.value_registry.subject_strategy) == (
        "http://127.0.0.1:8081", "fred:secret", "TopicRecordNameStrategy")
    assert c.key_registry is not None and c.key_registry.registry_url == "http://127.0.0.1:8081"
    assert c.key_registry.user_info is None and c.key_registry.subject_strategy == "TopicNameStrategy"
    assert config().value_registry.registry_url is None  # filled from the stack's registry when the sink runs
    assert config().key_registry is None
    # Keys take the values' registry unless told otherwise, and their own strategy and credentials.
    k = config(**{"value.converter.schema.registry.url": "http://h:1", "value.converter.basic.auth.user.info": "a:b",
                  "value.converter.basic.auth.credentials.source": "USER_INFO",
                  "key.converter": "io.confluent.connect.avro.AvroConverter",
                  "key.subject.name.strategy": "RecordNameStrategy"}).key_registry
    assert k is not None and (k.registry_url, k.user_info, k.subject_strategy) == ("http://h:1", "a:b",
                                                                                  "RecordNameStrategy")


@pytest.mark.parametrize(("schema", "kind"), [
    ({"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}, "json"),
    ("long", "text"), (["null", "string"], "text"), (["int", "string"], "json"), ("bytes", "bytes"),
    ({"type": "fixed", "name": "F", "size": 4}, "bytes"), ({"type": "string", "logicalType": "uuid"}, "text"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1}, "text"),
    ({"type": "map", "values": "long"}, "json"),
])
def test_a_decoded_key_becomes_json_or_its_plain_value(schema: object, kind: str) -> None:
    assert key_kind(json.dumps(schema)) == kind


@pytest.mark.parametrize(("extra", "key"), [
    ({"value.converter.schema.registry.url": "registry:8081"}, "value.converter.schema.registry.url"),
    ({"value.converter.basic.auth.credentials.source": "SASL_INHERIT"},
     "value.converter.basic.auth.credentials.source"),
    ({"value.converter.basic.auth.credentials.source": "USER_INFO"}, "value.converter.basic.auth.user.info"),
    ({"value.subject.name.strategy": "com.example.Mine"}, "value.subject.name.strategy"),
    ({"key.converter": "io.confluent.connect.avro.AvroConverter", "key.subject.name.strategy": "Mine"},
     "key.subject.name.strategy"),
    ({"key.converter": "io.confluent.connect.avro.AvroConverter", "key.converter.schema.registry.url": "h:1"},
     "key.converter.schema.registry.url"),
])
def test_bad_avro_converter_values_name_their_key(extra: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config(**extra)


def test_generator_schema_versions_follow_the_drift_and_encode_its_events() -> None:
    gen = Generator("payments", seed=3, drift=[{"after": 5, "add": {"tip": {"kind": "float", "max": 5}},
                                                "widen": {"amount": "long"}}])
    stages = stage_schemas(gen.spec)
    assert [after for after, _, _ in stages] == [0, 5]
    first, second = (dict((f["name"], f) for f in schema["fields"]) for _, schema, _ in stages)
    assert first["amount"]["type"] == "int" and second["amount"]["type"] == "long"
    assert "tip" not in first and second["tip"] == {"name": "tip", "type": ["null", "double"], "default": None}
    assert first["created_at"]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert first["document"]["type"] == "string"  # the spec emits it as a string ("75")
    # The connect mapping of each version: the table's evolution is add a column, widen int -> long.
    v1, v2 = (connect_to_spark(avro_to_connect(schema)) for _, schema, _ in stages)
    assert v1["amount"].dataType == T.IntegerType() and v2["amount"].dataType == T.LongType()
    value = frame(7, b"\x02")
    assert value[:1] == b"\x00" and struct.unpack(">I", value[1:5]) == (7,) and value[5:] == b"\x02"
    _, schema, converters = stages[0]
    event = next(iter(gen.events(1)))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema),
                               {k: (converters[k](v) if converters[k] else v) for k, v in event.items()})
    back = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), fastavro.parse_schema(schema))
    assert str(back["id"]) == event["id"] and back["created_at"].strftime("%Y-%m-%dT%H:%M:%S") == event["created_at"]
