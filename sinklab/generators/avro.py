"""A spec's events as Avro in Confluent's wire format, their schema registered in a schema registry.

Each drift stage of a spec has its own Avro schema (a step that adds a field or widens one makes a
new version of the subject), registered the first time an event of that stage is produced, the way a
producer with Confluent's ``KafkaAvroSerializer`` and ``auto.register.schemas`` does. Timestamps
become ``timestamp-millis``, uuids ``string``/``uuid``, a field with a null ratio a union with null.
``registry_records`` frames and registers them; with ``format="json-schema"`` it says each stage's
schema in JSON Schema (``jsonschema.py``) and writes JSON bodies instead.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Any

import fastavro

from sinklab.generators import jsonschema
from sinklab.generators.fields import parse_time
from sinklab.generators.spec import (
    ArrayField,
    BoolField,
    ChoiceField,
    ConstantField,
    FieldSpec,
    FloatField,
    IntField,
    ObjectField,
    SequenceField,
    TimestampField,
    UuidField,
)
from sinklab.sink.wire import MAGIC, RegistryClient, subject

if TYPE_CHECKING:
    from sinklab.generators.record import Record
    from sinklab.generators.spec import Spec

INT32_MAX = 2**31 - 1


Converters = dict[str, Callable[[Any], Any] | None]


def stage_schemas(spec: Spec) -> list[tuple[int, dict[str, Any], Converters]]:
    """Per drift stage: its first event index, its Avro record schema, and how its values become datums."""
    fields: dict[str, FieldSpec] = dict(spec.fields)
    widened: dict[str, str] = {}
    added: set[str] = set()
    stages = [(0, _record(spec.name, fields, widened), _converters(fields, widened))]
    for step in sorted(spec.drift, key=lambda s: s.after):
        widened.update(step.widen)
        fields.update(step.add)
        added.update(step.add)
        stages.append((step.after, _record(spec.name, fields, widened, added=frozenset(added)),
                       _converters(fields, widened)))
    return stages


def _converters(fields: Mapping[str, FieldSpec], widened: Mapping[str, str]) -> Converters:
    return {n: _converter(f, widened.get(n)) for n, f in fields.items()}


def _record(name: str, fields: Mapping[str, FieldSpec], widened: Mapping[str, str], path: str = "",
            added: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A record of ``fields``; those in ``added`` (by drift) are optional with a null default, which
    keeps each new version backward compatible, as Confluent's default compatibility demands."""
    record_name = "".join(part.capitalize() for part in (path or name).replace(".", "_").split("_") if part)
    out = []
    for n, f in fields.items():
        t = _type(f, widened.get(n), f"{path or name}.{n}")
        if n in added and not (isinstance(t, list) and "null" in t):
            t = ["null", t]
        out.append({"name": n, "type": t, **({"default": None} if isinstance(t, list) else {})})
    return {"type": "record", "name": record_name, "namespace": "sinklab.generators", "fields": out}


def _type(f: FieldSpec, widen: str | None, path: str) -> Any:  # noqa: C901 - one case per kind
    t: Any
    if f.as_string:
        t = "string"
    elif widen is not None:
        t = widen
    elif isinstance(f, UuidField):
        t = {"type": "string", "logicalType": "uuid"}
    elif isinstance(f, IntField):
        t = "int" if f.min >= -INT32_MAX - 1 and f.max <= INT32_MAX else "long"
    elif isinstance(f, SequenceField):
        t = "long"
    elif isinstance(f, FloatField):
        t = "double"
    elif isinstance(f, BoolField):
        t = "boolean"
    elif isinstance(f, TimestampField):
        t = {"type": "long", "logicalType": "timestamp-millis"}
    elif isinstance(f, ChoiceField | ConstantField):
        values = f.pairs()[0] if isinstance(f, ChoiceField) else [f.value]
        t = _common(values, path)
    elif isinstance(f, ObjectField):
        t = _record(path, f.fields, {}, path)
    elif isinstance(f, ArrayField):
        t = {"type": "array", "items": _type(f.items, None, f"{path}[]")}
    else:  # names, templates: text
        t = "string"
    return ["null", t] if f.null_ratio > 0 else t


