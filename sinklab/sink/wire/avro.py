"""Avro in Confluent's wire format: what Kafka Connect's ``AvroConverter`` hands the Java sink.

The record as a Connect struct with its Connect schema; here the record as JSON text and its schema
as a Connect schema (``avro_to_connect``, Confluent's ``AvroData`` mapping). The Spark tasks decode
with ``from_avro`` of the body and that id's writer schema (``decoded_text``), one branch per id;
the framing, the registry and the per-id bookkeeping are ``registry``'s.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column

AVRO_CONVERTER = "io.confluent.connect.avro.AvroConverter"
# Timestamps to JSON with all six fractional digits: Spark's default keeps milliseconds only.
TO_JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                   "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}
LOCAL_TIMESTAMP = "sinklab.LocalTimestamp"  # Connect has no zone-less timestamp; this name marks one


def full_name(schema: dict[str, Any]) -> str:
    """A named type's full name: its name, in its namespace unless the name is dotted already."""
    name = schema["name"]
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def avro_to_connect(schema: dict[str, Any] | str) -> dict[str, Any]:
    """The Connect schema (JSON form, as in JsonConverter's envelope) of an Avro record schema."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    out = _connect(parsed, {}, "value")
    if out["type"] != "struct":
        raise ValueError(f"the Avro schema of the value must be a record, got {parsed!r:.100}")
    return out


def _connect(s: Any, named: dict[str, dict[str, Any]], path: str) -> dict[str, Any]:  # noqa: C901 - one per type
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        if len(branches) == 1:
            return {**_connect(branches[0], named, path), "optional": "null" in s}
        # Spark's from_avro makes a struct of member0, member1, ... of the non-null branches.
        return {"type": "struct", "optional": "null" in s, "fields": [
            {"field": f"member{i}", **_connect(b, named, f"{path}.member{i}"), "optional": True}
            for i, b in enumerate(branches)]}
    if isinstance(s, str):
        if s in named:
            return named[s]
        return _primitive(s, path)
    kind, logical = s.get("type"), s.get("logicalType")
    if isinstance(kind, (list, dict)):
        return _connect(kind, named, path)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "optional": False,
                "parameters": {"scale": str(s.get("scale", 0)), "connect.decimal.precision": str(s["precision"])}}
    if logical == "date" and kind == "int":
        return {"type": "int32", "name": "org.apache.kafka.connect.data.Date", "optional": False}
    if logical == "time-millis" and kind == "int":
        return {"type": "int32", "name": "org.apache.kafka.connect.data.Time", "optional": False}
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "optional": False}
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return {"type": "int64", "name": LOCAL_TIMESTAMP, "optional": False}
    if kind == "record":
        out: dict[str, Any] = {"type": "struct", "optional": False, "fields": []}
        named[full_name(s)] = named[s["name"]] = out  # later references by name reuse it
        out["fields"] = [{"field": f["name"], **_connect(f["type"], named, f"{path}.{f['name']}")}
                         for f in s.get("fields", [])]
        return out
    if kind == "enum":
        named[full_name(s)] = named[s["name"]] = {"type": "string", "optional": False}
        return named[s["name"]]
    if kind == "fixed":
        named[full_name(s)] = named[s["name"]] = {"type": "bytes", "optional": False}
        return named[s["name"]]
    if kind == "array":
        return {"type": "array", "optional": False, "items": _connect(s["items"], named, f"{path}[]")}
    if kind == "map":
        return {"type": "map", "optional": False, "keys": {"type": "string", "optional": False},
                "values": _connect(s["values"], named, f"{path}{{}}")}
    # time-micros stays a long (Spark writes no Iceberg time), uuid a string: the primitive beneath.
    return _primitive(str(kind), path)


_PRIMITIVES = {"int": "int32", "long": "int64", "float": "float32", "double": "float64", "boolean": "boolean",
               "string": "string", "bytes": "bytes"}


def _primitive(name: str, path: str) -> dict[str, Any]:
    if name not in _PRIMITIVES:
        raise ValueError(f"{path}: unknown Avro type {name!r}")
    return {"type": _PRIMITIVES[name], "optional": False}


# ---- decoding in Spark
def key_kind(schema: str) -> str:
    """How a key decoded with ``schema`` (its text) becomes text, for tombstone ids and transforms:
    "json" (records, arrays, maps, unions of several types), "bytes" (base64, as JSON carries bytes)
    or "text" (primitives)."""
    return _kind(json.loads(schema))


def _kind(parsed: Any) -> str:
    if isinstance(parsed, list):
        branches = [b for b in parsed if b != "null"]
        return _kind(branches[0]) if len(branches) == 1 else "json"
    if isinstance(parsed, dict):
        kind = parsed.get("type")
        if isinstance(kind, (list, dict)):
            return _kind(kind)
        if kind in ("record", "array", "map"):
            return "json"
        if kind in ("bytes", "fixed") and parsed.get("logicalType") != "decimal":
            return "bytes"
        return "text"
    return "bytes" if parsed == "bytes" else "text"


def decoded_text(body: Column, schema: str, side: str, kind: str) -> Column:
    """The text of ``body`` decoded with the writer ``schema``: JSON for a value, as ``kind`` says for a key."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    decoded = from_avro(body, schema, {"mode": "PERMISSIVE"})
    if side == "value" or kind == "json":
        return F.to_json(decoded, TO_JSON_OPTIONS)
    return F.base64(decoded) if kind == "bytes" else decoded.cast("string")
