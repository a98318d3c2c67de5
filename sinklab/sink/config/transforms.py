"""Single-message transforms and predicates, read from a connector's ``transforms.*`` and ``predicates.*``
keys: Kafka Connect's own (``org.apache.kafka.connect.transforms``), Iceberg's, and Debezium's
``ExtractNewRecordState``; each with the settings its class documents, its defaults, and its ``$Key`` or
``$Value`` side. ``records.transform`` turns a chain into Spark expressions. Any other class runs as the
Python function registered under its name (``register_transform``), or is refused here, naming the alias
and the class, before anything runs."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sinklab.exceptions import ConfigError
from sinklab.sink.config.keys import TRANSFORMS_MODULES as MODULES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

KAFKA = "org.apache.kafka.connect.transforms."
PREDICATES = KAFKA + "predicates."
ICEBERG = ("org.apache.iceberg.connect.transforms.", "io.tabular.iceberg.connect.transforms.")
Side = Literal["value", "key"]


class Predicate(BaseModel):
    """``predicates.<alias>``: TopicNameMatches (``pattern``), HasHeaderKey (``name``), RecordIsTombstone."""

    model_config = ConfigDict(frozen=True)
    alias: str
    kind: Literal["topic-name-matches", "has-header-key", "record-is-tombstone"]
    pattern: str | None = None  # a Java regex the whole topic matches
    name: str | None = None  # a header key


class Step(BaseModel):
    """What every transform has: its alias, the side of the record it works on, and the predicate
    (``transforms.<alias>.predicate``, with ``negate``) that decides which records it applies to."""

    model_config = ConfigDict(frozen=True)
    alias: str = ""
    side: Side = "value"
    predicate: Predicate | None = None
    negate: bool = False


class KafkaMetadata(Step):
    """Iceberg's KafkaMetadataTransform: topic, partition, offset and timestamp as columns."""

    kind: Literal["kafka-metadata"] = "kafka-metadata"
    field_name: str = "_kafka_metadata"
    nested: bool = False
    external_field: tuple[str, str] | None = None


class Debezium(Step):
    """Iceberg's DebeziumTransform: the row image becomes the record, with a ``_cdc`` struct."""

    kind: Literal["debezium"] = "debezium"
    target_pattern: str | None = None  # e.g. "{db}.{table}"; default: the source table


class Flatten(Step):
    """Kafka Connect's Flatten: nested structs become top-level fields joined by ``delimiter``."""

    kind: Literal["flatten"] = "flatten"
    delimiter: str = "."


class InsertField(Step):
    """Kafka Connect's InsertField: the record's topic, partition, offset, timestamp or a static value as
    fields. A name ending in ``!`` is required, in ``?`` optional (the default), as Kafka reads them."""

    kind: Literal["insert-field"] = "insert-field"
    topic: str | None = None
    partition: str | None = None
    offset: str | None = None
    timestamp: str | None = None
    static: str | None = None
    static_value: str | None = None


class ReplaceField(Step):
    """Kafka Connect's ReplaceField: fields excluded, included, renamed (``old:new``)."""

    kind: Literal["replace-field"] = "replace-field"
    exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()


class MaskField(Step):
    """Kafka Connect's MaskField: the fields' values replaced by their type's empty value, or ``replacement``."""

    kind: Literal["mask-field"] = "mask-field"
    fields: tuple[str, ...]
    replacement: str | None = None


CAST_TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")


class Cast(Step):
    """Kafka Connect's Cast: fields (or the whole value, field None) cast to a Connect primitive type."""

    kind: Literal["cast"] = "cast"
    spec: tuple[tuple[str | None, str], ...]


class TimestampConverter(Step):
    """Kafka Connect's TimestampConverter: a field (or the whole value) between unix, string and timestamps."""

    kind: Literal["timestamp-converter"] = "timestamp-converter"
    field: str | None = None
    target: Literal["string", "unix", "Date", "Time", "Timestamp"]
    format: str | None = None  # a SimpleDateFormat pattern, in UTC
    unix_precision: Literal["seconds", "milliseconds", "microseconds", "nanoseconds"] = "milliseconds"


