"""A Confluent-compatible schema registry and the wire format of the records it frames.

Kafka Connect's ``AvroConverter`` and ``JsonSchemaConverter`` read records framed alike: a magic
byte 0, the writer schema's id (4 bytes, big-endian), the body. The driver fetches each id's schema
once (``RegistryClient``, cached) and describes it as the Connect schema the Java sink would be
handed (``avro.avro_to_connect``, ``jsonschema.json_schema_to_connect``); the Spark tasks decode the
bodies (``FramedDecoder.columns``). The rest of the sink then reads a record as JSON text with its
Connect schema, exactly as JSON with a schema envelope: tables are created and evolved from the
registry's types (``tables.connect_to_spark``), fields matched to columns by name, which resolves
writer schemas of every version against the table.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

import requests
from pydantic import BaseModel

from sinklab.exceptions import ConfigError, RegistryError
from sinklab.sink import avro, jsonschema, keys
from sinklab.sink.errors import UNDECODABLE

if TYPE_CHECKING:
    from pyspark.sql import Column

# The wire format's first byte; any other first byte is not a framed record.
MAGIC = 0
STRATEGIES = {
    "TopicNameStrategy": "io.confluent.kafka.serializers.subject.TopicNameStrategy",
    "RecordNameStrategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy",
    "TopicRecordNameStrategy": "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
}
Format = Literal["avro", "json"]
# The registry's schemaType of each format (AVRO is what a registry assumes when it says none).
SCHEMA_TYPES: dict[str, str] = {"avro": "AVRO", "json": "JSON"}
FORMAT_NAMES = {"avro": "Avro", "json": "JSON Schema"}


class RegistrySettings(BaseModel):
    """A converter's registry settings, as Kafka Connect's ``AvroConverter`` and
    ``JsonSchemaConverter`` take them, for values or keys."""

    format: Format = "avro"
    registry_url: str | None = None
    # "user:password" (basic.auth.credentials.source=USER_INFO), or None (none, or in the URL).
    user_info: str | None = None
    subject_strategy: str = "TopicNameStrategy"


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




class FramedDecoder:
    """The driver's side of decoding one side of the records (values or keys) in one format: the
    schemas of the ids seen so far, and the Spark columns that decode with them. Ids not yet known
    decode to an error until ``learn`` fetches them."""

    def __init__(self, client: RegistryClient, format: Format = "avro", strategy: str = "TopicNameStrategy",
                 side: Literal["value", "key"] = "value"):
        self.client = client
        self.format = format
        self.strategy = strategy
        self.side = side
        # id -> (schema text, and for values the Connect schema as JSON, for Avro keys their key_kind)
        self.known: dict[int, tuple[str, str]] = {}
        self.unusable: dict[int, str] = {}  # id -> why it cannot decode (another format; a value not a record)
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
        """Fetch the schemas of ``ids`` not known yet; whether any was found (decodable, or why not)."""
        found_any = False
        for schema_id in sorted(i for i in ids if i not in self.known and i not in self.unusable):
            found = self.client.registered(schema_id)
            if found is None:
                continue  # unregistered: its records stay bad; asked again when they come back
            found_any = True
            schema_type, text = found
            if schema_type != SCHEMA_TYPES[self.format]:
                self.unusable[schema_id] = f"is registered as {schema_type}, not {FORMAT_NAMES[self.format]}"
                continue
            try:
                self.known[schema_id] = (text, self._describe(text))
            except ValueError as exc:
                self.unusable[schema_id] = f"cannot be read: {exc}"
        return found_any

    def _describe(self, text: str) -> str:
        if self.side == "key":
            return avro.key_kind(text) if self.format == "avro" else ""
        to_connect = avro.avro_to_connect if self.format == "avro" else jsonschema.json_schema_to_connect
        return json.dumps(to_connect(text))

    def columns(self) -> tuple[Column, Column, Column, Column]:
        """(text, Connect schema, error, schema id) of each record's value or key, for ``prepare``:
        a value's text is its JSON object; a key's is JSON for records, else the plain value."""
        from pyspark.sql import functions as F

        from sinklab.sink import avro, jsonschema

        side, name = self.side, FORMAT_NAMES[self.format]
        raw = F.col(side)
        framed = (F.length(raw) >= 5) & (F.hex(F.substring(raw, 1, 1)) == f"{MAGIC:02X}")
        schema_id = F.when(framed, F.conv(F.hex(F.substring(raw, 2, 4)), 16, 10).cast("long"))
        body = F.expr(f"substring(`{side}`, 6, 2147483647)")
        known = schema_id.isin(list(self.known)) if self.known else F.lit(False)
        connect = F.lit(None).cast("string")
        if self.format == "avro":
            text = F.lit(None).cast("string")
            for sid, (schema, described) in self.known.items():
                text = F.when(schema_id == sid, avro.decoded_text(body, schema, side, described)).otherwise(text)
        else:
            text = F.when(known, jsonschema.body_text(body, side))
        if side == "value":
            for sid, (_, described) in self.known.items():
                connect = F.when(schema_id == sid, F.lit(described)).otherwise(connect)
        error = F.when(raw.isNull(), F.lit(None).cast("string")).when(
            ~framed, F.lit(f"{UNDECODABLE}: {side} is not {name} in Confluent's wire format (magic byte 0, "
                           f"4-byte schema id, {name} body)"))
        for sid, why in self.unusable.items():
            error = error.when(schema_id == sid, F.lit(f"{UNDECODABLE}: {side} schema id {sid} {why}"))
        error = error.when(~known, F.concat(F.lit(f"{UNDECODABLE}: {side} schema id "), schema_id.cast("string"),
                                            F.lit(f" is not in the schema registry at {self.client.url}"))).when(
            text.isNull(), F.concat(F.lit(f"{UNDECODABLE}: {side} does not decode as {name} with schema id "),
                                    schema_id.cast("string")))
        return text, connect, error, schema_id


def decoder(settings: RegistrySettings | None, side: Literal["value", "key"]) -> FramedDecoder | None:
    """The decoder of a converter's registry settings (None: not a registry's converter)."""
    if settings is None:
        return None
    if not settings.registry_url:
        raise ConfigError(keys.converter_key(side, keys.REGISTRY_URL), "the converter needs the schema registry's URL "
                          "(or a stack with one: `sinklab stack up --schema-registry`)")
    return FramedDecoder(RegistryClient(settings.registry_url, settings.user_info), settings.format,
                         settings.subject_strategy, side)


def id_sets(decoders: list[FramedDecoder]) -> list[Column]:
    """Per decoder, the writer-schema ids its records carry (``<side>_ids``): what ``learn`` is given."""
    from pyspark.sql import functions as F

    from sinklab.sink.columns import KEY_SCHEMA_ID, SCHEMA_ID

    return [F.collect_set(SCHEMA_ID if d.side == "value" else KEY_SCHEMA_ID).alias(f"{d.side}_ids")
            for d in decoders]
