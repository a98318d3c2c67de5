"""Data writers: a cycle's rows go to a private staging branch; publishing is a compare-and-swap.

Iceberg's automatic commit retry rebases an append onto a concurrent one, which is exactly how two
instances duplicate data. So Spark writes to a branch no one else touches (its retries are
harmless there), and the target branch is moved to the staged snapshot by one REST commit that
asserts the target still points where the cycle planned: no retry, no rebase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException
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


STAGE_PREFIX = "sinklab-stage-"


def stage_name(sink: str, commit_id: str) -> str:
    return f"{STAGE_PREFIX}{sink}-{commit_id}"


def write_staged(spark: SparkSession, catalog: Catalog, catalog_name: str, state: TableState, rows: DataFrame,
                 properties: dict[str, str], stage: str) -> Staged:
    """Append ``rows`` as one snapshot on branch ``stage``, forked from the planned snapshot."""
    import time

    started = time.monotonic()
    assert state.table is not None
    if state.snapshot_id is not None:
        state.table.manage_snapshots().create_branch(state.snapshot_id, stage).commit()
    spark.conf.set("spark.wap.branch", stage)
    try:
        writer = rows.writeTo(f"{catalog_name}.{quote(state.name)}")
        for key, value in properties.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.append()
    finally:
        spark.conf.unset("spark.wap.branch")
    table = catalog.load_table(identifier(state.name))
    snapshot_id = table.metadata.refs[stage].snapshot_id
    data_files, delete_files = added_files(table, snapshot_id)
    snap = table.metadata.snapshot_by_id(snapshot_id)
    summary = snap.summary.additional_properties if snap and snap.summary else {}
    return Staged(state.name, stage, snapshot_id, int(summary.get("added-records", 0)),
                  int(summary.get("added-files-size", 0)), data_files, delete_files,
                  int((time.monotonic() - started) * 1000))


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


def publish(catalog: Catalog, state: TableState, staged: Staged) -> bool:
    """Move the target branch to the staged snapshot iff it still points at the planned snapshot.

    Returns False when the table moved since planning (the caller re-plans); the staging branch
    goes away in the same commit when it lands.
    """
    table = catalog.load_table(identifier(state.name))
    try:
        catalog.commit_table(
            table,
            (AssertRefSnapshotId(ref=state.branch, snapshot_id=state.snapshot_id),),
            (SetSnapshotRefUpdate(ref_name=state.branch, type="branch", snapshot_id=staged.snapshot_id),
             RemoveSnapshotRefUpdate(ref_name=staged.stage)),
        )
    except CommitFailedException:
        return False
    return True


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
