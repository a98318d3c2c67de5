"""A Confluent-compatible schema registry: its client, its subjects, and the frame of the records it serves.

Kafka Connect's ``AvroConverter`` and ``JsonSchemaConverter`` read records framed alike: a magic
byte 0, the writer schema's id (4 bytes, big-endian), the body. The driver fetches each id's schema
once (``RegistryClient``, cached) and describes it as the Connect schema the Java sink would be
handed (``avro.avro_to_connect``, ``jsonschema.json_schema_to_connect``); the Spark tasks decode the
bodies (``FramedDecoder.columns``). The rest of the sink then reads a record as JSON text with its
Connect schema, exactly as JSON with a schema envelope: tables are created and evolved from the
registry's types (``tables.create.connect_to_spark``), fields matched to columns by name, which resolves
writer schemas of every version against the table.
"""

from __future__ import annotations

import json
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

import requests
from pydantic import BaseModel, Field

from sinklab.exceptions import ConfigError, RegistryError
from sinklab.sink.wire import avro

# The wire format's first byte; any other first byte is not a framed record.
MAGIC = 0
STRATEGIES = {
    "TopicNameStrategy": "io.confluent.kafka.serializers.subject.TopicNameStrategy",
    "RecordNameStrategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy",
    "TopicRecordNameStrategy": "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
}
Format = Literal["avro", "json", "protobuf"]
# The registry's schemaType of each format (AVRO is what a registry assumes when it says none).
SCHEMA_TYPES: dict[str, str] = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}
FORMAT_NAMES = {"avro": "Avro", "json": "JSON Schema", "protobuf": "Protobuf"}


class ApicurioFrame(BaseModel):
    """Where Apicurio's serializer put a record's id, and which id (``wire.apicurio``)."""

    use_id: Literal["globalId", "contentId"] = "globalId"
    headers_enabled: bool = True
    header_names: dict[str, str] = Field(default_factory=dict)  # use_id -> its header, when not apicurio.<side>.<id>
    id_size: Literal[4, 8] = 8  # in the payload, after the magic byte
    request_headers: dict[str, str] = Field(default_factory=dict)  # apicurio.registry.request.headers.*


class RegistrySettings(BaseModel):
    """A converter's registry settings, as Kafka Connect's ``AvroConverter`` and
    ``JsonSchemaConverter`` (or Apicurio's ``AvroConverter``: ``apicurio``) take them, for values or keys."""

    format: Format = "avro"
    registry_url: str | None = None
    # "user:password" (basic.auth.credentials.source=USER_INFO), or None (none, or in the URL).
    user_info: str | None = None
    subject_strategy: str = "TopicNameStrategy"
    apicurio: ApicurioFrame | None = None  # Apicurio's frame and native API, not Confluent's


def strategy_name(key: str, value: str) -> str:
    """The short name of a subject naming strategy given by its class name (or short name)."""
    for short, full in STRATEGIES.items():
        if value in (short, full):
            return short
    raise ConfigError(key, f"unknown subject name strategy {value!r} (one of {', '.join(STRATEGIES.values())})")


def subject(strategy: str, topic: str, schema: dict[str, Any], is_key: bool = False) -> str:
    """The subject a producer registers ``schema`` under for ``topic`` (Confluent's naming strategies)."""
    if strategy == "TopicNameStrategy":
        return f"{topic}-{'key' if is_key else 'value'}"
    full = avro.full_name(schema)
    return full if strategy == "RecordNameStrategy" else f"{topic}-{full}"



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
        self._by_id: dict[int, tuple[str, str]] = {}  # id -> (schemaType, schema text)

    def registered(self, schema_id: int) -> tuple[str, str] | None:
        """(schemaType, schema text) registered under ``schema_id``; None when the registry has no such id."""
        if schema_id not in self._by_id:
            resp = self._request("GET", f"/schemas/ids/{schema_id}")
            if resp.status_code == 404:
                return None
            body = self._json(resp, f"schema id {schema_id}")
            self._by_id[schema_id] = (body.get("schemaType", "AVRO"), body["schema"])
        return self._by_id[schema_id]

    def schema(self, schema_id: int) -> str | None:
        """The schema text registered under ``schema_id``; None when the registry has no such id."""
        found = self.registered(schema_id)
        return None if found is None else found[1]

    def register(self, subject_name: str, schema: dict[str, Any] | str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject_name`` (a new version unless it is there); its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        body = {"schema": text, **({"schemaType": schema_type} if schema_type != "AVRO" else {})}
        resp = self._request("POST", f"/subjects/{quote(subject_name, safe='')}/versions", body)
        schema_id = int(self._json(resp, f"registering subject {subject_name}")["id"])
        self._by_id[schema_id] = (schema_type, text)
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
            self._by_id[int(body["id"])] = (body.get("schemaType", "AVRO"), body["schema"])
            ids.append(int(body["id"]))
        return ids

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *, data: bytes | None = None,
                 headers: dict[str, str] | None = None) -> requests.Response:
        try:
            return self.session.request(method, self.url + path, json=body, data=data, timeout=self.timeout,
                                        headers=headers or {"Content-Type": "application/vnd.schemaregistry.v1+json"})
        except requests.RequestException as exc:
            raise RegistryError(f"schema registry {self.url} did not answer {method} {path}: {exc}") from exc

    def _ok(self, resp: requests.Response, what: str) -> requests.Response:
        if resp.status_code >= 400:
            raise RegistryError(f"schema registry {self.url}: {what}: HTTP {resp.status_code} {resp.text[:300]}")
        return resp

    def _json(self, resp: requests.Response, what: str) -> Any:
        return self._ok(resp, what).json()
