"""Protobuf in Confluent's wire format: what Confluent's ``ProtobufConverter`` hands the Java sink.

After the magic byte and the 4-byte schema id, the frame names the message of the schema the body is:
a count of indexes and the indexes (zigzag varints; a single 0 byte for the first message), then the
message's bytes. The registry's ``.proto`` text is parsed here (``parse``: proto2 and proto3 messages,
enums, nested types, ``repeated``, ``map<,>``, ``oneof``, Google's ``Timestamp``) into the Connect schema
Confluent's ``ProtobufData`` makes of it at its defaults (``proto_to_connect``), and the bodies are decoded
in Python (``decoded_text``, a Spark UDF; no Spark Protobuf reader is on Maven Central's mirror here) to
the record's JSON text, as a JSON envelope's payload would carry it.

As ``ProtobufData``: every field optional; a scalar without presence that is not set reads as its
default (0, "", false), a message or a field with presence (proto2, proto3 ``optional``) as null; an enum
as its name; ``uint32``/``fixed32`` as int64 (``uint64`` wraps as Java's long does); a ``oneof`` as a
struct ``<name>_0`` of its fields; a Timestamp as Connect's Timestamp (milliseconds).
"""

from __future__ import annotations

import base64
import json
import re
import struct
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column

PROTOBUF_CONVERTER = "io.confluent.connect.protobuf.ProtobufConverter"
# ProtobufData's settings that change what a record becomes, at the values sinklab reads as: another value
# is refused (sink_config), since the table would differ from the Java sink's.
READ_AS = {"generate.index.for.unions": "true", "int.for.enums": "false", "optional.for.nullables": "false",
           "generate.struct.for.nulls": "false", "wrapper.for.nullables": "false", "flatten.unions": "false",
           "enhanced.protobuf.schema.support": "false", "scrub.invalid.names": "false"}
TIMESTAMP = "google.protobuf.Timestamp"
WELL_KNOWN = {"google/protobuf/timestamp.proto"}  # the imports sinklab knows without fetching them
_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[A-Za-z_][\w.]*|\.[A-Za-z_][\w.]*'
                    r'|-?\d[\w.+-]*|[{}()\[\]<>;=,:]', re.S)
_INT32 = ("int32", "sint32", "sfixed32")
_INT64 = ("int64", "sint64", "sfixed64", "uint32", "fixed32", "uint64", "fixed64")
SCALARS = {**dict.fromkeys(_INT32, "int32"), **dict.fromkeys(_INT64, "int64"), "double": "float64",
           "float": "float32", "bool": "boolean", "string": "string", "bytes": "bytes"}
_DEFAULTS: dict[str, Any] = {"bool": False, "string": "", "bytes": "", "double": 0.0, "float": 0.0}


@dataclass
class Field:
    name: str
    number: int
    type: str  # a scalar's name, or an enum's or a message's full name once resolved
    repeated: bool = False
    presence: bool = False  # unset reads as null, not as its default
    oneof: str | None = None
    map: tuple[str, str] | None = None  # (key type, value type)


@dataclass
class Message:
    name: str  # full name
    fields: list[Field] = field(default_factory=list)
    nested: list[str] = field(default_factory=list)  # the full names of its messages, in order


