"""Data writers: a cycle's rows go to a private staging branch; publishing is a compare-and-swap.

Iceberg's automatic commit retry rebases an append onto a concurrent one, which is exactly how two
instances duplicate data. So Spark writes to a branch no one else touches (its retries are
harmless there), and the target branch is moved to the staged snapshot by one REST commit that
asserts the target still points where the cycle planned: no retry, no rebase.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import requests
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException, ServiceUnavailableError
from pyiceberg.table.update import AssertRefSnapshotId, RemoveSnapshotRefUpdate, SetSnapshotRefUpdate

from sinklab.sink.tables import TableState, identifier, quote

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Staged:
    table: str
    stage: str
    snapshot_id: int
    records: int
    bytes: int
    data_files: list[str]
    delete_files: list[str]
    write_ms: int
    commit_ms: int = 0  # set when published
    # The table as loaded after the write: publishing commits against it without loading it again.
    loaded: Table | None = field(default=None, repr=False, compare=False)


log = logging.getLogger("sinklab.sink")
STAGE_PREFIX = "sinklab-stage-"
# A commit to one branch raced by a commit to another: the ref the writer asserted did not move, but
# the sequence number it computed was taken, and the REST server refuses it as a bad request (Iceberg
# does not retry those). Nothing landed; writing again is safe.
SEQUENCE_RACE = "Cannot add snapshot with sequence number"


def lost_sequence_race(exc: BaseException) -> bool:
    return SEQUENCE_RACE in str(exc)


def stage_name(sink: str, commit_id: str) -> str:
    return f"{STAGE_PREFIX}{sink}-{commit_id}"


def write_staged(spark: SparkSession, catalog: Catalog, catalog_name: str, state: TableState, rows: DataFrame,
                 properties: dict[str, str], stage: str) -> Staged:
    """Append ``rows`` as one snapshot on branch ``stage``, forked from the planned snapshot."""

    def append() -> None:
        writer = rows.writeTo(f"{catalog_name}.{quote(state.name)}")
        for key, value in properties.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.append()

    return _staged_write(spark, catalog, state, stage, {}, append)


def _staged_write(spark: SparkSession, catalog: Catalog, state: TableState, stage: str,
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
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    assert state.table is not None
    latest = Window.partitionBy(*ids).orderBy(F.col("partition").desc(), F.col("offset").desc())
    changes = rows.withColumn("_sinklab_rank", F.row_number().over(latest)).where("_sinklab_rank = 1")
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
    return _staged_write(spark, catalog, state, stage, properties, lambda: spark.sql(sql).collect())


def added_files(table: Table, snapshot_id: int) -> tuple[list[str], list[str]]:
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

    snap = table.metadata.snapshot_by_id(snapshot_id)
    data, deletes = [], []
    if snap is None:
        return data, deletes
    for manifest in snap.manifests(table.io):
        if manifest.added_snapshot_id != snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status != ManifestEntryStatus.ADDED:
                continue
            target = data if entry.data_file.content == DataFileContent.DATA else deletes
            target.append(entry.data_file.file_path)
    return data, deletes


# Answers that say nothing of whether a commit landed: it failed inside the catalog after arriving
# (500/502/504), the catalog refused for now (503), or the answer never came back.
UNKNOWN_OUTCOME = (CommitStateUnknownException, ServiceUnavailableError, requests.ConnectionError, requests.Timeout)
PUBLISH_ATTEMPTS = 3


def publish(catalog: Catalog, state: TableState, staged: Staged) -> bool:
    """Move the target branch to the staged snapshot iff it still points at the planned snapshot.

    Returns False when the table moved since planning (the caller re-plans); the staging branch
    goes away in the same commit when it lands. A publish whose answer is lost is resolved by
    reading the table (``landed``), never by committing blindly again: the compare-and-swap makes a
    second attempt safe only once the table says the first did not land.
    """
    # The requirement, not the loaded metadata, is what the catalog checks: a table loaded after the write
    # serves as well as a fresh one.
    table = staged.loaded or catalog.load_table(identifier(state.name))
    for attempt in range(1, PUBLISH_ATTEMPTS + 1):
        try:
            catalog.commit_table(
                table,
                (AssertRefSnapshotId(ref=state.branch, snapshot_id=state.snapshot_id),),
                (SetSnapshotRefUpdate(ref_name=state.branch, type="branch", snapshot_id=staged.snapshot_id),
                 RemoveSnapshotRefUpdate(ref_name=staged.stage)),
            )
            return True
        except CommitFailedException:
            return False
        except UNKNOWN_OUTCOME as exc:
            outcome = landed(catalog, state, staged)
            if outcome is not None:
                log.warning("table %s: the catalog's answer to publishing snapshot %d was lost (%s); the table says "
                            "it %s", state.name, staged.snapshot_id, exc, "landed" if outcome else "did not land")
                return outcome
            if attempt == PUBLISH_ATTEMPTS:
                raise
            log.warning("table %s: publishing snapshot %d got no answer (%s) and did not land; publishing again",
                        state.name, staged.snapshot_id, exc)
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def landed(catalog: Catalog, state: TableState, staged: Staged) -> bool | None:
    """After a publish without an answer: True when the target branch holds the staged snapshot
    (it landed, perhaps with commits of others on top), False when the branch moved to something
    else (the caller re-plans), None when the branch did not move (it did not land)."""
    from pyiceberg.table.snapshots import ancestors_of

    table = catalog.load_table(identifier(state.name))
    ref = table.metadata.refs.get(state.branch)
    head = ref.snapshot_id if ref is not None else None
    if head == state.snapshot_id:
        return None
    current = table.metadata.snapshot_by_id(head) if head is not None else None
    return any(s.snapshot_id == staged.snapshot_id for s in ancestors_of(current, table.metadata))


def drop_stage(catalog: Catalog, table_name: str, stage: str) -> None:
    table = catalog.load_table(identifier(table_name))
    if stage in table.metadata.refs:
        catalog.commit_table(table, (), (RemoveSnapshotRefUpdate(ref_name=stage),))


def drop_stale_stages(catalog: Catalog, table_name: str, sink: str) -> None:
    """Staging branches this sink's crashed cycles left behind; their snapshots never reached the target."""
    table = catalog.load_table(identifier(table_name))
    stale = [name for name in table.metadata.refs if name.startswith(f"{STAGE_PREFIX}{sink}-")]
    if stale:
        catalog.commit_table(table, (), tuple(RemoveSnapshotRefUpdate(ref_name=name) for name in stale))
