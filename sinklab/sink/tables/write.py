"""Data writers: a cycle's rows become a snapshot no one sees yet (``publish`` makes it the branch's
head by compare-and-swap). A cycle never lets Iceberg commit to the target branch for it:

- An append (``write_append``): Spark writes the data files and hands them back uncommitted
  (Iceberg's file-rewrite staging, the way ``rewrite_data_files`` collects its output), and Iceberg
  builds the snapshot's manifests without committing them. One REST commit then adds the snapshot
  and moves the target branch to it, asserting the branch still points where the cycle planned: one
  catalog commit per table and cycle, no retry, no rebase.
- Row-level changes (``write_changes``): a MERGE has no such staging, so it commits to a private
  branch no one else touches (its retries are harmless there), and the REST commit that publishes
  moves the target branch to the staged snapshot and drops the private branch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AddSnapshotUpdate, TableRequirement, TableUpdate

from sinklab.sink.records.changes import newest_changes
from sinklab.sink.tables.state import TableState, identifier, quote

if TYPE_CHECKING:
    from uuid import UUID

    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Staged:
    """A table's part of a cycle, written and not yet visible: an uncommitted ``snapshot`` (an append)
    or the head of the private branch ``stage`` (row-level changes), named by ``stage_name``."""

    table: str
    stage: str | None
    snapshot_id: int
    records: int
    bytes: int
    data_files: list[str]
    delete_files: list[str]
    write_ms: int
    commit_ms: int = 0  # set when published
    # The table as loaded after the write: publishing commits against it without loading it again.
    loaded: Table | None = field(default=None, repr=False, compare=False)
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)  # an append's, uncommitted


log = logging.getLogger("sinklab.sink")
STAGE_PREFIX = "sinklab-stage-"
# A commit to one branch raced by a commit to another: the ref the writer asserted did not move, but
# the sequence number (or, format 3, the first row id) it computed was taken, and the REST server
# refuses it (Iceberg's own client does not retry it). Nothing landed; writing again is safe.
SEQUENCE_RACES = ("Cannot add snapshot with sequence number", "first-row-id is behind table next-row-id")


def lost_sequence_race(exc: BaseException) -> bool:
    return any(race in str(exc) for race in SEQUENCE_RACES)


def stage_name(sink: str, commit_id: str) -> str:
    return f"{STAGE_PREFIX}{sink}-{commit_id}"


def write_append(spark: SparkSession, catalog_name: str, state: TableState, rows: DataFrame,
                 properties: dict[str, str], stage: str) -> Staged:
    """Write ``rows`` as data files and build the snapshot appending them to the target branch, with
    ``properties`` in its summary; nothing is committed (``publish`` does that)."""
    started = time.monotonic()
    jvm = spark._jvm  # type: ignore[attr-defined]
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, f"{catalog_name}.{quote(state.name)}")  # type: ignore[attr-defined]
    files = write_files(spark, table, rows, f"{stage}-{state.name}")
    if not files:
        return Staged(state.name, None, -1, 0, 0, [], [], int((time.monotonic() - started) * 1000))
    # Inline, not on Iceberg's worker pool, whose completion is polled every 10 ms: building the snapshot
    # of a table with 30 manifests took 21 ms instead of 31 (measured, medians of 35).
    inline = jvm.org.apache.iceberg.relocated.com.google.common.util.concurrent.MoreExecutors.newDirectExecutorService()
    append = table.newFastAppend().toBranch(state.branch).scanManifestsWith(inline)
    for data_file in files:
        append.appendFile(data_file)
    for key, value in properties.items():
        append.set(key, value)
    snapshot = Snapshot.model_validate_json(jvm.org.apache.iceberg.SnapshotParser.toJson(append.apply()))
    return staged_append(state.name, snapshot, [f.location() for f in files], int((time.monotonic() - started) * 1000))


def staged_append(table: str, snapshot: Snapshot, data_files: list[str], write_ms: int,
                  loaded: Table | None = None) -> Staged:
    """An append's part of a cycle: its uncommitted ``snapshot``, which adds ``data_files``."""
    summary = snapshot.summary.additional_properties if snapshot.summary else {}
    return Staged(table, None, snapshot.snapshot_id, int(summary.get("added-records", 0)),
                  int(summary.get("added-files-size", 0)), data_files, [], write_ms, loaded=loaded, snapshot=snapshot)


