"""Single-message transforms as Spark expressions, one record frame at a time on the stack's Spark (each
step's semantics; tests/test_connect_transforms.py compares whole chains with Kafka's own classes), the
refusals of what sinklab cannot run, and schema evolution planning (pure logic)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from helpers import mongo_event, run_cli
from pyspark.sql import types as T

from sinklab.exceptions import ConfigError
from sinklab.sink.config.sink_config import load_config
from sinklab.sink.records.columns import ERROR, KEY_TEXT
from sinklab.sink.records.prepare import prepare
from sinklab.sink.records.transform import mongo
from sinklab.sink.tables.evolve import plan_changes
from sinklab.stack import Stack

K = "org.apache.kafka.connect.transforms."
ICEBERG = "org.apache.iceberg.connect.transforms."
RAW = T.StructType([T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
                    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
                    T.StructField("offset", T.LongType()), T.StructField("timestamp", T.LongType()),
                    T.StructField("headers", T.ArrayType(T.StructType([T.StructField("key", T.StringType()),
                                                                        T.StructField("value", T.BinaryType())])))])
STAMP = 1704371293123  # 2024-01-04T12:28:13.123Z


def chain(stack: Stack, conf: dict[str, Any], values: list[Any], envelope: bool = False, topic: str = "orders",
          headers: list[list[tuple[str, bytes]]] | None = None,
          key: bytes | None = b'{"id":7}') -> list[dict[str, Any]]:
    """The records as prepared with the transforms of ``conf``: payload (parsed), schema, error, key text."""
    config = load_config({"name": "s", "topics": topic, "iceberg.tables": "n.t",
                          "value.converter.schemas.enable": str(envelope).lower(), **conf})
    rows = [(key, None if v is None else json.dumps(v).encode(), topic, 0, i, STAMP,
             (headers or [])[i] if headers and i < len(headers) else []) for i, v in enumerate(values)]
    prepared = prepare(stack.spark.createDataFrame(rows, RAW), config.schemas_enable, config.transforms,
                       config.route_field)
    out = []
    for r in prepared.orderBy("offset").collect():
        d = r.asDict()
        out.append({"offset": d["offset"], "payload": json.loads(d["_payload"]) if d["_payload"] else None,
                    "schema": json.loads(d["_schema"]) if d["_schema"] else None, "error": d[ERROR],
                    "key": d.get(KEY_TEXT)})
    return out


def one(kind: str, cls: str, **settings: str) -> dict[str, str]:
    return {"transforms": kind, f"transforms.{kind}.type": cls, **{f"transforms.{kind}.{k.replace('_', '.')}": v
                                                                   for k, v in settings.items()}}


@pytest.mark.spark
def test_kafka_metadata_flat_nested_and_schema(stack: Stack) -> None:
    [flat] = chain(stack, one("meta", ICEBERG + "KafkaMetadataTransform"), [{"id": 1}])
    assert flat["payload"] == {"id": 1, "_kafka_metadata_topic": "orders", "_kafka_metadata_partition": 0,
                               "_kafka_metadata_offset": 0, "_kafka_metadata_timestamp": STAMP}
    conf = {**one("meta", ICEBERG + "KafkaMetadataTransform"), "transforms.meta.nested": "true",
            "transforms.meta.external_field": "env,prod"}
    envelope = {"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]}, "payload": {"id": 1}}
    [nested] = chain(stack, conf, [envelope], envelope=True)
    assert nested["payload"]["_kafka_metadata"] == {"topic": "orders", "partition": 0, "offset": 0,
                                                    "timestamp": STAMP, "env": "prod"}
    added = nested["schema"]["fields"][1]
    assert added["field"] == "_kafka_metadata" and [f["field"] for f in added["fields"]] == [
        "topic", "partition", "offset", "timestamp", "env"]


@pytest.mark.spark
def test_flatten_values_and_schema(stack: Stack) -> None:
    payload = {"a": {"b": {"c": 1}, "d": [1, {"x": 2}]}, "e": None}
    schema = {"type": "struct", "fields": [
        {"field": "a", "type": "struct", "optional": False, "fields": [
            {"field": "b", "type": "struct", "optional": True, "fields": [
                {"field": "c", "type": "int64", "optional": False}]}]}]}
    [out] = chain(stack, one("f", K + "Flatten$Value", delimiter="_"), [{"schema": schema, "payload": payload}],
                  envelope=True)
    assert out["payload"] == {"a_b_c": 1, "a_d": [1, {"x": 2}], "e": None}  # lists kept, as Connect's Flatten does
    assert out["schema"]["fields"] == [{"field": "a_b_c", "type": "int64", "optional": True}]
    deep: dict[str, Any] = {"v": 1}
    for _ in range(10):
        deep = {"n": deep}
    [too_deep] = chain(stack, one("f", K + "Flatten$Value"), [deep])
    assert "nests deeper than 9 levels" in too_deep["error"] and "'f' (Flatten)" in too_deep["error"]


@pytest.mark.spark
def test_debezium_ops_and_images(stack: Stack) -> None:
    source = {"db": "shop", "table": "orders"}
    events = [{"op": "c", "after": {"id": 1}, "ts_ms": 5, "source": source},
              {"op": "d", "before": {"id": 1}, "after": None, "source": source},
              {"op": "r", "after": {"id": 2}, "source": source}, {"op": "u", "after": {"id": 3}, "source": source},
              {"id": 1}, {"op": "u", "after": None}]
    created, deleted, snapshot, updated, no_op, no_image = chain(
        stack, {**one("dbz", ICEBERG + "DebeziumTransform"), "transforms.dbz.cdc.target.pattern": "cdc.{table}"},
        events)
    assert created["payload"] == {"id": 1, "_cdc": {"op": "I", "ts": 5, "offset": 0, "source": "shop.orders",
                                                    "target": "cdc.orders", "key": '{"id":7}'}}
    assert deleted["payload"]["id"] == 1 and deleted["payload"]["_cdc"]["op"] == "D"
    assert snapshot["payload"]["_cdc"]["op"] == "I" and updated["payload"]["_cdc"]["op"] == "U"
    assert "not a Debezium change event: op is missing" in no_op["error"]
    assert "has no after row image" in no_image["error"]


@pytest.mark.spark
def test_the_key_side_and_the_steps_no_chain_test_shows(stack: Stack) -> None:
    """ExtractField$Key, ValueToKey, HoistField, MaskField's replacement, a cast of the whole value,
    TimestampRouter, header steps with a negated predicate, ExtractField V2 paths."""
    conf = {"transforms": "vk,xk,hoist", "transforms.vk.type": K + "ValueToKey", "transforms.vk.fields": "id,n",
            "transforms.xk.type": K + "ExtractField$Key", "transforms.xk.field": "id",
            "transforms.hoist.type": K + "HoistField$Value", "transforms.hoist.field": "inner"}
    [keyed, no_field] = chain(stack, conf, [{"id": 42, "n": "x"}, {"n": "y"}])
    assert keyed["key"] == "42" and keyed["payload"] == {"inner": {"id": 42, "n": "x"}}
    assert "the value has no field id" in no_field["error"]

    [masked] = chain(stack, one("m", K + "MaskField$Value", fields="card,qty,gone", replacement="99"),
                     [{"card": "4111", "qty": 3, "ok": True}])
    assert masked["payload"] == {"card": "99", "qty": 99, "ok": True}
    [bad_mask] = chain(stack, one("m", K + "MaskField$Value", fields="ok", replacement="x"), [{"ok": 5}])
    assert "cannot mask ok with 'x'" in bad_mask["error"]

    [whole, not_int] = chain(stack, {**one("x", K + "ExtractField$Value", field="a.b"),
                                     "transforms.x.field.syntax.version": "V2",
                                     "transforms": "x,c", "transforms.c.type": K + "Cast$Value",
                                     "transforms.c.spec": "int64"},
                             [{"a": {"b": "12"}}, {"a": {"b": "twelve"}}])
    # A value that is no struct afterwards is no row: the sink says so, as Apache's sink fails on it.
    assert "no struct or map after the transforms" in whole["error"]
    assert "cannot cast the value to int64" in not_int["error"]

    conf = {"transforms": "tr,drop,add,only", "transforms.tr.type": K + "TimestampRouter",
            "transforms.tr.topic.format": "${topic}_${timestamp}", "transforms.tr.timestamp.format": "yyyy-MM",
            "transforms.drop.type": K + "DropHeaders", "transforms.drop.headers": "a",
            "transforms.add.type": K + "InsertHeader", "transforms.add.header": "b",
            "transforms.add.value.literal": "1",
            "transforms.only.type": K + "Filter", "transforms.only.predicate": "hasb", "transforms.only.negate": "true",
            "predicates": "hasb", "predicates.hasb.type": K + "predicates.HasHeaderKey", "predicates.hasb.name": "b",
            "transforms.ins.type": K + "InsertField$Value"}
    conf["transforms"] += ",ins"
    conf["transforms.ins.topic.field"] = "t"
    [kept] = chain(stack, conf, [{"id": 1}], headers=[[("a", b"x")]])
    assert kept["payload"] == {"id": 1, "t": "orders_2024-01"}  # negated: dropped only without header b


@pytest.mark.spark
def test_debeziums_extract_new_record_state(stack: Stack) -> None:
    """Debezium's unwrap on the sink side: the row, deletes dropped or rewritten, tombstones dropped, envelope
    and source fields added; a record that is no change event passes as it is."""
    unwrap = {**one("u", "io.debezium.transforms.ExtractNewRecordState"),
              "transforms.u.add.fields": "op,table,source.ts_ms"}
    source = {"table": "orders", "ts_ms": 17}
    events = [{"op": "c", "before": None, "after": {"id": 1}, "source": source},
              {"op": "d", "before": {"id": 1}, "after": None, "source": source}, None, {"plain": True}]
    created, passed = chain(stack, unwrap, events)
    assert created["payload"] == {"id": 1, "__op": "c", "__table": "orders", "__source_ts_ms": 17}
    assert passed["payload"] == {"plain": True}  # the delete and the tombstone are gone
    rewrite = {**unwrap, "transforms.u.delete.handling.mode": "rewrite", "transforms.u.drop.tombstones": "false"}
    created, deleted, tombstone, _ = chain(stack, rewrite, events)
    assert created["payload"]["__deleted"] == "false" and deleted["payload"] == {
        "id": 1, "__op": "d", "__table": "orders", "__source_ts_ms": 17, "__deleted": "true"}
    assert tombstone["offset"] == 2 and tombstone["payload"] is None
    schema = {"type": "struct", "fields": [
        {"field": "before", "type": "struct", "optional": True, "fields": [{"field": "id", "type": "int64"}]},
        {"field": "after", "type": "struct", "optional": True, "fields": [{"field": "id", "type": "int64"}]},
        {"field": "op", "type": "string"}]}
    [typed] = chain(stack, one("u", "io.debezium.transforms.ExtractNewRecordState"),
                    [{"schema": schema, "payload": {"op": "u", "after": {"id": 5}}}], envelope=True)
    assert typed["payload"] == {"id": 5} and typed["schema"]["fields"] == [{"field": "id", "type": "int64"}]
    with pytest.raises(ConfigError) as headers:
        load_config({"name": "s", "topics": "a", "iceberg.tables": "n.t", **unwrap, "transforms.u.add.headers": "op"})
    assert headers.value.key == "transforms.u.add.headers"


@pytest.mark.spark
def test_icebergs_copy_value_and_dms(stack: Stack) -> None:
    envelope = {"schema": {"type": "struct", "fields": [{"field": "name", "type": "string", "optional": True}]},
                "payload": {"name": "a"}}
    [copied] = chain(stack, one("c", ICEBERG + "CopyValue", source_field="name", target_field="copy"), [envelope],
                     envelope=True)
    assert copied["payload"] == {"name": "a", "copy": "a"}
    assert copied["schema"]["fields"][1] == {"field": "copy", "type": "string", "optional": True}
    dms = [{"data": {"id": 1}, "metadata": {"operation": "delete", "timestamp": "t", "schema-name": "s",
                                            "table-name": "o"}}, {"id": 2}]
    [deleted] = chain(stack, one("d", ICEBERG + "DmsTransform"), dms)  # the second is no DMS record: skipped
    assert deleted["payload"] == {"id": 1, "_cdc": {"op": "D", "ts": "t", "source": "s.o"}}


@pytest.mark.spark
def test_json_to_map_types_a_text_value_and_refuses_other_converters(stack: Stack) -> None:
    conf = {"value.converter": "org.apache.kafka.connect.storage.StringConverter",
            **one("j", ICEBERG + "JsonToMapTransform")}
    [typed, nested] = chain(stack, conf, [{"id": 1, "n": None, "o": {"a": [1]}}, {"id": 2, "deep": [[1], [2]]}])
    assert typed["payload"] == {"id": 1, "n": None, "o": {"a": [1]}}  # the JSON stays; its schema says how to read it
    assert typed["schema"] == {"type": "struct", "optional": False, "fields": [
        {"field": "id", "type": "int32", "optional": True},
        {"field": "o", "type": "map", "keys": {"type": "string", "optional": False},
         "values": {"type": "string", "optional": False}, "optional": True}]}
    assert nested["error"].endswith("an array of arrays, which sinklab does not type as Iceberg's class does")
    [root] = chain(stack, {**conf, "transforms.j.json.root": "true"}, [{"id": 1, "o": {"a": 1}}])
    assert root["payload"] == {"payload": {"id": 1, "o": {"a": 1}}}
    assert [f["field"] for f in root["schema"]["fields"]] == ["payload"]
    with pytest.raises(ConfigError) as refused:
        load_config({"name": "s", "topics": "a", "iceberg.tables": "n.t", **one("j", ICEBERG + "JsonToMapTransform")})
    assert refused.value.key == "transforms.j.type" and "StringConverter" in str(refused.value)


OID = '{"$oid": "5F0000000000000000000001"}'
DOC = {"_id": {"$oid": "5F0000000000000000000001"}, "name": "margherita", "qty": {"$numberLong": "3"}, "price": 9.5,
       "n": 4, "at": {"$date": STAMP}, "tags": ["a", "b"], "addr": {"city": "Rome", "deep": {"zip": 1}},
       "items": [{"sku": "x", "q": 1}, {"sku": "y"}], "sym": {"$symbol": "s"}}


def opt(kind: str, **more: Any) -> dict[str, Any]:
    return {"type": kind, "optional": True, **more}


def test_mongo_debeziums_documents_are_typed_as_icebergs_class_types_them() -> None:
    """BSON's extended JSON to values and Connect schemas (pure logic: the UDF the step runs)."""
    converted = mongo.convert(json.dumps(DOC), None, None, None, OID, False)
    assert converted["err"] is None and json.loads(converted["key"]) == "5f0000000000000000000001"
    assert json.loads(converted["after"]) == {
        "_id": "5f0000000000000000000001", "name": "margherita", "qty": 3, "price": 9.5, "n": 4, "at": STAMP,
        "tags": ["a", "b"], "addr": {"city": "Rome", "deep": {"zip": 1}}, "items": [{"sku": "x", "q": 1}, {"sku": "y"}]}
    schema = json.loads(converted["after_schema"])
    assert "name" not in schema and [f["field"] for f in schema["fields"]] == [  # the symbol is dropped
        "_id", "name", "qty", "price", "n", "at", "tags", "addr", "items"]
    by_name = {f.pop("field"): f for f in schema["fields"]}
    assert by_name["qty"] == opt("int64") and by_name["n"] == opt("int32") and by_name["price"] == opt("float64")
    assert by_name["at"] == opt("int64", name="org.apache.kafka.connect.data.Timestamp", version=1)
    assert by_name["addr"]["name"] == "null.addr" and by_name["addr"]["fields"][1]["name"] == "null.addr.deep"
    assert by_name["items"]["items"] == opt("struct", name="null.items", fields=[
        {"field": "sku", **opt("string")}, {"field": "q", **opt("int32")}])
    regexes = mongo.convert(json.dumps({"new": {"$regularExpression": {"pattern": "^a", "options": "i"}},
                                        "old": {"$regex": "^b", "$options": "m"}}), None, None, None, None, False)
    assert json.loads(regexes["after"]) == {"new": {"regex": "^a", "options": "i"},
                                            "old": {"regex": "^b", "options": "m"}}
    as_documents = mongo.convert(json.dumps({"tags": ["a", "b"]}), None, None, None, None, True)
    assert json.loads(as_documents["after"]) == {"tags": {"_0": "a", "_1": "b"}}
    assert json.loads(as_documents["after_schema"])["fields"][0]["name"] == "null.tags"
    # A partial update: updatedFields over before (a dotted path a literal name), removedFields out, _id from
    # the key when neither has one.
    partial = mongo.convert(None, json.dumps(DOC), json.dumps({"qty": 5, "addr.city": "Milan"}), ["tags"], OID, False)
    after = json.loads(partial["after"])
    assert after["qty"] == 5 and after["addr.city"] == "Milan" and "tags" not in after and after["_id"] == DOC[
        "_id"]["$oid"].lower()
    alone = mongo.convert(None, None, '{"qty": 6}', [], OID, False)
    assert json.loads(alone["after"]) == {"qty": 6, "_id": "5f0000000000000000000001"} and alone["before"] is None
    for bad, err in [('{"mix": [1, "a"]}', "after: Field null.mix is not a homogenous array"),
                     ('{"a": 1, "a": 2}', "after: a document names a field twice (null)"),
                     ('{"w": {"$code": "f", "$scope": {}}}', "after: a JavaScript-with-scope value"),
                     ('{"d": {"$date": "yesterday"}}', 'after: not a date: {"$date": "yesterday"}'),
                     ('{"l": [{"a": 1}, {"a": "x"}]}', "after: the documents of array null.l give field a different"),
                     ("[1]", "after is no document"), ("{nope", "after is not BSON's extended JSON: {nope")]:
        assert mongo.convert(bad, None, None, None, None, False)["err"].startswith(err), bad
    assert mongo.convert('{"a": 1}', None, None, None, "{x", False)["err"].startswith(
        "the key's id is not BSON's extended JSON")


