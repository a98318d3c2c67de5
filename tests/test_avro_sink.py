"""Avro with a schema registry, end to end: a real broker, the stack's real registry, real Spark."""

from __future__ import annotations

import io
import json

import fastavro
import pytest
from helpers import produce_raw, sink_config
from test_bad_records import dead_letters

from sinklab import viz
from sinklab.generators import Generator
from sinklab.generators.avro import frame
from sinklab.sink import IcebergSink
from sinklab.sink.wire.avro import AVRO_CONVERTER
from sinklab.sink.wire.jsonschema import JSON_SCHEMA_CONVERTER
from sinklab.sink.wire.registry import RegistryClient
from sinklab.stack import Stack

pytestmark = pytest.mark.spark


def avro_bytes(schema_id: int, parsed: object, datum: object) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, datum)
    return frame(schema_id, buf.getvalue())


def avro_config(unique: str, **extra: str) -> dict:
    config = sink_config(unique, **{"value.converter": AVRO_CONVERTER, "iceberg.tables.evolve-schema-enabled": "true",
                                    **extra})
    del config["config"]["value.converter.schemas.enable"]
    return config


def test_avro_pizzas_land_typed_exactly_once_and_a_new_version_adds_its_column(
        stack: Stack, schema_registry: str, unique: str) -> None:
    first = Generator("pizzas", seed=11).produce(stack, unique, count=120, partitions=2, format="avro").wait()
    # The producer's next schema version adds a field (optional, so the subject stays backward compatible).
    drift = Generator("pizzas", seed=12, drift=[{"after": 0, "add": {"tip": {"kind": "float", "max": 5}}}])
    registry = RegistryClient(schema_registry)
    sink = IcebergSink(stack, avro_config(unique, **{"value.converter.schema.registry.url": schema_registry}))
    try:
        assert sink.run_once() is not None
        table = stack.spark.table(f"sinklab.{unique}.pizzas")
        types = {f.name: f.dataType.simpleString() for f in table.schema.fields}
        # Auto-created from the registry's schema: Avro int -> int, timestamp-millis -> timestamp, uuid -> string.
        assert types == {"order_id": "string", "store_id": "int", "sauce": "string", "cheese": "string",
                         "meats": "string", "veggies": "string", "date_ordered": "timestamp"}
        assert not [f for f in table.schema.fields if f.nullable]  # required in Avro, required in Iceberg

        second = drift.produce(stack, unique, count=80, partitions=2, format="avro").wait()
        assert registry.versions(f"{unique}-value") == [1, 2]
        assert sink.run_once() is not None
        assert sink.run_once() is None  # nothing new: nothing written twice
    finally:
        sink.stop()
    rows = stack.spark.table(f"sinklab.{unique}.pizzas")
    assert dict(rows.dtypes)["tip"] == "double"
    assert rows.count() == first.delivered + second.delivered == 200
    assert rows.select("order_id").distinct().count() == 200
    assert rows.where("tip IS NULL").count() == 120 and rows.where("tip IS NOT NULL").count() == 80
    expected = next(iter(Generator("pizzas", seed=11).events(1)))
    got = rows.where(f"order_id = '{expected['order_id']}'").first()
    assert got.store_id == expected["store_id"] and got.sauce == expected["sauce"]
    assert got.date_ordered.strftime("%Y-%m-%d %H:%M:%S") == expected["date_ordered"]


