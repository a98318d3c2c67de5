"""Creating a destination table: its schema inferred from records (JSON, or a Connect schema), its
partition spec, and the table made with the sink's properties (``iceberg.tables.auto-create-enabled``)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.exceptions import ConfigError, TableMissing
from sinklab.sink.config import keys
from sinklab.sink.config.sink_config import PartitionField, SinkConfig
from sinklab.sink.tables.state import quote
from sinklab.sink.tables.write import ROW_LEVEL_PROPS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("sinklab.sink")


def infer_schema(spark: SparkSession, records: DataFrame, schemas_enable: bool) -> T.StructType:
    """The schema of prepared records: their Connect schemas when the envelope is there, else JSON
    inference (integer→long, float→double, boolean, string, object→struct, array→list), in
    first-seen order. Without the envelope every column is optional."""
    records = records.where(F.col("value").isNotNull())  # a tombstone's ids come from its key, untyped
    if schemas_enable:
        # Each schema in the order its first record came (Kafka's timestamp, then topic, partition, offset),
        # as Apache's sink creates a table from its first record and evolves it record by record: in the
        # order ``distinct`` gave them, columns came out in another order from run to run.
        firsts = (records.where(F.col("_schema").isNotNull()).groupBy("_schema")
                  .agg(F.min(F.struct("timestamp", "topic", "partition", "offset")).alias("first")).collect())
        texts = [r[0] for r in sorted(firsts, key=lambda r: tuple(r[1]))]
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


def auto_create(spark: SparkSession, c: SinkConfig, name: str, records: DataFrame) -> None:
    """The table ``name``, created from its first records: their schema inferred (or the VARIANT columns
    configured), partitioned and with the ids and properties the config gives."""
    # A whole value as one VARIANT needs no inference: that job's answer would be thrown away.
    inferred = T.StructType([]) if c.variant_value else infer_schema(spark, records, c.typed_values)
    schema = with_variants(inferred, c.variant_columns, c.variant_value)
    if not schema.fields:
        raise TableMissing(f"table {name}: cannot create it from records with no fields", sink=c.name, table=name)
    if c.schema_force_optional:
        schema = all_optional(schema)
    partition_by = c.table_partition_by(name)
    schema = partition_schema(records, schema, partition_by, c.partition_key(name))
    ids = c.table_id_columns(name) if c.row_level else []
    props = {**(ROW_LEVEL_PROPS if c.row_level else {}), **c.table_create_props}
    create_table(spark, c.catalog_name, name, schema, partition_by, props, ids)
    log.info("created table %s with columns %s", name, ", ".join(schema.fieldNames()))
