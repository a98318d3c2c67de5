"""JSON Schema in Confluent's wire format: what Kafka Connect's ``JsonSchemaConverter`` hands the Java sink.

The body after the framing is the record's JSON text, read as it is; the registry's JSON Schema
becomes the Connect schema Confluent's ``JsonSchemaData`` makes of it (``json_schema_to_connect``),
so tables are created and evolved from the registry's types, not from sampled values. Types follow
``JsonSchemaData``: ``integer`` is int64 unless ``connect.type`` narrows it, ``number`` float64
(``connect.type: float32``), objects with ``properties`` structs (a property is optional unless
``required``), objects with only ``additionalProperties`` maps, ``oneOf``/``anyOf`` with ``null``
optional, Connect's logical types by ``title`` (``org.apache.kafka.connect.data.Timestamp`` …).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sinklab.sink.wire.text import utf8_text

if TYPE_CHECKING:
    from pyspark.sql import Column

JSON_SCHEMA_CONVERTER = "io.confluent.connect.json.JsonSchemaConverter"
_INTEGERS = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64"}
_LOGICAL = {"org.apache.kafka.connect.data.Timestamp": "int64", "org.apache.kafka.connect.data.Date": "int32",
            "org.apache.kafka.connect.data.Time": "int32"}
DECIMAL = "org.apache.kafka.connect.data.Decimal"


def json_schema_to_connect(schema: dict[str, Any] | str) -> dict[str, Any]:
    """The Connect schema (JSON form, as in JsonConverter's envelope) of a JSON Schema for an object."""
    root = json.loads(schema) if isinstance(schema, str) else schema
    out = _connect(root, root, "value", set())
    if out["type"] != "struct":
        raise ValueError(f"the JSON Schema of the value must be an object with properties, got {root!r:.100}")
    return {**out, "optional": False}


def _connect(s: Any, root: dict[str, Any], path: str, refs: set[str]) -> dict[str, Any]:  # noqa: C901 - per type
    if s is True or s == {}:
        raise ValueError(f"{path}: a schema that allows anything has no Connect type")
    ref = s.get("$ref")
    if ref is not None:
        if ref in refs:
            raise ValueError(f"{path}: recursive $ref {ref} has no Connect type")
        return _connect(_resolve(root, ref, path), root, path, refs | {ref})
    for combinator in ("oneOf", "anyOf"):
        if combinator in s:
            branches = [b for b in s[combinator] if b.get("type") != "null"]
            optional = len(branches) < len(s[combinator])
            if len(branches) == 1:
                return {**_connect(branches[0], root, path, refs), "optional": optional}
            return {"type": "struct", "optional": optional, "fields": [
                {"field": f"io.confluent.connect.json.OneOf.field.{i}",
                 **_connect(b, root, f"{path}.{i}", refs), "optional": True} for i, b in enumerate(branches)]}
    kind = s.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise ValueError(f"{path}: type {kind} has no single Connect type")
        return {**_connect({**s, "type": kinds[0]}, root, path, refs), "optional": "null" in kind}
    connect_type, title = s.get("connect.type"), s.get("title")
    if kind == "integer" or (kind == "number" and title in _LOGICAL):
        out = {"type": _LOGICAL.get(title) or _INTEGERS.get(connect_type, "int64"), "optional": False}
        return {**out, "name": title} if title in _LOGICAL else out
    if kind == "number":
        if title == DECIMAL:
            params = s.get("connect.parameters", {})
            return {"type": "bytes", "name": DECIMAL, "optional": False,
                    "parameters": {"scale": str(params.get("scale", 0)),
                                   "connect.decimal.precision": str(params.get("connect.decimal.precision", 38))}}
        return {"type": "float32" if connect_type == "float32" else "float64", "optional": False}
    if kind == "boolean":
        return {"type": "boolean", "optional": False}
    if kind == "string" or "enum" in s:
        return {"type": "bytes" if connect_type == "bytes" else "string", "optional": False}
    if kind == "array":
        return {"type": "array", "optional": False, "items": _connect(s.get("items", True), root, f"{path}[]", refs)}
    if kind == "object" or "properties" in s:
        properties = s.get("properties") or {}
        extra = s.get("additionalProperties")
        if connect_type == "map" or (not properties and isinstance(extra, dict)):
            return {"type": "map", "optional": False, "keys": {"type": "string", "optional": False},
                    "values": _connect(extra if isinstance(extra, dict) else True, root, f"{path}{{}}", refs)}
        required = set(s.get("required", []))
        ordered = sorted(properties.items(), key=lambda p: p[1].get("connect.index", 0) if isinstance(p[1], dict)
                         else 0)
        return {"type": "struct", "optional": False, "fields": [
            {"field": name, **_connect(sub, root, f"{path}.{name}", refs),
             **({} if name in required else {"optional": True})} for name, sub in ordered]}
    raise ValueError(f"{path}: JSON Schema type {kind!r} has no Connect type")


def _resolve(root: dict[str, Any], ref: str, path: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"{path}: $ref {ref} is not in this schema (schema references are not read)")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        raise ValueError(f"{path}: $ref {ref} names nothing in the schema")
    return node


def body_text(body: Column, side: str) -> Column:
    """A body's text, null when it is not what the side needs: a value's JSON object, or a key's value
    (an object's JSON text; a string without its quotes, as a tombstone's single id takes it)."""
    from pyspark.sql import functions as F

    text = utf8_text(body)
    if side == "value":
        return F.when(F.json_object_keys(text).isNotNull(), text)
    return F.get_json_object(F.concat(F.lit('{"k":'), text, F.lit("}")), "$.k")
