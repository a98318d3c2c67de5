"""Kafka Connect's own transforms and predicates, run by sinklab as Spark expressions, against Kafka's own
classes: the same connector config (the same chain) runs through Apache's sink in the stack's Connect
worker, where Kafka's transform classes run as the Connect runtime ships them, and through sinklab, on the
same records; the two tables are compared row by row (and, auto-created, column type by column type)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from beside_apache import create_both, produce, rows, through_both, types
from helpers import mongo_event, produce_raw
from pyiceberg.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
)

from sinklab.stack import Stack
from sinklab.stack.apache_sink import ConnectWorker

# One Connect worker for every comparison with Apache's sink (make test: --dist loadgroup).
pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("beside-apache")]

K = "org.apache.kafka.connect.transforms."


def test_a_schemaless_chain_of_kafkas_transforms_writes_what_kafkas_classes_write(
        stack: Stack, connect_worker: ConnectWorker, unique: str) -> None:
    """RegexRouter → InsertField (topic, partition, offset, timestamp, static) → ReplaceField (exclude,
    renames) → MaskField → Cast → TimestampConverter (string → unix, unix → string) → HeaderFrom (move) →
    Flatten → Filter on HasHeaderKey, and a Filter of tombstones first, on plain JSON into a table that
    exists, routed by the field that holds the new topic (iceberg.tables.route-field)."""
    stack.create_topic(unique)
    records: list[tuple[dict[str, Any] | None, list[tuple[str, bytes]]]] = [(
        {"id": i, "name": f"n{i}", "secret2": "s", "card": "4111-1111", "qty2": 3, "n": str(10 + i), "price": 5 + i,
         "small": 250 + i, "big": 3.5e9 * (1 if i % 2 else -1),
         "flag": i % 2, "when": f"2024-01-04 12:28:{i:02d}", "ms": 1704371293123 + i * 86_400_000,
         "trace": f"tr{i}", "nest": {"a": i, "b": {"c": f"deep{i}"}}},
        [("skip", b"1")] if i == 3 else []) for i in range(8)]
    produce(stack, unique, [*records, (None, [])])
    columns = [("id", LongType()), ("who", StringType()), ("src", StringType()), ("part", IntegerType()),
               ("off", LongType()), ("env", StringType()), ("kts", LongType()), ("card", StringType()),
               ("qty2", LongType()), ("n", IntegerType()), ("price", DoubleType()), ("flag", BooleanType()),
               ("when", LongType()), ("ms", StringType()), ("nest_a", LongType()), ("nest_b_c", StringType()),
               ("secret2", StringType()), ("trace", StringType()), ("small", IntegerType()), ("big", IntegerType())]
    create_both(stack, unique, columns)
    config = {
        "topics": unique, "value.converter.schemas.enable": "false", "iceberg.tables.auto-create-enabled": "false",
        # Tombstones dropped first: Kafka's MaskField fails on one (its null value is no map), as sinklab's does.
        "transforms": "tomb,route,ins,rf,mask,cast,unix,text,hf,flat,skip",
        "transforms.route.type": K + "RegexRouter", "transforms.route.regex": "(t[0-9a-f]+)",
        "transforms.route.replacement": "$1-routed",
        "transforms.ins.type": K + "InsertField$Value", "transforms.ins.topic.field": "src",
        "transforms.ins.partition.field": "part", "transforms.ins.offset.field": "off",
        "transforms.ins.timestamp.field": "kts", "transforms.ins.static.field": "env",
        "transforms.ins.static.value": "prod",
        "transforms.rf.type": K + "ReplaceField$Value", "transforms.rf.exclude": "secret2",
        "transforms.rf.renames": "name:who",
        "transforms.mask.type": K + "MaskField$Value", "transforms.mask.fields": "card,qty2",
        "transforms.cast.type": K + "Cast$Value", "transforms.cast.spec":
            "n:int32,price:float64,flag:boolean,small:int8,big:int32",
        "transforms.unix.type": K + "TimestampConverter$Value", "transforms.unix.field": "when",
        "transforms.unix.format": "yyyy-MM-dd HH:mm:ss", "transforms.unix.target.type": "unix",
        "transforms.text.type": K + "TimestampConverter$Value", "transforms.text.field": "ms",
        "transforms.text.format": "yyyy-MM-dd", "transforms.text.target.type": "string",
        "transforms.hf.type": K + "HeaderFrom$Value", "transforms.hf.fields": "trace",
        "transforms.hf.headers": "trace", "transforms.hf.operation": "move",
        "transforms.flat.type": K + "Flatten$Value", "transforms.flat.delimiter": "_",
        "transforms.skip.type": K + "Filter", "transforms.skip.predicate": "skipped",
        "transforms.tomb.type": K + "Filter", "transforms.tomb.predicate": "tombstone",
        "predicates": "skipped,tombstone",
        "predicates.skipped.type": K + "predicates.HasHeaderKey", "predicates.skipped.name": "skip",
        "predicates.tombstone.type": K + "predicates.RecordIsTombstone",
        # Routed by the topic RegexRouter renamed, which InsertField put in `src`.
        "iceberg.tables.route-field": "src", f"iceberg.table.{unique}.route-regex": ".*-routed",
    }
    apache, ours = through_both(stack, connect_worker, unique, config, expected=7)
    theirs, mine = rows(stack, apache), rows(stack, ours)
    assert [r["id"] for r in mine] == [0, 1, 2, 4, 5, 6, 7]
    assert mine == theirs
    # What each step did, seen in one row (so a chain that did nothing cannot pass).
    first = mine[1]
    assert first["src"] == f"{unique}-routed" and first["who"] == "n1" and first["secret2"] is None
    assert (first["card"], first["qty2"], first["n"], first["price"], first["flag"]) == ("", 0, 11, 6.0, True)
    # Java's narrowing: an int wraps around, a double saturates at an int's range.
    assert (first["small"], first["big"]) == (251 - 256, 2**31 - 1)
    assert first["when"] == 1704371281000 and first["ms"] == "2024-01-05" and first["trace"] is None
    assert (first["nest_a"], first["nest_b_c"], first["env"], first["part"]) == (1, "deep1", "prod", 0)


def test_a_chain_on_connects_schema_envelope_auto_creates_what_kafkas_classes_create(
        stack: Stack, connect_worker: ConnectWorker, unique: str) -> None:
    """With the JSON converter's schemas (value.converter.schemas.enable): InsertField (a timestamp field,
    required topic) → ReplaceField (include, renames) → Cast → TimestampConverter (unix → Timestamp) →
    Flatten → SetSchemaMetadata, into tables each sink creates: the same columns, types and rows."""
    stack.create_topic(unique)
    schema = {"type": "struct", "name": "order", "fields": [
        {"field": "id", "type": "int64", "optional": False}, {"field": "name", "type": "string", "optional": True},
        {"field": "amount", "type": "int32", "optional": False}, {"field": "at", "type": "int64", "optional": True},
        {"field": "dropped", "type": "string", "optional": True},
        {"field": "shop", "type": "struct", "optional": True, "fields": [
            {"field": "city", "type": "string", "optional": False}, {"field": "size", "type": "int32"}]}]}
    values = [{"schema": schema, "payload": {"id": i, "name": f"n{i}", "amount": 100 + i,
                                             "at": 1704371293123 + i, "dropped": "x",
                                             "shop": {"city": "Oslo", "size": i} if i % 2 else None}}
              for i in range(5)]
    produce(stack, unique, [(v, []) for v in values])
    config = {
        "topics": unique, "value.converter.schemas.enable": "true", "iceberg.tables.auto-create-enabled": "true",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "transforms": "ins,rf,cast,ts,flat,meta",
        "transforms.ins.type": K + "InsertField$Value", "transforms.ins.topic.field": "src!",
        "transforms.ins.timestamp.field": "kts",
        "transforms.rf.type": K + "ReplaceField$Value", "transforms.rf.include": "id,name,amount,at,shop,src,kts",
        "transforms.rf.renames": "amount:total",
        "transforms.cast.type": K + "Cast$Value", "transforms.cast.spec": "total:int64",
        "transforms.ts.type": K + "TimestampConverter$Value", "transforms.ts.field": "at",
        "transforms.ts.target.type": "Timestamp",
        "transforms.flat.type": K + "Flatten$Value", "transforms.flat.delimiter": "_",
        "transforms.meta.type": K + "SetSchemaMetadata$Value", "transforms.meta.schema.name": "renamed",
    }
    stack.catalog.create_namespace_if_not_exists(unique)
    apache, ours = through_both(stack, connect_worker, unique, config, expected=5)
    assert types(stack, ours) == types(stack, apache)
    assert set(types(stack, ours)) == {"id", "name", "total", "at", "shop_city", "shop_size", "src", "kts"}
    assert types(stack, ours)["at"] == "timestamptz" and types(stack, ours)["total"] == "long"
    assert rows(stack, ours) == rows(stack, apache)


def test_icebergs_own_transforms_write_what_icebergs_classes_write(stack: Stack, connect_worker: ConnectWorker,
                                                                  unique: str) -> None:
    """Iceberg's DmsTransform (a record that is no DMS record skipped) → CopyValue → KafkaMetadataTransform,
    through Iceberg's own classes in the worker and through sinklab, into a table that exists."""
    stack.create_topic(unique)
    ops = ["load", "insert", "update", "delete"]
    records = [({"data": {"id": i, "name": f"n{i}"}, "metadata": {
        "operation": ops[i % 4], "timestamp": f"2024-01-04T12:28:0{i}.000000Z", "schema-name": "shop",
        "table-name": "orders"}}, []) for i in range(6)]
    produce(stack, unique, [*records[:3], ({"id": 99, "not": "dms"}, []), *records[3:]])
    cdc = StructType(NestedField(20, "op", StringType(), required=False),
                     NestedField(21, "ts", StringType(), required=False),
                     NestedField(22, "source", StringType(), required=False))
    columns = [("id", LongType()), ("name", StringType()), ("_cdc", cdc), ("copied", StringType()),
               ("_kafka_metadata_topic", StringType()), ("_kafka_metadata_partition", IntegerType()),
               ("_kafka_metadata_offset", LongType()), ("_kafka_metadata_timestamp", LongType())]
    create_both(stack, unique, columns)
    iceberg = "org.apache.iceberg.connect.transforms."
    config = {"topics": unique, "value.converter.schemas.enable": "false",
              "iceberg.tables.auto-create-enabled": "false", "transforms": "dms,copy,meta",
              "transforms.dms.type": iceberg + "DmsTransform",
              "transforms.copy.type": iceberg + "CopyValue", "transforms.copy.source.field": "name",
              "transforms.copy.target.field": "copied",
              "transforms.meta.type": iceberg + "KafkaMetadataTransform"}
    apache, ours = through_both(stack, connect_worker, unique, config, expected=6)
    mine = rows(stack, ours)
    assert mine == rows(stack, apache)
    assert [(r["id"], r["_cdc"]["op"], r["copied"]) for r in mine[:4]] == [
        (0, "I", "n0"), (1, "I", "n1"), (2, "U", "n2"), (3, "D", "n3")]
    assert mine[0]["_cdc"]["source"] == "shop.orders" and mine[4]["_kafka_metadata_offset"] == 5


