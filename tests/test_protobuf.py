"""Protobuf with a schema registry (Confluent's ProtobufConverter): the records encoded by Google's own protobuf
library from the same schema, decoded by sinklab (pure logic), then end to end through the stack's registry,
broker and Spark into a table (a round trip: Confluent's converter is not on Maven Central, so it cannot run
in the stack's Connect worker beside it)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from helpers import once, produce_raw, sink_config
from test_bad_records import dead_letters

from sinklab.exceptions import ConfigError
from sinklab.sink.config.sink_config import load_config
from sinklab.sink.wire import protobuf
from sinklab.sink.wire.registry import MAGIC, RegistryClient
from sinklab.stack import Stack

PROTO = """
// A pizza order, as a shop's producer would register it.
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  enum Size { SMALL = 0; LARGE = 1; }
  string id = 1;
  int64 qty = 2;
  double price = 3;
  Size size = 4;
  repeated string toppings = 5;
  Shop shop = 6;
  map<string, int32> extras = 7;
  google.protobuf.Timestamp at = 8;
  oneof pay { string card = 9; int32 cash = 10; }
  optional string note = 11;
  uint32 count = 12 [deprecated = true];
  sint32 delta = 13;
  repeated int32 scores = 14;
  bytes blob = 15;
}
message Shop { string city = 1; int32 zip = 2; }
"""
F = descriptor_pb2.FieldDescriptorProto


def google_order_class() -> Any:
    """The same schema built as a descriptor, for Google's protobuf library to encode with."""
    file = descriptor_pb2.FileDescriptorProto(name="shop.proto", package="shop", syntax="proto3",
                                              dependency=["google/protobuf/timestamp.proto"])
    shop = file.message_type.add(name="Shop")
    shop.field.add(name="city", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    shop.field.add(name="zip", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    order = file.message_type.add(name="Order")
    order.enum_type.add(name="Size").value.extend([descriptor_pb2.EnumValueDescriptorProto(name="SMALL", number=0),
                                                   descriptor_pb2.EnumValueDescriptorProto(name="LARGE", number=1)])
    entry = order.nested_type.add(name="ExtrasEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    order.oneof_decl.add(name="pay")
    order.oneof_decl.add(name="_note")
    one, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    for name, number, kind, label, extra in [
            ("id", 1, F.TYPE_STRING, one, {}), ("qty", 2, F.TYPE_INT64, one, {}), ("price", 3, F.TYPE_DOUBLE, one, {}),
            ("size", 4, F.TYPE_ENUM, one, {"type_name": ".shop.Order.Size"}), ("toppings", 5, F.TYPE_STRING, rep, {}),
            ("shop", 6, F.TYPE_MESSAGE, one, {"type_name": ".shop.Shop"}),
            ("extras", 7, F.TYPE_MESSAGE, rep, {"type_name": ".shop.Order.ExtrasEntry"}),
            ("at", 8, F.TYPE_MESSAGE, one, {"type_name": ".google.protobuf.Timestamp"}),
            ("card", 9, F.TYPE_STRING, one, {"oneof_index": 0}), ("cash", 10, F.TYPE_INT32, one, {"oneof_index": 0}),
            ("note", 11, F.TYPE_STRING, one, {"oneof_index": 1, "proto3_optional": True}),
            ("count", 12, F.TYPE_UINT32, one, {}), ("delta", 13, F.TYPE_SINT32, one, {}),
            ("scores", 14, F.TYPE_INT32, rep, {}), ("blob", 15, F.TYPE_BYTES, one, {})]:
        order.field.add(name=name, number=number, type=kind, label=label, **extra)
    return google_class(file, "shop.Order")


def google_class(file: descriptor_pb2.FileDescriptorProto, name: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def framed(schema_id: int, message: Any) -> bytes:
    """Confluent's frame: magic byte, 4-byte id, the message indexes ([0]: one 0 byte), the message."""
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + b"\x00" + message.SerializeToString()


def orders() -> list[Any]:
    order = google_order_class()
    full = order(id="o-1", qty=3, price=12.5, size=1, toppings=["basil", "olives"], shop={"city": "Oslo", "zip": 150},
                 extras={"chili": 2}, card="4111", note="ring twice", count=4_000_000_000, delta=-7,
                 scores=[5, -1], blob=b"\x01\x02")
    full.at.FromMilliseconds(1704371293123)
    return [full, order(id="o-2", cash=20)]


def test_bodies_encoded_by_googles_library_decode_as_protobufdata_reads_them() -> None:
    full, sparse = (json.loads(protobuf.decode(PROTO, b"\x00" + o.SerializeToString())) for o in orders())
    assert full == {"id": "o-1", "qty": 3, "price": 12.5, "size": "LARGE", "toppings": ["basil", "olives"],
                    "shop": {"city": "Oslo", "zip": 150}, "extras": {"chili": 2}, "at": 1704371293123,
                    "pay_0": {"card": "4111", "cash": None}, "note": "ring twice", "count": 4_000_000_000,
                    "delta": -7, "scores": [5, -1], "blob": "AQI="}
    # Unset: a scalar reads as its default, a message, a oneof and an `optional` field as null.
    assert sparse == {"id": "o-2", "qty": 0, "price": 0.0, "size": "SMALL", "toppings": [], "shop": None,
                      "extras": {}, "at": None, "pay_0": {"card": None, "cash": 20}, "note": None, "count": 0,
                      "delta": 0, "scores": [], "blob": ""}
    schema = protobuf.proto_to_connect(PROTO)
    by_name = {f["field"]: f for f in schema["fields"]}
    assert [f["field"] for f in schema["fields"]] == ["id", "qty", "price", "size", "toppings", "shop", "extras",
                                                      "at", "pay_0", "note", "count", "delta", "scores", "blob"]
    assert by_name["count"]["type"] == "int64" and by_name["size"]["type"] == "string"  # uint32: a long
    assert by_name["at"]["name"] == "org.apache.kafka.connect.data.Timestamp"
    assert by_name["extras"]["type"] == "map" and by_name["toppings"]["items"]["type"] == "string"
    assert [f["field"] for f in by_name["pay_0"]["fields"]] == ["card", "cash"]
    with pytest.raises(ValueError, match="imports \"other.proto\""):
        protobuf.parse('syntax = "proto3"; import "other.proto"; message A { int32 a = 1; }')
    with pytest.raises(ValueError, match="type Missing"):
        protobuf.parse('syntax = "proto3"; message A { Missing a = 1; }')
    with pytest.raises(ValueError, match="ends inside"):
        protobuf.decode(PROTO, b"\x00\x0a\x05ab")  # a string of 5 bytes, 2 there


def test_the_converters_settings_are_read_or_refused_naming_the_key() -> None:
    base = {"name": "s", "topics": "a", "iceberg.tables": "n.t", "value.converter": protobuf.PROTOBUF_CONVERTER,
            "value.converter.schema.registry.url": "http://127.0.0.1:1"}
    assert load_config({**base, "value.converter.int.for.enums": "false"}).value_registry.format == "protobuf"
    with pytest.raises(ConfigError) as ints:
        load_config({**base, "value.converter.int.for.enums": "true"})
    assert ints.value.key == "value.converter.int.for.enums" and "int.for.enums=false" in str(ints.value)


@pytest.mark.spark
def test_protobuf_orders_land_in_a_table_created_from_the_registrys_schema(stack: Stack, schema_registry: str,
                                                                          unique: str) -> None:
    stack.create_topic(unique)
    schema_id = RegistryClient(schema_registry).register(f"{unique}-value", PROTO, "PROTOBUF")
    cut = b"\x00" + schema_id.to_bytes(4, "big") + b"\x00\x0a\x05ab"  # a string of 5 bytes, 2 there
    produce_raw(stack, unique, [framed(schema_id, o) for o in orders()] + [cut])
    dlq = f"{unique}-dlq"
    config = sink_config(unique, **{"value.converter": protobuf.PROTOBUF_CONVERTER,
                                    "value.converter.schema.registry.url": schema_registry,
                                    "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
                                    "errors.deadletterqueue.context.headers.enable": "true"})
    del config["config"]["value.converter.schemas.enable"]
    assert once(stack, config).counters["undecodable"] == 1
    [letter] = dead_letters(stack, dlq)
    assert letter["value"] == cut and letter["headers"]["__connect.errors.offset"] == b"2"
    assert f"does not decode as Protobuf with schema id {schema_id}: the body ends inside a field" in letter[
        "headers"]["__connect.errors.exception.message"].decode()
    table = stack.catalog.load_table((unique, "pizzas"))
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types["qty"] == "long" and types["count"] == "long" and types["at"] == "timestamptz"
    assert types["size"] == "string" and types["extras"].startswith("map<string, int>")
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == ["o-1", "o-2"]  # the third does not decode: a dead letter
    assert rows[0]["shop"] == {"city": "Oslo", "zip": 150} and rows[0]["pay_0"] == {"card": "4111", "cash": None}
    assert rows[0]["at"].timestamp() == 1704371293.123 and rows[0]["blob"] == b"\x01\x02"
    assert rows[1]["qty"] == 0 and rows[1]["note"] is None and rows[1]["shop"] is None


@pytest.mark.spark
def test_protobuf_keys_name_the_rows_that_tombstones_delete(stack: Stack, schema_registry: str, unique: str) -> None:
    """``key.converter`` ProtobufConverter: an upsert table's tombstone deletes the row its key names."""
    registry = RegistryClient(schema_registry)
    value_id = registry.register(f"{unique}-value", 'syntax = "proto3"; message Customer { int64 id = 1; '
                                 'string name = 2; }', "PROTOBUF")
    key_id = registry.register(f"{unique}-key", 'syntax = "proto3"; message CustomerKey { int64 id = 1; }', "PROTOBUF")
    file = descriptor_pb2.FileDescriptorProto(name="c.proto", syntax="proto3")
    for name, fields in (("Customer", [("id", F.TYPE_INT64), ("name", F.TYPE_STRING)]),
                         ("CustomerKey", [("id", F.TYPE_INT64)])):
        message = file.message_type.add(name=name)
        for number, (field, kind) in enumerate(fields, start=1):
            message.field.add(name=field, number=number, type=kind, label=F.LABEL_OPTIONAL)
    customer, key = google_class(file, "Customer"), google_class(file, "CustomerKey")
    records = [(framed(key_id, key(id=i)), None if name is None else framed(value_id, customer(id=i, name=name)))
               for i, name in [(1, "ada"), (2, "bob"), (1, "ada l."), (2, None)]]
    stack.create_topic(unique)
    produce_raw(stack, unique, [v for _, v in records], keys=[k for k, _ in records])
    config = sink_config(unique, **{"value.converter": protobuf.PROTOBUF_CONVERTER,
                                    "key.converter": protobuf.PROTOBUF_CONVERTER,
                                    "value.converter.schema.registry.url": schema_registry,
                                    "iceberg.tables.upsert-mode-enabled": "true",
                                    "iceberg.tables.default-id-columns": "id"})
    del config["config"]["value.converter.schemas.enable"]
    once(stack, config)
    rows = stack.spark.table(f"sinklab.{unique}.pizzas").collect()
    assert [(r.id, r.name) for r in rows] == [(1, "ada l.")]