class ExtractField(Step):
    """Kafka Connect's ExtractField: the record becomes one of its fields (a dotted path with V2 field syntax)."""

    kind: Literal["extract-field"] = "extract-field"
    field: tuple[str, ...]


class HoistField(Step):
    """Kafka Connect's HoistField: the record becomes a struct of one field that holds it."""

    kind: Literal["hoist-field"] = "hoist-field"
    field: str


class ValueToKey(Step):
    """Kafka Connect's ValueToKey: the key becomes a struct of the value's ``fields``."""

    kind: Literal["value-to-key"] = "value-to-key"
    fields: tuple[str, ...]


class RegexRouter(Step):
    """Kafka Connect's RegexRouter: a topic the regex matches whole is renamed by ``replacement`` ($1...)."""

    kind: Literal["regex-router"] = "regex-router"
    regex: str
    replacement: str


class TimestampRouter(Step):
    """Kafka Connect's TimestampRouter: the topic renamed from ``${topic}`` and the record's ``${timestamp}``."""

    kind: Literal["timestamp-router"] = "timestamp-router"
    topic_format: str = "${topic}-${timestamp}"
    timestamp_format: str = "yyyyMMdd"


class Filter(Step):
    """Kafka Connect's Filter: drops every record it applies to (so, with a predicate, those it names)."""

    kind: Literal["filter"] = "filter"


class DropHeaders(Step):
    kind: Literal["drop-headers"] = "drop-headers"
    headers: tuple[str, ...]


class InsertHeader(Step):
    kind: Literal["insert-header"] = "insert-header"
    header: str
    literal: str


class HeaderFrom(Step):
    """Kafka Connect's HeaderFrom: fields copied (or moved) into headers, their values as text."""

    kind: Literal["header-from"] = "header-from"
    fields: tuple[str, ...]
    headers: tuple[str, ...]
    move: bool


class CopyValue(Step):
    """Iceberg's CopyValue: ``source.field``'s value copied into ``target.field``."""

    kind: Literal["copy-value"] = "copy-value"
    source: str
    target: str


class Dms(Step):
    """Iceberg's DmsTransform: an AWS DMS record's ``data`` becomes the record, with a ``_cdc`` struct (op, ts,
    source) from its ``metadata``; a record without both is skipped, as Iceberg's class skips it."""

    kind: Literal["dms"] = "dms"


class JsonToMap(Step):
    """Iceberg's JsonToMapTransform, on a value read as text (StringConverter): the object becomes a struct
    whose fields are typed as Iceberg's JsonToMapUtils types them (a nested object a map of texts, an array
    of mixed types an array of texts, a null or empty field left out); ``root`` (``json.root``): one
    field ``payload``, the whole object as a map of texts."""

    kind: Literal["json-to-map"] = "json-to-map"
    root: bool = False


class MongoDebezium(Step):
    """Iceberg's MongoDebeziumTransform: a Debezium MongoDB change event's ``before`` and ``after`` (BSON's
    extended JSON, as text) become structs typed from their values, a partial update's ``updateDescription``
    merged over ``before``; the key becomes ``{id}``. ``array_mode``: an array is an array of one type
    (``array``) or a struct of fields ``_0``, ``_1``, ... (``document``)."""

    kind: Literal["mongo-debezium"] = "mongo-debezium"
    array_mode: Literal["array", "document"] = "array"


class ExtractNewRecordState(Step):
    """Debezium's ExtractNewRecordState (unwrap): a change event becomes its row (``after``; ``before`` for a
    delete rewritten), with ``add.fields`` from the envelope or its source as ``__<name>``."""

    kind: Literal["extract-new-record-state"] = "extract-new-record-state"
    drop_tombstones: bool = True
    delete_handling: Literal["drop", "rewrite", "none"] = "drop"
    add_fields: tuple[str, ...] = ()
    prefix: str = "__"


class SetSchemaMetadata(Step):
    kind: Literal["set-schema-metadata"] = "set-schema-metadata"
    name: str | None = None
    version: int | None = None


class Python(Step):
    """A class sinklab has no expressions for, run as the Python function registered under its name."""

    kind: Literal["python"] = "python"
    cls: str
    settings: tuple[tuple[str, str], ...] = ()  # its transforms.<alias>.* settings, as given