def test_a_chain_of_the_other_kafka_transforms_writes_what_kafkas_classes_write(
        stack: Stack, connect_worker: ConnectWorker, unique: str) -> None:
    """ExtractField (a nested object) → HoistField → Flatten → TimestampRouter → InsertField (topic) →
    InsertField (static, only where TopicNameMatches the new topic) → ValueToKey → InsertHeader → DropHeaders
    → Filter on a negated HasHeaderKey (twice: one drops the records without a `keep` header, one would drop
    every record if InsertHeader had not run)."""
    stack.create_topic(unique)
    records = [({"order": {"id": i, "pizza": {"name": "margherita", "size": i}}, "noise": 1},
                [("keep", b"1"), ("x", b"2")] if i % 3 else [("x", b"2")]) for i in range(9)]
    produce(stack, unique, records)
    columns = [("o_id", LongType()), ("o_pizza_name", StringType()), ("o_pizza_size", LongType()),
               ("src", StringType()), ("noise", LongType()), ("env", StringType())]
    create_both(stack, unique, columns)
    config = {
        "topics": unique, "value.converter.schemas.enable": "false", "iceberg.tables.auto-create-enabled": "false",
        "transforms": "x,hoist,flat,when,ins,env,key,add,drop,keep,added",
        "transforms.x.type": K + "ExtractField$Value", "transforms.x.field": "order",
        "transforms.hoist.type": K + "HoistField$Value", "transforms.hoist.field": "o",
        "transforms.flat.type": K + "Flatten$Value", "transforms.flat.delimiter": "_",
        "transforms.when.type": K + "TimestampRouter", "transforms.when.topic.format": "${topic}_${timestamp}",
        "transforms.when.timestamp.format": "yyyy",
        "transforms.ins.type": K + "InsertField$Value", "transforms.ins.topic.field": "src",
        "transforms.env.type": K + "InsertField$Value", "transforms.env.static.field": "env",
        "transforms.env.static.value": "prod", "transforms.env.predicate": "routed",
        "transforms.key.type": K + "ValueToKey", "transforms.key.fields": "o_id",
        "transforms.add.type": K + "InsertHeader", "transforms.add.header": "added",
        "transforms.add.value.literal": "yes",
        "transforms.drop.type": K + "DropHeaders", "transforms.drop.headers": "x",
        "transforms.keep.type": K + "Filter", "transforms.keep.predicate": "kept", "transforms.keep.negate": "true",
        "transforms.added.type": K + "Filter", "transforms.added.predicate": "added",
        "transforms.added.negate": "true",
        "predicates": "kept,added,routed", "predicates.kept.type": K + "predicates.HasHeaderKey",
        "predicates.routed.type": K + "predicates.TopicNameMatches", "predicates.routed.pattern": ".*_[0-9]{4}",
        "predicates.kept.name": "keep", "predicates.added.type": K + "predicates.HasHeaderKey",
        "predicates.added.name": "added",
    }
    apache, ours = through_both(stack, connect_worker, unique, config, expected=6)
    mine = sorted(rows(stack, ours), key=lambda r: r["o_id"])
    assert mine == sorted(rows(stack, apache), key=lambda r: r["o_id"])
    year = time.strftime("%Y", time.gmtime())
    assert [r["o_id"] for r in mine] == [1, 2, 4, 5, 7, 8]
    assert mine[0] == {"o_id": 1, "o_pizza_name": "margherita", "o_pizza_size": 1, "src": f"{unique}_{year}",
                       "noise": None, "env": "prod"}


