"""Maintenance operations on one table, through Iceberg's Spark procedures.

Each is "another writer" to the sink's compare-and-swap (docs/protocol.md): when one lands between a
cycle's planning and its publish, the cycle stages again on top of it. Compaction commits with
Iceberg's own retry (rewriting files changes no data, so rebasing it onto a sink commit is safe);
when Iceberg refuses it (a sink's new deletes touch a file being rewritten), it plans again.
Beside Apache's sink, what it has written and not committed yet is kept (``sink.apache.in_flight``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field
from pyiceberg.table.update import RemoveSnapshotRefUpdate

from sinklab.maintenance.retention import (
    expiry_cutoff,
    recovery_snapshots,
    snaps_of,
    stale_stages,
    unreachable,
)
from sinklab.retry import retrying
from sinklab.sink.apache import InFlight, in_flight
from sinklab.sink.tables import identifier, lost_sequence_race, quote

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from sinklab.stack import Stack

log = logging.getLogger("sinklab.maintenance")
COMMIT_ATTEMPTS = 4
# Iceberg's defaults, for a command run by hand: snapshots live 5 days, orphan files 3 days.
DEFAULT_EXPIRE_MS = 5 * 86_400_000
DEFAULT_ORPHAN_MS = 3 * 86_400_000
# A file's age is its storage's clock, Apache's rounds' starts the Connect worker's: the margin between.
CLOCK_SLACK_MS = 30_000


class Report(BaseModel):
    """What one operation did to one table."""

    table: str
    operation: str  # compact, rewrite-manifests, expire, clean
    started_at_ms: int
    duration_ms: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    snapshot_id: int | None = None  # the branch head after the operation
    note: str | None = None

    def __str__(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        return f"{self.operation} {self.table}: {counts or 'nothing to do'} in {self.duration_ms} ms" + (
            f" ({self.note})" if self.note else "")


@dataclass
class Target:
    """A table as maintenance sees it: through Spark (procedures) and the REST catalog (metadata)."""

    spark: SparkSession
    catalog: Catalog
    catalog_name: str
    table: str
    # The Kafka Apache's sink may write the table from (a librdkafka client's settings): cleaning then keeps
    # what it has in flight; ``control_topics``: its control topics beyond its default one.
    kafka: dict[str, Any] | None = None
    control_topics: tuple[str, ...] = ()

    @classmethod
    def on(cls, stack: Stack, table: str, catalog_name: str = "sinklab",
           control_topics: tuple[str, ...] = ()) -> Target:
        spark = stack.driver(f"maintenance of {table}")
        stack.register_spark_catalog(catalog_name)
        return cls(spark, stack.catalog, catalog_name, table, stack.kafka_config(), control_topics)

    def load(self) -> Table:
        return self.catalog.load_table(identifier(self.table))

    def call(self, procedure: str, **args: str) -> list[Any]:
        named = ", ".join(f"{k} => {v}" for k, v in args.items())
        return self.spark.sql(f"CALL {self.catalog_name}.system.{procedure}({named})").collect()

    @property
    def quoted(self) -> str:
        return _literal(self.table)


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _timestamp(ms: int) -> str:
    """A timestamp literal that means the same instant whatever the session's time zone."""
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return f"TIMESTAMP '{at.strftime('%Y-%m-%d %H:%M:%S')}.{ms % 1000:03d}Z'"


def _options(options: dict[str, str]) -> str:
    return "map(" + ", ".join(f"{_literal(k)}, {_literal(v)}" for k, v in options.items()) + ")"


def _start() -> tuple[int, float]:
    return int(time.time() * 1000), time.monotonic()


def _done(report: Report, began: float, after: Table) -> Report:
    """``report`` finished; ``after``: the table as the operation left it (loaded once, by the operation)."""
    report.duration_ms = int((time.monotonic() - began) * 1000)
    head = after.current_snapshot()
    report.snapshot_id = head.snapshot_id if head else None
    log.info("%s", report)
    return report


def small_files(target: Target, small_bytes: int, table: Table | None = None) -> int:
    """The most small data files any one partition of the table (``table``, if loaded already) holds."""
    spec = (table or target.load()).spec()
    group = "" if spec.is_unpartitioned() else "GROUP BY partition ORDER BY n DESC LIMIT 1"
    rows = target.spark.sql(
        f"SELECT count(*) AS n FROM {target.catalog_name}.{quote(target.table)}.files "
        f"WHERE content = 0 AND file_size_in_bytes < {int(small_bytes)} {group}").collect()
    return int(rows[0].n) if rows else 0


def target_file_size(table: Table, override: int | None = None) -> int:
    return override or int(table.properties.get("write.target-file-size-bytes", 512 * 1024 * 1024))


