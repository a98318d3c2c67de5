"""Avro values and keys in Confluent's wire format, with a Confluent-compatible schema registry.

A record's value is a magic byte 0, the writer schema's id (4 bytes, big-endian) and the Avro body.
The driver fetches each id's schema once (``RegistryClient``, cached) and the Spark tasks decode
(``from_avro`` of the body with that id's writer schema, one branch per id). What the rest of the sink
reads is what Kafka Connect's ``AvroConverter`` hands the Java sink: the record as a Connect struct
with its Connect schema. Here that is the record as JSON text and its schema as a Connect schema
(``avro_to_connect``, Confluent's ``AvroData`` mapping), so table creation and evolution take the
registry's types, exactly as for JSON with a schema envelope (``tables.connect_to_spark``). Fields are
matched to columns by name, which resolves writer schemas of every version against the table.
Keys decode the same way, to the text a tombstone names its row by (``key_kind``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

import requests
from pydantic import BaseModel

from sinklab.sink.errors import UNDECODABLE

if TYPE_CHECKING:
    from pyspark.sql import Column

AVRO_CONVERTER = "io.confluent.connect.avro.AvroConverter"
# The Confluent wire format's first byte; any other first byte is not a framed record.
MAGIC = 0
STRATEGIES = {
    "TopicNameStrategy": "io.confluent.kafka.serializers.subject.TopicNameStrategy",
    "RecordNameStrategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy",
    "TopicRecordNameStrategy": "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
}
# Timestamps to JSON with all six fractional digits: Spark's default keeps milliseconds only.
TO_JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                   "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}
LOCAL_TIMESTAMP = "sinklab.LocalTimestamp"  # Connect has no zone-less timestamp; this name marks one


class RegistryError(RuntimeError):
    """The schema registry refused a request, or could not be reached; the message names the URL."""


class AvroSettings(BaseModel):
    """A converter's registry settings, as Kafka Connect's ``AvroConverter`` takes them."""

    registry_url: str | None = None
    # "user:password" (basic.auth.credentials.source=USER_INFO), or None (none, or in the URL).
    user_info: str | None = None
    subject_strategy: str = "TopicNameStrategy"


def strategy_name(key: str, value: str) -> str:
    """The short name of a subject naming strategy given by its class name (or short name)."""
    for short, full in STRATEGIES.items():
        if value in (short, full):
            return short
    raise ValueError(f"{key}: unknown subject name strategy {value!r} (one of {', '.join(STRATEGIES.values())})")


def subject(strategy: str, topic: str, schema: dict[str, Any], is_key: bool = False) -> str:
    """The subject a producer registers ``schema`` under for ``topic`` (Confluent's naming strategies)."""
    if strategy == "TopicNameStrategy":
        return f"{topic}-{'key' if is_key else 'value'}"
    full = full_name(schema)
    return full if strategy == "RecordNameStrategy" else f"{topic}-{full}"


def full_name(schema: dict[str, Any]) -> str:
    name = schema["name"]
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


class RegistryClient:
    """The Confluent Schema Registry API: schemas by id (cached for the client's life), registering."""

    def __init__(self, url: str, user_info: str | None = None, timeout: float = 10):
        parts = urlsplit(url.rstrip("/"))
        auth = None
        if parts.username is not None:  # basic.auth.credentials.source=URL
            auth = (parts.username, parts.password or "")
            parts = parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else ""))
        if user_info:
            user, _, password = user_info.partition(":")
            auth = (user, password)
        self.url = urlunsplit(parts)
        self.session = requests.Session()
        self.session.auth = auth
        self.timeout = timeout
        self._by_id: dict[int, str] = {}

    def schema(self, schema_id: int) -> str | None:
        """The schema text registered under ``schema_id``; None when the registry has no such id."""
        if schema_id in self._by_id:
            return self._by_id[schema_id]
        resp = self._request("GET", f"/schemas/ids/{schema_id}")
        if resp.status_code == 404:
            return None
        body = self._json(resp, f"schema id {schema_id}")
        if body.get("schemaType", "AVRO") != "AVRO":
            raise RegistryError(f"schema id {schema_id} at {self.url} is {body['schemaType']}, not Avro")
        self._by_id[schema_id] = body["schema"]
        return body["schema"]

    def register(self, subject_name: str, schema: dict[str, Any] | str) -> int:
        """Register ``schema`` under ``subject_name`` (a new version unless it is there); its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        resp = self._request("POST", f"/subjects/{quote(subject_name, safe='')}/versions", {"schema": text})
        schema_id = int(self._json(resp, f"registering subject {subject_name}")["id"])
        self._by_id[schema_id] = text
        return schema_id

    def versions(self, subject_name: str) -> list[int]:
        resp = self._request("GET", f"/subjects/{quote(subject_name, safe='')}/versions")
        return [int(v) for v in self._json(resp, f"subject {subject_name}")]

    def subject_ids(self, subject_name: str) -> list[int]:
        """The schema ids of every version of ``subject_name`` (none when there is no such subject)."""
        path = f"/subjects/{quote(subject_name, safe='')}/versions"
        resp = self._request("GET", path)
        if resp.status_code == 404:
            return []
        ids = []
        for version in self._json(resp, f"subject {subject_name}"):
            body = self._json(self._request("GET", f"{path}/{version}"), f"subject {subject_name} v{version}")
            if body.get("schemaType", "AVRO") == "AVRO":
                self._by_id[int(body["id"])] = body["schema"]
                ids.append(int(body["id"]))
        return ids

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> requests.Response:
        try:
            return self.session.request(method, self.url + path, json=body, timeout=self.timeout,
                                        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        except requests.RequestException as exc:
            raise RegistryError(f"schema registry {self.url} did not answer {method} {path}: {exc}") from exc

    def _json(self, resp: requests.Response, what: str) -> Any:
        if resp.status_code >= 400:
            raise RegistryError(f"schema registry {self.url}: {what}: HTTP {resp.status_code} {resp.text[:300]}")
        return resp.json()


# ---- Avro schema -> Kafka Connect schema (what AvroData makes of it; the Java sink types tables from that)
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


class AvroDecoder:
    """The driver's side of decoding one side of the records (values or keys): the schemas of the
    ids seen so far, and the Spark columns that decode with them. Ids not yet known decode to an
    error until ``learn`` fetches them."""

    def __init__(self, client: RegistryClient, strategy: str = "TopicNameStrategy",
                 side: Literal["value", "key"] = "value"):
        self.client = client
        self.strategy = strategy
        self.side = side
        # id -> (Avro schema, and for values the Connect schema as JSON, for keys their key_kind)
        self.known: dict[int, tuple[str, str]] = {}
        self.unusable: dict[int, str] = {}  # id -> why it cannot decode (a value that is not a record)
        self._primed: set[str] = set()

    def prime(self, topics: set[str]) -> None:
        """Learn the versions registered under each new topic's subject (TopicNameStrategy), so that a
        sink's first cycle usually knows its ids before it reads: no cycle prepared twice to learn them."""
        if self.strategy != "TopicNameStrategy":
            return
        for topic in sorted(topics - self._primed):
            self.learn(set(self.client.subject_ids(f"{topic}-{self.side}")))
            self._primed.add(topic)

    def learn(self, ids: set[int]) -> bool:
        """Fetch the schemas of ``ids`` not known yet; whether any became decodable."""
        learned = False
        for schema_id in sorted(i for i in ids if i not in self.known and i not in self.unusable):
            text = self.client.schema(schema_id)
            if text is None:
                continue  # unregistered: its records stay bad; asked again when they come back
            try:
                described = json.dumps(avro_to_connect(text)) if self.side == "value" else key_kind(text)
            except ValueError as exc:
                self.unusable[schema_id] = str(exc)
                continue
            self.known[schema_id] = (text, described)
            learned = True
        return learned

    def columns(self) -> tuple[Column, Column, Column, Column]:
        """(text, Connect schema, error, schema id) of each record's value or key, for ``prepare``:
        a value's text is its JSON object; a key's is JSON for records, else the plain value."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import from_avro

        side = self.side
        raw = F.col(side)
        framed = (F.length(raw) >= 5) & (F.hex(F.substring(raw, 1, 1)) == f"{MAGIC:02X}")
        schema_id = F.when(framed, F.conv(F.hex(F.substring(raw, 2, 4)), 16, 10).cast("long"))
        body = F.expr(f"substring(`{side}`, 6, 2147483647)")
        text = F.lit(None).cast("string")
        connect = F.lit(None).cast("string")
        for sid, (avro_schema, described) in self.known.items():
            decoded = from_avro(body, avro_schema, {"mode": "PERMISSIVE"})
            if side == "value" or described == "json":
                as_text = F.to_json(decoded, TO_JSON_OPTIONS)
            else:
                as_text = F.base64(decoded) if described == "bytes" else decoded.cast("string")
            text = F.when(schema_id == sid, as_text).otherwise(text)
            if side == "value":
                connect = F.when(schema_id == sid, F.lit(described)).otherwise(connect)
        known = schema_id.isin(list(self.known)) if self.known else F.lit(False)
        error = F.when(raw.isNull(), F.lit(None).cast("string")).when(
            ~framed, F.lit(f"{UNDECODABLE}: {side} is not Avro in Confluent's wire format (magic byte 0, "
                           "4-byte schema id, Avro body)"))
        for sid, why in self.unusable.items():
            error = error.when(schema_id == sid, F.lit(f"{UNDECODABLE}: {side} schema id {sid}: {why}"))
        error = error.when(~known, F.concat(F.lit(f"{UNDECODABLE}: {side} schema id "), schema_id.cast("string"),
                                            F.lit(f" is not in the schema registry at {self.client.url}"))).when(
            text.isNull(), F.concat(F.lit(f"{UNDECODABLE}: {side} does not decode as Avro with schema id "),
                                    schema_id.cast("string")))
        return text, connect, error, schema_id
