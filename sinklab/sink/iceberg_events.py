"""Apache Iceberg's Kafka Connect event frame, the bytes its sink writes to and reads from its control topic.

Iceberg's ``AvroEncoderUtil`` writes the magic bytes C2 01, then the writer's Avro schema as Java's
``DataOutputStream.writeUTF`` (a two-byte length, then the text), then the datum under that schema. The
schema names Java classes (``org.apache.iceberg.connect.events.Event``, one class per payload) and gives
each field a ``field-id``. Apache's sink decodes *every* record of its control topic this way before it
filters by group, and fails on one it cannot decode, a sinklab event among them; each of its classes
also fails on a field it does not know, so nothing of sinklab's can ride in its events either. Hence
sinklab's control topic of its own (docs/protocol.md, "Beside Apache's sink").
"""

from __future__ import annotations

import functools
import io
import json
from typing import Any

import fastavro

MAGIC = b"\xc2\x01"


def unframe(data: bytes) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The writer's schema and the record (uuids as 16 bytes, timestamps as microseconds) of an event in
    Apache's frame; None when ``data`` is not in that frame."""
    if data[:2] != MAGIC or len(data) < 4:
        return None
    size = int.from_bytes(data[2:4], "big")
    text = data[4:4 + size]
    record: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(data[4 + size:]), _parsed(text))  # type: ignore[assignment]
    return json.loads(text), record


@functools.lru_cache(maxsize=64)
def _parsed(text: bytes) -> Any:
    """The schema for fastavro: the same binary layout, with uuids and timestamps left raw (bytes, ints)
    and named types in the enclosing namespace (Iceberg declares ``uuid_fixed`` in the null namespace and
    refers to it from its own, which Java's parser resolves and fastavro does not)."""
    return fastavro.parse_schema(_plain(json.loads(text)))


def _plain(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_plain(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "logicalType" and not (k == "namespace" and v == "")}
    if "fields" in out:
        out["fields"] = [{**f, "type": _plain(f["type"])} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = _plain(out[key])
    return out
