"""Converters sinklab reads as the converter classes do, against those classes: the same connector config runs
through Apache's sink in the stack's Connect worker (the converter's own jar on its classpath) and through
sinklab, on the same records framed by the stack's schema registry; the tables are compared row by row and
column type by column type."""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro
import pytest
from beside_apache import produce, rows, through_both, types
from test_bad_records import dead_letters

from sinklab.sink import IcebergSink
from sinklab.sink.wire import APICURIO_AVRO_CONVERTER, ApicurioClient
from sinklab.sink.wire.apicurio import native_url
from sinklab.stack import Stack
from sinklab.stack.apache_sink import ConnectWorker

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("beside-apache")]

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "price", "type": "double"}, {"name": "paid", "type": "boolean"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": "int"}]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}
# A second version, as a producer's next release registers it: one optional field more.
ORDER_V2 = {**ORDER, "fields": [*ORDER["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}


def order(i: int, v2: bool = False) -> dict[str, Any]:
    out = {"id": i, "name": f"n{i}", "qty": i * 2, "price": 1.5 + i, "paid": i % 2 == 0, "at": 1_764_000_000_000 + i,
           "note": None if i % 2 else f"note {i}", "address": {"city": f"c{i}", "zip": 1000 + i},
           "tags": ["a", f"t{i}"]}
    return {**out, "coupon": f"C{i}"} if v2 else out


def avro(schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


def apicurio_config(unique: str, url: str, **settings: str) -> dict[str, str]:
    return {"topics": unique, "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": APICURIO_AVRO_CONVERTER, "value.converter.apicurio.registry.url": url,
            "iceberg.tables.auto-create-enabled": "true", "iceberg.tables.evolve-schema-enabled": "true",
            **{f"value.converter.{k}": v for k, v in settings.items()}}


def test_apicurios_avro_converter_reads_ids_in_headers_and_payloads_as_apicurios_class_does(
        stack: Stack, connect_worker: ConnectWorker, schema_registry: str, unique: str) -> None:
    """Apicurio 2.x's defaults: a globalId in the header apicurio.value.globalId (the body the whole payload), or,
    from a producer without headers, a magic byte and an 8-byte globalId before the body; two versions of the
    schema. Each sink auto-creates its table from the registry's schema and evolves it: the same types, rows."""
    url = native_url(schema_registry)
    registry = ApicurioClient(url)
    first, second = (registry.register(f"{unique}-value", s) for s in (ORDER, ORDER_V2))
    assert first != second
    in_headers = [(avro(ORDER, order(i)), [("apicurio.value.globalId", struct.pack(">q", first)),
                                           ("apicurio.value.encoding", b"BINARY")]) for i in range(3)]
    in_payload = [(b"\x00" + struct.pack(">q", second) + avro(ORDER_V2, order(i, v2=True)), [])
                  for i in range(3, 6)]
    stack.create_topic(unique, partitions=1)
    produce(stack, unique, [*in_headers, *in_payload])
    stack.catalog.create_namespace_if_not_exists(unique)
    apache, ours = through_both(stack, connect_worker, unique, apicurio_config(unique, url), expected=6)
    assert types(stack, ours) == types(stack, apache)
    assert types(stack, ours)["coupon"] == "string" and types(stack, ours)["at"] == "timestamptz"
    mine = rows(stack, ours)
    assert mine == rows(stack, apache)
    assert [r["coupon"] for r in mine] == [None, None, None, "C3", "C4", "C5"]
    assert mine[1]["address"] == {"city": "c1", "zip": 1001} and mine[1]["tags"] == ["a", "t1"]


def test_apicurios_content_ids_in_four_bytes_read_as_apicurios_class_reads_them(
        stack: Stack, connect_worker: ConnectWorker, schema_registry: str, unique: str) -> None:
    """use-id=contentId, as-confluent (a 4-byte id, Confluent's frame with Apicurio's ids), headers off: an id
    header is then not read by either sink, the payload's id is."""
    url = native_url(schema_registry)
    content_id = ApicurioClient(url, use_id="contentId").register(f"{unique}-value", ORDER)
    framed = [(b"\x00" + struct.pack(">I", content_id) + avro(ORDER, order(i)),
               [("apicurio.value.contentId", struct.pack(">q", 2**40))]) for i in range(3)]
    stack.create_topic(unique, partitions=1)
    produce(stack, unique, framed)
    stack.catalog.create_namespace_if_not_exists(unique)
    config = apicurio_config(unique, url, **{"apicurio.registry.use-id": "contentId",
                                             "apicurio.registry.as-confluent": "true",
                                             "apicurio.registry.headers.enabled": "false"})
    apache, ours = through_both(stack, connect_worker, unique, config, expected=3)
    assert types(stack, ours) == types(stack, apache)
    assert rows(stack, ours) == rows(stack, apache) and [r["id"] for r in rows(stack, ours)] == [0, 1, 2]


def test_apicurio_frames_that_do_not_read_are_dead_lettered_with_the_reason(
        stack: Stack, schema_registry: str, unique: str) -> None:
    """A globalId the registry never gave, a body in Avro's JSON encoding, bytes in no frame: each a dead letter
    naming why; the good records land. The registry's URL comes from the stack (its native API)."""
    registry = ApicurioClient(native_url(schema_registry))
    global_id = registry.register(f"{unique}-value", ORDER)
    unknown = 2**40 + 7
    header = "apicurio.value.globalId"
    records = [(avro(ORDER, order(0)), [(header, struct.pack(">q", global_id))]),
               (avro(ORDER, order(1)), [(header, struct.pack(">q", unknown))]),
               (b'{"id": 2}', [(header, struct.pack(">q", global_id)), ("apicurio.value.encoding", b"JSON")]),
               (b'{"id": 3}', []),
               (b"\x00" + struct.pack(">q", global_id) + avro(ORDER, order(4)), [])]
    stack.create_topic(unique, partitions=1)
    produce(stack, unique, records)
    dlq = f"{unique}-dlq"
    config = {k: v for k, v in apicurio_config(unique, "").items() if not k.endswith("registry.url")}
    sink = IcebergSink(stack, {"name": unique, "config": {
        **config, "iceberg.tables": f"{unique}.orders", "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq, "errors.deadletterqueue.context.headers.enable": "true"}})
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.counters["undecodable"] == 3
    assert [r["id"] for r in rows(stack, f"{unique}.orders")] == [0, 4]
    why = {int(x["headers"]["__connect.errors.offset"]): x["headers"]["__connect.errors.exception.message"].decode()
           for x in dead_letters(stack, dlq)}
    assert sorted(why) == [1, 2, 3]
    assert f"globalId {unknown} is not in the schema registry at {native_url(schema_registry)}" in why[1]
    assert "Avro in its JSON encoding (apicurio.value.encoding=JSON)" in why[2]
    assert "not Avro in Apicurio's wire format" in why[3] and header in why[3]