def compact(target: Target, target_file_size_bytes: int | None = None, sort_by: list[str] | None = None,
            min_input_files: int = 2) -> Report:
    """Bin-pack (or sort) the data files of each partition holding ``min_input_files`` or more into
    files of about the target size; a row-level table's deletes are applied and its delete files
    compacted too. ``sort_by`` orders rows within the new files (e.g. the id columns)."""
    started_at, began = _start()
    table = target.load()
    options = {"min-input-files": str(min_input_files)}
    if target_file_size_bytes:
        options["target-file-size-bytes"] = str(target_file_size_bytes)
    deletes = _has_deletes(table)
    if deletes:
        options["delete-file-threshold"] = "1"  # a data file with any delete is rewritten without the deleted rows
    args = {"table": target.quoted, "options": _options(options)}
    if sort_by:
        args.update(strategy="'sort'", sort_order=_literal(", ".join(sort_by)))
    report = Report(table=target.table, operation="compact", started_at_ms=started_at)
    row = _retrying(target, report, lambda: target.call("rewrite_data_files", **args)[0])
    report.counts.update(rewritten_data_files=row.rewritten_data_files_count,
                         added_data_files=row.added_data_files_count, rewritten_bytes=row.rewritten_bytes_count,
                         removed_delete_files=row.removed_delete_files_count)
    if deletes:
        pos = target.call("rewrite_position_delete_files", table=target.quoted,
                          options=_options({"rewrite-all": "true"}))[0]
        report.counts.update(rewritten_delete_files=pos.rewritten_delete_files_count,
                             added_delete_files=pos.added_delete_files_count)
    after = target.load()
    report.counts["table_rows"] = _total(after, "total-records")
    return _done(report, began, after)


def rewrite_manifests(target: Target) -> Report:
    """One manifest per partition range instead of one per commit: planning reads fewer files."""
    started_at, began = _start()
    report = Report(table=target.table, operation="rewrite-manifests", started_at_ms=started_at)
    row = _retrying(target, report, lambda: target.call("rewrite_manifests", table=target.quoted)[0])
    report.counts.update(rewritten_manifests=row.rewritten_manifests_count, added_manifests=row.added_manifests_count)
    return _done(report, began, target.load())


def expire(target: Target, older_than_ms: int = DEFAULT_EXPIRE_MS, retain_last: int = 1) -> Report:
    """Expire snapshots older than ``older_than_ms`` (an age), except what exactly-once recovery needs:
    each sink's newest snapshot with recorded offsets on each branch and everything after it.
    The files only expired snapshots referenced are deleted."""
    started_at, began = _start()
    report = Report(table=target.table, operation="expire", started_at_ms=started_at)
    return _done(report, began, _expire(target, started_at - older_than_ms, retain_last, [], report))


def clean(target: Target, older_than_ms: int = DEFAULT_ORPHAN_MS) -> Report:
    """Remove what no snapshot will ever reference and is older than ``older_than_ms`` (the safety age):
    staging branches of cycles that never published, the snapshots they staged, and orphan files
    (data files of killed writes, old metadata). The age must exceed the longest write in flight; beside
    Apache's sink (``target.kafka`` given) its files in flight are kept whatever their age."""
    started_at, began = _start()
    report = Report(table=target.table, operation="clean", started_at_ms=started_at)
    cutoff = started_at - older_than_ms
    table = target.load()
    snaps, refs = snaps_of(table.metadata)
    stale = stale_stages(snaps, refs, cutoff)
    if stale:
        target.catalog.commit_table(table, (), tuple(RemoveSnapshotRefUpdate(ref_name=r.name) for r in stale))
        log.info("%s: dropped %d staging branches of cycles that never published: %s", target.table, len(stale),
                 ", ".join(r.name for r in stale))
    report.counts["dropped_stages"] = len(stale)
    table = target.load() if stale else table
    snaps, refs = snaps_of(table.metadata)
    dead = unreachable(snaps, refs, cutoff)
    if dead:
        # Only the named snapshots: the time-based cutoff given is the oldest one, so nothing else goes.
        table = _expire(target, min(s.timestamp_ms for s in snaps.values()), 1, dead, report)
    report.counts["unreachable_snapshots"] = len(dead)
    apache = apache_in_flight(target, table)
    if apache.open_since_ms is not None:
        cutoff = min(cutoff, apache.open_since_ms - CLOCK_SLACK_MS)
    # Files only: the metadata stays as it is.
    report.counts["orphan_files"], report.counts["kept_in_flight"] = _delete_orphans(target, cutoff, apache.files)
    if apache.any:
        report.note = (f"beside Apache's sink ({', '.join(f'{g} {s}' for g, s in apache.connectors.items())}): kept "
                       f"the {len(apache.files)} files it named and has not committed" + (
                           f", and files younger than {_timestamp(cutoff)[10:-1]} (its open round)"
                           if apache.open_since_ms is not None else ""))
    return _done(report, began, table)


def apache_in_flight(target: Target, table: Table) -> InFlight:
    """What Apache's sink has in flight on the target's table (nothing without ``target.kafka``)."""
    if target.kafka is None:
        return InFlight(target.table)
    from confluent_kafka.admin import AdminClient

    return in_flight(target.kafka, AdminClient({"log_level": 4, **target.kafka}), table, target.table,
                     topics=target.control_topics)


