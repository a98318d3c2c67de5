"""Iceberg's metadata as tidy frames: a branch's snapshots, the snapshot log, schemas, refs, live files,
the metadata files, and the Kafka metadata columns a table holds.

Every time is a UTC ``pandas.Timestamp``. A table's history is the *lineage of a branch*: the
branch head and its ancestors, oldest first. Snapshots that never reached the branch (a crashed
cycle's staged snapshot, a lost compare-and-swap) are left out, because no reader ever saw them.

When a snapshot became visible: the sink builds each cycle's snapshot before it commits it (row-level
changes on a private branch), so the snapshot's own ``timestamp-ms`` (``committed_at``) is when it
was *written*, a little before readers could see it. Iceberg's snapshot log records when ``main``
was moved (``made_current_at`` in Spark's ``.history``); ``visible_at`` is that time, and for a
snapshot that was never current itself, the time its first descendant became current. Branches
other than ``main`` have no such log: there ``visible_at`` is ``committed_at``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyiceberg.manifest import DataFileContent, FileFormat, ManifestEntryStatus
from pyiceberg.table.snapshots import ancestors_of

from sinklab.readings.columns import SNAPSHOT_COLUMNS, empty
from sinklab.readings.sources import catalog_of, names
from sinklab.sink.tables import COMMIT_ID_PROP, OFFSETS_PROP, SINK_PROP, VTTS_PROP, identifier
from sinklab.sink.wire import apache_events as apache
from sinklab.sink.wire import from_property

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from sinklab.readings.sources import MetadataSource

MAIN = "main"
METADATA_FIELD = "_kafka_metadata"

# Iceberg's standard snapshot summary keys, as integer columns.
SUMMARY_INTS = {
    "added_records": "added-records", "deleted_records": "deleted-records", "added_files": "added-data-files",
    "removed_files": "deleted-data-files", "added_delete_files": "added-delete-files",
    # Format v3's deletion vectors (Puffin blobs, at most one per data file), which Iceberg also counts
    # among the delete files: a v3 row-level table replaces a file's vector instead of adding files.
    "added_dvs": "added-dvs", "removed_dvs": "removed-dvs",
    "added_bytes": "added-files-size", "removed_bytes": "removed-files-size", "total_records": "total-records",
    "total_files": "total-data-files", "total_delete_files": "total-delete-files", "total_bytes": "total-files-size",
}


def _ms(value: Any) -> pd.Timestamp:
    return pd.Timestamp(int(value), unit="ms", tz="UTC")


def load_table(source: MetadataSource, table: str) -> Table:
    return catalog_of(source).load_table(identifier(table))


def snapshots(source: MetadataSource, tables: str | Iterable[str], branch: str = MAIN) -> pd.DataFrame:
    """One row per snapshot on each table's ``branch`` lineage, oldest first.

    Columns: the Iceberg summary as integers (``added_records``, ``added_files``, ``added_bytes``,
    ``total_records``, …), the sink's properties (``sink``, ``commit_id``, ``offsets`` as
    ``{topic: {partition: next offset}}``, ``vtts``; empty for other writers' snapshots),
    ``committed_at`` and ``visible_at`` (see the module docstring).
    """
    frames = [_table_snapshots(load_table(source, name), name, branch) for name in names(tables)]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return empty(SNAPSHOT_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def _lineage(table: Table, branch: str) -> list[Snapshot]:
    """The branch head and its ancestors, oldest first; an expired snapshot ends the lineage."""
    ref = table.metadata.refs.get(branch)
    head = table.metadata.snapshot_by_id(ref.snapshot_id) if ref is not None else None
    return list(ancestors_of(head, table.metadata))[::-1]


def _table_snapshots(table: Table, name: str, branch: str) -> pd.DataFrame:
    chain = _lineage(table, branch)
    if not chain:
        return empty(SNAPSHOT_COLUMNS)
    made_current: dict[int, int] = {}
    if branch == MAIN:
        for entry in table.metadata.snapshot_log:
            made_current.setdefault(entry.snapshot_id, entry.timestamp_ms)
    rows = []
    for snap in chain:
        props = dict(snap.summary.additional_properties) if snap.summary else {}
        row: dict[str, Any] = {
            "table": name, "branch": branch, "snapshot_id": snap.snapshot_id, "parent_id": snap.parent_snapshot_id,
            "sequence_number": snap.sequence_number,
            "operation": snap.summary.operation.value if snap.summary else None, "schema_id": snap.schema_id,
            "committed_at": _ms(snap.timestamp_ms),
            "visible_at": _ms(made_current[snap.snapshot_id]) if snap.snapshot_id in made_current else pd.NaT,
            "sink": props.get(SINK_PROP), "commit_id": props.get(COMMIT_ID_PROP),
            "offsets": from_property(props[OFFSETS_PROP]) if OFFSETS_PROP in props else None,
            "vtts": _ms(props[VTTS_PROP]) if VTTS_PROP in props else pd.NaT,
        }
        if row["sink"] is None and apache.TASK_ID_PROP in props:
            # Apache's sink's commit: its connector, commit and valid-through time; it records no source offsets.
            row.update(sink=props[apache.TASK_ID_PROP].rsplit("-", 1)[0], commit_id=props.get(apache.COMMIT_ID_PROP),
                       offsets={}, vtts=pd.Timestamp(props[apache.VTTS_PROP]).tz_convert("UTC")
                       if apache.VTTS_PROP in props else pd.NaT)
        for column, key in SUMMARY_INTS.items():
            row[column] = int(props.get(key, 0))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=SNAPSHOT_COLUMNS)
    # A snapshot that was never current itself became visible with its first current descendant.
    frame["visible_at"] = pd.to_datetime(frame["visible_at"], utc=True).bfill().fillna(frame["committed_at"])
    frame["vtts"] = pd.to_datetime(frame["vtts"], utc=True)
    # From the Python ints: through float64 (the default with a None in it) 64-bit ids lose digits.
    frame["parent_id"] = pd.array([s.parent_snapshot_id for s in chain], dtype="Int64")
    return frame


def history(source: MetadataSource, table: str) -> pd.DataFrame:
    """Spark's ``<table>.history``: when each snapshot became current on ``main``, and whether it
    is still an ancestor of the current snapshot."""
    arrow = load_table(source, table).inspect.history()
    frame = arrow.to_pandas()
    frame["made_current_at"] = pd.to_datetime(frame["made_current_at"]).dt.tz_localize("UTC")
    frame["parent_id"] = pd.array(arrow.column("parent_id").to_pylist(), dtype="Int64")
    return frame


def schemas(source: MetadataSource, table: str) -> pd.DataFrame:
    """Every schema the table has had, one row per column: ``schema_id, field_id, column`` (nested
    columns by their dotted name), ``type`` and ``required``; ``current`` marks the table's schema.
    A column keeps its ``field_id`` through renames and type promotions."""
    tbl = load_table(source, table)
    rows = []
    for schema in tbl.metadata.schemas:
        for column, field_id in _columns(schema):
            field = schema.find_field(field_id)
            rows.append({"table": table, "schema_id": schema.schema_id, "field_id": field_id, "column": column,
                         "type": str(field.field_type), "required": field.required,
                         "current": schema.schema_id == tbl.metadata.current_schema_id})
    return pd.DataFrame(rows, columns=["table", "schema_id", "field_id", "column", "type", "required", "current"])


def _columns(schema: Any) -> list[tuple[str, int]]:
    """(dotted name, field id) of every field, struct members after their struct, in schema order."""
    from pyiceberg.types import ListType, MapType, StructType

    out: list[tuple[str, int]] = []

    def walk(struct: StructType, prefix: str) -> None:
        for f in struct.fields:
            name = f"{prefix}{f.name}"
            out.append((name, f.field_id))
            if isinstance(f.field_type, StructType):
                walk(f.field_type, f"{name}.")
            elif isinstance(f.field_type, ListType) and isinstance(f.field_type.element_type, StructType):
                walk(f.field_type.element_type, f"{name}.element.")
            elif isinstance(f.field_type, MapType) and isinstance(f.field_type.value_type, StructType):
                walk(f.field_type.value_type, f"{name}.value.")

    walk(schema.as_struct(), "")
    return out


def refs(source: MetadataSource, table: str) -> pd.DataFrame:
    """The table's branches and tags (the sink's staging branches while a cycle commits)."""
    return load_table(source, table).inspect.refs().to_pandas()


def files(source: MetadataSource, table: str, snapshot_id: int | None = None) -> pd.DataFrame:
    """The live data and delete files of a snapshot (default: current), with the snapshot that added each;
    ``content`` is data, position-deletes, equality-deletes or deletion-vector (format v3)."""
    columns = ["table", "added_by", "content", "file_path", "record_count", "file_size_in_bytes", "partition"]
    tbl = load_table(source, table)
    snap = tbl.current_snapshot() if snapshot_id is None else tbl.snapshot_by_id(snapshot_id)
    if snap is None:
        return empty(columns)
    # From the manifests, not pyiceberg's inspect.entries: that reads every file's column metrics,
    # which a deletion vector (a Puffin blob) does not have, and fails on a v3 table.
    rows = []
    for manifest in snap.manifests(tbl.io):
        fields = [f.name for f in tbl.specs()[manifest.partition_spec_id].fields]
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            f = entry.data_file
            content = _content(int(f.content), f.file_format == FileFormat.PUFFIN)
            rows.append((table, entry.snapshot_id, content, f.file_path, f.record_count, f.file_size_in_bytes,
                         _partition_text({n: f.partition[i] for i, n in enumerate(fields)})))
    frame = pd.DataFrame(rows, columns=columns) if rows else empty(columns)
    return frame.astype({"added_by": "int64", "record_count": "int64", "file_size_in_bytes": "int64"})


def _content(content: int, puffin: bool) -> str:
    if content == 1 and puffin:
        return "deletion-vector"  # format v3: position deletes of one data file, as a Puffin blob
    return {0: "data", 1: "position-deletes", 2: "equality-deletes"}.get(content, str(content))


def _partition_text(partition: dict[str, Any] | None) -> str:
    if not partition:
        return "(unpartitioned)"
    return ", ".join(f"{k}={v}" for k, v in partition.items())


def metadata_history(source: MetadataSource, table: str) -> pd.DataFrame:
    """One row per table metadata file Iceberg still lists (its ``metadata-log`` and the current one):
    when it was written, its size, and how many snapshots and snapshot references it held. The
    growth a sink's frequent commits cause, and what expiry gives back."""
    tbl = load_table(source, table)
    entries = [(e.timestamp_ms, e.metadata_file) for e in tbl.metadata.metadata_log]
    entries.append((tbl.metadata.last_updated_ms, tbl.metadata_location))
    rows = []
    for ts, path in entries:
        try:
            with tbl.io.new_input(path).open() as stream:
                raw = stream.read()
        except FileNotFoundError:
            continue  # removed by orphan-file cleanup: the log may name files that are gone
        meta = json.loads(raw)
        rows.append({"table": table, "written_at": _ms(ts), "metadata_file": path, "bytes": len(raw),
                     "snapshots": len(meta.get("snapshots", [])), "refs": len(meta.get("refs", {}))})
    return pd.DataFrame(rows, columns=["table", "written_at", "metadata_file", "bytes", "snapshots", "refs"])