@pytest.mark.spark
def test_mongo_debezium_rewrites_the_envelope_and_the_key(stack: Stack) -> None:
    event = partial(mongo_event, "mongo.shop.orders")
    heartbeat = {"schema": {"type": "struct", "name": "heartbeat", "fields": [{"field": "ts", "type": "int64"}]},
                 "payload": {"ts": 1}}
    conf = {**one("m", ICEBERG + "MongoDebeziumTransform"), "key.converter.schemas.enable": "false"}
    created, deleted, malformed, tombstone, bad = chain(
        stack, conf, [event(after=json.dumps(DOC), op="c"), event(before='{"_id": 1}', op="d"), event(op="d"),
                      None, heartbeat, event(after='{"mix": [1, "a"]}', op="c")], envelope=True,
        key=json.dumps({"id": OID}).encode())
    assert created["error"] is None and created["payload"]["after"]["qty"] == 3
    assert [f["field"] for f in created["schema"]["fields"]] == ["after", "updateDescription", "op", "ts_ms"]
    assert created["schema"]["name"] == "mongo.shop.orders.Envelope"
    assert json.loads(created["key"]) == {"id": "5f0000000000000000000001"}
    assert deleted["payload"] == {"before": {"_id": 1}, "updateDescription": None, "op": "d", "ts_ms": 0}
    assert malformed["error"].endswith("malformed record topic: orders, partition: 0, offset: 2")
    assert tombstone["payload"] is None and tombstone["error"] is None  # the heartbeat (offset 4) is gone
    assert bad["offset"] == 5 and bad["error"] == (
        "transform: transform 'm' (MongoDebezium): after: Field null.mix is not a homogenous array")