# A Python transform: the records as a frame (``records.transform.python`` says which columns) and the
# transform's settings, to the records it returns.
PythonTransform = Callable[["DataFrame", Mapping[str, str]], "DataFrame"]
_REGISTERED: dict[str, PythonTransform] = {}


def register_transform(cls: str, function: PythonTransform) -> None:
    """Run ``function`` wherever a connector's chain names the transform class ``cls`` (for example a
    third-party class such as ``com.github.jcustenborder.kafka.connect.transform.common.PatternMapString$Value``):
    the published config then runs unchanged. docs/connect.md, "A transform of your own"."""
    if not cls.strip():
        raise ValueError("a transform's class name is needed to register it")
    _REGISTERED[cls.strip()] = function


def registered(cls: str) -> PythonTransform | None:
    return _REGISTERED.get(cls)


Transform = Annotated[
    KafkaMetadata | Debezium | Flatten | InsertField | ReplaceField | MaskField | Cast | TimestampConverter
    | ExtractField | HoistField | ValueToKey | RegexRouter | TimestampRouter | Filter | DropHeaders | InsertHeader
    | HeaderFrom | SetSchemaMetadata | CopyValue | Dms | JsonToMap | MongoDebezium | ExtractNewRecordState | Python,
    Field(discriminator="kind")]


# ---- reading the keys
class _Settings:
    """One transform's settings (``transforms.<alias>.*``), each read once; what is left is unknown to
    the class, as Kafka's ConfigDef leaves it (logged as unused, changing nothing)."""

    def __init__(self, prefix: str, props: dict[str, Any], notes: list[str]):
        self.prefix, self.props, self.notes = prefix, dict(props), notes

    def text(self, name: str, default: str | None = None, *older: str) -> str | None:
        value = None
        for n in (name, *older):
            if n in self.props:
                value = self.props.pop(n)
        return default if value is None else str(value)

    def required(self, name: str, *older: str) -> str:
        value = self.text(name, None, *older)
        if value is None or not value.strip():
            raise ConfigError(self.prefix + name, "is required by this transform")
        return value

    def names(self, name: str, *older: str) -> tuple[str, ...]:
        value = self.text(name, "", *older) or ""
        return tuple(p.strip() for p in value.split(",") if p.strip())

    def flag(self, name: str, default: bool) -> bool:
        value = self.text(name)
        if value is None:
            return default
        if value.strip().lower() not in ("true", "false"):
            raise ConfigError(self.prefix + name, f"expected true or false, got {value!r}")
        return value.strip().lower() == "true"

    def rest(self) -> tuple[tuple[str, str], ...]:
        """Every setting left, taken (a Python transform reads them itself)."""
        out = tuple(sorted((k, str(v)) for k, v in self.props.items()))
        self.props.clear()
        return out

    def choice(self, name: str, choices: tuple[str, ...], default: str | None = None) -> str:
        value = self.text(name, default)
        match = next((c for c in choices if value is not None and c.lower() == value.strip().lower()), None)
        if match is None:
            raise ConfigError(self.prefix + name, f"expected one of {', '.join(choices)}, got {value!r}")
        return match


def _insert_field(s: _Settings) -> dict[str, Any]:
    out = {k: s.text(f"{k}.field") for k in ("topic", "partition", "offset", "timestamp", "static")}
    out["static_value"] = s.text("static.value")
    if out["static"] and out["static_value"] is None:
        raise ConfigError(s.prefix + "static.value", "is required with static.field")
    return out


def _replace_field(s: _Settings) -> dict[str, Any]:
    renames = []
    for pair in s.names("renames"):
        old, sep, new = pair.partition(":")
        if not sep or not old.strip() or not new.strip():
            raise ConfigError(s.prefix + "renames", f"expected old:new pairs, got {pair!r}")
        renames.append((old.strip(), new.strip()))
    older = [n for n in ("blacklist", "whitelist") if n in s.props]
    if older:
        # Kafka 3.x read them as exclude and include; Kafka Connect 4.0 dropped them (its runtime, the
        # stack's 4.3 included, ignores them: tests/test_connect_transforms.py found it).
        current = "/".join("exclude" if n == "blacklist" else "include" for n in older)
        s.notes.append(f"{s.prefix}{'/'.join(older)}: read as {current}, as Kafka Connect 3.x reads them; "
                       "Kafka Connect 4.0 and later ignore them")
    return {"exclude": s.names("exclude", "blacklist"), "include": s.names("include", "whitelist"),
            "renames": tuple(renames)}