def table_record_times(source: MetadataSource, table: str, field: str = METADATA_FIELD,
                       snapshot_id: int | None = None) -> pd.DataFrame:
    """The same columns as :func:`~sinklab.readings.record_times` plus ``table``, read from the table's own
    Kafka metadata columns (the ``KafkaMetadataTransform``, flat or nested): exactly the records the
    table holds, which is what per-table visibility needs under fan-out."""
    tbl = load_table(source, table)
    columns = _metadata_columns(tbl, table, field)
    scan = tbl.scan(selected_fields=tuple(columns), snapshot_id=snapshot_id).to_arrow()
    frame = _metadata_frame(scan, columns, field)
    frame["table"] = table
    return frame.sort_values(["topic", "partition", "offset"], ignore_index=True)


def added_offsets(source: MetadataSource, table: str, field: str = METADATA_FIELD, branch: str = MAIN
                  ) -> pd.DataFrame:
    """Per snapshot of ``branch``, the source offsets its records end at (per topic and partition, the
    last offset + 1, as a sink records them), read from the Kafka-metadata columns (``field``, as
    :func:`table_record_times`) of the data files it added: ``table``, ``snapshot_id``, ``offsets``, for
    :func:`~sinklab.readings.with_offsets`. For a sink that keeps its offsets out of the table (Apache's)
    once its control topic is gone; each snapshot reads only the files it added."""
    import pyarrow.parquet as pq

    tbl = load_table(source, table)
    columns = _metadata_columns(tbl, table, field)
    top = list(dict.fromkeys(c.split(".", 1)[0] for c in columns))
    rows = []
    for snap in _lineage(tbl, branch):
        added = [e.data_file.file_path for m in snap.manifests(tbl.io) if m.added_snapshot_id == snap.snapshot_id
                 for e in m.fetch_manifest_entry(tbl.io) if e.status == ManifestEntryStatus.ADDED
                 and e.data_file.content == DataFileContent.DATA]
        if not added:
            continue
        parts = []
        for path in added:
            with tbl.io.new_input(path).open() as f:
                parts.append(_metadata_frame(pq.read_table(f, columns=top), columns, field))
        frame = pd.concat(parts, ignore_index=True)
        ends = frame.groupby(["topic", "partition"])["offset"].max() + 1
        offsets: dict[str, dict[int, int]] = {}
        for (topic, partition), end in ends.items():
            offsets.setdefault(str(topic), {})[int(partition)] = int(end)
        rows.append({"table": table, "snapshot_id": snap.snapshot_id, "offsets": offsets})
    return pd.DataFrame(rows, columns=["table", "snapshot_id", "offsets"])