def test_what_sinklab_cannot_run_is_refused_naming_the_alias_and_the_class() -> None:
    base = {"name": "s", "topics": "a", "iceberg.tables": "n.t"}
    with pytest.raises(ConfigError) as custom:
        load_config({**base, **one("cc", "com.github.jcustenborder.kafka.connect.transform.common."
                                   "ChangeCase$Value")})
    assert custom.value.key == "transforms.cc.type" and "'cc'" in str(custom.value)
    assert "ChangeCase" in str(custom.value) and "run it where the records are produced" in str(custom.value)
    assert "register a Python function under its name (sinklab.sink.register_transform" in str(custom.value)
    with pytest.raises(ConfigError) as unimportable:
        load_config({**base, "sinklab.transforms.modules": "no_such_module_here"})
    assert unimportable.value.key == "sinklab.transforms.modules" and "'no_such_module_here'" in str(unimportable.value)
    with pytest.raises(ConfigError) as formless:
        load_config({**base, **one("c", K + "Cast")})
    assert formless.value.key == "transforms.c.type" and "$Key or $Value" in str(formless.value)
    with pytest.raises(ConfigError) as spec:
        load_config({**base, **one("c", K + "Cast$Value", spec="a:uuid")})
    assert spec.value.key == "transforms.c.spec" and "'uuid'" in str(spec.value)
    with pytest.raises(ConfigError) as predicate:
        load_config({**base, **one("f", K + "Filter", predicate="nope")})
    assert predicate.value.key == "transforms.f.predicate"
    with pytest.raises(ConfigError) as string_target:
        load_config({**base, **one("t", K + "TimestampConverter$Value", field="a", target_type="string")})
    assert string_target.value.key == "transforms.t.format"
    noted = load_config({**base, **one("f", K + "Flatten$Value", delimiter="_", colour="red")})
    assert noted.notes == ["transforms.f.colour: not a setting of Flatten$Value: ignored, as Kafka Connect ignores it"]
    older = load_config({**base, **one("r", K + "ReplaceField$Value", whitelist="a", blacklist="b")})
    assert (older.transforms[0].include, older.transforms[0].exclude) == (("a",), ("b",))
    assert "Kafka Connect 4.0 and later ignore them" in older.notes[0]


