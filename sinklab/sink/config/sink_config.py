"""The sink's configuration: the Kafka Connect JSON a user already has, validated and mapped."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field

from sinklab.exceptions import ConfigError
from sinklab.security import librdkafka_settings, resolve_all
from sinklab.sink.config import keys
from sinklab.sink.config.connect_json import read_connect_json
from sinklab.sink.config.keys import Key
from sinklab.sink.config.transforms import Flatten, JsonToMap, Transform, read_chain
from sinklab.sink.wire import apicurio, protobuf
from sinklab.sink.wire.avro import AVRO_CONVERTER
from sinklab.sink.wire.jsonschema import JSON_SCHEMA_CONVERTER
from sinklab.sink.wire.registry import ApicurioFrame, Format, RegistrySettings, strategy_name

JSON_CONVERTERS = {"org.apache.kafka.connect.json.JsonConverter"}
# Converters of records framed by a schema registry (magic byte, schema id, body), by the format they read.
REGISTRY_CONVERTERS: dict[str, Format] = {AVRO_CONVERTER: "avro", JSON_SCHEMA_CONVERTER: "json",
                                           protobuf.PROTOBUF_CONVERTER: "protobuf",
                                           apicurio.APICURIO_AVRO_CONVERTER: "avro"}
STRING_CONVERTERS = {"org.apache.kafka.connect.storage.StringConverter"}
VARIANT_FORMAT_VERSION = 3  # Iceberg's VARIANT type is a format v3 type


TIME_TRANSFORMS = {"year": "years", "years": "years", "month": "months", "months": "months", "day": "days",
                   "days": "days", "date": "days", "hour": "hours", "hours": "hours", "date_hour": "hours"}


class PartitionField(BaseModel):
    """One entry of ``partition-by``: identity, year/month/day/hour(col), bucket(N, col), truncate(W, col)."""

    transform: str  # identity, years, months, days, hours, bucket, truncate
    column: str
    param: int | None = None

    @property
    def ddl(self) -> str:
        col = ".".join(f"`{p}`" for p in self.column.split("."))
        if self.transform == "identity":
            return col
        if self.param is not None:
            return f"{self.transform}({self.param}, {col})"
        return f"{self.transform}({col})"


PARTITION_RE = re.compile(r"^\s*(\w+)\s*\(\s*([^),]+?)\s*(?:,\s*([^)]+?)\s*)?\)\s*$")


def parse_partition(key: str, text: str) -> PartitionField:
    text = text.strip()
    match = PARTITION_RE.match(text)
    if match is None:
        if not re.fullmatch(r"[\w.]+", text):
            raise ConfigError(key, f"cannot read partition field {text!r} (expected a column, day(col), "
                              f"bucket(16, col), truncate(4, col), ...)")
        return PartitionField(transform="identity", column=text)
    name, first, second = match.group(1).lower(), match.group(2), match.group(3)
    if name in TIME_TRANSFORMS or name == "identity":
        if second is not None:
            raise ConfigError(key, f"{name}() takes one column, got {text!r}")
        return PartitionField(transform=TIME_TRANSFORMS.get(name, "identity"), column=first)
    if name in ("bucket", "truncate"):
        if second is None:
            raise ConfigError(key, f"{name} needs a width and a column, e.g. {name}(16, id); got {text!r}")
        # Both orders are in use (Spark DDL puts the width first, Java's config the column).
        width, column = (first, second) if first.isdigit() else (second, first)
        if not width.isdigit() or int(width) < 1:
            raise ConfigError(key, f"{name} width must be a positive integer, got {text!r}")
        return PartitionField(transform=name, column=column, param=int(width))
    raise ConfigError(key, f"unknown partition transform {name!r} in {text!r} (use identity, year, month, day, "
                      f"hour, bucket or truncate)")


class SinkConfig(BaseModel):
    """A sink's configuration, read from its Kafka Connect keys by ``from_connect``: the key of each field,
    with its type, default and documentation, is declared in ``sinklab.sink.config.keys``."""

    name: str
    topics: list[str] = Field(default_factory=list)
    topics_regex: str | None = None
    tables: list[str] = Field(default_factory=list)
    route_field: str | None = None
    route_regex: dict[str, str] = Field(default_factory=dict)
    dynamic_enabled: bool = False
    auto_create: bool = False
    default_partition_by: list[PartitionField] = Field(default_factory=list)
    partition_by: dict[str, list[PartitionField]] = Field(default_factory=dict)
    auto_create_props: dict[str, str] = Field(default_factory=dict)
    # Fields landing as VARIANT columns (format v3) instead of inferred structs; the whole value as one.
    variant_columns: list[str] = Field(default_factory=list)
    variant_value: str | None = None
    evolve_schema: bool = False
    schema_force_optional: bool = False
    schema_case_insensitive: bool = False
    default_id_columns: list[str] = Field(default_factory=list)
    id_columns: dict[str, list[str]] = Field(default_factory=dict)
    upsert_mode: bool = False
    cdc_field: str | None = None
    default_commit_branch: str = keys.COMMIT_BRANCH_DEFAULT
    commit_branch: dict[str, str] = Field(default_factory=dict)
    control_topic: str = keys.CONTROL_TOPIC
    commit_interval_ms: int = keys.COMMIT_INTERVAL_MS_DEFAULT
    commit_timeout_ms: int = keys.COMMIT_TIMEOUT_MS_DEFAULT
    catalog_name: str = keys.CATALOG_DEFAULT
    catalog_properties: dict[str, str] = Field(default_factory=dict)
    kafka_properties: dict[str, str] = Field(default_factory=dict)
    # producer.override.* and admin.override.*: only their login is read (``kafka_settings``).
    producer_properties: dict[str, str] = Field(default_factory=dict)
    group_id: str = ""
    auto_offset_reset: Literal["earliest", "latest"] = keys.AUTO_OFFSET_RESET_DEFAULT
    schemas_enable: bool = False
    # value.converter / key.converter = AvroConverter or JsonSchemaConverter: the format and registry settings
    # (the URL may come from the stack).
    value_registry: RegistrySettings | None = None
    key_registry: RegistrySettings | None = None
    # key.converter=JsonConverter with schemas.enable: a key in the envelope names its row by its payload.
    key_envelope: bool = False
    errors_tolerance: Literal["none", "all"] = keys.ERRORS_TOLERANCE_DEFAULT
    dlq_topic: str | None = None
    dlq_table: str | None = None
    dlq_context_headers: bool = False
    errors_log: bool = False
    max_records_per_cycle: int = keys.CYCLE_MAX_RECORDS_DEFAULT
    max_tasks_per_cycle: int | None = None  # None: one per core
    # What else starts a cycle before the interval (cycle.pace): records or bytes waiting, a latency target.
    commit_max_records: int | None = None
    commit_max_bytes: int | None = None
    commit_target_lag_ms: int | None = None
    # How long a running sink keeps trying cycles that fail on a service away for now (errors.transient)
    # before it is FAILED; -1 forever, 0 never.
    retry_timeout_ms: int = keys.RETRY_TIMEOUT_MS_DEFAULT
    transforms: list[Transform] = Field(default_factory=list)
    # sinklab.maintenance.* as given: run between cycles by the hook a sink is given (sinklab.maintenance.schedule).
    maintenance_keys: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    @property
    def table_create_props(self) -> dict[str, str]:
        """Properties of a table auto-create makes (besides the row-level ones): the configured ones,
        with format v3 when VARIANT columns need it."""
        props = dict(self.auto_create_props)
        if self.variant_columns or self.variant_value:
            props.setdefault("format-version", str(VARIANT_FORMAT_VERSION))
        return props

    @property
    def typed_values(self) -> bool:
        """Whether each value brings its schema (Connect's envelope, a writer schema in a registry, or the
        one JsonToMapTransform gives it)."""
        return self.schemas_enable or self.value_registry is not None or any(
            isinstance(t, JsonToMap) for t in self.transforms)

    def table_branch(self, table: str) -> str:
        return self.commit_branch.get(table, self.default_commit_branch)

    def table_partition_by(self, table: str) -> list[PartitionField]:
        return self.partition_by.get(table, self.default_partition_by)

    def partition_key(self, table: str) -> str:
        if table in self.partition_by:
            return keys.table_key(table, keys.PARTITION_BY)
        return keys.TABLES_DEFAULT_PARTITION_BY

    def table_id_columns(self, table: str) -> list[str]:
        return self.id_columns.get(table, self.default_id_columns)

    @property
    def row_level(self) -> bool:
        return self.upsert_mode or self.cdc_field is not None

    def matches_topic(self, topic: str) -> bool:
        if topic in self.topics:
            return True
        return bool(self.topics_regex and re.fullmatch(self.topics_regex, topic))

    def reads_topic(self, topic: str) -> bool:
        """Whether the sink reads ``topic``: never its own control or dead-letter topic; one it names; one its
        regex matches unless it is a log of another kind (Apache's sink's control topic, Kafka's ``__`` topics)."""
        if topic in (self.control_topic, self.dlq_topic):
            return False
        if topic in self.topics:
            return True
        return topic != keys.APACHE_CONTROL_TOPIC and not topic.startswith("__") and self.matches_topic(topic)

    def kafka_settings(self, stack: dict[str, Any]) -> dict[str, Any]:
        """The sink's Kafka client settings, in librdkafka's names, references resolved: the stack's
        (``Stack.kafka_config``), under this config's own (``iceberg.kafka.*``, ``consumer.override.*``,
        in either client's names: a connector's are Java's), and the login of ``producer.override.*`` or
        ``admin.override.*`` where those set none."""
        login = {k: v for k, v in self.producer_properties.items() if k.startswith(_LOGIN)}
        return librdkafka_settings(resolve_all({**stack, **login, **self.kafka_properties}))

    @property
    def transactional_id(self) -> str:
        # Stable per sink name: a newer instance's init_transactions fences an older one.
        return f"sinklab-{self.name}"

    def shareable(self) -> str:
        """What a reader of the sink's tables may learn of it (``sinklab.fresh`` converts a table's Kafka tail
        with it): this config as JSON without what may hold credentials or is the sink's own business
        (the catalog's and Kafka's client settings, a registry's user info, maintenance, notes)."""
        data = self.model_dump(mode="json", exclude=PRIVATE_FIELDS)
        for side in ("value_registry", "key_registry"):
            if data.get(side):
                data[side]["user_info"] = None
                if data[side]["apicurio"]:  # apicurio.registry.request.headers.*: an Authorization, say
                    data[side]["apicurio"]["request_headers"] = {}
                url = urlsplit(data[side]["registry_url"] or "")
                if url.username or url.password:  # user:password@host: the host alone
                    data[side]["registry_url"] = urlunsplit(url._replace(netloc=url.hostname + (
                        f":{url.port}" if url.port else "")))
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


PRIVATE_FIELDS = {"catalog_properties", "kafka_properties", "producer_properties", "maintenance_keys", "notes"}
_LOGIN = ("security.protocol", "sasl.", "ssl.")  # a Kafka client's login settings, in either client's names


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(key, f"expected true or false, got {value!r}")


def _int(key: str, value: Any, minimum: int = 0) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(key, f"expected an integer, got {value!r}") from None
    if number < minimum:
        raise ConfigError(key, f"must be at least {minimum}, got {number}")
    return number


def _list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _partition_list(key: str, value: Any) -> list[PartitionField]:
    # "bucket(16, id), day(ts)": split on commas outside parentheses.
    parts, depth, current = [], 0, ""
    for ch in str(value):
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        current += ch
    parts.append(current.strip())
    return [parse_partition(key, p) for p in parts if p]


def _regex(key: str, value: Any) -> str:
    try:
        re.compile(str(value))
    except re.error as exc:
        raise ConfigError(key, f"invalid regular expression {value!r} ({exc})") from None
    return str(value)


def _choice(decl: Key, key: str, value: Any) -> str:
    if str(value) not in decl.choices:
        raise ConfigError(key, f"expected {' or '.join(decl.choices)}, got {value!r}")
    return str(value)


Reader = Callable[[Key, str, Any], Any]
# How a value of each type (or Key.parse) is read; a key with choices takes one of them.
READERS: dict[str, Reader] = {
    "BOOLEAN": lambda _, key, value: _bool(key, value),
    "INT": lambda decl, key, value: _int(key, value, decl.minimum),
    "LONG": lambda decl, key, value: _int(key, value, decl.minimum),
    "LIST": lambda _, key, value: _list(value),
    "STRING": lambda _, key, value: str(value),
    "partitions": lambda _, key, value: _partition_list(key, value),
    "regex": lambda _, key, value: _regex(key, value),
    "optional": lambda _, key, value: str(value) or None,  # empty: none, as Connect's "" default
    "column": lambda _, key, value: str(value).strip() or None,
}


def read_value(decl: Key, key: str, value: Any) -> Any:
    """``value`` of ``key`` read as its declaration ``decl`` says; ConfigError naming the key if it cannot be."""
    reader = _choice if decl.choices else READERS[decl.parse or decl.type]
    return reader(decl, key, value)


def _transforms(conf: dict[str, Any], notes: list[str]) -> list[Transform]:
    """Kafka Connect's ``transforms`` chain (``transforms.read_chain``), then sinklab's own flattening."""
    out: list[Transform] = read_chain(conf, notes)  # type: ignore[assignment]
    for t in out:
        if isinstance(t, JsonToMap) and str(conf.get(keys.VALUE_CONVERTER)) not in STRING_CONVERTERS:
            raise ConfigError(f"transforms.{t.alias}.type", f"JsonToMapTransform reads a value as text, as Iceberg's "
                              f"class requires: set {keys.VALUE_CONVERTER} to {sorted(STRING_CONVERTERS)[0]}")
    if keys.FLATTEN_SEPARATOR in conf or _bool(keys.FLATTEN, conf.get(keys.FLATTEN, False)):
        out.append(Flatten(alias=keys.FLATTEN, delimiter=str(conf.get(keys.FLATTEN_SEPARATOR,
                                                                       keys.FLATTEN_SEPARATOR_DEFAULT))))
    return out


def load_config(source: str | Path | dict[str, Any], name: str | None = None) -> SinkConfig:
    """Read a Kafka Connect sink configuration: ``{"name": ..., "config": {...}}`` or the flat map."""
    name, conf = read_connect_json(source, name)
    return from_connect(name, conf)


def from_connect(name: str, conf: dict[str, Any]) -> SinkConfig:
    """A sink's configuration from its Kafka Connect keys, each read as ``sinklab.sink.config.keys`` declares it;
    notes say what was accepted and not used. Raises ConfigError naming the key."""
    out: dict[str, Any] = {"name": name}
    notes: list[str] = []
    conf, given_as = _current_spellings(conf, notes)
    for key, value in conf.items():
        if key.startswith(keys.MAINTENANCE_PREFIX):
            continue  # kept as given for the maintenance policy (below), which reads them
        decl = keys.lookup(key)
        if decl is None:
            notes.append(f"unknown key {key!r} ignored")
        elif decl.ignored is not None:
            notes.append(f"{key}: accepted, not used ({decl.ignored})")
        elif decl.field is not None:
            read = read_value(decl, given_as.get(key, key), value)  # an error names the key as the user wrote it
            if decl.family:
                out.setdefault(decl.field, {})[decl.entry(key)] = read
            else:
                out[decl.field] = read
        # else: read with the keys it goes with (converters, transforms) or by Kafka Connect (name)
    _converters(conf, out, notes)
    out["transforms"] = _transforms(conf, notes)
    out["maintenance_keys"] = {k: str(v) for k, v in conf.items() if k.startswith(keys.MAINTENANCE_PREFIX)}
    out["group_id"] = out.get("group_id") or f"connect-{name}"
    config = SinkConfig(**out, notes=notes)
    _validate(config)
    return config


def _current_spellings(conf: dict[str, Any], notes: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``conf`` with the older spellings of Tabular's sink read as their current keys (a note names both),
    and which current key was given in which older spelling; an older spelling given beside its current
    key with another value is refused, naming both."""
    out, given_as = dict(conf), {}
    for key in conf:
        current = keys.current_spelling(key)
        if current is None:
            continue
        value = out.pop(key)
        if current in conf and str(conf[current]) != str(value):
            raise ConfigError(key, f"{key} is the older spelling of {current}, which is also given, with another "
                              f"value ({value!r} against {conf[current]!r}): keep {current}")
        if current not in conf:
            out[current], given_as[current] = value, key
        notes.append(f"{key}: the older spelling (Tabular's sink) of {current}, read as it")
    return out, given_as


def _converters(conf: dict[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """The value's and the key's converter with their settings, read together: what a setting means
    depends on the converter (a registry's, JsonConverter's envelope, none when read as text)."""
    value_converter, key_converter = (str(conf[c]) if c in conf else None for c in (keys.VALUE_CONVERTER,
                                                                                    keys.KEY_CONVERTER))
    value_props, key_props = (_converter_settings(conf, side) for side in keys.SIDES)
    readable = JSON_CONVERTERS | STRING_CONVERTERS | set(REGISTRY_CONVERTERS)
    if value_converter is not None and value_converter not in readable:
        raise ConfigError(keys.VALUE_CONVERTER, f"sinklab reads JSON, Avro, JSON Schema or Protobuf values; "
                          f"{value_converter!r} is not supported (use {sorted(JSON_CONVERTERS)[0]}, {AVRO_CONVERTER}, "
                          f"{apicurio.APICURIO_AVRO_CONVERTER}, {JSON_SCHEMA_CONVERTER} or "
                          f"{protobuf.PROTOBUF_CONVERTER})")
    framed = value_converter in REGISTRY_CONVERTERS
    out["value_registry"] = _registry("value", value_converter, value_props, notes) if framed else None
    for prop in value_props if not framed else []:
        notes.append(f"{keys.VALUE_CONVERTER}.{prop}: ignored ({keys.VALUE_CONVERTER} reads no schema registry)")
    if key_converter in REGISTRY_CONVERTERS:
        out["key_registry"] = key = _registry("key", key_converter, key_props, notes)
        value = out["value_registry"]
        # One registry for both, as usual (and one API: Apicurio's native one is not Confluent's).
        if key.registry_url is None and value is not None and (value.apicurio is None) == (key.apicurio is None):
            key.registry_url, key.user_info = value.registry_url, value.user_info
    else:
        # Keys are read as UTF-8 text: a row-level table's tombstone names its row by a JSON or plain key;
        # JsonConverter's keys carry the schema envelope unless told otherwise, as its values do.
        if key_converter in JSON_CONVERTERS:
            out["key_envelope"] = _bool(keys.KEY_SCHEMAS_ENABLE,
                                        key_props.pop(keys.SCHEMAS_ENABLE, keys.SCHEMAS_ENABLE_DEFAULT))
        elif key_converter is not None:
            notes.append(f"{keys.KEY_CONVERTER}: {key_converter} accepted, not used (keys are read as text)")
        for prop in key_props:
            notes.append(f"{keys.KEY_CONVERTER}.{prop}: accepted, not used (keys are read as text)")
    # Kafka Connect's JsonConverter expects the schema envelope unless told otherwise.
    if out.get("schemas_enable") is None or framed:
        out["schemas_enable"] = value_converter in JSON_CONVERTERS
        if value_converter in JSON_CONVERTERS:
            notes.append(f"{keys.VALUE_SCHEMAS_ENABLE} not set: JsonConverter's default (true) applies")


def _converter_settings(conf: dict[str, Any], side: str) -> dict[str, str]:
    """A converter's settings by name (``schema.registry.url``, ``subject.name.strategy``), as given;
    ``value.converter.schemas.enable`` is a key of its own."""
    prefix, strategy = f"{keys.CONVERTERS[side]}.", keys.SUBJECT_STRATEGIES[side]
    return {keys.SUBJECT_STRATEGY if k == strategy else k.removeprefix(prefix): str(v) for k, v in conf.items()
            if k == strategy or (k.startswith(prefix) and k != keys.VALUE_SCHEMAS_ENABLE)}


def _registry(side: str, converter: str, props: dict[str, str], notes: list[str]) -> RegistrySettings:
    """A registry converter's settings for values or keys (``side``): ``schema.registry.url``,
    ``basic.auth.*``, the subject strategy."""
    if converter in apicurio.CONVERTERS:
        return _apicurio(side, props, notes)
    settings = RegistrySettings(format=REGISTRY_CONVERTERS[converter])
    source = "URL"
    for prop, value in props.items():
        key = keys.converter_key(side, prop)
        if prop == keys.REGISTRY_URL:
            if not value.startswith(("http://", "https://")):
                raise ConfigError(key, f"expected an http(s) URL, got {value!r}")
            # Confluent's clients take a comma-separated list; one registry answers for all of them.
            settings.registry_url = value.split(",")[0].strip()
        elif prop in (keys.CREDENTIALS_SOURCE, f"schema.registry.{keys.CREDENTIALS_SOURCE}"):
            if value not in ("USER_INFO", "URL"):
                raise ConfigError(key, f"expected USER_INFO or URL, got {value!r}")
            source = value
        elif prop in (keys.USER_INFO, f"schema.registry.{keys.USER_INFO}"):
            if ":" not in value:
                raise ConfigError(key, "expected user:password")
            settings.user_info = value
        elif prop in (keys.SUBJECT_STRATEGIES[side], keys.SUBJECT_STRATEGY):
            settings.subject_strategy = strategy_name(key, value)
        elif prop == keys.SCHEMAS_ENABLE:
            notes.append(f"{key}: ignored (framed {side}s always carry their schema id)")
        elif settings.format == "protobuf" and prop in protobuf.READ_AS:
            if value.strip().lower() != protobuf.READ_AS[prop]:
                raise ConfigError(key, f"sinklab reads Protobuf as Confluent's ProtobufData does with {prop}="
                                  f"{protobuf.READ_AS[prop]}; {value!r} is not supported")
        else:
            notes.append(f"{key}: unknown converter setting, ignored")
    if source == "USER_INFO" and settings.user_info is None:
        raise ConfigError(keys.converter_key(side, keys.USER_INFO), f"{keys.CREDENTIALS_SOURCE}=USER_INFO needs it")
    if source == "URL":
        settings.user_info = None  # credentials, if any, are in the URL
    return settings


def _apicurio(side: str, props: dict[str, str], notes: list[str]) -> RegistrySettings:
    """Apicurio's ``AvroConverter``'s settings (``apicurio.registry.*``, ``apicurio.auth.*``) for values or keys."""
    frame = ApicurioFrame()
    settings = RegistrySettings(format="avro", apicurio=frame)
    user: str | None = None
    password = ""
    for prop, value in props.items():
        key = keys.converter_key(side, prop)
        named = apicurio.HEADER_NAME.fullmatch(prop)
        if prop == apicurio.URL:
            if not value.startswith(("http://", "https://")):
                raise ConfigError(key, f"expected an http(s) URL of the registry's API, got {value!r}")
            settings.registry_url = value
        elif prop == apicurio.USE_ID:
            if value not in ("globalId", "contentId"):
                raise ConfigError(key, f"expected globalId or contentId, got {value!r}")
            frame.use_id = value  # type: ignore[assignment]  # checked above
        elif prop == apicurio.HEADERS_ENABLED:
            frame.headers_enabled = _bool(key, value)
        elif prop == apicurio.AS_CONFLUENT:
            if _bool(key, value):
                frame.id_size = 4
        elif prop == apicurio.ID_HANDLER:
            if value not in apicurio.ID_HANDLERS:
                raise ConfigError(key, f"sinklab reads the ids of {', '.join(apicurio.ID_HANDLERS)}; {value!r} writes "
                                  "its own")
            frame.id_size = apicurio.ID_HANDLERS[value]  # type: ignore[assignment]  # 4 or 8
        elif prop == apicurio.AVRO_ENCODING:
            if value.upper() != "BINARY":
                raise ConfigError(key, f"sinklab reads Avro's binary encoding; {value!r} is not supported")
        elif prop == apicurio.AUTH_USERNAME:
            user = value
        elif prop == apicurio.AUTH_PASSWORD:
            password = value
        elif prop == apicurio.AUTH_SERVICE_URL or prop.startswith("apicurio.auth."):
            raise ConfigError(key, "sinklab reaches Apicurio Registry with basic authentication "
                              f"({apicurio.AUTH_USERNAME}, {apicurio.AUTH_PASSWORD}) or request headers "
                              f"({apicurio.REQUEST_HEADERS}*), not through an OAuth2 service")
        elif prop.startswith(apicurio.REQUEST_HEADERS):
            frame.request_headers[prop.removeprefix(apicurio.REQUEST_HEADERS)] = value
        elif named is not None:
            if named.group(1) == side:
                frame.header_names[named.group(2)] = value
            else:
                notes.append(f"{key}: ignored (it names the {named.group(1)}'s header)")
        elif prop in apicurio.SERIALIZER_ONLY:
            notes.append(f"{key}: ignored (a serializer's setting: reading, each record's id is resolved as it comes)")
        else:
            notes.append(f"{key}: unknown converter setting, ignored")
    if password and user is None:
        raise ConfigError(keys.converter_key(side, apicurio.AUTH_USERNAME), f"{apicurio.AUTH_PASSWORD} needs it")
    if user is not None:
        settings.user_info = f"{user}:{password}"
    return settings


def _validate(config: SinkConfig) -> None:
    """What no single key says: the keys that go together."""
    if not config.topics and not config.topics_regex:
        raise ConfigError(keys.TOPICS, f"set {keys.TOPICS} or {keys.TOPICS_REGEX}")
    if config.topics and config.topics_regex:
        raise ConfigError(keys.TOPICS_REGEX, f"set either {keys.TOPICS} or {keys.TOPICS_REGEX}, not both")
    if not config.tables and not config.dynamic_enabled:
        raise ConfigError(keys.TABLES, "name at least one destination table (or enable dynamic routing)")
    for table in config.tables:
        if len(table.split(".")) < 2:
            raise ConfigError(keys.TABLES, f"{table!r} needs a namespace (namespace.table)")
    if config.dynamic_enabled and not config.route_field:
        raise ConfigError(keys.TABLES_ROUTE_FIELD, "dynamic routing needs a route field")
    for table, regex in config.route_regex.items():
        key = keys.table_key(table, keys.ROUTE_REGEX)
        _regex(key, regex)
        if not config.route_field:
            raise ConfigError(key, f"needs {keys.TABLES_ROUTE_FIELD}")
    if config.variant_columns or config.variant_value:
        key = keys.VARIANT_VALUE if config.variant_value else keys.VARIANT_COLUMNS
        version = config.auto_create_props.get("format-version", str(VARIANT_FORMAT_VERSION))
        if not version.isdigit() or int(version) < VARIANT_FORMAT_VERSION:
            raise ConfigError(key, f"VARIANT columns need Iceberg format version 3, but "
                              f"{keys.TABLES_AUTO_CREATE_PROPS_PREFIX}format-version is {version}")
        if config.variant_value and config.variant_columns:
            raise ConfigError(keys.VARIANT_COLUMNS, "the whole value already lands in "
                              f"{config.variant_value} ({keys.VARIANT_VALUE}); set one of the two")
        if config.variant_value and config.row_level:
            raise ConfigError(keys.VARIANT_VALUE, "upsert/CDC needs id columns, and a whole value as one VARIANT has "
                              f"none; use {keys.VARIANT_COLUMNS} for the changing fields")
    if config.errors_tolerance == "all" and not (config.dlq_topic or config.dlq_table):
        # Kafka Connect would drop such records; sinklab loses nothing, so they need somewhere to go.
        raise ConfigError(keys.ERRORS_DLQ_TOPIC, f"{keys.ERRORS_TOLERANCE}=all needs a dead-letter topic "
                          f"({keys.ERRORS_DLQ_TOPIC}) or table ({keys.ERRORS_DLQ_TABLE})")
    if config.dlq_table:
        if config.errors_tolerance != "all":
            raise ConfigError(keys.ERRORS_DLQ_TABLE, f"a dead-letter table takes records only with "
                              f"{keys.ERRORS_TOLERANCE}=all (it is {config.errors_tolerance})")
        if "." not in config.dlq_table:
            raise ConfigError(keys.ERRORS_DLQ_TABLE, f"{config.dlq_table!r} needs a namespace (namespace.table)")
        if config.dlq_table in config.tables:
            raise ConfigError(keys.ERRORS_DLQ_TABLE, f"{config.dlq_table} is also a destination table "
                              f"({keys.TABLES}): dead letters need a table of their own")
