"""Several tables' appends from one Spark job: a fanned-out cycle's rows read, converted and written once,
whatever the table count and their schemas.

Spark's writers write one table per job, and a cycle that fans out paid for that with a cache of its
records and a job per table (1.7-1.9x one table's work, bench/README.md "Fan-out: two shapes"). Here each
record carries its row of each table schema as a struct column (``records.to_rows_by_schema``) and its
tables as bits (``route.table_bits``); Spark hands them to Python workers as Arrow batches
(``mapInArrow``), and each task writes every table's part of its records with pyiceberg's writer (the
table's partitioning, file size, Parquet settings, metrics and field ids). The files come back to the
driver, which stages each table's snapshot as ``write.append_rows`` does; publishing is unchanged. One
table alone stays on Iceberg's Spark writer: the two tie for it, and Iceberg's writes every type and sort
order and needs no Python on a cluster's executors (bench/README.md, "Fan-out in one job").
"""

from __future__ import annotations

import pickle
import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)
from pyspark.sql import types as T

from sinklab.sink.records.columns import TABLES
from sinklab.sink.tables.write import Staged, stage_append, staged_append

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import DataFrame

    from sinklab.sink.tables.state import TableState

# Types Spark hands to Arrow as pyiceberg writes them. Others (uuid and fixed come as strings and
# binaries, VARIANT, time, nanosecond timestamps) go through Iceberg's own writer, a table at a time.
_PLAIN = (BooleanType, IntegerType, LongType, FloatType, DoubleType, DecimalType, DateType, TimestampType,
          TimestamptzType, StringType, BinaryType)
_FILES = "file"


def writable(table: Table, columns: T.StructType) -> bool:
    """Whether this writer writes ``table`` (whose Spark ``columns`` these are) as Iceberg's Spark writer
    would: Parquet, no sort order (Iceberg's writer sorts each task's rows by it), columns of plain types.
    pyiceberg shows a VARIANT column as binary (``stack.catalog_client``): Spark's columns tell."""
    metadata = table.metadata
    return (metadata.properties.get("write.format.default", "parquet").lower() == "parquet"
            and metadata.sort_order().is_unsorted and all(_plain(f.field_type) for f in table.schema().fields)
            and not _has_variant(columns))


def _has_variant(dtype: T.DataType) -> bool:
    if isinstance(dtype, T.StructType):
        return any(_has_variant(f.dataType) for f in dtype.fields)
    if isinstance(dtype, T.ArrayType):
        return _has_variant(dtype.elementType)
    if isinstance(dtype, T.MapType):
        return _has_variant(dtype.keyType) or _has_variant(dtype.valueType)
    return isinstance(dtype, T.VariantType)


def _plain(field_type: IcebergType) -> bool:
    if isinstance(field_type, StructType):
        return all(_plain(f.field_type) for f in field_type.fields)
    if isinstance(field_type, ListType):
        return _plain(field_type.element_type)
    if isinstance(field_type, MapType):
        return _plain(field_type.key_type) and _plain(field_type.value_type)
    return isinstance(field_type, _PLAIN)


def write_appends(rows: DataFrame, tables: list[tuple[TableState, dict[str, str], str]]) -> list[Staged | None]:
    """``rows`` (each table's row as a struct column, and TABLES) written as each table's data files by
    one Spark job, and each table's snapshot appending them staged with its ``properties``, not
    committed; None for a table no row went to. ``tables``: each table's state, properties and the
    column that holds its rows."""
    started = time.monotonic()
    targets = []
    for state, _, column in tables:
        assert state.table is not None
        targets.append((state.table.metadata, dict(state.table.io.properties), column))
    files: list[list] = [[] for _ in tables]
    columns = sorted({column for _, _, column in tables})
    for row in rows.where(rows[TABLES] != 0).select(*columns, TABLES).mapInArrow(
            partial(_write_task, targets), f"table int, {_FILES} binary").collect():
        files[row.table].append(pickle.loads(row[_FILES]))  # noqa: S301 - our own workers' DataFiles
    write_ms = int((time.monotonic() - started) * 1000)
    staged: list[Staged | None] = []
    for (state, properties, _), written in zip(tables, files, strict=True):
        if not written:
            staged.append(None)
            continue
        assert state.table is not None
        snapshot, added = stage_append(state.table, state.branch, properties, lambda _m, _u, w=written: w)
        staged.append(staged_append(state.name, snapshot, [f.file_path for f in added], write_ms, loaded=state.table))
    return staged


def _write_task(targets: list[tuple[TableMetadata, dict[str, str], str]],
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a Spark task's Python worker: its rows split by table and written as each table's data files;
    one batch back naming them (pickled DataFiles)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import _dataframe_to_data_files  # what pyiceberg's appends write with (pinned)

    parts: list[list[pa.RecordBatch]] = [[] for _ in targets]
    for batch in batches:
        bits = batch.column(TABLES)
        for i, part in enumerate(parts):
            mine = pc.not_equal(pc.bit_wise_and(bits, pa.scalar(1 << i, pa.int64())), 0)
            taken = pc.filter(batch.column(targets[i][2]), mine)
            if len(taken):
                part.append(pa.RecordBatch.from_struct_array(taken))
    out: dict[str, list] = {"table": [], _FILES: []}
    for i, part in enumerate(parts):
        if not part:
            continue
        metadata, io_properties, _ = targets[i]
        data = _utc(pa.Table.from_batches(part))
        for data_file in _dataframe_to_data_files(metadata, data, load_file_io(io_properties, metadata.location),
                                                  write_uuid=uuid.uuid4()):
            out["table"].append(i)
            out[_FILES].append(pickle.dumps(data_file))
    yield pa.RecordBatch.from_pydict(out, schema=pa.schema([("table", pa.int32()), (_FILES, pa.binary())]))


def _utc(data: pa.Table) -> pa.Table:
    """Spark's Arrow timestamps carry the session's time zone; pyiceberg takes UTC. The same instants,
    relabelled (a cast of the type alone)."""
    import pyarrow as pa

    def relabel(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t) and t.tz is not None:
            return pa.timestamp(t.unit, tz="UTC")
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(relabel(f.type)) for f in t])
        if pa.types.is_list(t):
            return pa.list_(t.value_field.with_type(relabel(t.value_type)))
        if pa.types.is_map(t):
            return pa.map_(t.key_field.with_type(relabel(t.key_type)), t.item_field.with_type(relabel(t.item_type)))
        return t

    target = pa.schema([f.with_type(relabel(f.type)) for f in data.schema])
    return data if target.equals(data.schema) else data.cast(target)