def field(name: str, dtype: T.DataType, nullable: bool = True) -> T.StructField:
    return T.StructField(name, dtype, nullable)


def test_plan_changes() -> None:
    table = T.StructType([field("id", T.IntegerType(), False), field("f", T.FloatType()),
                          field("d", T.DecimalType(10, 2)), field("s", T.StructType([field("a", T.StringType())])),
                          field("name", T.StringType())])
    incoming = T.StructType([field("id", T.LongType()), field("f", T.DoubleType()), field("d", T.DecimalType(20, 2)),
                             field("s", T.StructType([field("a", T.StringType()), field("b", T.LongType())])),
                             field("NAME", T.StringType()), field("new", T.BooleanType(), False),
                             field("name", T.LongType())])
    changes = {(c.action, ".".join(c.path), c.dtype.simpleString() if c.dtype else None)
               for c in plan_changes(table, incoming, {"id"}, case_insensitive=True)}
    assert changes == {("widen", "id", "bigint"), ("optional", "id", None), ("widen", "f", "double"),
                       ("widen", "d", "decimal(20,2)"), ("add", "s.b", "bigint"), ("add", "new", "boolean")}
    # Case-sensitive: NAME is a new column; a string column never narrows to long.
    names = {".".join(c.path) for c in plan_changes(table, incoming, set()) if c.action == "add"}
    assert names == {"s.b", "NAME", "new"}


