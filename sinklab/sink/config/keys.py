"""Every configuration key of the sink, declared once: its name, type, default and documentation.

As Apache Iceberg's ``IcebergSinkConfig`` declares its keys in a Kafka Connect ``ConfigDef``, and
pyiceberg names its properties as module constants, this module is the one place a key is written:

- the key names, as constants (``COMMIT_INTERVAL_MS = "iceberg.control.commit.interval-ms"``), used
  wherever code names a key, and their defaults (``COMMIT_INTERVAL_MS_DEFAULT``);
- ``SINK_KEYS`` and ``MAINTENANCE_KEYS``: one ``Key`` per key or key family
  (``iceberg.table.<table>.route-regex``, ``iceberg.catalog.*``): its Connect type, default,
  documentation, who defines it (Kafka Connect, Iceberg's sink, sinklab), its group and importance,
  and the ``SinkConfig`` field it sets. ``sinklab.sink.config`` reads a config by this table, the
  Connect server's validate endpoint answers with it, and the docs' key reference (docs/sink.md) is made of it
  (``sinklab.sink.config.reference``: ``python -m sinklab.sink.config.reference`` rewrites it).

Documentation is plain text with code in backticks (the docs show them as code; Connect's validate
endpoint answers without them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Final, Literal

from sinklab.sink.wire.apache_events import APACHE_CONTROL_TOPIC as APACHE_CONTROL_TOPIC
from sinklab.sink.wire.control import CONTROL_TOPIC as CONTROL_TOPIC

ConfigType = Literal["BOOLEAN", "STRING", "INT", "LONG", "LIST", "CLASS", "PASSWORD"]
Owner = Literal["connect", "iceberg", "sinklab"]
Importance = Literal["HIGH", "MEDIUM", "LOW"]
# How a value is read when its type does not say it all (see sinklab.sink.config.READERS).
Parse = Literal["partitions", "regex", "optional", "column"]

# ---- Kafka Connect's own keys (ConnectorConfig, SinkConnectorConfig)
NAME: Final = "name"
CONNECTOR_CLASS: Final = "connector.class"
TASKS_MAX: Final = "tasks.max"
TASKS_MAX_DEFAULT: Final = 1
TOPICS: Final = "topics"
TOPICS_REGEX: Final = "topics.regex"
HEADER_CONVERTER: Final = "header.converter"
TRANSFORMS: Final = "transforms"
PREDICATES: Final = "predicates"
ERRORS_TOLERANCE: Final = "errors.tolerance"
ERRORS_TOLERANCE_DEFAULT: Final = "none"
ERRORS_DLQ_TOPIC: Final = "errors.deadletterqueue.topic.name"
ERRORS_DLQ_CONTEXT_HEADERS: Final = "errors.deadletterqueue.context.headers.enable"
ERRORS_DLQ_TABLE: Final = "errors.deadletterqueue.table.name"
ERRORS_LOG_ENABLE: Final = "errors.log.enable"
ERRORS_RETRY_TIMEOUT: Final = "errors.retry.timeout"
ERRORS_RETRY_DELAY_MAX_MS: Final = "errors.retry.delay.max.ms"
CONSUMER_OVERRIDE_PREFIX: Final = "consumer.override."
PRODUCER_OVERRIDE_PREFIX: Final = "producer.override."
ADMIN_OVERRIDE_PREFIX: Final = "admin.override."
AUTO_OFFSET_RESET: Final = CONSUMER_OVERRIDE_PREFIX + "auto.offset.reset"
AUTO_OFFSET_RESET_DEFAULT: Final = "earliest"  # Connect's for a sink's consumer (Kafka's own is latest)

# ---- converters: the value's and the key's, and the settings of each (value.converter.<setting>)
SIDES: Final = ("value", "key")
VALUE_CONVERTER: Final = "value.converter"
KEY_CONVERTER: Final = "key.converter"
CONVERTERS: Final = {"value": VALUE_CONVERTER, "key": KEY_CONVERTER}
SCHEMAS_ENABLE: Final = "schemas.enable"
SCHEMAS_ENABLE_DEFAULT: Final = True  # JsonConverter's
REGISTRY_URL: Final = "schema.registry.url"
CREDENTIALS_SOURCE: Final = "basic.auth.credentials.source"
USER_INFO: Final = "basic.auth.user.info"
SUBJECT_STRATEGY: Final = "subject.name.strategy"
SUBJECT_STRATEGIES: Final = {"value": "value.subject.name.strategy", "key": "key.subject.name.strategy"}


def converter_key(side: str, setting: str) -> str:
    """The key of a converter setting: ``value.converter.schema.registry.url``; the subject strategy's
    is ``value.subject.name.strategy`` (Confluent's name)."""
    return SUBJECT_STRATEGIES[side] if setting == SUBJECT_STRATEGY else f"{CONVERTERS[side]}.{setting}"


VALUE_SCHEMAS_ENABLE: Final = converter_key("value", SCHEMAS_ENABLE)
KEY_SCHEMAS_ENABLE: Final = converter_key("key", SCHEMAS_ENABLE)

# ---- Iceberg's sink (IcebergSinkConfig; upsert and CDC are Tabular's sink's, which Apache's left out)
TABLES: Final = "iceberg.tables"
TABLES_ROUTE_FIELD: Final = "iceberg.tables.route-field"
TABLES_DYNAMIC_ENABLED: Final = "iceberg.tables.dynamic-enabled"
TABLES_AUTO_CREATE_ENABLED: Final = "iceberg.tables.auto-create-enabled"
TABLES_AUTO_CREATE_PROPS_PREFIX: Final = "iceberg.tables.auto-create-props."
TABLES_WRITE_PROPS_PREFIX: Final = "iceberg.tables.write-props."
TABLES_DEFAULT_PARTITION_BY: Final = "iceberg.tables.default-partition-by"
TABLES_EVOLVE_SCHEMA_ENABLED: Final = "iceberg.tables.evolve-schema-enabled"
TABLES_SCHEMA_FORCE_OPTIONAL: Final = "iceberg.tables.schema-force-optional"
TABLES_SCHEMA_CASE_INSENSITIVE: Final = "iceberg.tables.schema-case-insensitive"
TABLES_DEFAULT_ID_COLUMNS: Final = "iceberg.tables.default-id-columns"
TABLES_UPSERT_MODE_ENABLED: Final = "iceberg.tables.upsert-mode-enabled"
TABLES_CDC_FIELD: Final = "iceberg.tables.cdc-field"
TABLES_DEFAULT_COMMIT_BRANCH: Final = "iceberg.tables.default-commit-branch"
COMMIT_BRANCH_DEFAULT: Final = "main"
# One table's settings: iceberg.table.<table>.<setting>.
TABLE_PREFIX: Final = "iceberg.table."
ROUTE_REGEX: Final = "route-regex"
PARTITION_BY: Final = "partition-by"
ID_COLUMNS: Final = "id-columns"
COMMIT_BRANCH: Final = "commit-branch"


def table_key(table: str, setting: str) -> str:
    """The key of one table's setting: ``iceberg.table.rpc.pizzas.route-regex``."""
    return f"{TABLE_PREFIX}{table}.{setting}"


CONTROL_TOPIC_KEY: Final = "iceberg.control.topic"
COMMIT_INTERVAL_MS: Final = "iceberg.control.commit.interval-ms"
COMMIT_INTERVAL_MS_DEFAULT: Final = 300_000
COMMIT_TIMEOUT_MS: Final = "iceberg.control.commit.timeout-ms"
COMMIT_TIMEOUT_MS_DEFAULT: Final = 30_000
COMMIT_THREADS: Final = "iceberg.control.commit.threads"
COMMIT_MAX_CONSECUTIVE_FAILURES: Final = "iceberg.control.commit.max-consecutive-failures"  # Apache's, from 1.12
COORDINATOR_TRANSACTIONAL_PREFIX: Final = "iceberg.coordinator.transactional.prefix"
COORDINATOR_KEEP_ALIVE_MS: Final = "iceberg.coordinator-executor-keep-alive-timeout-ms"
CONTROL_GROUP_ID_PREFIX: Final = "iceberg.control.group-id-prefix"
CONNECT_GROUP_ID: Final = "iceberg.connect.group-id"
CATALOG: Final = "iceberg.catalog"
CATALOG_DEFAULT: Final = "iceberg"
CATALOG_PREFIX: Final = "iceberg.catalog."
# Catalog properties (iceberg.catalog.<property>) the stack's catalog replaces when a sink runs on a stack.
CATALOG_CONNECTION_KEYS: Final = {"type", "uri", "warehouse", "token", "credential", "s3.endpoint",
                                  "s3.access-key-id", "s3.secret-access-key", "s3.path-style-access", "io-impl",
                                  "client.region"}
HADOOP_CONF_DIR: Final = "iceberg.hadoop-conf-dir"
HADOOP_PREFIX: Final = "iceberg.hadoop."
KAFKA_PREFIX: Final = "iceberg.kafka."

# ---- sinklab's own
VARIANT_COLUMNS: Final = "sinklab.tables.variant-columns"
VARIANT_VALUE: Final = "sinklab.tables.variant-value"
CYCLE_MAX_RECORDS: Final = "sinklab.cycle.max-records"
CYCLE_MAX_RECORDS_DEFAULT: Final = 5_000_000
CYCLE_MAX_TASKS: Final = "sinklab.cycle.max-tasks"
COMMIT_MAX_RECORDS: Final = "sinklab.commit.max-records"
COMMIT_MAX_BYTES: Final = "sinklab.commit.max-bytes"
COMMIT_TARGET_LAG_MS: Final = "sinklab.commit.target-lag-ms"
RETRY_TIMEOUT_MS: Final = "sinklab.retry.timeout-ms"
RETRY_TIMEOUT_MS_DEFAULT: Final = 600_000
FLATTEN: Final = "sinklab.flatten"
TRANSFORMS_MODULES: Final = "sinklab.transforms.modules"
FLATTEN_SEPARATOR: Final = "sinklab.flatten.separator"
FLATTEN_SEPARATOR_DEFAULT: Final = "_"
MAINTENANCE_PREFIX: Final = "sinklab.maintenance."
COMPACT_EVERY_COMMITS: Final = MAINTENANCE_PREFIX + "compact.every-commits"
COMPACT_SMALL_FILES: Final = MAINTENANCE_PREFIX + "compact.small-files"
COMPACT_TARGET_FILE_SIZE_BYTES: Final = MAINTENANCE_PREFIX + "compact.target-file-size-bytes"
COMPACT_REWRITE_MANIFESTS: Final = MAINTENANCE_PREFIX + "compact.rewrite-manifests"
EXPIRE_OLDER_THAN: Final = MAINTENANCE_PREFIX + "expire.older-than"
EXPIRE_RETAIN_LAST: Final = MAINTENANCE_PREFIX + "expire.retain-last"
EXPIRE_EVERY_COMMITS: Final = MAINTENANCE_PREFIX + "expire.every-commits"
ORPHANS_OLDER_THAN: Final = MAINTENANCE_PREFIX + "orphans.older-than"

OWNERS: Final = {"connect": "Kafka Connect", "iceberg": "Iceberg", "sinklab": "sinklab"}
_PLACEHOLDER = re.compile(r"<\w+>|\*$")


@dataclass(frozen=True)
class Key:
    """One key, or a family of keys (``name`` with a ``<placeholder>`` or a trailing ``*``).

    ``field`` is the ``SinkConfig`` field the key sets (a family's: the dict its entries fill, by the
    part of the key the placeholder stands for); None when the key is read with the keys it goes with
    (the converters, the transforms), by Kafka Connect only, or not at all (``ignored``: accepted, and
    why it is not used). A ``sinklab.maintenance.*`` key's ``field`` is its ``MaintenancePolicy`` field.
    The type says how a value is read (``minimum``, ``choices``), unless ``parse`` does."""

    name: str
    type: ConfigType
    owner: Owner
    group: str
    doc: str
    default: str | int | bool | None = None
    field: str | None = None
    parse: Parse | None = None
    minimum: int = 0
    choices: tuple[str, ...] = ()
    ignored: str | None = None
    importance: Importance = "MEDIUM"
    required: bool = False
    # Older spellings of the key, which Tabular's sink documented before Apache took it in (its
    # IcebergSinkConfig until 0.5): read as this key, with a note that names both.
    older: tuple[str, ...] = ()

    @cached_property
    def _pattern(self) -> re.Pattern[str] | None:
        parts = _PLACEHOLDER.split(self.name)
        return re.compile("(.*)".join(re.escape(p) for p in parts)) if len(parts) > 1 else None

    @property
    def family(self) -> bool:
        return self._pattern is not None

    def current(self, key: str) -> str | None:
        """This key's current spelling of ``key`` when ``key`` is one of its older spellings (a family's with
        the same entry: ``iceberg.table.t.routeRegex`` -> ``iceberg.table.t.route-regex``); else None."""
        for old in self.older:
            parts = _PLACEHOLDER.split(old)
            if len(parts) == 1:
                if key == old:
                    return self.name
                continue
            match = re.compile("(.*)".join(re.escape(p) for p in parts)).fullmatch(key)
            placeholder = _PLACEHOLDER.search(self.name)
            if match is not None and placeholder is not None:
                return self.name.replace(placeholder.group(0), match.group(1), 1)
        return None

    def entry(self, key: str) -> str | None:
        """For a family, the part of ``key`` its placeholder stands for (the table, the property);
        None when ``key`` is not of the family."""
        match = self._pattern.fullmatch(key) if self._pattern is not None else None
        return match.group(1) if match is not None else None

    @property
    def default_text(self) -> str | None:
        """The default as Connect shows it: a string, or None."""
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return None if self.default is None else str(self.default)

    @property
    def plain_doc(self) -> str:
        """The documentation as Connect answers it: without backticks, saying why an ignored key is not used."""
        doc = f"{self.doc} Accepted, not used: {self.ignored}." if self.ignored else self.doc
        if self.older:
            doc += f" Also read as Tabular's older spelling {', '.join(self.older)}."
        return doc.replace("`", "")


_CONNECTION = ", ".join(f"`{k}`" for k in sorted(CATALOG_CONNECTION_KEYS))

SINK_KEYS: tuple[Key, ...] = (
    # ---- Common
    Key(NAME, "STRING", "connect", "Common", required=True, importance="HIGH",
        doc="The connector's name: its consumer group is `connect-<name>` and its transactional id `sinklab-<name>` "
            "(a newer instance of the same name fences an older one)."),
    Key(CONNECTOR_CLASS, "STRING", "connect", "Common", required=True, importance="HIGH",
        ignored="sinklab is the connector",
        doc="The connector's class: Iceberg's sink, by Apache's or Tabular's class name (or its simple name); the "
            "Connect server checks it."),
    Key(TASKS_MAX, "INT", "connect", "Common", default=TASKS_MAX_DEFAULT, minimum=1, importance="HIGH",
        ignored="Spark decides read parallelism from the partitions and cores",
        doc="The tasks Connect shows for the connector (at least 1); they share one commit cycle."),
    Key(TOPICS, "LIST", "connect", "Common", default="", field="topics", importance="HIGH",
        doc="The topics to read, comma-separated (or `topics.regex`, not both)."),
    Key(TOPICS_REGEX, "STRING", "connect", "Common", default="", field="topics_regex", parse="regex",
        importance="HIGH",
        doc="A regular expression of the topics to read, evaluated every cycle: a new daily topic "
            "(`logs.20240103`) joins without a restart."),
    # ---- Routing
    Key(TABLES, "LIST", "iceberg", "Routing", field="tables", importance="HIGH",
        doc="The destination tables, comma-separated, each `namespace.table`; without a route field every record "
            "goes to each of them."),
    Key(TABLES_ROUTE_FIELD, "STRING", "iceberg", "Routing", older=("iceberg.tables.routeField",), field="route_field",
        doc="The record field that routes records: matched by each table's `route-regex`, or naming the table "
            "with dynamic routing."),
    Key(table_key("<table>", ROUTE_REGEX), "STRING", "iceberg", "Routing",
        older=("iceberg.table.<table>.routeRegex",), field="route_regex",
        doc="The route-field values the table takes, as a regular expression (static fan-out): a record may go to "
            "several tables; records no table takes are skipped and counted (`no-table`)."),
    Key(TABLES_DYNAMIC_ENABLED, "BOOLEAN", "iceberg", "Routing",
        older=("iceberg.tables.dynamic.enabled",), default=False, field="dynamic_enabled",
        doc="The route field (lower-cased) names the table; a missing table is created (auto-create) or its records "
            "are skipped and counted."),
    # ---- Tables
    Key(TABLES_AUTO_CREATE_ENABLED, "BOOLEAN", "iceberg", "Tables", default=False, field="auto_create",
        doc="Create missing tables, typed from the Connect schema (the envelope's, or the registry's) or by JSON "
            "inference."),
    Key(TABLES_DEFAULT_PARTITION_BY, "STRING", "iceberg", "Tables", field="default_partition_by", parse="partitions",
        doc="The partition spec of the tables auto-create makes, comma-separated: columns (identity), "
            "`year/month/day/hour(col)`, `bucket(N, col)`, `truncate(W, col)`; a string column under a time "
            "transform becomes a timestamp when its values read as one."),
    Key(table_key("<table>", PARTITION_BY), "STRING", "iceberg", "Tables", field="partition_by", parse="partitions",
        doc="The table's own partition spec, as `iceberg.tables.default-partition-by`."),
    Key(TABLES_AUTO_CREATE_PROPS_PREFIX + "*", "STRING", "iceberg", "Tables", field="auto_create_props",
        doc="Properties of the tables auto-create makes (`iceberg.tables.auto-create-props.format-version`, ...)."),
    Key(TABLES_WRITE_PROPS_PREFIX + "*", "STRING", "iceberg", "Tables",
        ignored="Spark's Iceberg writer reads a table's write properties from the table: set them with "
                "`iceberg.tables.auto-create-props.*` or `ALTER TABLE ... SET TBLPROPERTIES`",
        doc="Iceberg write properties for the sink's data files (`write.parquet.compression-codec`, ...)."),
    Key(TABLES_EVOLVE_SCHEMA_ENABLED, "BOOLEAN", "iceberg", "Tables", default=False, field="evolve_schema",
        doc="Add columns for new fields (nested too), widen int to long, float to double and decimal precision, "
            "relax NOT NULL when a null arrives; without it unknown fields are ignored."),
    Key(TABLES_SCHEMA_FORCE_OPTIONAL, "BOOLEAN", "iceberg", "Tables", default=False, field="schema_force_optional",
        doc="Make every column auto-create or evolution adds optional, whatever the schema says."),
    Key(TABLES_SCHEMA_CASE_INSENSITIVE, "BOOLEAN", "iceberg", "Tables", default=False,
        field="schema_case_insensitive", doc="Match record fields to table columns ignoring case."),
    Key(VARIANT_COLUMNS, "LIST", "sinklab", "Tables", field="variant_columns",
        doc="Fields that land as VARIANT columns, each value as it came, read with `variant_get`: for JSON whose "
            "shape changes too often for evolution (Spark 4, format v3; auto-create makes v3 tables)."),
    Key(VARIANT_VALUE, "STRING", "sinklab", "Tables", field="variant_value", parse="column",
        doc="A column that holds each whole value as one VARIANT (format v3; not with upsert/CDC, which need id "
            "columns); set this or `sinklab.tables.variant-columns`, not both."),
    # ---- Row-level changes
    Key(TABLES_UPSERT_MODE_ENABLED, "BOOLEAN", "iceberg", "Row-level changes",
        older=("iceberg.tables.upsertModeEnabled",), default=False, field="upsert_mode",
        doc="Each record replaces the row its id columns name, as a merge-on-read MERGE (format v2); the last change "
            "per id in a cycle wins, and a tombstone deletes the row its key names (a key of Tabular's sink, which "
            "Apache's left out)."),
    Key(TABLES_CDC_FIELD, "STRING", "iceberg", "Row-level changes",
        older=("iceberg.tables.cdcField",), field="cdc_field",
        doc="The record field giving each change's operation, read by its first letter (`I`, `U`, `D`; Debezium's "
            "`c` and `r` are inserts) and applied by id as a merge-on-read MERGE (Tabular's sink's key)."),
    Key(TABLES_DEFAULT_ID_COLUMNS, "LIST", "iceberg", "Row-level changes", field="default_id_columns",
        doc="The id columns of upsert and CDC, comma-separated; a tombstone names its row by a JSON object of them "
            "or the single id's value."),
    Key(table_key("<table>", ID_COLUMNS), "LIST", "iceberg", "Row-level changes", field="id_columns",
        doc="The table's own id columns, as `iceberg.tables.default-id-columns`."),
    # ---- Commits
    Key(COMMIT_INTERVAL_MS, "INT", "iceberg", "Commits",
        older=("iceberg.control.commitIntervalMs",), default=COMMIT_INTERVAL_MS_DEFAULT, minimum=100,
        field="commit_interval_ms", importance="HIGH",
        doc="A cycle starts this long after the previous one started, or at once when that one took longer; the "
            "upper bound when a `sinklab.commit.*` key starts cycles sooner."),
    Key(COMMIT_TIMEOUT_MS, "INT", "iceberg", "Commits",
        older=("iceberg.control.commitTimeoutMs",), default=COMMIT_TIMEOUT_MS_DEFAULT, minimum=1000,
        field="commit_timeout_ms",
        doc="A cycle whose table commits take longer fails (`CommitTimeout`): its Kafka transaction is aborted and "
            "the next cycle resumes from the tables' recorded offsets."),
    Key(CONTROL_TOPIC_KEY, "STRING", "iceberg", "Commits", default=CONTROL_TOPIC, field="control_topic",
        doc="The commit log: each cycle's `commit-start` and `commit-complete` events (and maintenance runs), in the "
            "cycle's Kafka transaction. Not Apache's sink's default `control-iceberg`: that sink's tasks fail on any "
            "record of its control topic that is not its own event, so a sink refuses a topic that carries them."),
    Key(COMMIT_THREADS, "INT", "iceberg", "Commits",
        older=("iceberg.control.commitThreads",), ignored="tables are committed by the driver",
        doc="Iceberg's coordinator threads for table commits."),
    Key(COMMIT_MAX_CONSECUTIVE_FAILURES, "INT", "iceberg", "Commits", default=1,
        ignored=f"a cycle that fails for a transient reason is tried again until `{RETRY_TIMEOUT_MS}`; any other "
                "failure stops the sink at once",
        doc="How many commits in a row may fail before Apache's coordinator stops (Iceberg 1.12)."),
    Key(COORDINATOR_TRANSACTIONAL_PREFIX, "STRING", "iceberg", "Commits", importance="LOW",
        ignored="the transactional id is `sinklab-<name>`, one per sink",
        doc="A prefix of the transactional id of Apache's coordinator."),
    Key(COORDINATOR_KEEP_ALIVE_MS, "LONG", "iceberg", "Commits", default=120_000, importance="LOW",
        ignored="the driver commits, with no executor of its own to keep alive",
        doc="How long Apache's coordinator keeps its commit executor's idle threads."),
    Key(CONTROL_GROUP_ID_PREFIX, "STRING", "iceberg", "Commits", default="cg-control-", importance="LOW",
        ignored="sinklab has no worker group on the control topic",
        doc="The prefix of the consumer groups of Iceberg's workers on the control topic."),
    Key(TABLES_DEFAULT_COMMIT_BRANCH, "STRING", "iceberg", "Commits", default=COMMIT_BRANCH_DEFAULT,
        field="default_commit_branch", doc="The branch tables are committed to."),
    Key(table_key("<table>", COMMIT_BRANCH), "STRING", "iceberg", "Commits", field="commit_branch",
        doc="The table's own branch, as `iceberg.tables.default-commit-branch`."),
    Key(COMMIT_MAX_RECORDS, "INT", "sinklab", "Commits", minimum=1, field="commit_max_records",
        doc="Start a cycle early once this many records wait in the source partitions past the last cycle's end "
            "(the sink looks every 100 ms while it waits; one cycle at a time, whatever starts it)."),
    Key(COMMIT_MAX_BYTES, "LONG", "sinklab", "Commits", minimum=1, field="commit_max_bytes",
        doc="Start a cycle early once this many key and value bytes wait, counted at the record size the sink has "
            "read so far (until its first records, only the clock and `sinklab.commit.max-records` start one)."),
    Key(COMMIT_TARGET_LAG_MS, "INT", "sinklab", "Commits", minimum=100, field="commit_target_lag_ms",
        doc="The sink chooses each interval so that visibility latency (Kafka timestamp to snapshot published) "
            "stays under this target with as few commits as possible; `status().pace` and the dashboard show the "
            "interval chosen, and say so when the target is below what back-to-back cycles achieve."),
    Key(CYCLE_MAX_RECORDS, "INT", "sinklab", "Commits", default=CYCLE_MAX_RECORDS_DEFAULT, minimum=1,
        field="max_records_per_cycle",
        doc="At most this many records per cycle: a backlog is drained in cycles of this size; a cycle that does "
            "not fit in Spark's memory fails the sink with `CycleTooLarge`, naming its records, the driver memory "
            "and this key."),
    Key(CYCLE_MAX_TASKS, "INT", "sinklab", "Commits", minimum=1, field="max_tasks_per_cycle",
        doc="At most this many Spark tasks read and write a cycle (each writes one data file per table); unset, one "
            "per core of the session. Fewer leaves cores to other jobs on the same Spark: fresh reads need not wait "
            "for a long cycle to end (docs/fresh-reads.md)."),
    # ---- Catalog
    Key(CATALOG, "STRING", "iceberg", "Catalog", default=CATALOG_DEFAULT, field="catalog_name", importance="HIGH",
        doc="The catalog's name, which also works in Spark (`<catalog>.<namespace>.<table>`)."),
    Key(CATALOG_PREFIX + "*", "STRING", "iceberg", "Catalog", field="catalog_properties", importance="HIGH",
        doc="The catalog's properties (`type`, `uri`, `warehouse`, credentials, `s3.*`, ...); on a stack, the "
            f"stack's catalog replaces its connection ones ({_CONNECTION}), so a config written for Docker or "
            "production runs there."),
    Key(HADOOP_CONF_DIR, "STRING", "iceberg", "Catalog", ignored="Hadoop settings come from the Spark session",
        doc="A folder of Hadoop configuration files for Iceberg's sink."),
    Key(HADOOP_PREFIX + "*", "STRING", "iceberg", "Catalog", ignored="Hadoop settings come from the Spark session",
        doc="Hadoop configuration properties for Iceberg's sink (`iceberg.hadoop.fs.s3a.endpoint`, ...)."),
    # ---- Kafka
    Key(KAFKA_PREFIX + "*", "STRING", "iceberg", "Kafka", field="kafka_properties",
        doc="Kafka client properties of the sink's consumer and transactional producer "
            "(`iceberg.kafka.bootstrap.servers`, ...)."),
    Key(AUTO_OFFSET_RESET, "STRING", "connect", "Kafka", default=AUTO_OFFSET_RESET_DEFAULT,
        choices=("earliest", "latest"), field="auto_offset_reset",
        doc="Where the sink starts on partitions its group has no offsets for."),
    Key(CONSUMER_OVERRIDE_PREFIX + "*", "STRING", "connect", "Kafka", field="kafka_properties",
        doc="Kafka client properties, as `iceberg.kafka.*`."),
    Key(PRODUCER_OVERRIDE_PREFIX + "*", "STRING", "connect", "Kafka", field="producer_properties",
        doc="Kafka Connect's settings of a sink's dead-letter producer. sinklab's clients share one set of "
            "settings: of these it reads the login (`security.protocol`, `sasl.*`, `ssl.*`) where "
            "`consumer.override.*` and `iceberg.kafka.*` give none (docs/production.md)."),
    Key(ADMIN_OVERRIDE_PREFIX + "*", "STRING", "connect", "Kafka", field="producer_properties",
        doc="Kafka Connect's settings of a sink's admin client: read as `producer.override.*` is."),
    Key(CONNECT_GROUP_ID, "STRING", "iceberg", "Kafka", field="group_id", importance="LOW",
        doc="The consumer group whose offsets each cycle commits in its Kafka transaction (default "
            "`connect-<name>`, Connect's own); not to be set under normal conditions."),
    # ---- Converters
    Key(VALUE_CONVERTER, "CLASS", "connect", "Converters",
        doc="How values are read: `JsonConverter` (Connect's envelope unless `schemas.enable=false`), "
            "`StringConverter` (JSON text), `AvroConverter`, `JsonSchemaConverter` or `ProtobufConverter` "
            "(Confluent's wire format, with a schema registry), Apicurio's `AvroConverter` (its frame, with Apicurio "
            "Registry); other converters are refused."),
    Key(VALUE_SCHEMAS_ENABLE, "BOOLEAN", "connect", "Converters", default=SCHEMAS_ENABLE_DEFAULT,
        field="schemas_enable",
        doc="With `JsonConverter`: each value is Connect's envelope (`schema`, `payload`) and tables are typed from "
            "its schema; false: plain JSON, typed by inference."),
    Key(converter_key("value", REGISTRY_URL), "STRING", "connect", "Converters",
        doc="The schema registry of `AvroConverter`, `JsonSchemaConverter` and `ProtobufConverter` (Confluent's "
            "API; the first of a "
            "comma-separated list); on a stack with a registry it may be left out."),
    Key(converter_key("value", CREDENTIALS_SOURCE), "STRING", "connect", "Converters", default="URL",
        choices=("URL", "USER_INFO"),
        doc="Where the registry's credentials come from: the URL itself, or `basic.auth.user.info`."),
    Key(converter_key("value", USER_INFO), "PASSWORD", "connect", "Converters",
        doc="The registry's `user:password`, with `basic.auth.credentials.source=USER_INFO`."),
    Key(converter_key("value", SUBJECT_STRATEGY), "CLASS", "connect", "Converters", default="TopicNameStrategy",
        doc="How subjects are named: `TopicNameStrategy` (`<topic>-value`, whose versions the sink reads when it "
            "first meets a topic, so that even its first cycle knows their ids), `RecordNameStrategy` or "
            "`TopicRecordNameStrategy`."),
    Key(converter_key("value", "apicurio.registry.url"), "STRING", "connect", "Converters",
        doc="The native API of Apicurio's `AvroConverter` (`.../apis/registry/v2`); on a stack with a registry it "
            "may be left out. With it: `apicurio.registry.use-id`, `.headers.enabled`, `.as-confluent`, "
            "`.id-handler`, the header names, `apicurio.auth.username`/`password`, `apicurio.registry.request."
            "headers.*` (docs/sink.md)."),
    *(Key(converter_key(side, name), "PASSWORD", "connect", "Converters", doc=doc) for side in SIDES
      for name, doc in (("apicurio.auth.password", "With Apicurio's `AvroConverter`: the registry's password, with "
                                                   "`apicurio.auth.username` (basic authentication)."),
                        ("apicurio.registry.request.headers.*", "With Apicurio's `AvroConverter`: HTTP headers sent "
                                                                "to the registry (an `Authorization`, say)."))),
    Key(VALUE_CONVERTER + ".*", "STRING", "connect", "Converters",
        doc="The value converter's other settings (`value.converter.subject.name.strategy` is "
            "`value.subject.name.strategy`); others are reported and ignored."),
    Key(KEY_CONVERTER, "CLASS", "connect", "Converters",
        doc="How keys are read: `AvroConverter`, `JsonSchemaConverter` and `ProtobufConverter` decode them with the "
            "registry (a record "
            "whose key does not decode is `undecodable`), `JsonConverter` reads Connect's envelope; otherwise keys "
            "are read as UTF-8 text."),
    Key(KEY_SCHEMAS_ENABLE, "BOOLEAN", "connect", "Converters", default=SCHEMAS_ENABLE_DEFAULT,
        doc="With `key.converter=JsonConverter`: a key is Connect's envelope and names its row by its payload, as "
            "Debezium writes keys; false: the key's JSON itself."),
    Key(converter_key("key", REGISTRY_URL), "STRING", "connect", "Converters",
        doc="The keys' schema registry (default: the values')."),
    Key(converter_key("key", CREDENTIALS_SOURCE), "STRING", "connect", "Converters", default="URL",
        choices=("URL", "USER_INFO"), doc="As `value.converter.basic.auth.credentials.source`, for keys."),
    Key(converter_key("key", USER_INFO), "PASSWORD", "connect", "Converters",
        doc="As `value.converter.basic.auth.user.info`, for keys."),
    Key(converter_key("key", SUBJECT_STRATEGY), "CLASS", "connect", "Converters", default="TopicNameStrategy",
        doc="As `value.subject.name.strategy`, for keys (`<topic>-key`)."),
    Key(KEY_CONVERTER + ".*", "STRING", "connect", "Converters",
        doc="The key converter's other settings; reported and ignored where keys are read as text."),
    Key(HEADER_CONVERTER, "CLASS", "connect", "Converters", default="org.apache.kafka.connect.storage."
        "SimpleHeaderConverter", importance="LOW", ignored="headers are kept as bytes",
        doc="How Connect reads headers."),
    # ---- Transforms
    Key(TRANSFORMS, "LIST", "connect", "Transforms", default="", importance="LOW",
        doc="The aliases of the transforms to run, in order, as Spark expressions on the records: Kafka Connect's "
            "own (InsertField, ReplaceField, MaskField, Cast, TimestampConverter, ExtractField, HoistField, "
            "ValueToKey, Flatten, RegexRouter, TimestampRouter, Filter, DropHeaders, InsertHeader, HeaderFrom, "
            "SetSchemaMetadata), Iceberg's (`KafkaMetadataTransform`, `DebeziumTransform`, `CopyValue`, "
            "`DmsTransform`, `JsonToMapTransform`, `MongoDebeziumTransform`: its documents in Python, a batch "
            "at a time) and Debezium's `ExtractNewRecordState`; any other class as "
            "the Python function registered under its name (`sinklab.transforms.modules`), or it is refused "
            "before the sink starts "
            "(docs/connect.md, \"Transforms\")."),
    Key(TRANSFORMS + ".<alias>.type", "CLASS", "connect", "Transforms", importance="LOW",
        doc="The transform's class, with its `$Key` or `$Value` form where it has one."),
    Key(TRANSFORMS + ".*", "STRING", "connect", "Transforms", importance="LOW",
        doc="A transform's settings, `transforms.<alias>.<setting>`, as its class documents them, and "
            "`predicate` and `negate`; a setting the class does not have changes nothing (noted)."),
    Key(PREDICATES, "LIST", "connect", "Transforms", default="", importance="LOW",
        doc="The aliases of the predicates transforms name: Kafka Connect's `TopicNameMatches`, `HasHeaderKey`, "
            "`RecordIsTombstone`."),
    Key(PREDICATES + ".<alias>.type", "CLASS", "connect", "Transforms", importance="LOW",
        doc="The predicate's class."),
    Key(PREDICATES + ".*", "STRING", "connect", "Transforms", importance="LOW",
        doc="A predicate's settings: `pattern` (TopicNameMatches), `name` (HasHeaderKey)."),
    Key(TRANSFORMS_MODULES, "LIST", "sinklab", "Transforms", default="", importance="LOW",
        doc="Python modules imported before the transforms are read, so that the functions they register "
            "(`sinklab.sink.register_transform`) run the classes a chain names that sinklab has no expressions for "
            "(docs/connect.md, \"A transform of your own\")."),
    Key(FLATTEN, "BOOLEAN", "sinklab", "Transforms", default=False, importance="LOW",
        doc="Flatten nested fields into columns after the transforms, their names joined by "
            "`sinklab.flatten.separator`."),
    Key(FLATTEN_SEPARATOR, "STRING", "sinklab", "Transforms", default=FLATTEN_SEPARATOR_DEFAULT, importance="LOW",
        doc="The separator of flattened names; setting it turns flattening on."),
    # ---- Error Handling
    Key(ERRORS_TOLERANCE, "STRING", "connect", "Error Handling", default=ERRORS_TOLERANCE_DEFAULT,
        choices=("none", "all"), field="errors_tolerance",
        doc="`none`: a record the sink cannot write stops its cycle before it commits, naming topic, partition, "
            "offset, table and reason; `all`: it is dead-lettered inside the cycle's transaction."),
    Key(ERRORS_DLQ_TOPIC, "STRING", "connect", "Error Handling", default="", field="dlq_topic", parse="optional",
        doc="The dead-letter topic, needed with `errors.tolerance=all`: each bad record with its original key, "
            "value and headers."),
    Key(ERRORS_DLQ_TABLE, "STRING", "sinklab", "Error Handling", default="", field="dlq_table", parse="optional",
        doc="The dead-letter table (`namespace.table`, created when missing), with or instead of the topic: each "
            "bad record with where it came from, why and where it was going, published in the cycle that read it "
            "and under the same protocol as the data (docs/dead-letters.md)."),
    Key(ERRORS_DLQ_CONTEXT_HEADERS, "BOOLEAN", "connect", "Error Handling", default=False,
        field="dlq_context_headers", doc="Add Connect's context headers (where a record came from, and why) to "
                                         "dead letters."),
    Key(ERRORS_LOG_ENABLE, "BOOLEAN", "connect", "Error Handling", default=False, field="errors_log",
        doc="Log each dead-lettered record."),
    Key(ERRORS_RETRY_TIMEOUT, "LONG", "connect", "Error Handling", default=0,
        ignored="Spark retries failed tasks itself", doc="How long Connect retries a failed operation."),
    Key(ERRORS_RETRY_DELAY_MAX_MS, "LONG", "connect", "Error Handling", default=60_000,
        ignored="Spark retries failed tasks itself", doc="The longest wait between Connect's retries."),
    Key(RETRY_TIMEOUT_MS, "INT", "sinklab", "Error Handling", default=RETRY_TIMEOUT_MS_DEFAULT, minimum=-1,
        field="retry_timeout_ms",
        doc="How long a running sink keeps trying cycles that fail because the broker, the catalog or the object "
            "store is away for now, before it is FAILED (`-1` forever, `0` never)."),
)

# Read by sinklab.maintenance.policy from the keys the sink passes on as given (SinkConfig.maintenance_keys);
# each sets the MaintenancePolicy field named. Everything is off by default.
MAINTENANCE_KEYS: tuple[Key, ...] = (
    Key(COMPACT_EVERY_COMMITS, "INT", "sinklab", "Maintenance", default=0, field="compact_every_commits",
        doc="Compact a table after every N of its commits."),
    Key(COMPACT_SMALL_FILES, "INT", "sinklab", "Maintenance", default=0, field="compact_small_files",
        doc="Compact a table also when one of its partitions holds more than M small files (under 3/4 of the "
            "target size; checked only when enough files arrived to make it possible)."),
    Key(COMPACT_TARGET_FILE_SIZE_BYTES, "LONG", "sinklab", "Maintenance", field="target_file_size_bytes",
        doc="The size compaction writes files of (default: the table's `write.target-file-size-bytes`)."),
    Key(COMPACT_REWRITE_MANIFESTS, "BOOLEAN", "sinklab", "Maintenance", default=True, field="rewrite_manifests",
        doc="Rewrite the manifests after each compaction."),
    Key(EXPIRE_OLDER_THAN, "STRING", "sinklab", "Maintenance", field="expire_older_than_ms",
        doc="With each compaction, expire snapshots older than this (`30s`, `10m`, `2h`, `7d`; `0s`: all but what "
            "recovery reads)."),
    Key(EXPIRE_RETAIN_LAST, "INT", "sinklab", "Maintenance", default=1, field="expire_retain_last",
        doc="Keep at least this many snapshots."),
    Key(EXPIRE_EVERY_COMMITS, "INT", "sinklab", "Maintenance", default=0, field="expire_every_commits",
        doc="Expire also without compaction, after every N commits of a table."),
    Key(ORPHANS_OLDER_THAN, "STRING", "sinklab", "Maintenance", field="orphans_older_than_ms",
        doc="With each expiry, clean orphan files and dead staging branches this old (the safety age)."),
)

KEYS: tuple[Key, ...] = SINK_KEYS + MAINTENANCE_KEYS
_BY_NAME = {k.name: k for k in KEYS if not k.family}
# The most specific family first: transforms.<alias>.type before transforms.*.
_FAMILIES = sorted((k for k in KEYS if k.family), key=lambda k: -len(_PLACEHOLDER.sub("", k.name)))


def current_spelling(key: str) -> str | None:
    """The current spelling of ``key`` when it is an older one (Tabular's sink's); else None."""
    return next((c for k in KEYS if k.older and (c := k.current(key)) is not None), None)


def lookup(key: str) -> Key | None:
    """The declaration of ``key``: its own, else that of the most specific family it belongs to."""
    return _BY_NAME.get(key) or next((f for f in _FAMILIES if f.entry(key) is not None), None)