def append_rows(state: TableState, rows: pa.Table, properties: dict[str, str]) -> Staged:
    """Rows the driver holds (a cycle's dead letters), appended as ``write_append`` does, by pyiceberg: a
    Spark job for a few hundred rows cost more than everything else they cost a cycle (bench/README.md,
    "Dead letters"). ``rows`` have the table's columns (``schema_to_pyarrow`` of its schema), so
    pyiceberg's check of them against the table is left out."""
    # What pyiceberg's Transaction.append writes the files with (pyiceberg is pinned: pyproject.toml).
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    started = time.monotonic()
    assert state.table is not None
    io = state.table.io
    snapshot, files = stage_append(state.table, state.branch, properties,
                                   lambda metadata, uuid: _dataframe_to_data_files(metadata, rows, io, uuid))
    return staged_append(state.name, snapshot, [f.file_path for f in files], int((time.monotonic() - started) * 1000),
                         loaded=state.table)


def stage_append(table: Table, branch: str, properties: dict[str, str],
                 files: Callable[[TableMetadata, UUID], Iterable[DataFile]]) -> tuple[Snapshot, list[DataFile]]:
    """The snapshot a fast append of ``files(metadata, write_uuid)`` to ``branch`` makes, built the way
    pyiceberg builds any commit and never committed (``publish`` commits it by compare-and-swap); and the
    files, known as written rather than read back from the new manifest."""
    staging = _Staging(table)
    with staging.update_snapshot(snapshot_properties=properties, branch=branch).fast_append() as append:
        added = list(files(staging.table_metadata, append.commit_uuid))
        for data_file in added:
            append.append_data_file(data_file)
    return staging.added_snapshot(), added


class _Staging(Transaction):
    """pyiceberg's transaction, its metadata worked out once per staged update. pyiceberg works it out again,
    deep-copying the table's whole metadata, each time an append looks at it (18 times): a dead-letter
    table's append took 22 ms a cycle with that, 12 ms without (bench/README.md, "Dead letters"). The
    metadata is immutable, so one copy serves every look."""

    def __init__(self, table: Table):
        super().__init__(table)
        self._worked_out: tuple[int, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        if self._worked_out is None or self._worked_out[0] != len(self._updates):
            self._worked_out = (len(self._updates), super().table_metadata)
        return self._worked_out[1]

    def _stage(self, updates: tuple[TableUpdate, ...], requirements: tuple[TableRequirement, ...] = ()) -> Transaction:
        # Its requirements are never sent (``publish`` asserts its own), so they are not checked here:
        # pyiceberg refuses a first snapshot on a branch other than main, which the REST catalog takes.
        return super()._stage(updates)

    def added_snapshot(self) -> Snapshot:
        """The snapshot the staged append adds, as its update holds it (no metadata worked out again)."""
        return next(u.snapshot for u in self._updates if isinstance(u, AddSnapshotUpdate))


def write_files(spark: SparkSession, table: Any, rows: DataFrame, name: str) -> list[Any]:
    """Spark writes ``rows`` into ``table``'s data files and keeps them: the write's commit hands its
    files to Iceberg's rewrite coordinator under ``name`` instead of committing a snapshot."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    tables = _table_cache(spark)
    staged = jvm.org.apache.iceberg.spark.FileRewriteCoordinator.get()
    tables.add(name, table)
    # Iceberg resolves the write in the session active on this thread, and registers its rewrite
    # catalog there: a sink's own session, cycling on a thread of its own, is not it unless told.
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[attr-defined]
    try:
        rows.write.format("iceberg").mode("append").save(name)
        # A write Spark optimized away never reaches its commit.
        # As an array: py4j ends iterating a Java collection on an exception, which PySpark takes ~40 ms to
        # convert (measured, a one-record cycle).
        return list(staged.fetchNewFiles(table, name).toArray()) if staged.fetchSetIds(table).contains(name) else []
    finally:
        staged.clearRewrite(table, name)
        tables.remove(name)


def _table_cache(spark: SparkSession) -> Any:
    """Iceberg's ``SparkTableCache.get()``, found by reflection: py4j looks a static method up by its
    name alone, and the class also has an instance ``get(String)``; which of the two py4j meets first
    is the JVM's choice (measured: a sink's first write failed with "does not exist" in one JVM and
    not in another)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    holder = jvm.java.lang.Class.forName("org.apache.iceberg.spark.SparkTableCache", True, loader)
    get = holder.getMethod("get", gateway.new_array(jvm.java.lang.Class, 0))
    return get.invoke(None, gateway.new_array(jvm.java.lang.Object, 0))