def test_connect_validate_lists_every_key_it_ignores_and_refuses_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    config = {"topics": "a", "iceberg.tables": "n.t", "tasks.max": "4", **one("r", K + "ReplaceField$Value",
                                                                              blacklist="x", colour="red")}
    path.write_text(json.dumps({"name": "demo", "config": config}))
    ok = run_cli("connect", "validate", str(path))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == [
        "demo: sinklab runs it; 3 note(s):",
        "  tasks.max: accepted, not used (Spark decides read parallelism from the partitions and cores)",
        "  transforms.r.blacklist: read as exclude, as Kafka Connect 3.x reads them; Kafka Connect 4.0 and later "
        "ignore them",
        "  transforms.r.colour: not a setting of ReplaceField$Value: ignored, as Kafka Connect ignores it"]
    path.write_text(json.dumps({"name": "demo", "config": {**config, "transforms.r.type": K + "ExtractTopic$Value"}}))
    refused = run_cli("connect", "validate", str(path))
    assert refused.returncode == 1 and refused.stderr.startswith("sinklab: error: transforms.r.type: transform 'r'")


@pytest.mark.spark
def test_a_python_function_registered_under_a_class_name_runs_that_class(stack: Stack) -> None:
    """A published config naming a third-party class runs unchanged once a module registers a function under
    that name: between Kafka's steps, with the record's field order kept, its errors bad records naming the
    step, the rows it leaves out dropped, and its predicate deciding which records it sees."""
    conf = {"sinklab.transforms.modules": "pattern_map", "transforms": "src,pm,drop",
            "transforms.src.type": K + "InsertField$Value", "transforms.src.topic.field": "src",
            "transforms.pm.type": "com.github.jcustenborder.kafka.connect.transform.common.PatternMapString$Value",
            "transforms.pm.src.field.name": "phone", "transforms.pm.value.pattern": "[0-9]{4}$",
            "transforms.pm.value.replacement": "xxxx",
            "transforms.drop.type": K + "ReplaceField$Value", "transforms.drop.exclude": "noise"}
    values = [{"phone": "555-1234", "id": 1, "noise": 0}, {"id": 2}, {"id": -3, "phone": "1"}, None]
    masked, missing, tombstone = chain(stack, conf, values)
    assert masked["payload"] == {"phone": "555-xxxx", "id": 1, "src": "orders"}
    assert list(masked["payload"]) == ["phone", "id", "src"] and masked["error"] is None
    assert missing["error"] == ("transform: transform 'pm' (com.github.jcustenborder.kafka.connect.transform."
                                "common.PatternMapString$Value): the value has no text field phone")
    assert tombstone["offset"] == 3 and tombstone["error"] is None  # passed through: no value to map
    # Its predicate: only topics it matches go through the function.
    skipped = chain(stack, {**conf, "predicates": "p", "predicates.p.type": K + "predicates.TopicNameMatches",
                            "predicates.p.pattern": "payments", "transforms.pm.predicate": "p"}, values[:1])
    assert skipped[0]["payload"] == {"phone": "555-1234", "id": 1, "src": "orders"}
    with pytest.raises(ConfigError) as broken:
        chain(stack, {"sinklab.transforms.modules": "pattern_map", **one("b", "com.example.Broken")}, [{"id": 1}])
    assert broken.value.key == "transforms.b.type" and "headers (array<struct<key:string,value:binary>>)" in str(
        broken.value)
    with pytest.raises(ConfigError) as raised:
        chain(stack, {"sinklab.transforms.modules": "pattern_map", **one("r", "com.example.Raising")}, [{"id": 1}])
    assert raised.value.key == "transforms.r.type" and "failed: KeyError: 'pattern'" in str(raised.value)