@dataclass
class Proto:
    package: str
    messages: dict[str, Message]  # every message by full name
    top: list[str]  # the top-level messages, in order
    enums: dict[str, dict[int, str]]  # every enum by full name: number -> name

    def message_at(self, indexes: list[int]) -> Message:
        """The message the frame's indexes name: the first among the top-level messages, the rest nested."""
        names = self.top
        for i in indexes:
            if not 0 <= i < len(names):
                raise ValueError(f"message index {indexes} names no message of the schema")
            message = self.messages[names[i]]
            names = message.nested
        return message


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"unexpected {text[pos:pos + 20]!r} in the .proto")
        token = m.group()
        if not (token.isspace() or token.startswith(("//", "/*"))):
            out.append(token)
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.t = _tokens(text)
        self.i = 0
        self.proto2 = False
        self.package = ""
        self.messages: dict[str, Message] = {}
        self.enums: dict[str, dict[int, str]] = {}
        self.top: list[str] = []

    def next(self) -> str:
        if self.i >= len(self.t):
            raise ValueError("the .proto ends early")
        self.i += 1
        return self.t[self.i - 1]

    def expect(self, token: str) -> None:
        got = self.next()
        if got != token:
            raise ValueError(f"expected {token!r} in the .proto, got {got!r}")

    def skip_statement(self) -> None:
        depth = 0
        while True:
            token = self.next()
            depth += token in "{[(" and len(token) == 1
            depth -= token in "}])" and len(token) == 1
            if depth <= 0 and token in (";", "}"):
                return

    def parse(self) -> Proto:
        while self.i < len(self.t):
            token = self.next()
            if token == "syntax" or token == "edition":
                self.expect("=")
                value = self.next().strip("\"'")
                self.proto2 = value == "proto2"
                if token == "edition" or value not in ("proto2", "proto3"):
                    raise ValueError(f"{token} {value} is not proto2 or proto3")
                self.expect(";")
            elif token == "package":
                self.package = self.next()
                self.expect(";")
            elif token == "import":
                path = self.next()
                if path in ("public", "weak"):
                    path = self.next()
                if path.strip("\"'") not in WELL_KNOWN:
                    raise ValueError(f"it imports {path}, another schema (a reference), which sinklab does not fetch")
                self.expect(";")
            elif token == "message":
                self.top.append(self.message(self.package))
            elif token == "enum":
                self.enum(self.package)
            elif token in ("option", "service", "extend"):
                self.skip_statement()
            elif token != ";":
                raise ValueError(f"unexpected {token!r} in the .proto")
        return self.resolved()

    def message(self, scope: str) -> str:
        name = _join(scope, self.next())
        message = self.messages[name] = Message(name)
        self.expect("{")
        self.body(message, None)
        return name

    def body(self, message: Message, oneof: str | None) -> None:
        while (token := self.next()) != "}":
            if token == "message":
                message.nested.append(self.message(message.name))
            elif token == "enum":
                self.enum(message.name)
            elif token == "oneof":
                name = self.next()
                self.expect("{")
                self.body(message, name)
            elif token in ("option", "reserved", "extensions", "extend"):
                self.skip_statement()
            elif token == "group":
                raise ValueError(f"{message.name} has a group, which sinklab does not read")
            elif token != ";":
                self.field(message, token, oneof)

    def field(self, message: Message, token: str, oneof: str | None) -> None:
        label = token if token in ("optional", "repeated", "required") else None
        kind = self.next() if label else token
        entry = None
        if kind == "map":
            self.expect("<")
            key = self.next()
            self.expect(",")
            value = self.next()
            self.expect(">")
            entry, kind = (key, value), "map"
        name = self.next()
        self.expect("=")
        number = int(self.next(), 0)
        token = self.next()
        if token == "[":
            while self.next() != "]":
                pass
            token = self.next()
        if token != ";":
            raise ValueError(f"expected ';' after field {name} of {message.name}, got {token!r}")
        # Presence: proto2's singular fields, proto3's `optional` ones, a oneof's members.
        presence = label != "repeated" and entry is None and (self.proto2 or label == "optional" or oneof is not None)
        message.fields.append(Field(name, number, kind, label == "repeated", presence, oneof, entry))

    def enum(self, scope: str) -> None:
        name = _join(scope, self.next())
        values = self.enums[name] = {}
        self.expect("{")
        while (token := self.next()) != "}":
            if token in ("option", "reserved"):
                self.skip_statement()
            elif token != ";":
                self.expect("=")
                number = int(self.next(), 0)
                values.setdefault(number, token)  # with allow_alias, the first name of a number
                if self.next() == "[":
                    while self.next() != "]":
                        pass
                    self.expect(";")

    def resolved(self) -> Proto:
        """Each field's type as a scalar's name or a full name, as protobuf resolves it: innermost scope first."""
        known = set(self.messages) | set(self.enums) | {TIMESTAMP}
        for message in self.messages.values():
            for f in message.fields:
                if f.map is not None:
                    f.map = (f.map[0], self.lookup(f.map[1], message.name, known))
                else:
                    f.type = self.lookup(f.type, message.name, known)
        return Proto(self.package, self.messages, self.top, self.enums)

    @staticmethod
    def lookup(name: str, scope: str, known: set[str]) -> str:
        if name in SCALARS:
            return name
        if name.startswith("."):
            if name[1:] in known:
                return name[1:]
        else:
            parts = scope.split(".") if scope else []
            for n in range(len(parts), -1, -1):
                candidate = _join(".".join(parts[:n]), name)
                if candidate in known:
                    return candidate
        raise ValueError(f"type {name} (in {scope}) is not in the schema")