def _cast(s: _Settings) -> dict[str, Any]:
    spec: list[tuple[str | None, str]] = []
    for part in s.names("spec"):
        name, sep, kind = part.rpartition(":")
        kind = kind.strip().lower()
        if kind not in CAST_TYPES:
            raise ConfigError(s.prefix + "spec", f"{part!r}: cannot cast to {kind!r} (types: {', '.join(CAST_TYPES)})")
        spec.append((name.strip() if sep else None, kind))
    if not spec:
        raise ConfigError(s.prefix + "spec", "is required by this transform")
    if any(n is None for n, _ in spec) and len(spec) > 1:
        raise ConfigError(s.prefix + "spec", "a cast of the whole value is the only entry of its spec")
    return {"spec": tuple(spec)}


def _timestamp_converter(s: _Settings) -> dict[str, Any]:
    target = s.choice("target.type", ("string", "unix", "Date", "Time", "Timestamp"))
    fmt = s.text("format") or None
    if target == "string" and not fmt:
        raise ConfigError(s.prefix + "format", "is required when target.type is string")
    return {"field": s.text("field") or None, "target": target, "format": fmt,
            "unix_precision": s.choice("unix.precision", ("seconds", "milliseconds", "microseconds", "nanoseconds"),
                                       "milliseconds")}


def _extract_field(s: _Settings) -> dict[str, Any]:
    field = s.required("field")
    v2 = s.choice("field.syntax.version", ("V1", "V2"), "V1") == "V2"
    return {"field": tuple(field.split(".")) if v2 else (field,)}


def _header_from(s: _Settings) -> dict[str, Any]:
    fields, headers = s.names("fields"), s.names("headers")
    if not fields or len(fields) != len(headers):
        raise ConfigError(s.prefix + "headers", f"names one header per field ({len(fields)} fields, "
                          f"{len(headers)} headers)")
    return {"fields": fields, "headers": headers, "move": s.choice("operation", ("move", "copy")) == "move"}


def _kafka_metadata(s: _Settings) -> dict[str, Any]:
    external = s.text("external_field")
    pair = tuple(external.split(",", 1)) if external else None
    if pair is not None and len(pair) != 2:
        raise ConfigError(s.prefix + "external_field", f"expected 'name,value', got {external!r}")
    return {"field_name": s.text("field_name", "_kafka_metadata"), "nested": s.flag("nested", False),
            "external_field": pair}


def _version(s: _Settings) -> int | None:
    text = s.text("schema.version")
    if text is None:
        return None
    if not text.strip().lstrip("-").isdigit():
        raise ConfigError(s.prefix + "schema.version", f"expected an integer, got {text!r}")
    return int(text)


