"""Apicurio Registry's own frame, as its Kafka Connect ``AvroConverter`` reads it (Red Hat's and Debezium's
stacks), and its native REST API.

Apicurio's serializer names a record's writer schema by a registry id, its ``globalId`` (2.x's default) or
its ``contentId`` (``apicurio.registry.use-id``), written either in a header (``apicurio.value.globalId``,
``apicurio.key.contentId``..., 8 bytes big-endian: 2.x's default, ``apicurio.registry.headers.enabled``)
with the Avro body as the whole payload, or before the body: a magic byte 0 and the id in 8 bytes
(``DefaultIdHandler``) or 4 (``Legacy4ByteIdHandler``, ``apicurio.registry.as-confluent``). Its
deserializer reads the header when there is one, else the payload; so does sinklab
(``records.framed.FramedDecoder``). Ids resolve through the native API (``/ids/globalIds/{id}``), which
``apicurio.registry.url`` names (``.../apis/registry/v2``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal
from urllib.parse import quote

from sinklab.sink.wire.registry import RegistryClient

APICURIO_AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
CONVERTERS = frozenset({APICURIO_AVRO_CONVERTER})
# The converter's settings (io.apicurio.registry.serde.SerdeConfig), by the name a connector config gives them.
URL = "apicurio.registry.url"
HEADERS_ENABLED = "apicurio.registry.headers.enabled"
USE_ID = "apicurio.registry.use-id"
ID_HANDLER = "apicurio.registry.id-handler"
AS_CONFLUENT = "apicurio.registry.as-confluent"
AVRO_ENCODING = "apicurio.registry.avro.encoding"
AUTH_USERNAME = "apicurio.auth.username"
AUTH_PASSWORD = "apicurio.auth.password"
AUTH_SERVICE_URL = "apicurio.auth.service.url"
REQUEST_HEADERS = "apicurio.registry.request.headers."
# apicurio.registry.headers.<side>.<globalId|contentId>.name: another header for the id.
HEADER_NAME = re.compile(r"apicurio\.registry\.headers\.(key|value)\.(globalId|contentId)\.name")
ID_HANDLERS = {"io.apicurio.registry.serde.DefaultIdHandler": 8,
               "io.apicurio.registry.serde.Legacy4ByteIdHandler": 4}
# What only a serializer reads (how it finds or registers a schema; how long it caches one): reading, the
# converter resolves each record's id as it comes, as sinklab does, so these change nothing here.
SERIALIZER_ONLY = ("apicurio.registry.auto-register", "apicurio.registry.auto-register.if-exists",
                   "apicurio.registry.find-latest", "apicurio.registry.artifact-resolver-strategy",
                   "apicurio.registry.artifact.group-id", "apicurio.registry.artifact.artifact-id",
                   "apicurio.registry.artifact.version", "apicurio.registry.check-period-ms",
                   "apicurio.registry.cache-latest", "apicurio.registry.retry-count",
                   "apicurio.registry.retry-backoff-ms", "apicurio.registry.dereference-schema")
UseId = Literal["globalId", "contentId"]
NATIVE_API = "/apis/registry/v2"
# Apicurio serves Confluent's API beside its own: a stack's ccompat URL names the same registry.
_CCOMPAT = re.compile(r"/apis/ccompat/v\d+/?$")


def native_url(url: str) -> str:
    """The native API of the registry whose Confluent-compatible URL is ``url`` (Apicurio serves both)."""
    return _CCOMPAT.sub(NATIVE_API, url.rstrip("/"))


def id_header(side: str, use_id: UseId) -> str:
    """The header Apicurio's serializer writes a record's id in (SerdeHeaders)."""
    return f"apicurio.{side}.{use_id}"


def encoding_header(side: str) -> str:
    """The header that says the Avro body's encoding (BINARY or JSON) when Apicurio's serializer writes headers."""
    return f"apicurio.{side}.encoding"


class ApicurioClient(RegistryClient):
    """Apicurio Registry's native API: schemas by ``globalId`` or ``contentId`` (cached), an artifact's
    versions (its ``TopicIdStrategy`` name is a Confluent subject's, ``<topic>-value``), registering."""

    def __init__(self, url: str, user_info: str | None = None, use_id: UseId = "globalId",
                 headers: dict[str, str] | None = None, timeout: float = 10):
        super().__init__(url, user_info, timeout)
        self.use_id = use_id
        self.session.headers.update(headers or {})

    def registered(self, schema_id: int) -> tuple[str, str] | None:
        if schema_id not in self._by_id:
            resp = self._request("GET", f"/ids/{self.use_id}s/{schema_id}")
            if resp.status_code == 404:
                return None
            self._ok(resp, f"{self.use_id} {schema_id}")
            self._by_id[schema_id] = (resp.headers.get("X-Registry-ArtifactType", "AVRO"), resp.text)
        return self._by_id[schema_id]

    def subject_ids(self, subject_name: str) -> list[int]:
        """The ids (as ``use_id`` says) of every version of the artifact ``subject_name`` in the default group."""
        resp = self._request("GET", f"/groups/default/artifacts/{quote(subject_name, safe='')}/versions")
        if resp.status_code == 404:
            return []
        return [int(v[self.use_id]) for v in self._json(resp, f"artifact {subject_name}")["versions"]]

    def register(self, subject_name: str, schema: dict[str, Any] | str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` as a version of the artifact ``subject_name`` (created if new) in the default
        group, as Apicurio's serializer does with ``auto-register``; its id (as ``use_id`` says)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        resp = self._request("POST", "/groups/default/artifacts?ifExists=RETURN_OR_UPDATE", data=text.encode(),
                             headers={"Content-Type": "application/json", "X-Registry-ArtifactId": subject_name,
                                      "X-Registry-ArtifactType": schema_type})
        schema_id = int(self._json(resp, f"registering artifact {subject_name}")[self.use_id])
        self._by_id[schema_id] = (schema_type, text)
        return schema_id
