"""The sink's configuration: the Kafka Connect JSON a user already has, validated and mapped."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

# Keys that only mean something inside Kafka Connect: accepted, reported, not used.
CONNECT_ONLY = {
    "connector.class": "sinklab is the connector",
    "tasks.max": "Spark decides read parallelism from the partitions and cores",
    "key.converter": "keys are read as bytes",
    "key.converter.schemas.enable": "keys are read as bytes",
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
STRING_CONVERTERS = {"org.apache.kafka.connect.storage.StringConverter"}
# Connection keys the stack's catalog replaces when a sink runs on a stack.
CATALOG_CONNECTION_KEYS = {"type", "uri", "warehouse", "token", "credential", "s3.endpoint", "s3.access-key-id",
                           "s3.secret-access-key", "s3.path-style-access", "io-impl", "client.region"}


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


class SinkConfig(BaseModel):
    name: str
    topics: list[str] = Field(default_factory=list)
    topics_regex: str | None = None
    tables: list[str] = Field(default_factory=list)
    route_field: str | None = None
    route_regex: dict[str, str] = Field(default_factory=dict)
    dynamic_enabled: bool = False
    auto_create: bool = False
    default_partition_by: list[str] = Field(default_factory=list)
    partition_by: dict[str, list[str]] = Field(default_factory=dict)
    auto_create_props: dict[str, str] = Field(default_factory=dict)
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
    errors_tolerance: Literal["none", "all"] = "none"
    dlq_topic: str | None = None
    dlq_context_headers: bool = False
    errors_log: bool = False
    max_records_per_cycle: int = 5_000_000
    notes: list[str] = Field(default_factory=list)

    def table_branch(self, table: str) -> str:
        return self.commit_branch.get(table, self.default_commit_branch)

    def table_partition_by(self, table: str) -> list[str]:
        return self.partition_by.get(table, self.default_partition_by)

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
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def _int(key: str, value: Any, minimum: int = 0) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
    if number < minimum:
        raise ConfigError(f"{key}: must be at least {minimum}, got {number}")
    return number


def _list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _partition_list(value: Any) -> list[str]:
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
    return [p for p in parts if p]


def load_config(source: str | Path | dict[str, Any], name: str | None = None) -> SinkConfig:
    """Read a Kafka Connect sink configuration: ``{"name": ..., "config": {...}}`` or the flat map."""
    if isinstance(source, dict):
        raw = source
        origin = "<dict>"
    else:
        path = Path(source)
        origin = str(path)
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a JSON object")
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
        raise ConfigError("name: a sink needs a name (it keys the consumer group and the transactional id)")
    return from_connect(str(name), conf)


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
    schemas_enable: bool | None = None

    for key, value in conf.items():
        if key == "name":
            continue
        if key == "topics":
            out["topics"] = _list(value)
        elif key == "topics.regex":
            try:
                re.compile(str(value))
            except re.error as exc:
                raise ConfigError(f"topics.regex: invalid regular expression {value!r} ({exc})") from None
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
            out["default_partition_by"] = _partition_list(value)
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
                partition_by[table] = _partition_list(value)
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
                    raise ConfigError(f"{key}: expected earliest or latest, got {value!r}")
                out["auto_offset_reset"] = str(value)
            else:
                kafka_props[prop] = str(value)
        elif key == "iceberg.connect.group-id":
            out["group_id"] = str(value)
        elif key == "value.converter":
            value_converter = str(value)
        elif key == "value.converter.schemas.enable":
            schemas_enable = _bool(key, value)
        elif key == "errors.tolerance":
            if str(value) not in ("none", "all"):
                raise ConfigError(f"errors.tolerance: expected none or all, got {value!r}")
            out["errors_tolerance"] = str(value)
        elif key == "errors.deadletterqueue.topic.name":
            out["dlq_topic"] = str(value) or None
        elif key == "errors.deadletterqueue.context.headers.enable":
            out["dlq_context_headers"] = _bool(key, value)
        elif key == "errors.log.enable":
            out["errors_log"] = _bool(key, value)
        elif key == "sinklab.cycle.max-records":
            out["max_records_per_cycle"] = _int(key, value, 1)
        elif key in CONNECT_ONLY:
            notes.append(f"{key}: accepted, not used ({CONNECT_ONLY[key]})")
        else:
            notes.append(f"unknown key {key!r} ignored")

    if value_converter is not None and value_converter not in JSON_CONVERTERS | STRING_CONVERTERS:
        raise ConfigError(f"value.converter: sinklab reads JSON values; {value_converter!r} is not supported "
                          f"(use {sorted(JSON_CONVERTERS)[0]})")
    # Kafka Connect's JsonConverter expects the schema envelope unless told otherwise.
    if schemas_enable is None:
        schemas_enable = value_converter in JSON_CONVERTERS
        if value_converter in JSON_CONVERTERS:
            notes.append("value.converter.schemas.enable not set: JsonConverter's default (true) applies")
    out["schemas_enable"] = schemas_enable

    out.update(route_regex=route_regex, partition_by=partition_by, id_columns=id_columns,
               commit_branch=commit_branch, auto_create_props=auto_props, catalog_properties=catalog_props,
               kafka_properties=kafka_props, notes=notes)
    out.setdefault("group_id", f"connect-{name}")
    if not out["group_id"]:
        out["group_id"] = f"connect-{name}"
    config = SinkConfig(**out)
    _validate(config)
    return config


def _validate(config: SinkConfig) -> None:
    if not config.topics and not config.topics_regex:
        raise ConfigError("topics: set topics or topics.regex")
    if config.topics and config.topics_regex:
        raise ConfigError("topics.regex: set either topics or topics.regex, not both")
    if not config.tables and not config.dynamic_enabled:
        raise ConfigError("iceberg.tables: name at least one destination table (or enable dynamic routing)")
    for table in config.tables:
        if len(table.split(".")) < 2:
            raise ConfigError(f"iceberg.tables: {table!r} needs a namespace (namespace.table)")
    if config.dynamic_enabled and not config.route_field:
        raise ConfigError("iceberg.tables.route-field: dynamic routing needs a route field")
    unsupported = {
        "iceberg.tables.route-field": config.route_field,
        "iceberg.tables.default-id-columns / id-columns": config.default_id_columns or config.id_columns,
        "iceberg.tables.upsert-mode-enabled": config.upsert_mode,
        "iceberg.tables.cdc-field": config.cdc_field,
        "errors.tolerance=all": config.errors_tolerance == "all",
        "iceberg.tables.default-partition-by / partition-by": config.default_partition_by or config.partition_by,
    }
    for key, value in unsupported.items():
        if value:
            # Refuse rather than silently ignore: these change where records go or how they are written.
            raise ConfigError(f"{key}: not supported by this version of sinklab yet")