# A class's simple name (``InsertField``; its ``$Key``/``$Value`` form chooses the side) -> the model and how
# its settings are read.
_KAFKA_CLASSES: dict[str, tuple[type[Step], Any]] = {
    "InsertField": (InsertField, _insert_field),
    "ReplaceField": (ReplaceField, _replace_field),
    "MaskField": (MaskField, lambda s: {"fields": s.names("fields") or (s.required("fields"),),
                                        "replacement": s.text("replacement")}),
    "Cast": (Cast, _cast),
    "TimestampConverter": (TimestampConverter, _timestamp_converter),
    "ExtractField": (ExtractField, _extract_field),
    "HoistField": (HoistField, lambda s: {"field": s.required("field")}),
    "ValueToKey": (ValueToKey, lambda s: {"fields": s.names("fields") or (s.required("fields"),)}),
    "Flatten": (Flatten, lambda s: {"delimiter": s.text("delimiter", ".")}),
    "RegexRouter": (RegexRouter, lambda s: {"regex": s.required("regex"), "replacement": s.text("replacement", "")}),
    "TimestampRouter": (TimestampRouter, lambda s: {"topic_format": s.text("topic.format", "${topic}-${timestamp}"),
                                                    "timestamp_format": s.text("timestamp.format", "yyyyMMdd")}),
    "Filter": (Filter, lambda s: {}),
    "DropHeaders": (DropHeaders, lambda s: {"headers": s.names("headers") or (s.required("headers"),)}),
    "InsertHeader": (InsertHeader, lambda s: {"header": s.required("header"), "literal": s.required("value.literal")}),
    "HeaderFrom": (HeaderFrom, _header_from),
    "SetSchemaMetadata": (SetSchemaMetadata, lambda s: {"name": s.text("schema.name"), "version": _version(s)}),
}
_ICEBERG_CLASSES: dict[str, tuple[type[Step], Any]] = {
    "KafkaMetadataTransform": (KafkaMetadata, _kafka_metadata),
    "DebeziumTransform": (Debezium, lambda s: {"target_pattern": s.text("cdc.target.pattern")}),
    "CopyValue": (CopyValue, lambda s: {"source": s.required("source.field"), "target": s.required("target.field")}),
    "DmsTransform": (Dms, lambda s: {}),
    "JsonToMapTransform": (JsonToMap, lambda s: {"root": s.flag("json.root", False)}),
    "MongoDebeziumTransform": (MongoDebezium, lambda s: _array_mode(s)),
}
UNWRAP = "io.debezium.transforms.ExtractNewRecordState"


def _array_mode(s: _Settings) -> dict[str, Any]:
    value = s.text("array_handling_mode")
    mode = (value or "array").strip().lower()
    if mode not in ("array", "document"):
        # Iceberg's class reads any other value as array, without a word: so does sinklab, with one.
        s.notes.append(f"{s.prefix}array_handling_mode: {value!r} is neither array nor document: read as array, "
                       "as Iceberg's MongoDebeziumTransform reads it")
        mode = "array"
    return {"array_mode": mode}


def _unwrap(s: _Settings) -> dict[str, Any]:
    if "delete.tombstone.handling.mode" in s.props:  # Debezium 2.5's one setting for both
        newer = s.choice("delete.tombstone.handling.mode", ("drop", "tombstone", "rewrite", "rewrite-with-tombstone"))
        mode, drop = {"drop": ("drop", True), "tombstone": ("none", False), "rewrite": ("rewrite", True),
                      "rewrite-with-tombstone": ("rewrite", False)}[newer]
    else:
        mode = s.choice("delete.handling.mode", ("drop", "rewrite", "none"), "drop")
        drop = s.flag("drop.tombstones", True)
    if s.text("add.headers"):
        raise ConfigError(s.prefix + "add.headers", "sinklab does not add Debezium's headers: headers never reach "
                          "the table, so drop the setting")
    return {"drop_tombstones": drop, "delete_handling": mode, "add_fields": s.names("add.fields"),
            "prefix": s.text("add.fields.prefix", "__")}


# Kafka's classes without a $Key/$Value form: the side they work on.
_ONE_SIDE = {"ValueToKey": "value", "RegexRouter": "value", "TimestampRouter": "value", "Filter": "value",
             "DropHeaders": "value", "InsertHeader": "value"}
_PREDICATE_CLASSES = {"TopicNameMatches": "topic-name-matches", "HasHeaderKey": "has-header-key",
                      "RecordIsTombstone": "record-is-tombstone"}


def runnable() -> list[str]:
    """The classes sinklab runs, by their simple names, for errors and the docs."""
    return sorted([*_KAFKA_CLASSES, *_ICEBERG_CLASSES, UNWRAP.rsplit(".", 1)[-1]])