def test_a_writer_schema_new_mid_stream_takes_a_second_pass_and_keeps_every_record_once(
        stack: Stack, schema_registry: str, unique: str) -> None:
    first = Generator("pizzas", seed=21).produce(stack, unique, count=60, partitions=2, format="avro").wait()
    config = avro_config(unique, **{"value.converter.schema.registry.url": schema_registry})
    del config["config"]["iceberg.tables.evolve-schema-enabled"]  # without evolution, a usual cycle is one pass
    sink = IcebergSink(stack, config)
    try:
        created = sink.run_once()
        assert created is not None and created.passes == 2  # auto-create
        usual = Generator("pizzas", seed=22).produce(stack, unique, count=40, partitions=2, format="avro").wait()
        result = sink.run_once()
        assert result is not None and result.passes == 1 and result.records == 40
        # A second version registered after the sink learnt the subject: its id is met in the one pass,
        # which cannot decode it; the cycle learns it and reads the same ranges again.
        drift = Generator("pizzas", seed=23, drift=[{"after": 0, "add": {"tip": {"kind": "float", "max": 5}}}])
        newer = drift.produce(stack, unique, count=30, partitions=2, format="avro").wait()
        assert RegistryClient(schema_registry).versions(f"{unique}-value") == [1, 2]
        result = sink.run_once()
        assert result is not None and result.passes == 2 and result.records == 30
        assert result.counters.get("undecodable", 0) == 0
        assert sink.run_once() is None
    finally:
        sink.stop()
    rows = stack.spark.table(f"sinklab.{unique}.pizzas")
    assert rows.count() == first.delivered + usual.delivered + newer.delivered == 130
    assert rows.select("order_id").distinct().count() == 130
    assert "tip" not in rows.columns  # evolution off: the new field is not the table's


