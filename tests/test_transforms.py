"""Single-message transforms and schema evolution planning: pure logic, no Spark session."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from sinklab.exceptions import TransformError
from sinklab.sink.config.transforms import Debezium, KafkaMetadata, Meta, debezium, flatten, kafka_metadata
from sinklab.sink.tables.evolve import plan_changes

META = Meta(topic="t", partition=1, offset=42, timestamp=1700000000000, key="k1")


def test_kafka_metadata_flat_nested_and_schema() -> None:
    flat, schema = kafka_metadata(KafkaMetadata(), {"id": 1}, {"type": "struct", "fields": []}, META)
    assert flat == {"id": 1, "_kafka_metadata_topic": "t", "_kafka_metadata_partition": 1,
                    "_kafka_metadata_offset": 42, "_kafka_metadata_record_timestamp": 1700000000000}
    assert schema is not None and [f["field"] for f in schema["fields"]][0] == "_kafka_metadata_topic"
    nested, _ = kafka_metadata(KafkaMetadata(nested=True, external_field=("env", "prod")), {"id": 1}, None, META)
    assert nested["_kafka_metadata"]["offset"] == 42 and nested["_kafka_metadata"]["env"] == "prod"


def test_flatten_values_and_schema() -> None:
    payload = {"a": {"b": {"c": 1}, "d": [1, {"x": 2}]}, "e": None}
    schema = {"type": "struct", "fields": [
        {"field": "a", "type": "struct", "optional": False, "fields": [
            {"field": "b", "type": "struct", "optional": True, "fields": [
                {"field": "c", "type": "int64", "optional": False}]}]}]}
    out, flat_schema = flatten("_", payload, schema)
    assert out == {"a_b_c": 1, "a_d": [1, {"x": 2}], "e": None}  # lists are kept, as in Connect's Flatten
    assert flat_schema == {"type": "struct", "fields": [{"field": "a_b_c", "type": "int64", "optional": True}]}


def test_debezium_ops_and_images() -> None:
    source = {"db": "shop", "table": "orders"}
    created, _ = debezium(Debezium(), {"op": "c", "after": {"id": 1}, "ts_ms": 5, "source": source}, None, META)
    assert created == {"id": 1, "_cdc": {"op": "I", "ts": 5, "offset": 42, "source": "shop.orders",
                                         "target": "shop.orders", "key": "k1"}}
    deleted, _ = debezium(Debezium(target_pattern="cdc.{table}"),
                          {"op": "d", "before": {"id": 1}, "after": None, "source": source}, None, META)
    assert deleted["id"] == 1 and deleted["_cdc"]["op"] == "D" and deleted["_cdc"]["target"] == "cdc.orders"
    snapshot, _ = debezium(Debezium(), {"op": "r", "after": {"id": 2}, "source": source}, None, META)
    assert snapshot["_cdc"]["op"] == "I"
    assert debezium(Debezium(), {"op": "u", "after": {"id": 3}, "source": source}, None, META)[0]["_cdc"]["op"] == "U"
    with pytest.raises(TransformError, match="op"):
        debezium(Debezium(), {"id": 1}, None, META)
    with pytest.raises(TransformError, match="after"):
        debezium(Debezium(), {"op": "u", "after": None}, None, META)


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
