"""Apache Iceberg's Kafka Connect event frame, the bytes its sink writes to and reads from its control topic.

Iceberg's ``AvroEncoderUtil`` writes the magic bytes C2 01, then the writer's Avro schema as Java's
``DataOutputStream.writeUTF`` (a two-byte length, then the text), then the datum under that schema. The
schema names Java classes (``org.apache.iceberg.connect.events.Event``, one class per payload) and gives
each field a ``field-id``. Apache's sink decodes *every* record of its control topic this way before it
filters by group, and fails on one it cannot decode, a sinklab event among them; each of its classes
also fails on a field it does not know, so nothing of sinklab's can ride in its events either. Hence
sinklab's control topic of its own (docs/protocol.md, "Beside Apache's sink").

Also the names of Apache's protocol that sinklab reads: its event types and its snapshot properties
(``apache.log`` reads its commits for the workbench, ``apache.takeover`` finishes its half-done commit).
"""

from __future__ import annotations

import functools
import io
import json
import uuid
from enum import IntEnum
from typing import Any

import fastavro

MAGIC = b"\xc2\x01"
APACHE_CONTROL_TOPIC = "control-iceberg"  # its default iceberg.control.topic
# The snapshot properties Apache's coordinator sets on each table commit (its ``Coordinator``): how far it
# read its control topic, as ``{partition: offset}`` JSON under ``<prefix><control topic>.<group>``; the
# commit; the task (``<connector>-<n>``); and the valid-through time (ISO 8601).
OFFSETS_PREFIX = "kafka.connect.offsets."
COMMIT_ID_PROP = "kafka.connect.commit-id"
TASK_ID_PROP = "kafka.connect.task-id"
VTTS_PROP = "kafka.connect.valid-through-ts"


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


class PayloadType(IntEnum):
    """Apache's event types (its ``PayloadType``), the ``type`` field of an event."""

    START_COMMIT = 0
    DATA_WRITTEN = 1
    DATA_COMPLETE = 2
    COMMIT_TO_TABLE = 3
    COMMIT_COMPLETE = 4


def uuid_text(raw: Any) -> str:
    """A uuid of an event (16 bytes as the frame carries it) as text."""
    return str(uuid.UUID(bytes=raw)) if isinstance(raw, bytes) and len(raw) == 16 else str(raw)


def table_name(reference: dict[str, Any]) -> str:
    """A table reference of an event (catalog, namespace, name) as sinklab names tables."""
    return ".".join([*reference["namespace"], reference["name"]])