def maintain(target: Target, expire_older_than_ms: int = DEFAULT_EXPIRE_MS, orphan_older_than_ms: int =
             DEFAULT_ORPHAN_MS, retain_last: int = 1, target_file_size_bytes: int | None = None,
             sort_by: list[str] | None = None, manifests: bool = True) -> list[Report]:
    """Compact, rewrite manifests, expire, clean: in that order, so that expiry deletes the files
    compaction replaced and cleaning finds only true leftovers."""
    reports = [compact(target, target_file_size_bytes, sort_by)]
    if manifests:
        reports.append(rewrite_manifests(target))
    reports.append(expire(target, expire_older_than_ms, retain_last))
    reports.append(clean(target, orphan_older_than_ms))
    return reports


# ---- inside
def _expire(target: Target, cutoff_ms: int, retain_last: int, snapshot_ids: list[int], report: Report) -> Table:
    """Expire through Iceberg's procedure, counted into ``report``; the table as it left it."""
    snaps, refs = snaps_of(target.load().metadata)
    held = recovery_snapshots(snaps, refs)
    cutoff = expiry_cutoff(cutoff_ms, held)
    if cutoff < cutoff_ms and not snapshot_ids:
        oldest = min(held.items(), key=lambda kv: kv[1].timestamp_ms)
        report.note = (f"kept snapshots from {oldest[1].snapshot_id} on: sink {oldest[0][1]}'s newest commit on "
                       f"branch {oldest[0][0]}, which its recovery reads")
    args = {"table": target.quoted, "older_than": _timestamp(cutoff),
            "retain_last": str(max(1, retain_last))}
    if snapshot_ids:
        args["snapshot_ids"] = "array(" + ", ".join(f"{i}L" for i in snapshot_ids) + ")"
    row = target.call("expire_snapshots", **args)[0]
    table = target.load()
    after = len(table.metadata.snapshots)
    report.counts["expired_snapshots"] = report.counts.get("expired_snapshots", 0) + len(snaps) - after
    report.counts["deleted_data_files"] = report.counts.get("deleted_data_files", 0) + row.deleted_data_files_count
    report.counts["deleted_delete_files"] = report.counts.get("deleted_delete_files", 0) + (
        row.deleted_position_delete_files_count + row.deleted_equality_delete_files_count)
    report.counts["snapshots"] = after
    return table


def _delete_orphans(target: Target, cutoff_ms: int, keep: set[str]) -> tuple[int, int]:
    """Iceberg's orphan-file action, deleting all it finds but ``keep``: (deleted, kept). Its procedure
    refuses ages under 24 h, a floor meant for writers it cannot see. sinklab's cycles stage within one
    interval, so a shorter age is the user's to choose."""
    jvm = target.spark._jvm  # type: ignore[attr-defined]
    jspark = target.spark._jsparkSession  # type: ignore[attr-defined]
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(jspark, f"{target.catalog_name}.{target.table}")
    # The action finds; a Stream.Builder (a Java Consumer of each path) takes what it would delete.
    found = jvm.java.util.stream.Stream.builder()
    (jvm.org.apache.iceberg.spark.actions.SparkActions.get(jspark).deleteOrphanFiles(table)
     .olderThan(int(cutoff_ms)).deleteWith(found).execute())
    keep_same = {_same_file(p) for p in keep}
    deleted = kept = 0
    for path in found.build().toArray():
        if _same_file(path) in keep_same:
            kept += 1
        else:
            table.io().deleteFile(path)
            deleted += 1
    return deleted, kept


def _same_file(path: str) -> tuple[str, str, str]:
    """A file's location as Iceberg's orphan-file action compares them: s3a:// and s3n:// are s3://,
    file:/x is file:///x."""
    parts = urlsplit(path)
    return {"s3a": "s3", "s3n": "s3"}.get(parts.scheme, parts.scheme), parts.netloc, "/" + parts.path.lstrip("/")


def _total(table: Table, key: str) -> int:
    """A ``total-*`` count of the table's current snapshot summary."""
    snap = table.current_snapshot()
    return int(snap.summary.additional_properties.get(key, 0)) if snap and snap.summary else 0


def _has_deletes(table: Table) -> bool:
    return _total(table, "total-delete-files") > 0


def _retrying(target: Target, report: Report, commit: Callable[[], Any]) -> Any:
    """Run a rewrite, planning it again when a concurrent commit (a sink's) made Iceberg refuse it."""
    def plan_again(exc: BaseException, attempt: int) -> None:
        log.warning("%s of %s lost a race with another commit (%s); planning again", report.operation,
                    target.table, _first_line(exc))
        report.counts["retries"] = attempt

    return retrying(commit, _lost_race, attempts=COMMIT_ATTEMPTS, before_again=plan_again)


def _lost_race(exc: BaseException) -> bool:
    text = str(exc)
    return lost_sequence_race(exc) or any(s in text for s in (
        "ValidationException", "CommitFailedException", "Cannot commit", "found new conflicting delete files",
        "Missing required files to delete"))


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