def _model(alias: str, cls: str) -> tuple[type[Step], Any, Side]:
    prefix = f"transforms.{alias}."
    if cls.startswith(KAFKA) and not cls.startswith(PREDICATES):
        simple, _, form = cls.removeprefix(KAFKA).partition("$")
        found = _KAFKA_CLASSES.get(simple)
        side = _ONE_SIDE.get(simple) if found else None
        if found and side is None and form in ("Key", "Value"):
            return (*found, "key" if form == "Key" else "value")
        if found and side is not None and not form:
            return (*found, side)  # type: ignore[return-value]
        if found:
            raise ConfigError(prefix + "type", f"{cls!r}: name its $Key or $Value form" if side is None
                              else f"{cls!r}: this class has no $Key or $Value form")
    if cls == UNWRAP:
        return ExtractNewRecordState, _unwrap, "value"
    for package in ICEBERG:
        if cls.startswith(package) and cls.removeprefix(package) in _ICEBERG_CLASSES:
            return (*_ICEBERG_CLASSES[cls.removeprefix(package)], "value")
    if cls in _REGISTERED:
        return Python, lambda s: {"cls": cls, "settings": s.rest()}, "value"
    raise ConfigError(prefix + "type", f"transform {alias!r} is {cls!r}, which sinklab cannot run (it runs "
                      f"{', '.join(runnable())}): run it where the records are produced, register a Python "
                      f"function under its name (sinklab.sink.register_transform, named in {MODULES}), or drop it")


def read_predicates(conf: dict[str, Any]) -> dict[str, Predicate]:
    out: dict[str, Predicate] = {}
    for alias in _names(conf.get("predicates", "")):
        prefix = f"predicates.{alias}."
        cls = str(conf.get(prefix + "type") or "")
        kind = _PREDICATE_CLASSES.get(cls.removeprefix(PREDICATES)) if cls.startswith(PREDICATES) else None
        if kind is None:
            raise ConfigError(prefix + "type", f"predicate {alias!r} is {cls or 'not given'!r}, which sinklab cannot "
                              f"run (it runs {', '.join(_PREDICATE_CLASSES)})")
        s = _Settings(prefix, {k.removeprefix(prefix): v for k, v in conf.items() if k.startswith(prefix)}, [])
        s.text("type")
        pattern = s.required("pattern") if kind == "topic-name-matches" else None
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(prefix + "pattern", f"not a regular expression: {exc}") from exc
        out[alias] = Predicate(alias=alias, kind=kind, pattern=pattern,  # type: ignore[arg-type]
                               name=s.required("name") if kind == "has-header-key" else None)
    return out


def read_chain(conf: dict[str, Any], notes: list[str]) -> list[Step]:
    """The ``transforms`` chain of a connector's flat config, in order; unknown settings noted (they change
    nothing, in Kafka Connect either); a class or setting sinklab cannot honour refused (ConfigError)."""
    for module in _names(conf.get(MODULES, "")):
        try:
            importlib.import_module(module)
        except Exception as exc:  # any error of the user's module: named, with the key that named it
            raise ConfigError(MODULES, f"cannot import {module!r}: {type(exc).__name__}: {exc}") from exc
    predicates = read_predicates(conf)
    used: set[str] = set()
    out: list[Step] = []
    for alias in _names(conf.get("transforms", "")):
        prefix = f"transforms.{alias}."
        cls = conf.get(prefix + "type")
        if cls is None:
            raise ConfigError(prefix + "type", f"transform {alias!r} has no type")
        model, read, side = _model(alias, str(cls).strip())
        s = _Settings(prefix, {k.removeprefix(prefix): v for k, v in conf.items()
                               if k.startswith(prefix) and k != prefix + "type"}, notes)
        name = s.text("predicate")
        if name is not None and name not in predicates:
            raise ConfigError(prefix + "predicate", f"names predicate {name!r}, which is not in predicates")
        used.update([name] if name else [])
        negate = s.flag("negate", False)
        if s.text("replace.null.with.default") is not None:
            notes.append(f"{prefix}replace.null.with.default: read; a null field stays null in sinklab (a "
                         "schema's default is not applied to it)")
        fields = read(s)
        out.append(model(alias=alias, side=side, predicate=predicates.get(name) if name else None, negate=negate,
                         **fields))
        notes.extend(f"{prefix}{k}: not a setting of {str(cls).rsplit('.', 1)[-1]}: ignored, as Kafka Connect "
                     "ignores it" for k in s.props)
    notes.extend(f"predicates.{p}: no transform names it: ignored" for p in predicates if p not in used)
    return out


def _names(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]
