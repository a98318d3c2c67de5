"""Single-message transforms: the Kafka Connect ones Iceberg sink users configure, on JSON records.

Each transform's settings, and what it does to one record (its payload and, with the Connect envelope,
its schema): plain functions over dicts, which ``records.prepare`` runs in Spark tasks only when a sink
configures any, so the hot path without transforms stays in Spark SQL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from sinklab.exceptions import TransformError

if TYPE_CHECKING:
    pass


class KafkaMetadata(BaseModel):
    """Iceberg's KafkaMetadataTransform: topic, partition, offset and timestamp as columns."""

    kind: Literal["kafka-metadata"] = "kafka-metadata"
    field_name: str = "_kafka_metadata"
    nested: bool = False
    external_field: tuple[str, str] | None = None


class Flatten(BaseModel):
    """Kafka Connect's Flatten$Value: nested objects become top-level fields joined by ``delimiter``."""

    kind: Literal["flatten"] = "flatten"
    delimiter: str = "."


class Debezium(BaseModel):
    """Iceberg's DebeziumTransform: the row image becomes the record, with a ``_cdc`` struct."""

    kind: Literal["debezium"] = "debezium"
    target_pattern: str | None = None  # e.g. "{db}.{table}"; default: the source table


Transform = KafkaMetadata | Flatten | Debezium
TRANSFORM_CLASSES: dict[str, type[BaseModel]] = {
    "org.apache.iceberg.connect.transforms.KafkaMetadataTransform": KafkaMetadata,
    "io.tabular.iceberg.connect.transforms.KafkaMetadataTransform": KafkaMetadata,
    "org.apache.kafka.connect.transforms.Flatten$Value": Flatten,
    "org.apache.iceberg.connect.transforms.DebeziumTransform": Debezium,
    "io.tabular.iceberg.connect.transforms.DebeziumTransform": Debezium,
}
DEBEZIUM_OPS = {"c": "I", "r": "I", "u": "U", "d": "D"}


class Meta(BaseModel):
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: str | None


# ---- one record
def apply(transforms: list[Transform], payload: dict[str, Any], schema: dict[str, Any] | None,
          meta: Meta) -> tuple[dict[str, Any], dict[str, Any] | None]:
    for t in transforms:
        if isinstance(t, KafkaMetadata):
            payload, schema = kafka_metadata(t, payload, schema, meta)
        elif isinstance(t, Flatten):
            payload, schema = flatten(t.delimiter, payload, schema)
        else:
            payload, schema = debezium(t, payload, schema, meta)
    return payload, schema


def _field(name: str, kind: str, logical: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"field": name, "type": kind, "optional": True}
    if logical:
        out["name"] = logical
    return out


TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"


def kafka_metadata(t: KafkaMetadata, payload: dict[str, Any], schema: dict[str, Any] | None,
                   meta: Meta) -> tuple[dict[str, Any], dict[str, Any] | None]:
    values = {"topic": meta.topic, "partition": meta.partition, "offset": meta.offset,
              "record_timestamp": meta.timestamp}
    fields = [_field("topic", "string"), _field("partition", "int32"), _field("offset", "int64"),
              _field("record_timestamp", "int64", TIMESTAMP)]
    if t.external_field:
        values[t.external_field[0]] = t.external_field[1]
        fields.append(_field(t.external_field[0], "string"))
    out = dict(payload)
    if t.nested:
        out[t.field_name] = values
    else:
        out.update({f"{t.field_name}_{k}": v for k, v in values.items()})
    if schema is None:
        return out, None
    new_fields = list(schema.get("fields", []))
    if t.nested:
        new_fields.append({"field": t.field_name, "type": "struct", "optional": True, "fields": fields})
    else:
        new_fields.extend({**f, "field": f"{t.field_name}_{f['field']}"} for f in fields)
    return out, {**schema, "fields": new_fields}


def flatten(delimiter: str, payload: dict[str, Any], schema: dict[str, Any] | None,
            prefix: str = "") -> tuple[dict[str, Any], dict[str, Any] | None]:
    out: dict[str, Any] = {}
    for key, value in payload.items():
        if isinstance(value, dict):
            out.update(flatten(delimiter, value, None, f"{prefix}{key}{delimiter}")[0])
        else:
            out[f"{prefix}{key}"] = value
    if schema is None:
        return out, None
    return out, {**schema, "fields": _flatten_fields(delimiter, schema.get("fields", []), "", False)}


def _flatten_fields(delimiter: str, fields: list[dict[str, Any]], prefix: str,
                    parent_optional: bool) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        # A field under an optional struct can be missing however required it is itself.
        optional = parent_optional or bool(f.get("optional", True))
        if f.get("type") == "struct" and not f.get("name"):
            out.extend(_flatten_fields(delimiter, f.get("fields", []), f"{prefix}{f['field']}{delimiter}", optional))
        else:
            out.append({**f, "field": f"{prefix}{f['field']}", "optional": optional})
    return out


def debezium(t: Debezium, payload: dict[str, Any], schema: dict[str, Any] | None,
             meta: Meta) -> tuple[dict[str, Any], dict[str, Any] | None]:
    op = payload.get("op")
    if op not in DEBEZIUM_OPS:
        raise TransformError(f"not a Debezium change event: op is {op!r}, expected one of c, r, u, d")
    image_name = "before" if op == "d" else "after"
    image = payload.get(image_name)
    if not isinstance(image, dict):
        raise TransformError(f"Debezium {op!r} event has no {image_name!r} row image")
    source = payload.get("source") or {}
    db, table = source.get("db"), source.get("table")
    source_name = f"{db}.{table}" if db and table else table
    target = t.target_pattern.format(db=db, table=table) if t.target_pattern else source_name
    cdc = {"op": DEBEZIUM_OPS[op], "ts": payload.get("ts_ms"), "offset": meta.offset, "source": source_name,
           "target": target, "key": meta.key}
    out = {**image, "_cdc": cdc}
    if schema is None:
        return out, None
    image_schema = next((f for f in schema.get("fields", []) if f.get("field") == image_name), None)
    if image_schema is None:
        raise TransformError(f"Debezium envelope schema has no {image_name!r} field")
    cdc_fields = [_field("op", "string"), _field("ts", "int64", TIMESTAMP), _field("offset", "int64"),
                  _field("source", "string"), _field("target", "string"), _field("key", "string")]
    fields = list(image_schema.get("fields", [])) + [
        {"field": "_cdc", "type": "struct", "optional": True, "fields": cdc_fields}]
    return out, {"type": "struct", "optional": False, "fields": fields}
