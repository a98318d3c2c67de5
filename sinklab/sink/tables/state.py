"""Destination tables: what the sink knows of them (snapshot, recorded offsets) and creating them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import NoSuchTableError
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.exceptions import ConfigError, TableUnfit
from sinklab.sink.config import keys
from sinklab.sink.config.sink_config import PartitionField, SinkConfig
from sinklab.sink.wire.offsets import Offsets, from_property

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

SINK_PROP = "sinklab.sink"
OFFSETS_PROP = "sinklab.offsets"
COMMIT_ID_PROP = "sinklab.commit-id"
VTTS_PROP = "sinklab.vtts"
REPLAY_PROP = "sinklab.replay"  # a replay's snapshot: which replay, of which dead letters (sinklab.sink.replay)
# A table property per sink that writes the table: its shareable settings (SinkConfig.shareable), so a
# fresh read (sinklab.fresh) converts the table's Kafka tail as that sink does, with no config at hand.
SETTINGS_PREFIX = "sinklab.settings."
# How far back through snapshots of other writers (compaction, users) to look for our last commit.
MAX_ANCESTORS = 1000


@dataclass
class TableState:
    """A table as the cycle planned against it: the branch head and what this sink recorded."""

    name: str
    branch: str
    exists: bool
    snapshot_id: int | None = None
    offsets: Offsets = field(default_factory=dict)
    table: Table | None = None


def identifier(name: str) -> tuple[str, ...]:
    return tuple(name.split("."))


def load_state(catalog: Catalog, name: str, branch: str, sink: str) -> TableState:
    try:
        table = catalog.load_table(identifier(name))
    except NoSuchTableError:
        return TableState(name=name, branch=branch, exists=False)
    ref = table.metadata.refs.get(branch)
    snapshot_id = ref.snapshot_id if ref else None
    return TableState(name=name, branch=branch, exists=True, snapshot_id=snapshot_id,
                      offsets=recorded_offsets(table, snapshot_id, sink), table=table)


def _summaries(table: Table, snapshot_id: int | None) -> Iterator[dict[str, str]]:
    """The summary properties of the snapshot and its ancestors, newest first (at most MAX_ANCESTORS)."""
    seen = 0
    while snapshot_id is not None and seen < MAX_ANCESTORS:
        snap = table.metadata.snapshot_by_id(snapshot_id)
        if snap is None:
            return
        yield snap.summary.additional_properties if snap.summary else {}
        snapshot_id = snap.parent_snapshot_id
        seen += 1


def recorded_offsets(table: Table, snapshot_id: int | None, sink: str) -> Offsets:
    """The offsets in this sink's newest commit on the branch (other writers' snapshots carry none)."""
    for props in _summaries(table, snapshot_id):
        if props.get(SINK_PROP) == sink and OFFSETS_PROP in props:
            return from_property(props[OFFSETS_PROP])
    return {}


def replay_landed(state: TableState, replay: str) -> bool:
    """Whether the replay ``replay`` already published to the table (on the branch's history)."""
    assert state.table is not None
    return any(props.get(REPLAY_PROP) == replay for props in _summaries(state.table, state.snapshot_id))


def ensure_properties(table: Table, extra: dict[str, str]) -> None:
    """The table's properties the sink needs, set in one commit when one differs: WAP (row-level changes
    are staged through ``spark.wap.branch``, which Iceberg only honours with WAP enabled) and ``extra``
    (merge-on-read for row-level changes, the sink's shareable settings)."""
    wanted = {"write.wap.enabled": "true", **extra}
    if any(table.properties.get(k) != v for k, v in wanted.items()):
        with table.transaction() as txn:
            txn.set_properties(wanted)


# ---- creating tables from records
def infer_schema(spark: SparkSession, records: DataFrame, schemas_enable: bool) -> T.StructType:
    """The schema of prepared records: their Connect schemas when the envelope is there, else JSON
    inference (integer→long, float→double, boolean, string, object→struct, array→list), in
    first-seen order. Without the envelope every column is optional."""
    records = records.where(F.col("value").isNotNull())  # a tombstone's ids come from its key, untyped
    if schemas_enable:
        texts = [r[0] for r in records.where(F.col("_schema").isNotNull()).select("_schema").distinct().collect()]
        merged = T.StructType([])
        for text in texts:
            merged = union_schema(merged, connect_to_spark(json.loads(text)))
        return merged
    payloads = records.select("_payload")
    inferred = json_schema(spark, payloads)
    inferred = T.StructType([f for f in inferred.fields if f.name != "_corrupt_record"])
    first = payloads.first()
    order = list(json.loads(first[0]).keys()) if first else []
    rank = {name: i for i, name in enumerate(order)}
    return all_optional(T.StructType(sorted(inferred.fields, key=lambda f: rank.get(f.name, len(rank)))))


def with_variants(schema: T.StructType, columns: list[str], whole_value: str | None = None) -> T.StructType:
    """``schema`` with the named top-level fields as VARIANT (their shape is not inferred, so it can
    change from record to record); with ``whole_value``, one VARIANT column holding each record's value."""
    if whole_value:
        return T.StructType([T.StructField(whole_value, T.VariantType(), True)])
    return T.StructType([T.StructField(f.name, T.VariantType(), True) if f.name in columns else f
                         for f in schema.fields])


def json_schema(spark: SparkSession, texts: DataFrame) -> T.StructType:
    """Spark's JSON schema inference over a string column, kept in the JVM: PySpark's
    ``read.json`` takes only an RDD, which would ship every record through Python."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    strings = getattr(texts._jdf, "as")(jvm.org.apache.spark.sql.Encoders.STRING())  # "as" is a Python keyword
    reader = spark._jsparkSession.read().option("primitivesAsString", "false").option("prefersDecimal", "false")
    parsed = T._parse_datatype_json_string(reader.json(strings).schema().json())
    assert isinstance(parsed, T.StructType)
    return parsed


def all_optional(schema: T.StructType) -> T.StructType:
    return T.StructType([T.StructField(f.name, _nullable(f.dataType), True) for f in schema.fields])


def widen(a: T.DataType, b: T.DataType) -> T.DataType | None:
    """The type that holds both, when Iceberg can promote ``a`` to it; None when it cannot."""
    if a == b:
        return a
    if isinstance(a, T.IntegerType) and isinstance(b, T.LongType):
        return b
    if isinstance(a, T.FloatType) and isinstance(b, T.DoubleType):
        return b
    if isinstance(a, T.DecimalType) and isinstance(b, T.DecimalType) and a.scale == b.scale:
        return T.DecimalType(max(a.precision, b.precision), a.scale)
    return None


def union_schema(a: T.StructType, b: T.StructType) -> T.StructType:
    """Fields of ``a`` (widened where ``b`` needs it), then the fields only ``b`` has."""
    by_name = {f.name: f for f in b.fields}
    out = []
    for f in a.fields:
        other = by_name.pop(f.name, None)
        dtype = f.dataType
        if other is not None:
            if isinstance(dtype, T.StructType) and isinstance(other.dataType, T.StructType):
                dtype = union_schema(dtype, other.dataType)
            else:
                dtype = widen(dtype, other.dataType) or dtype
        out.append(T.StructField(f.name, dtype, f.nullable or (other is not None and other.nullable)))
    out.extend(by_name.values())
    return T.StructType(out)


def _nullable(dtype: T.DataType) -> T.DataType:
    if isinstance(dtype, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType), True) for f in dtype.fields])
    if isinstance(dtype, T.ArrayType):
        return T.ArrayType(_nullable(dtype.elementType), True)
    if isinstance(dtype, T.MapType):
        return T.MapType(dtype.keyType, _nullable(dtype.valueType), True)
    if isinstance(dtype, T.NullType):
        return T.StringType()  # a field only ever seen as null
    return dtype


CONNECT_PRIMITIVES: dict[str, T.DataType] = {
    "int8": T.IntegerType(), "int16": T.IntegerType(), "int32": T.IntegerType(), "int64": T.LongType(),
    "float32": T.FloatType(), "float64": T.DoubleType(), "boolean": T.BooleanType(), "string": T.StringType(),
    "bytes": T.BinaryType(),
}


def connect_to_spark(schema: dict[str, Any]) -> T.StructType:
    dtype = _connect_type(schema, "value")
    if not isinstance(dtype, T.StructType):
        raise ValueError(f"the Connect schema of the value must be a struct, got {schema.get('type')!r}")
    return dtype


def _connect_type(schema: dict[str, Any], path: str) -> T.DataType:
    logical = schema.get("name")
    if logical == "org.apache.kafka.connect.data.Timestamp":
        return T.TimestampType()
    if logical == "sinklab.LocalTimestamp":  # Avro's local-timestamp-*: no zone (sink/avro.py)
        return T.TimestampNTZType()
    if logical == "org.apache.kafka.connect.data.Date":
        return T.DateType()
    if logical == "org.apache.kafka.connect.data.Time":
        # Spark cannot write Iceberg's time type: keep Connect's millis of the day.
        return T.IntegerType()
    if logical == "org.apache.kafka.connect.data.Decimal":
        params = schema.get("parameters") or {}
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", 38))
        return T.DecimalType(precision, scale)
    kind = schema.get("type")
    if kind in CONNECT_PRIMITIVES:
        return CONNECT_PRIMITIVES[kind]
    if kind == "struct":
        return T.StructType([
            T.StructField(f["field"], _connect_type(f, f"{path}.{f['field']}"), bool(f.get("optional", True)))
            for f in schema.get("fields", [])
        ])
    if kind == "array":
        return T.ArrayType(_connect_type(schema["items"], f"{path}[]"), True)
    if kind == "map":
        return T.MapType(T.StringType(), _connect_type(schema["values"], f"{path}{{}}"), True)
    raise ValueError(f"{path}: unsupported Kafka Connect schema type {kind!r}")


def partition_schema(records: DataFrame, schema: T.StructType, fields: list[PartitionField],
                     key: str) -> T.StructType:
    """Check partition columns exist; a string column under a time transform becomes a timestamp
    when every value reads as one (plain JSON has no timestamp type)."""
    out = schema
    for pf in fields:
        dtype = _field_type(out, pf.column)
        if dtype is None:
            raise ConfigError(key, f"column {pf.column!r} is not in the records (columns: "
                              f"{', '.join(out.fieldNames())})")
        if pf.transform in ("years", "months", "days", "hours") and isinstance(dtype, T.StringType):
            if "." in pf.column:
                raise ConfigError(key, f"{pf.transform}({pf.column}) needs a timestamp column")
            raw = F.get_json_object("_payload", f"$.{pf.column}")
            bad = records.where(raw.isNotNull() & raw.try_cast("timestamp").isNull()).select(raw).first()
            if bad is not None:
                raise ConfigError(key, f"{pf.transform}({pf.column}) needs a timestamp column, and {bad[0]!r} "
                                  f"is not a timestamp")
            out = T.StructType([T.StructField(f.name, T.TimestampType(), f.nullable) if f.name == pf.column else f
                                for f in out.fields])
    return out


def _field_type(schema: T.StructType, path: str) -> T.DataType | None:
    dtype: T.DataType = schema
    for part in path.split("."):
        if not isinstance(dtype, T.StructType) or part not in dtype.fieldNames():
            return None
        dtype = dtype[part].dataType
    return dtype


def create_table(spark: SparkSession, catalog_name: str, name: str, schema: T.StructType,
                 partition_by: list[PartitionField], properties: dict[str, str], ids: list[str] | None = None) -> None:
    """CREATE TABLE IF NOT EXISTS, and its namespace: another instance may be creating it too.
    ``ids`` become required identifier fields (row identity for upsert and CDC)."""
    missing = [c for c in ids or [] if c not in schema.fieldNames()]
    if missing:
        raise ConfigError(keys.TABLES_DEFAULT_ID_COLUMNS, f"table {name}: id column(s) {', '.join(missing)} "
                          f"are not in the records (columns: {', '.join(schema.fieldNames())})")
    schema = T.StructType([T.StructField(f.name, f.dataType, f.nullable and f.name not in (ids or []))
                           for f in schema.fields])
    ns, _, _ = name.rpartition(".")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog_name}.{quote(ns)}")
    props = {"format-version": "2", "write.wap.enabled": "true", **properties}
    tblprops = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
    partitioned = f" PARTITIONED BY ({', '.join(pf.ddl for pf in partition_by)})" if partition_by else ""
    columns = ddl(spark, schema, columns=True)
    spark.sql(f"CREATE TABLE IF NOT EXISTS {catalog_name}.{quote(name)} ({columns}) USING iceberg"
              f"{partitioned} TBLPROPERTIES ({tblprops})")
    if ids:
        fields = ", ".join(f"`{c}`" for c in ids)
        spark.sql(f"ALTER TABLE {catalog_name}.{quote(name)} SET IDENTIFIER FIELDS {fields}")


def ddl(spark: SparkSession, dtype: T.DataType, columns: bool = False) -> str:
    """Spark SQL DDL of a type, quoted the way Spark itself does; with ``columns`` a struct is
    written as a column list (for CREATE TABLE), otherwise as ``STRUCT<...>`` (for ALTER TABLE)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    parsed = jvm.org.apache.spark.sql.types.DataType.fromJson(dtype.json())
    return parsed.toDDL() if columns and isinstance(dtype, T.StructType) else parsed.sql()


def quote(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def row_ids(config: SinkConfig, state: TableState) -> list[str]:
    """A row-level table's row identity: the configured id columns, else the table's identifier fields."""
    ids = config.table_id_columns(state.name)
    if not ids and state.table is not None:
        ids = list(state.table.schema().identifier_field_names())
    if not ids:
        raise TableUnfit(keys.TABLES_DEFAULT_ID_COLUMNS, f"table {state.name} has no identifier fields; upsert/"
                         f"CDC needs id columns ({keys.table_key(state.name, keys.ID_COLUMNS)})",
                         table=state.name, sink=config.name)
    return ids