def test_unknown_schema_id_and_unframed_bytes_are_dead_lettered_with_their_context(
        stack: Stack, schema_registry: str, unique: str) -> None:
    schema = {"type": "record", "name": "Order", "namespace": "t", "fields": [
        {"name": "id", "type": "long"}, {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                                                     "precision": 9, "scale": 2}}]}
    registry = RegistryClient(schema_registry)
    schema_id = registry.register(f"{unique}-value", schema)
    parsed = fastavro.parse_schema(schema)

    def framed(sid: int, record: dict) -> bytes:
        return avro_bytes(sid, parsed, record)

    from decimal import Decimal

    unknown_id = 2**31 - 7  # never handed out by the registry
    values = [framed(schema_id, {"id": 1, "amount": Decimal("12.34")}),
              framed(unknown_id, {"id": 2, "amount": Decimal("1.00")}),
              json.dumps({"id": 3}).encode(),
              framed(schema_id, {"id": 4, "amount": Decimal("-0.50")})]
    stack.create_topic(unique)
    produce_raw(stack, unique, values)
    dlq = f"{unique}-dlq"
    sink = IcebergSink(stack, avro_config(unique, **{
        "value.converter.schema.registry.url": schema_registry, "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq, "errors.deadletterqueue.context.headers.enable": "true"}))
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.counters["undecodable"] == 2
    rows = stack.spark.table(f"sinklab.{unique}.pizzas").orderBy("id").collect()
    assert [(r.id, r.amount) for r in rows] == [(1, Decimal("12.34")), (4, Decimal("-0.50"))]
    letters = {int(x["headers"]["__connect.errors.offset"]): x for x in dead_letters(stack, dlq)}
    assert sorted(letters) == [1, 2]
    unknown = letters[1]["headers"]
    assert unknown["__connect.errors.topic"] == unique.encode() and unknown["__connect.errors.partition"] == b"0"
    assert f"schema id {unknown_id} is not in the schema registry" in unknown["__connect.errors.exception.message"
                                                                             ].decode()
    assert letters[1]["value"] == values[1] and letters[1]["key"] == b"k1"  # as it came
    assert "not Avro in Confluent's wire format" in letters[2]["headers"]["__connect.errors.exception.message"
                                                                          ].decode()



def test_avro_keys_name_the_rows_that_tombstones_delete_and_a_bad_key_is_dead_lettered(
        stack: Stack, schema_registry: str, unique: str) -> None:
    registry = RegistryClient(schema_registry)
    value_schema = {"type": "record", "name": "Customer", "namespace": "t", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
    key_schema = {"type": "record", "name": "CustomerKey", "namespace": "t", "fields": [{"name": "id", "type": "long"}]}
    value_id = registry.register(f"{unique}-value", value_schema)
    key_id = registry.register(f"{unique}-key", key_schema)
    # A producer keying by the bare id (KafkaAvroSerializer of a long), under a subject the sink does not
    # prime: the sink learns it from the records.
    long_id = registry.register(f"{unique}-bare-key", json.dumps("long"))
    value, key = fastavro.parse_schema(value_schema), fastavro.parse_schema(key_schema)

    def customer(i: int, name: str) -> tuple[bytes, bytes]:
        return avro_bytes(key_id, key, {"id": i}), avro_bytes(value_id, value, {"id": i, "name": name})

    unknown_key_id = 2**31 - 11
    records = [customer(1, "ada"), customer(2, "bob"), customer(3, "cy"), customer(1, "ada l."),
               (avro_bytes(key_id, key, {"id": 2}), None),  # a tombstone keyed by a record
               (avro_bytes(long_id, "long", 3), None),  # a tombstone keyed by the bare id
               (frame(unknown_key_id, b"\x08"), customer(4, "dee")[1]),
               (b"plain-key", customer(5, "eve")[1])]
    stack.create_topic(unique)
    produce_raw(stack, unique, [v for _, v in records], keys=[k for k, _ in records])
    dlq = f"{unique}-dlq"
    sink = IcebergSink(stack, avro_config(unique, **{
        "key.converter": AVRO_CONVERTER, "value.converter.schema.registry.url": schema_registry,
        "iceberg.tables.upsert-mode-enabled": "true", "iceberg.tables.default-id-columns": "id",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.context.headers.enable": "true"}))
    try:
        result = sink.run_once()
        assert sink.run_once() is None
    finally:
        sink.stop()
    assert result is not None and result.counters["undecodable"] == 2
    rows = stack.spark.table(f"sinklab.{unique}.pizzas").collect()
    assert [(r.id, r.name) for r in rows] == [(1, "ada l.")]
    letters = {int(x["headers"]["__connect.errors.offset"]): x for x in dead_letters(stack, dlq)}
    assert sorted(letters) == [6, 7]
    message = {o: letters[o]["headers"]["__connect.errors.exception.message"].decode() for o in letters}
    assert f"key schema id {unknown_key_id} is not in the schema registry" in message[6]
    assert "key is not Avro in Confluent's wire format" in message[7]
    assert letters[7]["key"] == b"plain-key" and letters[6]["value"] == records[6][1]  # as they came
    assert {letters[o]["headers"]["__connect.errors.stage"] for o in letters} == {b"KEY_CONVERTER"}
    # The dashboard's header counts them at the key's converter, not the value's.
    assert viz.dead_letter_stages(viz.cycles(stack, sink=sink.config.name)) == {"KEY_CONVERTER": 2}


def test_json_schema_values_and_keys_land_typed_from_the_registry_and_a_new_version_adds_its_column(
        stack: Stack, schema_registry: str, unique: str) -> None:
    registry = RegistryClient(schema_registry)
    v1 = {"type": "object", "title": "Customer", "required": ["id", "name"], "properties": {
        "id": {"type": "integer"}, "name": {"type": "string"},
        "since": {"type": "integer", "title": "org.apache.kafka.connect.data.Timestamp", "connect.type": "int64"}}}
    v2 = {**v1, "properties": {**v1["properties"], "tip": {"type": "number"}}}
    v1_id = registry.register(f"{unique}-value", v1, "JSON")
    # Apicurio tells a JSON Schema from its content: a bare {"type": "integer"} needs its $schema.
    key_id = registry.register(f"{unique}-key", {"$schema": "http://json-schema.org/draft-07/schema#",
                                                 "type": "integer"}, "JSON")
    avro_id = registry.register(f"{unique}-other", {"type": "record", "name": "R", "fields": []})

    def record(sid: int, i: int, **fields: object) -> tuple[bytes, bytes]:
        return frame(key_id, str(i).encode()), frame(sid, json.dumps({"id": i, **fields}).encode())

    first = [record(v1_id, 1, name="ada", since=1_700_000_000_000), record(v1_id, 2, name="bob"),
             (frame(key_id, b"2"), None),  # a tombstone: the key names id 2
             record(2**31 - 3, 3, name="cy"), record(avro_id, 4, name="dee"),
             (frame(key_id, b"5"), json.dumps({"id": 5, "name": "eve"}).encode())]
    stack.create_topic(unique)
    produce_raw(stack, unique, [v for _, v in first], keys=[k for k, _ in first])
    dlq = f"{unique}-dlq"
    config = avro_config(unique, **{
        "value.converter": JSON_SCHEMA_CONVERTER, "key.converter": JSON_SCHEMA_CONVERTER,
        "value.converter.schema.registry.url": schema_registry, "iceberg.tables.upsert-mode-enabled": "true",
        "iceberg.tables.default-id-columns": "id", "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq, "errors.deadletterqueue.context.headers.enable": "true"})
    sink = IcebergSink(stack, config)
    try:
        assert sink.run_once() is not None
        table = f"sinklab.{unique}.pizzas"
        # Typed from the registry's schema, not from the values: since is a timestamp, never seen as one.
        assert [(f.name, f.dataType.simpleString(), f.nullable) for f in stack.spark.table(table).schema.fields] == [
            ("id", "bigint", False), ("name", "string", False), ("since", "timestamp", True)]
        v2_id = registry.register(f"{unique}-value", v2, "JSON")
        produce_raw(stack, unique, [record(v2_id, 6, name="fay", tip=2.5)[1]], keys=[record(v2_id, 6)[0]])
        assert sink.run_once() is not None
        assert sink.run_once() is None
    finally:
        sink.stop()
    rows = {r.id: r for r in stack.spark.table(table).collect()}
    assert sorted(rows) == [1, 6]
    assert rows[1].since.year == 2023 and rows[1].tip is None and rows[6].tip == 2.5
    message = {int(x["headers"]["__connect.errors.offset"]): x["headers"]["__connect.errors.exception.message"].decode()
               for x in dead_letters(stack, dlq)}
    assert sorted(message) == [3, 4, 5]
    assert f"value schema id {2**31 - 3} is not in the schema registry" in message[3]
    assert f"value schema id {avro_id} is registered as AVRO, not JSON Schema" in message[4]
    assert "value is not JSON Schema in Confluent's wire format" in message[5]


def test_generated_json_schema_pizzas_land_typed_as_the_avro_ones(
        stack: Stack, schema_registry: str, unique: str) -> None:
    produced = Generator("pizzas", seed=14).produce(stack, unique, count=60, partitions=1,
                                                    format="json-schema").wait()
    assert RegistryClient(schema_registry).registered(
        RegistryClient(schema_registry).subject_ids(f"{unique}-value")[0])[0] == "JSON"
    sink = IcebergSink(stack, avro_config(unique, **{"value.converter": JSON_SCHEMA_CONVERTER}))
    try:
        assert sink.run_once() is not None
    finally:
        sink.stop()
    table = stack.spark.table(f"sinklab.{unique}.pizzas")
    # The same columns the Avro pizzas get (the first test), from the registry's JSON Schema.
    assert {f.name: f.dataType.simpleString() for f in table.schema.fields} == {
        "order_id": "string", "store_id": "int", "sauce": "string", "cheese": "string", "meats": "string",
        "veggies": "string", "date_ordered": "timestamp"}
    assert table.count() == produced.delivered == 60
    expected = next(iter(Generator("pizzas", seed=14).events(1)))
    got = table.where(f"order_id = '{expected['order_id']}'").first()
    assert got.date_ordered.strftime("%Y-%m-%d %H:%M:%S") == expected["date_ordered"]
