"""The sink's configuration: the Kafka Connect JSON a user already has, validated and mapped."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from sinklab.exceptions import ConfigError
from sinklab.sink.avro import AVRO_CONVERTER
from sinklab.sink.jsonschema import JSON_SCHEMA_CONVERTER
from sinklab.sink.registry import Format, RegistrySettings, strategy_name
from sinklab.sink.transforms import TRANSFORM_CLASSES, Debezium, Flatten, KafkaMetadata, Transform

# Keys the sink passes on to its between-cycles hook unread.
MAINTENANCE_PREFIX = "sinklab.maintenance."

# Keys that only mean something inside Kafka Connect: accepted, reported, not used.
CONNECT_ONLY = {
    "connector.class": "sinklab is the connector",
    "tasks.max": "Spark decides read parallelism from the partitions and cores",
    "header.converter": "headers are kept as bytes",
    "errors.retry.timeout": "Spark retries failed tasks itself",
    "errors.retry.delay.max.ms": "Spark retries failed tasks itself",
    "iceberg.control.commit.threads": "tables are committed by the driver",
    "iceberg.control.group-id-prefix": "sinklab has no worker group on the control topic",
    "iceberg.hadoop-conf-dir": "Hadoop settings come from the Spark session",
    "iceberg.catalog.client.region": "the region goes with the storage settings of the catalog",
    "consumer.override.auto.offset.reset": None,  # mapped, see below
}
JSON_CONVERTERS = {"org.apache.kafka.connect.json.JsonConverter"}
# Converters of records framed by a schema registry (magic byte, schema id, body), by the format they read.
REGISTRY_CONVERTERS: dict[str, Format] = {AVRO_CONVERTER: "avro", JSON_SCHEMA_CONVERTER: "json"}
STRING_CONVERTERS = {"org.apache.kafka.connect.storage.StringConverter"}
VARIANT_FORMAT_VERSION = 3  # Iceberg's VARIANT type is a format v3 type
# Connection keys the stack's catalog replaces when a sink runs on a stack.
CATALOG_CONNECTION_KEYS = {"type", "uri", "warehouse", "token", "credential", "s3.endpoint", "s3.access-key-id",
                           "s3.secret-access-key", "s3.path-style-access", "io-impl", "client.region"}


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
    default_commit_branch: str = "main"
    commit_branch: dict[str, str] = Field(default_factory=dict)
    control_topic: str = "control-iceberg"
    commit_interval_ms: int = 300_000
    commit_timeout_ms: int = 30_000
    catalog_name: str = "iceberg"
    catalog_properties: dict[str, str] = Field(default_factory=dict)
    kafka_properties: dict[str, str] = Field(default_factory=dict)
    group_id: str = ""
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    schemas_enable: bool = False
    # value.converter / key.converter = AvroConverter or JsonSchemaConverter: the format and registry settings
    # (the URL may come from the stack).
    value_registry: RegistrySettings | None = None
    key_registry: RegistrySettings | None = None
    # key.converter=JsonConverter with schemas.enable: a key in the envelope names its row by its payload.
    key_envelope: bool = False
    errors_tolerance: Literal["none", "all"] = "none"
    dlq_topic: str | None = None
    dlq_context_headers: bool = False
    errors_log: bool = False
    max_records_per_cycle: int = 5_000_000
    # What else starts a cycle before the interval (sinklab.sink.pace): records or bytes waiting, a latency target.
    commit_max_records: int | None = None
    commit_max_bytes: int | None = None
    commit_target_lag_ms: int | None = None
    # How long a running sink keeps trying cycles that fail on a service away for now (errors.transient)
    # before it is FAILED; -1 forever, 0 never.
    retry_timeout_ms: int = 600_000
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
        """Whether each value brings its schema (Connect's envelope, or a writer schema in a registry)."""
        return self.schemas_enable or self.value_registry is not None

    def table_branch(self, table: str) -> str:
        return self.commit_branch.get(table, self.default_commit_branch)

    def table_partition_by(self, table: str) -> list[PartitionField]:
        return self.partition_by.get(table, self.default_partition_by)

    def partition_key(self, table: str) -> str:
        if table in self.partition_by:
            return f"iceberg.table.{table}.partition-by"
        return "iceberg.tables.default-partition-by"

    def table_id_columns(self, table: str) -> list[str]:
        return self.id_columns.get(table, self.default_id_columns)

    @property
    def row_level(self) -> bool:
        return self.upsert_mode or self.cdc_field is not None

    def matches_topic(self, topic: str) -> bool:
        if topic in self.topics:
            return True
        return bool(self.topics_regex and re.fullmatch(self.topics_regex, topic))

    @property
    def transactional_id(self) -> str:
        # Stable per sink name: a newer instance's init_transactions fences an older one.
        return f"sinklab-{self.name}"


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


def _transforms(conf: dict[str, Any], notes: list[str]) -> list[Transform]:
    """Kafka Connect's ``transforms`` chain, for the transforms sinklab implements."""
    out: list[Transform] = []
    for alias in _list(conf.get("transforms", "")):
        prefix = f"transforms.{alias}."
        cls = conf.get(f"{prefix}type")
        if cls is None:
            raise ConfigError(f"{prefix}type", f"transform {alias!r} has no type")
        model = TRANSFORM_CLASSES.get(str(cls))
        if model is None:
            raise ConfigError(f"{prefix}type", f"sinklab cannot run transform {cls!r} (it runs "
                              f"{', '.join(sorted({c.rsplit('.', 1)[-1] for c in TRANSFORM_CLASSES}))})")
        props = {k.removeprefix(prefix): v for k, v in conf.items() if k.startswith(prefix) and k != f"{prefix}type"}
        if model is KafkaMetadata:
            external = props.pop("external_field", None)
            pair = tuple(str(external).split(",", 1)) if external else None
            if pair is not None and len(pair) != 2:
                raise ConfigError(f"{prefix}external_field", f"expected 'name,value', got {external!r}")
            out.append(KafkaMetadata(field_name=str(props.pop("field_name", "_kafka_metadata")),
                                     nested=_bool(f"{prefix}nested", props.pop("nested", False)),
                                     external_field=pair))  # type: ignore[arg-type]
        elif model is Flatten:
            out.append(Flatten(delimiter=str(props.pop("delimiter", "."))))
        else:
            out.append(Debezium(target_pattern=props.pop("cdc.target.pattern", None)))
        notes.extend(f"{prefix}{k}: unknown transform setting ignored" for k in props)
    if "sinklab.flatten.separator" in conf or _bool("sinklab.flatten", conf.get("sinklab.flatten", False)):
        out.append(Flatten(delimiter=str(conf.get("sinklab.flatten.separator", "_"))))
    return out


def load_config(source: str | Path | dict[str, Any], name: str | None = None) -> SinkConfig:
    """Read a Kafka Connect sink configuration: ``{"name": ..., "config": {...}}`` or the flat map."""
    name, conf = read_connect_json(source, name)
    return from_connect(name, conf)


def read_connect_json(source: str | Path | dict[str, Any], name: str | None = None) -> tuple[str, dict[str, Any]]:
    """The connector's name and its flat config map, from either Connect JSON shape (unvalidated)."""
    if isinstance(source, dict):
        raw = source
        origin = "<dict>"
    else:
        path = config_path(source)
        origin = str(path)
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(None, f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise ConfigError(None, f"{origin}: expected a JSON object")
    if "config" in raw and isinstance(raw["config"], dict):
        conf = dict(raw["config"])
        name = name or raw.get("name") or conf.get("name")
    else:
        conf = dict(raw)
        name = name or conf.get("name")
    if not name and not isinstance(source, dict):
        # The seed posts pizzas-on-ice.json to /connectors/pizzas-on-ice: the file names the connector.
        name = Path(source).stem.replace("_", "-")
    if not name:
        raise ConfigError("name", "a sink needs a name (it keys the consumer group and the transactional id)")
    return str(name), conf


def packaged_configs() -> dict[str, Path]:
    """The configs shipped in ``sinklab/configs`` (the seed's), by file name."""
    folder = Path(__file__).resolve().parent.parent / "configs"
    return {p.name: p for p in sorted(folder.glob("*.json"))}


def config_path(source: str | Path) -> Path:
    """The config file ``source`` names; a bare name that is not a file here is looked up among the
    packaged configs, so ``--config pizzas-on-ice.json`` works from any directory."""
    path = Path(source)
    if path.is_file():
        return path
    packaged = packaged_configs()
    if path.name == str(source) and path.name in packaged:
        return packaged[path.name]
    if path.exists():
        raise ConfigError(None, f"{path.resolve()}: not a file")
    raise ConfigError(None, f"config file {path.resolve()} not found (a bare name is also looked up among sinklab's "
                      f"packaged configs: {', '.join(packaged) or 'none'})")


def from_connect(name: str, conf: dict[str, Any]) -> SinkConfig:  # noqa: C901 - one branch per key family
    out: dict[str, Any] = {"name": name}
    notes: list[str] = []
    route_regex: dict[str, str] = {}
    partition_by: dict[str, list[str]] = {}
    id_columns: dict[str, list[str]] = {}
    commit_branch: dict[str, str] = {}
    auto_props: dict[str, str] = {}
    catalog_props: dict[str, str] = {}
    kafka_props: dict[str, str] = {}
    value_converter: str | None = None
    key_converter: str | None = None
    schemas_enable: bool | None = None
    converter_props: dict[str, dict[str, str]] = {"value": {}, "key": {}}

    for key, value in conf.items():
        if key == "name":
            continue
        if key == "topics":
            out["topics"] = _list(value)
        elif key == "topics.regex":
            try:
                re.compile(str(value))
            except re.error as exc:
                raise ConfigError("topics.regex", f"invalid regular expression {value!r} ({exc})") from None
            out["topics_regex"] = str(value)
        elif key == "iceberg.tables":
            out["tables"] = _list(value)
        elif key == "iceberg.tables.route-field":
            out["route_field"] = str(value)
        elif key == "iceberg.tables.dynamic-enabled":
            out["dynamic_enabled"] = _bool(key, value)
        elif key == "iceberg.tables.auto-create-enabled":
            out["auto_create"] = _bool(key, value)
        elif key == "iceberg.tables.default-partition-by":
            out["default_partition_by"] = _partition_list(key, value)
        elif key.startswith("iceberg.tables.auto-create-props."):
            auto_props[key.removeprefix("iceberg.tables.auto-create-props.")] = str(value)
        elif key == "iceberg.tables.evolve-schema-enabled":
            out["evolve_schema"] = _bool(key, value)
        elif key == "iceberg.tables.schema-force-optional":
            out["schema_force_optional"] = _bool(key, value)
        elif key == "iceberg.tables.schema-case-insensitive":
            out["schema_case_insensitive"] = _bool(key, value)
        elif key == "iceberg.tables.default-id-columns":
            out["default_id_columns"] = _list(value)
        elif key == "iceberg.tables.upsert-mode-enabled":
            out["upsert_mode"] = _bool(key, value)
        elif key == "iceberg.tables.cdc-field":
            out["cdc_field"] = str(value)
        elif key == "iceberg.tables.default-commit-branch":
            out["default_commit_branch"] = str(value)
        elif key.startswith("iceberg.table.") and key.count(".") >= 3:
            table, _, prop = key.removeprefix("iceberg.table.").rpartition(".")
            if prop == "route-regex":
                route_regex[table] = str(value)
            elif prop == "partition-by":
                partition_by[table] = _partition_list(key, value)
            elif prop == "id-columns":
                id_columns[table] = _list(value)
            elif prop == "commit-branch":
                commit_branch[table] = str(value)
            else:
                notes.append(f"unknown key {key!r} ignored")
        elif key == "iceberg.control.topic":
            out["control_topic"] = str(value)
        elif key == "iceberg.control.commit.interval-ms":
            out["commit_interval_ms"] = _int(key, value, 100)
        elif key == "iceberg.control.commit.timeout-ms":
            out["commit_timeout_ms"] = _int(key, value, 1000)
        elif key == "iceberg.catalog":
            out["catalog_name"] = str(value)
        elif key.startswith("iceberg.catalog."):
            catalog_props[key.removeprefix("iceberg.catalog.")] = str(value)
        elif key.startswith("iceberg.kafka."):
            kafka_props[key.removeprefix("iceberg.kafka.")] = str(value)
        elif key.startswith("consumer.override."):
            prop = key.removeprefix("consumer.override.")
            if prop == "auto.offset.reset":
                if str(value) not in ("earliest", "latest"):
                    raise ConfigError(key, f"expected earliest or latest, got {value!r}")
                out["auto_offset_reset"] = str(value)
            else:
                kafka_props[prop] = str(value)
        elif key == "iceberg.connect.group-id":
            out["group_id"] = str(value)
        elif key == "value.converter":
            value_converter = str(value)
        elif key == "value.converter.schemas.enable":
            schemas_enable = _bool(key, value)
        elif key.startswith(("value.converter.", "key.converter.")) or key in ("value.subject.name.strategy",
                                                                             "key.subject.name.strategy"):
            side, _, prop = key.partition(".")
            converter_props[side][prop.removeprefix("converter.")] = str(value)
        elif key == "key.converter":
            key_converter = str(value)
        elif key == "errors.tolerance":
            if str(value) not in ("none", "all"):
                raise ConfigError("errors.tolerance", f"expected none or all, got {value!r}")
            out["errors_tolerance"] = str(value)
        elif key == "errors.deadletterqueue.topic.name":
            out["dlq_topic"] = str(value) or None
        elif key == "errors.deadletterqueue.context.headers.enable":
            out["dlq_context_headers"] = _bool(key, value)
        elif key == "errors.log.enable":
            out["errors_log"] = _bool(key, value)
        elif key == "sinklab.tables.variant-columns":
            out["variant_columns"] = _list(value)
        elif key == "sinklab.tables.variant-value":
            out["variant_value"] = str(value).strip() or None
        elif key == "sinklab.cycle.max-records":
            out["max_records_per_cycle"] = _int(key, value, 1)
        elif key == "sinklab.commit.max-records":
            out["commit_max_records"] = _int(key, value, 1)
        elif key == "sinklab.commit.max-bytes":
            out["commit_max_bytes"] = _int(key, value, 1)
        elif key == "sinklab.commit.target-lag-ms":
            out["commit_target_lag_ms"] = _int(key, value, 100)
        elif key == "sinklab.retry.timeout-ms":
            out["retry_timeout_ms"] = _int(key, value, -1)
        elif key == "transforms" or key.startswith("transforms.") or key.startswith("sinklab.flatten") \
                or key.startswith(MAINTENANCE_PREFIX):
            continue  # read as a whole by _transforms, and kept as given for the maintenance schedule
        elif key in CONNECT_ONLY:
            notes.append(f"{key}: accepted, not used ({CONNECT_ONLY[key]})")
        else:
            notes.append(f"unknown key {key!r} ignored")

    readable = JSON_CONVERTERS | STRING_CONVERTERS | set(REGISTRY_CONVERTERS)
    if value_converter is not None and value_converter not in readable:
        raise ConfigError("value.converter", f"sinklab reads JSON, Avro or JSON Schema values; {value_converter!r} is "
                          f"not supported (use {sorted(JSON_CONVERTERS)[0]}, {AVRO_CONVERTER} or "
                          f"{JSON_SCHEMA_CONVERTER})")
    framed = REGISTRY_CONVERTERS.get(value_converter or "")
    out["value_registry"] = _registry("value", framed, converter_props["value"], notes) if framed else None
    for prop in converter_props["value"] if not framed else []:
        notes.append(f"value.converter.{prop}: ignored (value.converter reads no schema registry)")
    if key_converter in REGISTRY_CONVERTERS:
        out["key_registry"] = key = _registry("key", REGISTRY_CONVERTERS[key_converter], converter_props["key"], notes)
        if key.registry_url is None and out["value_registry"] is not None:  # one registry for both, as usual
            key.registry_url, key.user_info = out["value_registry"].registry_url, out["value_registry"].user_info
    else:
        # Keys are read as UTF-8 text: a row-level table's tombstone names its row by a JSON or plain key;
        # JsonConverter's keys carry the schema envelope unless told otherwise, as its values do.
        key_props = dict(converter_props["key"])
        if key_converter in JSON_CONVERTERS:
            out["key_envelope"] = _bool("key.converter.schemas.enable", key_props.pop("schemas.enable", "true"))
        elif key_converter is not None:
            notes.append(f"key.converter: {key_converter} accepted, not used (keys are read as text)")
        for prop in key_props:
            notes.append(f"key.converter.{prop}: accepted, not used (keys are read as text)")
    # Kafka Connect's JsonConverter expects the schema envelope unless told otherwise.
    if schemas_enable is None or framed:
        schemas_enable = value_converter in JSON_CONVERTERS
        if value_converter in JSON_CONVERTERS:
            notes.append("value.converter.schemas.enable not set: JsonConverter's default (true) applies")
    out["schemas_enable"] = schemas_enable

    out["transforms"] = _transforms(conf, notes)
    out["maintenance_keys"] = {k: str(v) for k, v in conf.items() if k.startswith(MAINTENANCE_PREFIX)}
    out.update(route_regex=route_regex, partition_by=partition_by, id_columns=id_columns,
               commit_branch=commit_branch, auto_create_props=auto_props, catalog_properties=catalog_props,
               kafka_properties=kafka_props, notes=notes)
    out.setdefault("group_id", f"connect-{name}")
    if not out["group_id"]:
        out["group_id"] = f"connect-{name}"
    config = SinkConfig(**out)
    _validate(config)
    return config


def _registry(side: str, format: Format, props: dict[str, str], notes: list[str]) -> RegistrySettings:
    """A registry converter's settings for values or keys (``side``): ``schema.registry.url``,
    ``basic.auth.*``, the subject strategy."""
    settings = RegistrySettings(format=format)
    source = "URL"
    for prop, value in props.items():
        key = f"{side}.converter.{prop}" if prop != "subject.name.strategy" else f"{side}.subject.name.strategy"
        if prop == "schema.registry.url":
            if not value.startswith(("http://", "https://")):
                raise ConfigError(key, f"expected an http(s) URL, got {value!r}")
            # Confluent's clients take a comma-separated list; one registry answers for all of them.
            settings.registry_url = value.split(",")[0].strip()
        elif prop in ("basic.auth.credentials.source", "schema.registry.basic.auth.credentials.source"):
            if value not in ("USER_INFO", "URL"):
                raise ConfigError(key, f"expected USER_INFO or URL, got {value!r}")
            source = value
        elif prop in ("basic.auth.user.info", "schema.registry.basic.auth.user.info"):
            if ":" not in value:
                raise ConfigError(key, "expected user:password")
            settings.user_info = value
        elif prop in (f"{side}.subject.name.strategy", "subject.name.strategy"):
            settings.subject_strategy = strategy_name(key, value)
        elif prop == "schemas.enable":
            notes.append(f"{key}: ignored (framed {side}s always carry their schema id)")
        else:
            notes.append(f"{key}: unknown converter setting, ignored")
    if source == "USER_INFO" and settings.user_info is None:
        raise ConfigError(f"{side}.converter.basic.auth.user.info", f"basic.auth.credentials.source=USER_INFO needs it")
    if source == "URL":
        settings.user_info = None  # credentials, if any, are in the URL
    return settings


def _validate(config: SinkConfig) -> None:
    if not config.topics and not config.topics_regex:
        raise ConfigError("topics", "set topics or topics.regex")
    if config.topics and config.topics_regex:
        raise ConfigError("topics.regex", "set either topics or topics.regex, not both")
    if not config.tables and not config.dynamic_enabled:
        raise ConfigError("iceberg.tables", "name at least one destination table (or enable dynamic routing)")
    for table in config.tables:
        if len(table.split(".")) < 2:
            raise ConfigError("iceberg.tables", f"{table!r} needs a namespace (namespace.table)")
    if config.dynamic_enabled and not config.route_field:
        raise ConfigError("iceberg.tables.route-field", "dynamic routing needs a route field")
    for table, regex in config.route_regex.items():
        try:
            re.compile(regex)
        except re.error as exc:
            raise ConfigError(f"iceberg.table.{table}.route-regex", f"invalid regular expression {regex!r} ({exc})"
                              ) from None
        if not config.route_field:
            raise ConfigError(f"iceberg.table.{table}.route-regex", f"needs iceberg.tables.route-field")
    if config.variant_columns or config.variant_value:
        key = "sinklab.tables.variant-value" if config.variant_value else "sinklab.tables.variant-columns"
        version = config.auto_create_props.get("format-version", str(VARIANT_FORMAT_VERSION))
        if not version.isdigit() or int(version) < VARIANT_FORMAT_VERSION:
            raise ConfigError(key, f"VARIANT columns need Iceberg format version 3, but "
                              f"iceberg.tables.auto-create-props.format-version is {version}")
        if config.variant_value and config.variant_columns:
            raise ConfigError("sinklab.tables.variant-columns", "the whole value already lands in "
                              f"{config.variant_value} (sinklab.tables.variant-value); set one of the two")
        if config.variant_value and config.row_level:
            raise ConfigError("sinklab.tables.variant-value", "upsert/CDC needs id columns, and a whole value as one "
                              "VARIANT has none; use sinklab.tables.variant-columns for the changing fields")
    if config.errors_tolerance == "all" and not config.dlq_topic:
        # Kafka Connect would drop such records; sinklab loses nothing, so they need somewhere to go.
        raise ConfigError("errors.deadletterqueue.topic.name", "errors.tolerance=all needs a dead-letter topic")