def _branch_write(spark: SparkSession, catalog: Catalog, state: TableState, stage: str,
                  commit_properties: dict[str, str], write: Callable[[], Any]) -> Staged:
    started = time.monotonic()
    assert state.table is not None
    # Not left to the write: Iceberg forks a missing branch from main's data but sums the snapshot's
    # total-records/-files from nothing (measured: a third commit of 250 rows read total-records=250).
    if state.snapshot_id is not None:
        state.table.manage_snapshots().create_branch(state.snapshot_id, stage).commit()
    spark.conf.set("spark.wap.branch", stage)
    try:
        with commit_metadata(spark, commit_properties):
            write()
    finally:
        spark.conf.unset("spark.wap.branch")
    table = catalog.load_table(identifier(state.name))
    snapshot_id = table.metadata.refs[stage].snapshot_id
    data_files, delete_files = added_files(table, snapshot_id)
    snap = table.metadata.snapshot_by_id(snapshot_id)
    summary = snap.summary.additional_properties if snap and snap.summary else {}
    return Staged(state.name, stage, snapshot_id, int(summary.get("added-records", 0)),
                  int(summary.get("added-files-size", 0)), data_files, delete_files,
                  int((time.monotonic() - started) * 1000), loaded=table)


@contextmanager
def commit_metadata(spark: SparkSession, properties: dict[str, str]) -> Iterator[None]:
    """Snapshot properties for SQL writes (MERGE takes no write options): Iceberg's CommitMetadata
    keeps them in a thread-local of the JVM thread that runs the query. PySpark pins each Python
    thread to one JVM thread, so setting it here reaches the MERGE run by this thread."""
    if not properties:
        yield
        return
    jvm = spark._jvm  # type: ignore[attr-defined]
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    holder = jvm.java.lang.Class.forName("org.apache.iceberg.spark.CommitMetadata", True, loader)
    field = holder.getDeclaredField("COMMIT_PROPERTIES")
    field.setAccessible(True)
    local = field.get(None)
    values = jvm.java.util.HashMap()
    for key, value in properties.items():
        values.put(key, value)
    local.set(values)
    try:
        yield
    finally:
        local.remove()


ROW_LEVEL_PROPS = {"write.merge.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                   "write.delete.mode": "merge-on-read"}


def write_changes(spark: SparkSession, catalog: Catalog, catalog_name: str, state: TableState, rows: DataFrame,
                  ids: list[str], op_column: str, properties: dict[str, str], stage: str) -> Staged:
    """Apply a cycle's row changes (I/U/D in ``op_column``) as one MERGE on branch ``stage``.

    Only the last change per id counts, in (partition, offset) order; deletes are written
    merge-on-read (position deletes), and a row whose partition value changes moves.
    """
    assert state.table is not None
    changes = newest_changes(rows, ids)
    columns = [c for c in rows.columns if c not in ("topic", "partition", "offset", "timestamp", op_column)]
    view = f"sinklab_changes_{stage.replace('-', '_')}"
    changes.select(*columns, op_column).createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in ids)
    assign = ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
    names = ", ".join(f"`{c}`" for c in columns)
    values = ", ".join(f"s.`{c}`" for c in columns)
    sql = (f"MERGE INTO {catalog_name}.{quote(state.name)} t USING {view} s ON {on} "
           f"WHEN MATCHED AND s.`{op_column}` = 'D' THEN DELETE "
           f"WHEN MATCHED THEN UPDATE SET {assign} "
           f"WHEN NOT MATCHED AND s.`{op_column}` != 'D' THEN INSERT ({names}) VALUES ({values})")
    return _branch_write(spark, catalog, state, stage, properties, lambda: spark.sql(sql).collect())


def added_files(table: Table, snapshot_id: int) -> tuple[list[str], list[str]]:
    snap = table.metadata.snapshot_by_id(snapshot_id)
    if snap is None:
        return [], []
    data, deletes = files_added(snap, table.io)
    return [f.file_path for f in data], [f.file_path for f in deletes]


def files_added(snapshot: Snapshot, io: FileIO) -> tuple[list[DataFile], list[DataFile]]:
    """The data and delete files ``snapshot`` added."""
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

    data: list[DataFile] = []
    deletes: list[DataFile] = []
    for manifest in snapshot.manifests(io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            if entry.status != ManifestEntryStatus.ADDED:
                continue
            (data if entry.data_file.content == DataFileContent.DATA else deletes).append(entry.data_file)
    return data, deletes
