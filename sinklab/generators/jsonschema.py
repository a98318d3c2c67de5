"""A spec's events as JSON Schema in Confluent's wire format: what a producer with Confluent's
``KafkaJsonSchemaSerializer`` writes, read back by ``JsonSchemaConverter``.

Each drift stage's JSON Schema is its Avro schema (``avro.stage_schemas``) said in JSON Schema,
with the annotations Confluent's ``JsonSchemaData`` reads: ``connect.type`` for 32-bit integers and
Connect's ``Timestamp`` by ``title`` (its values epoch milliseconds), so a sink types the columns
exactly as for the Avro stream.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

DRAFT = "http://json-schema.org/draft-07/schema#"
TIMESTAMP = {"type": "integer", "title": "org.apache.kafka.connect.data.Timestamp", "connect.type": "int64"}


def json_schema_of(avro: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a stage's Avro record schema (its title the record's name, for the
    record-name subject strategies)."""
    return {"$schema": DRAFT, **_json(avro)}


def _json(t: Any) -> dict[str, Any]:  # noqa: C901 - one case per Avro type the generators write
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        inner = _json(branches[0])
        return {"oneOf": [{"type": "null"}, inner]} if "null" in t else inner
    if isinstance(t, dict):
        kind, logical = t["type"], t.get("logicalType")
        if logical == "timestamp-millis":
            return dict(TIMESTAMP)
        if kind == "record":
            name = f"{t['namespace']}.{t['name']}" if t.get("namespace") else t["name"]
            return {"type": "object", "title": name, "additionalProperties": False,
                    "properties": {f["name"]: _json(f["type"]) for f in t["fields"]},
                    "required": [f["name"] for f in t["fields"] if not _optional(f["type"])]}
        if kind == "array":
            return {"type": "array", "items": _json(t["items"])}
        return _json(kind)  # uuid: its string
    return {"int": {"type": "integer", "connect.type": "int32"}, "long": {"type": "integer"},
            "double": {"type": "number"}, "float": {"type": "number", "connect.type": "float32"},
            "boolean": {"type": "boolean"}, "string": {"type": "string"}}[t]


def _optional(t: Any) -> bool:
    return isinstance(t, list) and "null" in t


def encode(datum: dict[str, Any]) -> bytes:
    """A stage's datum (``avro._datum``: timestamps as datetimes) as the JSON body."""
    return json.dumps(datum, separators=(",", ":"), default=_millis).encode()


def _millis(value: Any) -> int:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    raise TypeError(f"{type(value).__name__} is not JSON")