def _common(values: list[Any], path: str) -> str:
    if all(isinstance(v, bool) for v in values):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "long"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "double"
    if all(isinstance(v, str) for v in values):
        return "string"
    raise ValueError(f"{path}: an Avro field needs values of one type, got {values!r:.100}")


def _converter(f: FieldSpec, widen: str | None) -> Callable[[Any], Any] | None:
    """How a generated value becomes the Avro datum (None: as it is)."""
    if f.as_string or widen is not None:
        return None
    if isinstance(f, TimestampField):
        fmt = f.format

        def to_time(value: Any) -> Any:
            if value is None:
                return None
            when = parse_time(fmt, value)
            return when if when.tzinfo else when.replace(tzinfo=UTC)
        return to_time
    if isinstance(f, FloatField):
        return lambda v: None if v is None else float(v)
    if isinstance(f, ObjectField):
        inner = _converters(f.fields, {})
        return lambda v: None if v is None else _datum(v, inner)
    if isinstance(f, ArrayField):
        item = _converter(f.items, None)
        return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
    return None


def _datum(row: Mapping[str, Any], converters: Converters) -> dict[str, Any]:
    out = {}
    for name, value in row.items():
        convert = converters.get(name)
        out[name] = convert(value) if convert is not None else value
    return out


def frame(schema_id: int, body: bytes) -> bytes:
    """Confluent's wire format: magic byte, the schema id (big-endian int32), the body."""
    return struct.pack(">bI", MAGIC, schema_id) + body


def registry_records(spec: Spec, records: Iterable[Record], registry: RegistryClient, topic: str,
                     strategy: str = "TopicNameStrategy", format: str = "avro") -> Iterator[Record]:
    """``records`` with their values framed as ``format`` ("avro" or "json-schema"); each stage's
    schema registered on first use. A spec that cannot be framed fails here, before anything is produced."""
    if spec.cdc is not None:
        raise ValueError(f"spec {spec.name}: CDC streams are produced as JSON only (--format json)")
    if spec.bad_records is not None and spec.bad_records.ratio > 0:
        raise ValueError(f"spec {spec.name}: bad records are JSON-level mistakes; produce {format} without them")
    stages = stage_schemas(spec)
    afters = [after for after, _, _ in stages]
    converters = [conv for _, _, conv in stages]
    if format == "avro":
        schemas = [schema for _, schema, _ in stages]
        encoders = [_avro_encoder(schema) for schema in schemas]
        schema_type = "AVRO"
    else:
        schemas = [jsonschema.json_schema_of(schema) for _, schema, _ in stages]
        encoders = [jsonschema.encode] * len(stages)
        schema_type = "JSON"
    # Subjects are named by the Avro record's name (a JSON Schema's title is the same name).
    subjects = [subject(strategy, topic, schema) for _, schema, _ in stages]
    return _encoded(records, afters, schemas, subjects, schema_type, encoders, converters, registry)


def _avro_encoder(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bytes]:
    parsed = fastavro.parse_schema(schema)

    def encode(datum: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, datum)
        return buf.getvalue()
    return encode


def _encoded(records: Iterable[Record], afters: list[int], schemas: list[dict[str, Any]], subjects: list[str],
             schema_type: str, encoders: list[Callable[[dict[str, Any]], bytes]], converters: list[Converters],
             registry: RegistryClient) -> Iterator[Record]:
    from dataclasses import replace

    ids: dict[int, int] = {}
    stage = 0
    for record in records:
        while stage + 1 < len(afters) and record.index >= afters[stage + 1]:
            stage += 1
        if stage not in ids:
            ids[stage] = registry.register(subjects[stage], schemas[stage], schema_type)
        yield replace(record, value=frame(ids[stage], encoders[stage](_datum(record.event, converters[stage]))))


def decode(value: bytes, registry: RegistryClient) -> dict[str, Any]:
    """A framed Avro value back to a dict (for notebooks and tests)."""
    import json

    magic, schema_id = struct.unpack(">bI", value[:5])
    if magic != MAGIC:
        raise ValueError(f"not Confluent's wire format: magic byte {magic}")
    text = registry.schema(schema_id)
    if text is None:
        raise ValueError(f"schema id {schema_id} is not in the registry at {registry.url}")
    return fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(json.loads(text)))