def test_icebergs_json_to_map_creates_what_icebergs_class_creates(stack: Stack, connect_worker: ConnectWorker,
                                                                 unique: str) -> None:
    """JsonToMapTransform on values read as text (StringConverter): each sink creates its table from the types
    the transform gives (a nested object a map of texts, a mixed array an array of texts, a null or empty
    field left out), and writes the same rows."""
    stack.create_topic(unique)
    records = [({"id": i, "name": f"n{i}", "big": 3_000_000_000 + i, "price": 12.5 + i, "flag": i % 2 == 0,
                 "tags": ["a", f"t{i}"], "mixed": [1, "x"], "attrs": {"k": i, "n": {"x": True}}, "empty": {},
                 "none": None, "objs": [{"a": i}]}, []) for i in range(4)]
    produce(stack, unique, records)
    stack.catalog.create_namespace_if_not_exists(unique)
    config = {"topics": unique, "value.converter": "org.apache.kafka.connect.storage.StringConverter",
              "iceberg.tables.auto-create-enabled": "true", "transforms": "json",
              "transforms.json.type": "org.apache.iceberg.connect.transforms.JsonToMapTransform"}
    apache, ours = through_both(stack, connect_worker, unique, config, expected=4)
    assert types(stack, ours) == types(stack, apache)
    assert types(stack, ours) == {
        "id": "int", "name": "string", "big": "long", "price": "double", "flag": "boolean", "tags": "list<string>",
        "mixed": "list<string>", "attrs": "map<string, string>", "objs": "list<map<string, string>>"}

    def unordered(r: dict[str, Any]) -> dict[str, Any]:  # a map's entries in no order (Java's HashMap has none)
        return {**r, "attrs": dict(r["attrs"]), "objs": [dict(o) for o in r["objs"]]}

    mine = [unordered(r) for r in rows(stack, ours)]
    assert mine == [unordered(r) for r in rows(stack, apache)]
    assert mine[1]["mixed"] == ["1", "x"] and mine[1]["attrs"] == {"k": "1", "n": '{"x":true}'}