def _join(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


@cache
def parse(text: str) -> Proto:
    """The schema of a ``.proto`` text; ValueError for what sinklab does not read."""
    proto = _Parser(text).parse()
    if not proto.top:
        raise ValueError("the .proto defines no message")
    return proto


# ---- Connect schemas (ProtobufData's, at the converter's defaults)

def proto_to_connect(text: str) -> dict[str, Any]:
    """The Connect schema (JSON form, as in JsonConverter's envelope) of the schema's first message, the one
    sinklab reads (``decode``)."""
    proto = parse(text)
    return {**_struct(proto, proto.message_at([0]), set()), "optional": False}


def _struct(proto: Proto, message: Message, seen: set[str]) -> dict[str, Any]:
    if message.name in seen:
        raise ValueError(f"message {message.name} contains itself, which has no Connect schema")
    fields: list[dict[str, Any]] = []
    oneofs: dict[str, list[dict[str, Any]]] = {}
    for f in message.fields:
        schema = {"field": f.name, **_field_schema(proto, f, seen | {message.name})}
        if f.oneof is None:
            fields.append(schema)
        else:
            if f.oneof not in oneofs:
                oneofs[f.oneof] = []
                fields.append({"field": f"{f.oneof}_0", "type": "struct", "optional": True,
                               "name": f"{f.oneof}_0", "fields": oneofs[f.oneof]})
            oneofs[f.oneof].append(schema)
    return {"type": "struct", "name": message.name, "optional": True, "fields": fields}


def _field_schema(proto: Proto, f: Field, seen: set[str]) -> dict[str, Any]:
    if f.map is not None:
        return {"type": "map", "keys": {**_type_schema(proto, f.map[0], seen), "optional": True},
                "values": {**_type_schema(proto, f.map[1], seen), "optional": True}, "optional": True}
    one = _type_schema(proto, f.type, seen)
    if f.repeated:
        return {"type": "array", "items": {**one, "optional": True}, "optional": True}
    return one


def _type_schema(proto: Proto, kind: str, seen: set[str]) -> dict[str, Any]:
    if kind in SCALARS:
        return {"type": SCALARS[kind], "optional": True}
    if kind == TIMESTAMP:
        return {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "version": 1, "optional": True}
    if kind in proto.enums:
        return {"type": "string", "optional": True}
    return _struct(proto, proto.messages[kind], seen)


# ---- the bodies

def _varint(data: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("the body ends inside a varint")
        b = data[i]
        out |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return out, i
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _signed(n: int, bits: int) -> int:
    n &= (1 << bits) - 1
    return n - (1 << bits) if n >> (bits - 1) else n


def frame_indexes(body: bytes) -> tuple[list[int], int]:
    """The message indexes at the start of a framed body, and where the message's bytes start."""
    count, i = _varint(body, 0)
    count = _zigzag(count)
    if count == 0:
        return [0], i
    indexes = []
    for _ in range(count):
        n, i = _varint(body, i)
        indexes.append(_zigzag(n))
    return indexes, i


def _scalar(kind: str, wire: int, data: bytes, i: int) -> tuple[Any, int]:
    if wire == 0:
        n, i = _varint(data, i)
        if kind in ("int32", "sint32") or kind == "enum":
            return (_signed(_zigzag(n), 32) if kind == "sint32" else _signed(n, 32)), i
        if kind == "sint64":
            return _zigzag(n), i
        if kind == "uint32":
            return n & 0xFFFFFFFF, i
        if kind == "bool":
            return n != 0, i
        return _signed(n, 64), i  # int64, uint64 (as Java's long)
    if wire == 5:
        fmt = {"fixed32": "<I", "sfixed32": "<i", "float": "<f"}[kind]
        return struct.unpack_from(fmt, data, i)[0], i + 4
    if wire == 1:
        fmt = {"fixed64": "<q", "sfixed64": "<q", "double": "<d"}[kind]
        return struct.unpack_from(fmt, data, i)[0], i + 8
    raise ValueError(f"wire type {wire} for a {kind}")


_WIRE = {**dict.fromkeys(("int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "enum"), 0),
         **dict.fromkeys(("fixed32", "sfixed32", "float"), 5), **dict.fromkeys(("fixed64", "sfixed64", "double"), 1)}


def _value(proto: Proto, kind: str, wire: int, data: bytes, i: int) -> tuple[Any, int]:
    scalar = "enum" if kind in proto.enums else kind
    if scalar in _WIRE:
        value, i = _scalar(scalar, wire, data, i)
        return (proto.enums[kind].get(value, str(value)) if scalar == "enum" else value), i
    if wire != 2:
        raise ValueError(f"wire type {wire} for a {kind}")
    size, i = _varint(data, i)
    chunk, i = data[i:i + size], i + size
    if len(chunk) != size:
        raise ValueError("the body ends inside a field")
    if kind == "string":
        return chunk.decode("utf-8"), i
    if kind == "bytes":
        return base64.b64encode(chunk).decode(), i
    if kind == TIMESTAMP:
        stamp = decode_message(proto, TIMESTAMP_MESSAGE, chunk)
        return stamp["seconds"] * 1000 + stamp["nanos"] // 1_000_000, i
    return decode_message(proto, proto.messages[kind], chunk), i


def _skip(wire: int, data: bytes, i: int) -> int:
    if wire == 0:
        return _varint(data, i)[1]
    if wire == 1:
        return i + 8
    if wire == 5:
        return i + 4
    if wire == 2:
        size, i = _varint(data, i)
        return i + size
    raise ValueError(f"wire type {wire} (a group), which sinklab does not read")


def decode_message(proto: Proto, message: Message, data: bytes) -> dict[str, Any]:
    """A message's bytes as the Connect value ProtobufData makes of them (JSON-ready)."""
    by_number = {f.number: f for f in message.fields}
    got: dict[str, Any] = {}
    i = 0
    while i < len(data):
        tag, i = _varint(data, i)
        number, wire = tag >> 3, tag & 7
        f = by_number.get(number)
        if f is None:
            i = _skip(wire, data, i)  # a field of a newer writer: Kafka's converter drops it too
            continue
        if f.map is not None:
            size, i = _varint(data, i)
            key, value = _map_entry(proto, f, data[i:i + size])
            got.setdefault(f.name, {})[key] = value
            i += size
        elif f.repeated and wire == 2 and (f.type in _WIRE or f.type in proto.enums):  # packed
            size, i = _varint(data, i)
            end, items = i + size, got.setdefault(f.name, [])
            while i < end:
                item, i = _value(proto, f.type, _WIRE.get(f.type, 0), data, i)
                items.append(item)
        else:
            value, i = _value(proto, f.type, wire, data, i)
            if f.repeated:
                got.setdefault(f.name, []).append(value)
            else:
                got[f.name] = value
                if f.oneof is not None:  # the last member of a oneof written is the one set
                    for other in message.fields:
                        if other.oneof == f.oneof and other is not f:
                            got.pop(other.name, None)
    out: dict[str, Any] = {}
    for f in message.fields:
        value = got.get(f.name, _default(proto, f))
        if f.oneof is None:
            out[f.name] = value
        else:
            out.setdefault(f"{f.oneof}_0", {})[f.name] = value
    for name in [k for k, v in out.items() if k.endswith("_0") and isinstance(v, dict) and
                 all(x is None for x in v.values())]:
        out[name] = None  # no member set: the oneof's struct is null
    return out


TIMESTAMP_MESSAGE = Message(TIMESTAMP, [Field("seconds", 1, "int64"), Field("nanos", 2, "int32")])


def _map_entry(proto: Proto, f: Field, data: bytes) -> tuple[Any, Any]:
    assert f.map is not None
    entry = Message("entry", [Field("key", 1, f.map[0]), Field("value", 2, f.map[1])])
    decoded = decode_message(proto, entry, data)
    return decoded["key"], decoded["value"]


def _default(proto: Proto, f: Field) -> Any:
    if f.repeated:
        return []
    if f.map is not None:
        return {}
    if f.presence or f.type in proto.messages or f.type == TIMESTAMP:
        return None
    if f.type in proto.enums:
        return proto.enums[f.type].get(0, "0")
    return _DEFAULTS.get(f.type, 0)


def decode(text: str, body: bytes) -> str:
    """A framed body (indexes, then the message) as the record's JSON text; ValueError when it is not one."""
    proto = parse(text)
    indexes, start = frame_indexes(body)
    if indexes != [0]:
        raise ValueError(f"the body is message {indexes} of the schema; sinklab reads its first message")
    return json.dumps(decode_message(proto, proto.message_at(indexes), body[start:]))


def _decoded(text: str, body: bytes | None) -> tuple[str | None, str | None]:
    if body is None:
        return None, None
    try:
        return decode(text, bytes(body)), None
    except (ValueError, KeyError, IndexError, struct.error, UnicodeDecodeError) as exc:
        return None, str(exc) or type(exc).__name__  # the record is bad, and says why


def decoded(body: Column, text: str) -> Column:
    """Each record's body decoded with the schema ``text``: a struct of its JSON ``text``, or why not (``err``)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    result = T.StructType([T.StructField("text", T.StringType()), T.StructField("err", T.StringType())])
    return F.udf(lambda b: _decoded(text, b), returnType=result, useArrow=False)(body)
