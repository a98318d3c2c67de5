"""Records framed by a schema registry, decoded in Spark: the driver learns each writer schema's id once
(``wire.registry.RegistryClient``), and the tasks decode the bodies with the schemas learnt so far
(``FramedDecoder.columns``); an id not yet known decodes to an ``undecodable`` error until ``learn``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from sinklab.exceptions import ConfigError
from sinklab.sink.config import keys
from sinklab.sink.config.sink_config import RegistrySettings
from sinklab.sink.records.columns import KEY_SCHEMA_ID, SCHEMA_ID
from sinklab.sink.records.kinds import UNDECODABLE
from sinklab.sink.wire import apicurio, avro, jsonschema, protobuf
from sinklab.sink.wire.registry import FORMAT_NAMES, MAGIC, SCHEMA_TYPES, ApicurioFrame, Format, RegistryClient

if TYPE_CHECKING:
    from pyspark.sql import Column


class FramedDecoder:
    """The driver's side of decoding one side of the records (values or keys) in one format: the
    schemas of the ids seen so far, and the Spark columns that decode with them. Ids not yet known
    decode to an error until ``learn`` fetches them."""

    def __init__(self, client: RegistryClient, format: Format = "avro", strategy: str = "TopicNameStrategy",
                 side: Literal["value", "key"] = "value", apicurio: ApicurioFrame | None = None):
        self.client = client
        self.apicurio = apicurio
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
        to_connect = {"avro": avro.avro_to_connect, "json": jsonschema.json_schema_to_connect,
                      "protobuf": protobuf.proto_to_connect}[self.format]
        return json.dumps(to_connect(text))

    def columns(self) -> tuple[Column, Column, Column, Column]:
        """(text, Connect schema, error, schema id) of each record's value or key, for ``prepare``:
        a value's text is its JSON object; a key's is JSON for records, else the plain value."""
        from pyspark.sql import functions as F

        side, name = self.side, FORMAT_NAMES[self.format]
        raw = F.col(side)
        framed, schema_id, body, unframed, wrong = self._frame()
        known = schema_id.isin(list(self.known)) if self.known else F.lit(False)
        connect = F.lit(None).cast("string")
        reason = F.lit("")  # after the error's text: why a body did not decode, where its decoder says
        if self.format == "avro":
            text = F.lit(None).cast("string")
            for sid, (schema, described) in self.known.items():
                text = F.when(schema_id == sid, avro.decoded_text(body, schema, side, described)).otherwise(text)
        elif self.format == "protobuf":  # a body's decoder says why it failed
            text = F.lit(None).cast("string")
            for sid, (schema, _) in self.known.items():
                decoded = protobuf.decoded(body, schema)
                text = F.when(schema_id == sid, decoded["text"]).otherwise(text)
                reason = F.when(schema_id == sid, F.concat(F.lit(": "), decoded["err"])).otherwise(reason)
        else:
            text = F.when(known, jsonschema.body_text(body, side))
        if side == "value":
            for sid, (_, described) in self.known.items():
                connect = F.when(schema_id == sid, F.lit(described)).otherwise(connect)
        error = F.when(raw.isNull(), F.lit(None).cast("string")).when(~framed, F.lit(f"{UNDECODABLE}: {unframed}"))
        for condition, why in wrong:
            error = error.when(condition, F.lit(f"{UNDECODABLE}: {why}"))
        noun = self.id_noun
        for sid, why in self.unusable.items():
            error = error.when(schema_id == sid, F.lit(f"{UNDECODABLE}: {side} {noun} {sid} {why}"))
        error = error.when(~known, F.concat(F.lit(f"{UNDECODABLE}: {side} {noun} "), schema_id.cast("string"),
                                            F.lit(f" is not in the schema registry at {self.client.url}"))).when(
            text.isNull(), F.concat(F.lit(f"{UNDECODABLE}: {side} does not decode as {name} with {noun} "),
                                    schema_id.cast("string"), F.coalesce(reason, F.lit(""))))
        return text, connect, error, schema_id

    @property
    def id_noun(self) -> str:
        return "schema id" if self.apicurio is None else self.apicurio.use_id

    def _frame(self) -> tuple[Column, Column, Column, str, list[tuple[Column, str]]]:
        """Where each record's schema id and body are: (framed, the id, the body, what a record that is not
        framed lacks, and (condition, why) of framed records that still cannot be read)."""
        from pyspark.sql import functions as F

        side, name, frame = self.side, FORMAT_NAMES[self.format], self.apicurio
        raw = F.col(side)

        def in_payload(size: int) -> tuple[Column, Column, Column]:  # magic byte 0, the id in `size` bytes, the body
            framed = (F.length(raw) >= 1 + size) & (F.hex(F.substring(raw, 1, 1)) == f"{MAGIC:02X}")
            return framed, _number(F.substring(raw, 2, size)), F.expr(f"substring(`{side}`, {2 + size}, 2147483647)")

        if frame is None:
            framed, schema_id, body = in_payload(4)
            return (framed, F.when(framed, schema_id), body, f"{side} is not {name} in Confluent's wire format "
                    f"(magic byte 0, 4-byte schema id, {name} body)", [])
        header = frame.header_names.get(frame.use_id, apicurio.id_header(side, frame.use_id))
        in_body, body_id, body = in_payload(frame.id_size)
        if not frame.headers_enabled:
            return (in_body, F.when(in_body, body_id), body, f"{side} is not {name} in Apicurio's wire format (magic "
                    f"byte 0, a {frame.id_size}-byte {frame.use_id}, {name} body)", [])
        # As Apicurio's deserializer: the id in a header when there is one (the body is then the whole
        # payload), else in the payload; Kafka's last header of a name is the one read.
        by_header = _last_header(header)
        in_header = by_header.isNotNull() & (F.length(by_header) == 8)
        framed = in_header | in_body
        schema_id = F.when(in_header, _number(by_header)).when(in_body, body_id)
        encoding = _last_header(apicurio.encoding_header(side))
        wrong = [(in_header & (F.upper(F.decode(encoding, "UTF-8")) == "JSON"),
                  f"{side} is Avro in its JSON encoding ({apicurio.encoding_header(side)}=JSON); sinklab reads "
                  "Avro's binary encoding")]
        return (framed, schema_id, F.when(in_header, raw).otherwise(body), f"{side} is not {name} in Apicurio's wire "
                f"format (an 8-byte {frame.use_id} in header {header}, or magic byte 0, a {frame.id_size}-byte "
                f"{frame.use_id}, {name} body)", wrong)


def _number(big_endian: Column) -> Column:
    """The unsigned big-endian integer in ``big_endian``'s bytes (null past a long's range)."""
    from pyspark.sql import functions as F

    return F.conv(F.hex(big_endian), 16, 10).try_cast("long")


def _last_header(name: str) -> Column:
    """The value of the record's last header called ``name`` (null: none)."""
    from pyspark.sql import functions as F

    return F.try_element_at(F.filter("headers", lambda h: h["key"] == name), F.lit(-1))["value"]


def decoder(settings: RegistrySettings | None, side: Literal["value", "key"]) -> FramedDecoder | None:
    """The decoder of a converter's registry settings (None: not a registry's converter)."""
    if settings is None:
        return None
    if not settings.registry_url:
        raise ConfigError(keys.converter_key(side, keys.REGISTRY_URL), "the converter needs the schema registry's URL "
                          "(or a stack with one: `sinklab stack up --schema-registry`)")
    frame = settings.apicurio
    client = RegistryClient(settings.registry_url, settings.user_info) if frame is None else apicurio.ApicurioClient(
        settings.registry_url, settings.user_info, frame.use_id, frame.request_headers)
    return FramedDecoder(client, settings.format, settings.subject_strategy, side, frame)


def id_sets(decoders: list[FramedDecoder]) -> list[Column]:
    """Per decoder, the writer-schema ids its records carry (``<side>_ids``): what ``learn`` is given."""
    from pyspark.sql import functions as F

    return [F.collect_set(SCHEMA_ID if d.side == "value" else KEY_SCHEMA_ID).alias(f"{d.side}_ids")
            for d in decoders]