def test_icebergs_mongo_debezium_creates_what_icebergs_class_creates(stack: Stack, connect_worker: ConnectWorker,
                                                                    unique: str) -> None:
    """MongoDebeziumTransform on Debezium MongoDB change events (JSON with schemas, key and value): an insert
    with nested documents, arrays and BSON's wrappers, a partial update merged over its pre-image, a delete,
    and a heartbeat; both sinks create and evolve their tables from the structs the transform types."""
    stack.create_topic(unique)
    key_schema = {"type": "struct", "name": f"{unique}.shop.orders.Key", "optional": False,
                  "fields": [{"field": "id", "type": "string", "optional": False}]}
    doc = {"_id": {"$oid": "5f0000000000000000000001"}, "name": "margherita", "qty": {"$numberLong": "3"},
           "price": 9.5, "at": {"$date": 1704371293123}, "tags": ["a", "b"], "addr": {"city": "Rome", "zip": 1},
           "items": [{"sku": "x", "q": 1}, {"sku": "y", "q": 2}], "code": {"$numberDecimal": "1.50"}}
    events = [{"after": json.dumps(doc), "op": "c"},
              {"before": json.dumps(doc), "updateDescription": {"removedFields": ["tags"], "updatedFields": json.dumps(
                  {"qty": {"$numberLong": "5"}, "note": "extra cheese"})}, "op": "u"},
              {"before": json.dumps(doc), "op": "d"}]
    key = json.dumps({"schema": key_schema, "payload": {"id": json.dumps(doc["_id"])}}).encode()
    heartbeat = {"schema": {"type": "struct", "name": "heartbeat", "fields": [{"field": "ts", "type": "int64"}]},
                 "payload": {"ts": 1}}
    values = [mongo_event(f"{unique}.shop.orders", i, **event) for i, event in enumerate(events)] + [heartbeat]
    produce_raw(stack, unique, [json.dumps(v).encode() for v in values], [key] * len(values))
    stack.catalog.create_namespace_if_not_exists(unique)
    json_converter = "org.apache.kafka.connect.json.JsonConverter"
    config = {"topics": unique, "key.converter": json_converter, "key.converter.schemas.enable": "true",
              "value.converter": json_converter, "value.converter.schemas.enable": "true",
              "iceberg.tables.auto-create-enabled": "true", "iceberg.tables.evolve-schema-enabled": "true",
              "transforms": "mongo",
              "transforms.mongo.type": "org.apache.iceberg.connect.transforms.MongoDebeziumTransform"}
    apache, ours = through_both(stack, connect_worker, unique, config, expected=3)
    assert types(stack, ours) == types(stack, apache)
    mine = rows(stack, ours)
    assert mine == rows(stack, apache)
    assert mine[0]["after"]["items"] == [{"sku": "x", "q": 1}, {"sku": "y", "q": 2}] and mine[0]["before"] is None
    assert mine[1]["after"]["qty"] == 5 and mine[1]["after"]["note"] == "extra cheese"
    assert mine[1]["after"]["tags"] is None
    assert mine[2]["after"] is None and mine[2]["before"]["name"] == "margherita"