def _metadata_columns(tbl: Table, table: str, field: str) -> list[str]:
    """The Kafka-metadata columns of ``tbl`` (topic, partition, offset, timestamp), flat or nested."""
    fields = {f.name for f in tbl.schema().fields}
    # Iceberg's transform names the record's timestamp `timestamp`; sinklab before 2026-11-28 named it
    # `record_timestamp`, which its tables keep.
    stamp = "record_timestamp" if f"{field}_record_timestamp" in fields else "timestamp"
    parts = ("topic", "partition", "offset", stamp)
    if all(f"{field}_{p}" in fields for p in parts):
        return [f"{field}_{p}" for p in parts]
    if field in fields:
        nested = tbl.schema().find_field(field).field_type
        stamp = "record_timestamp" if "record_timestamp" in {f.name for f in nested.fields} else "timestamp"
        return [f"{field}.{p}" for p in (*parts[:3], stamp)]
    raise ValueError(f"table {table} has no Kafka metadata columns ({field}_topic, … or a {field} struct): "
                     f"configure the KafkaMetadataTransform, or use record_times() to read Kafka")


def _nested(scan: Any, field: str, part: str) -> pd.Series:
    return scan.column(field).combine_chunks().field(part).to_pandas()


def _metadata_frame(scan: Any, columns: list[str], field: str) -> pd.DataFrame:
    if "." in columns[0]:
        get = [_nested(scan, field, c.split(".", 1)[1]) for c in columns]
    else:
        get = [scan.column(c).to_pandas() for c in columns]
    stamps = get[3]
    produced = (pd.to_datetime(stamps, utc=True) if pd.api.types.is_datetime64_any_dtype(stamps)
                else pd.to_datetime(stamps.astype("int64"), unit="ms", utc=True))
    return pd.DataFrame({"topic": get[0].astype(object), "partition": get[1].astype("int64"),
                         "offset": get[2].astype("int64"), "produced_at": produced})
