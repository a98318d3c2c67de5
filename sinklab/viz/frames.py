"""Tidy pandas frames from Iceberg metadata and the sink's control topic.

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
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pyiceberg.manifest import FileFormat

from sinklab.sink.apache import ApacheLog
from sinklab.sink.records import (
    BAD_KINDS,
    DEAD_LETTER_TABLE,
    DEAD_LETTERED,
    KEY_CONNECT_STAGE,
    KEY_CONVERTER_FAILED,
    NO_TABLE,
    UNDECODABLE,
    connect_stage_of,
)
from sinklab.sink.tables import COMMIT_ID_PROP, OFFSETS_PROP, SINK_PROP, VTTS_PROP, identifier
from sinklab.sink.wire import (
    CONTROL_TOPIC,
    ControlEvent,
    Offsets,
    PayloadType,
    TopicReader,
    events_of,
    from_property,
    log_frame,
)
from sinklab.sink.wire import apache_events as apache

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from sinklab.stack import Stack

    MetadataSource = Stack | Catalog
    KafkaSource = Stack | str

MAIN = "main"
METADATA_FIELD = "_kafka_metadata"

SNAPSHOT_COLUMNS = [
    "table", "branch", "snapshot_id", "parent_id", "sequence_number", "operation", "schema_id", "committed_at",
    "visible_at", "sink", "commit_id", "offsets", "vtts", "added_records", "deleted_records", "added_files",
    "removed_files", "added_delete_files", "added_dvs", "removed_dvs", "added_bytes", "removed_bytes",
    "total_records", "total_files", "total_delete_files", "total_bytes",
]
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
COMMIT_COLUMNS = [
    "sink", "cycle", "commit_id", "started_at", "completed_at", "vtts", "table", "branch", "snapshot_id", "records",
    "data_files", "delete_files", "bytes", "write_ms", "commit_ms", "duration_ms", "offsets",
]
CYCLE_COLUMNS = [
    "sink", "cycle", "commit_id", "started_at", "completed_at", "vtts", "read", "written", "tables", "data_files",
    "bytes", "duration_ms", "offsets", "counters",
]
RECORD_COLUMNS = ["topic", "partition", "offset", "produced_at"]
VISIBILITY_COLUMNS = [*RECORD_COLUMNS, "table", "snapshot_id", "visible_at", "latency_s", "warmup"]
LAG_COLUMNS = ["at", "topic", "partition", "end", "committed", "lag"]


# ---- where things are
def _catalog(source: MetadataSource) -> Catalog:
    return source if hasattr(source, "load_table") else source.catalog


def _bootstrap(source: KafkaSource) -> str:
    return source if isinstance(source, str) else source.bootstrap_servers


def _names(tables: str | Iterable[str]) -> list[str]:
    return [tables] if isinstance(tables, str) else list(tables)


def _ms(value: Any) -> pd.Timestamp:
    return pd.Timestamp(int(value), unit="ms", tz="UTC")


TIME_COLUMNS = {"committed_at", "visible_at", "vtts", "started_at", "completed_at", "produced_at", "at", "until",
                "made_current_at", "ts"}
FLOAT_COLUMNS = {"gap_s", "interval_s", "ratio", "fresh_s", "stale_s", "latency_s"}
OBJECT_COLUMNS = {"table", "branch", "operation", "sink", "commit_id", "offsets", "counters", "topic", "content",
                  "file_path", "source", "target", "source_topic", "kind", "message", "key", "value", "type"}


def _empty(columns: list[str]) -> pd.DataFrame:
    """No rows, but the dtypes a filled frame has: code downstream (``.dt``, sums) works the same."""
    def dtype(c: str) -> str:
        if c in TIME_COLUMNS:
            return "datetime64[ns, UTC]"
        if c in FLOAT_COLUMNS:
            return "float64"
        return "object" if c in OBJECT_COLUMNS else "int64"
    return pd.DataFrame({c: pd.Series(dtype=dtype(c)) for c in columns})


def load_table(source: MetadataSource, table: str) -> Table:
    return _catalog(source).load_table(identifier(table))


# ---- Iceberg metadata
def snapshots(source: MetadataSource, tables: str | Iterable[str], branch: str = MAIN) -> pd.DataFrame:
    """One row per snapshot on each table's ``branch`` lineage, oldest first.

    Columns: the Iceberg summary as integers (``added_records``, ``added_files``, ``added_bytes``,
    ``total_records``, …), the sink's properties (``sink``, ``commit_id``, ``offsets`` as
    ``{topic: {partition: next offset}}``, ``vtts``; empty for other writers' snapshots),
    ``committed_at`` and ``visible_at`` (see the module docstring).
    """
    frames = [_table_snapshots(load_table(source, name), name, branch) for name in _names(tables)]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return _empty(SNAPSHOT_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def _lineage(table: Table, branch: str) -> list[Any]:
    ref = table.metadata.refs.get(branch)
    chain = []
    snapshot_id = ref.snapshot_id if ref is not None else None
    while snapshot_id is not None:
        snap = table.metadata.snapshot_by_id(snapshot_id)
        if snap is None:  # expired: the lineage stops here
            break
        chain.append(snap)
        snapshot_id = snap.parent_snapshot_id
    return chain[::-1]


def _table_snapshots(table: Table, name: str, branch: str) -> pd.DataFrame:
    chain = _lineage(table, branch)
    if not chain:
        return _empty(SNAPSHOT_COLUMNS)
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
        return _empty(columns)
    # From the manifests, not pyiceberg's inspect.entries: that reads every file's column metrics,
    # which a deletion vector (a Puffin blob) does not have, and fails on a v3 table.
    rows = []
    for manifest in snap.manifests(tbl.io):
        names = [f.name for f in tbl.specs()[manifest.partition_spec_id].fields]
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            f = entry.data_file
            content = _content(int(f.content), f.file_format == FileFormat.PUFFIN)
            rows.append((table, entry.snapshot_id, content, f.file_path, f.record_count, f.file_size_in_bytes,
                         _partition_text({n: f.partition[i] for i, n in enumerate(names)})))
    frame = pd.DataFrame(rows, columns=columns) if rows else _empty(columns)
    return frame.astype({"added_by": "int64", "record_count": "int64", "file_size_in_bytes": "int64"})


def _content(content: int, puffin: bool) -> str:
    if content == 1 and puffin:
        return "deletion-vector"  # format v3: position deletes of one data file, as a Puffin blob
    return {0: "data", 1: "position-deletes", 2: "equality-deletes"}.get(content, str(content))


# ---- the control topic
class ControlLog:
    """The control topic's committed events, read incrementally: each ``read()`` fetches only what
    arrived since the last one and returns every event so far, in ``read_control_log``'s columns.

    Unlike a one-shot read it never waits for an open transaction: a sink that is mid-commit (or
    was killed mid-commit, until its next instance aborts the transaction) holds read_committed
    consumers back, so ``read()`` returns what is committed once nothing new arrives for ``idle_s``.
    """

    def __init__(self, source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC):
        self.bootstrap = _bootstrap(source)
        self.sink = sink
        self.topic = control_topic
        self._events: list[ControlEvent] = []
        self._reader: TopicReader | None = None
        self._apache = ApacheLog(sink)

    def read(self, timeout: float = 10.0, idle_s: float = 0.5) -> pd.DataFrame:
        if self._reader is None:
            self._reader = TopicReader(self.bootstrap, self.topic)
        for batch in self._reader.read(timeout=timeout, idle_s=idle_s):
            self._events.extend(events_of(batch, self.sink))
            # Apache's sink's control topic reads the same: its commits as sinklab's events (apache_log).
            self._events.extend(self._apache.feed(batch))
        return self.frame()

    def frame(self) -> pd.DataFrame:
        return log_frame(self._events)

    def close(self) -> None:
        """Close the consumer; a later ``read()`` starts again from the beginning."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._events = []
        self._apache = ApacheLog(self.sink)

    def __enter__(self) -> ControlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def control_log(source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC) -> pd.DataFrame:
    """Every committed event on the control topic (of one sink), one row per event."""
    with ControlLog(source, sink, control_topic) as log:
        return log.read()


def commits(source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC,
            log: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per table per completed cycle, from the control topic's ``commit-complete`` events.

    ``started_at`` is the cycle's ``commit-start`` event (its Kafka transaction opened), ``completed_at``
    its ``commit-complete``; ``data_files``/``delete_files`` are counts; ``offsets`` is what the table
    recorded. ``log`` reuses a control log already read (:func:`control_log`, :class:`ControlLog`).
    """
    log = control_log(source, sink, control_topic) if log is None else log
    rows = []
    for cycle in _completed(log).itertuples(index=False):
        for t in cycle.tables:
            rows.append({
                "sink": cycle.sink, "cycle": cycle.cycle, "commit_id": cycle.commit_id,
                "started_at": cycle.started_at, "completed_at": cycle.ts, "vtts": cycle.vtts, "table": t["table"],
                "branch": t["branch"], "snapshot_id": t["snapshot_id"], "records": t["records"],
                "data_files": len(t["data_files"]), "delete_files": len(t["delete_files"]), "bytes": t["bytes"],
                "write_ms": t["write_ms"], "commit_ms": t["commit_ms"], "duration_ms": cycle.duration_ms,
                "offsets": t["offsets"],
            })
    return pd.DataFrame(rows, columns=COMMIT_COLUMNS) if rows else _empty(COMMIT_COLUMNS)


def cycles(source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC,
           log: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per completed cycle: records ``read`` from Kafka and rows ``written`` to all its
    tables (more than read with fan-out to several tables, fewer with bad or unrouted records),
    files, bytes, the cycle's end ``offsets`` and its ``counters`` (tombstones, dead letters, …)."""
    log = control_log(source, sink, control_topic) if log is None else log
    done = _completed(log)
    if done.empty:
        return _empty(CYCLE_COLUMNS)
    return pd.DataFrame({
        "sink": done["sink"], "cycle": done["cycle"], "commit_id": done["commit_id"],
        "started_at": done["started_at"], "completed_at": done["ts"], "vtts": done["vtts"],
        "read": done["counters"].map(lambda c: int(c.get("records", 0))),
        # The dead-letter table's rows are the cycle's bad records, not rows it wrote.
        "written": done["tables"].map(lambda ts: sum(int(t["records"]) for t in ts))
        - done["counters"].map(lambda c: int(c.get(DEAD_LETTER_TABLE, 0))),
        "tables": done["tables"].map(len),
        "data_files": done["tables"].map(lambda ts: sum(len(t["data_files"]) for t in ts)),
        "bytes": done["tables"].map(lambda ts: sum(int(t["bytes"]) for t in ts)),
        "duration_ms": done["duration_ms"], "offsets": done["offsets"],
        "counters": done["counters"].map(dict),
    }, columns=CYCLE_COLUMNS).reset_index(drop=True)


def _completed(log: pd.DataFrame) -> pd.DataFrame:
    """commit-complete events in commit order, numbered per sink, with their commit-start time."""
    if log.empty:
        return log.assign(cycle=pd.Series(dtype="int64"), started_at=pd.Series(dtype="datetime64[ns, UTC]"))
    starts = log[log["type"] == PayloadType.COMMIT_START].drop_duplicates("commit_id", keep="last") \
        .set_index("commit_id")["ts"]
    done = log[log["type"] == PayloadType.COMMIT_COMPLETE].sort_values("ts", kind="stable").copy()
    done["started_at"] = done["commit_id"].map(starts)
    done["cycle"] = done.groupby("sink").cumcount() + 1
    return done.reset_index(drop=True)


def dead_letter_stages(cycle_frame: pd.DataFrame) -> dict[str, int]:
    """Dead letters of the cycles by Kafka Connect stage, from each cycle's counters of bad-record kinds;
    a converter's kinds are the value's but for those its key's converter failed (``KEY_CONVERTER_FAILED``)."""
    out: dict[str, int] = {}
    for counters in cycle_frame.get("counters", []):
        if not counters.get(DEAD_LETTERED):
            continue  # without dead letters, records no table takes were skipped, not dead-lettered
        keyed = int(counters.get(KEY_CONVERTER_FAILED, 0))
        for kind in BAD_KINDS:
            if counters.get(kind):
                stage = connect_stage_of(kind)
                out[stage] = out.get(stage, 0) + int(counters[kind])
        if keyed:
            out[connect_stage_of(UNDECODABLE)] -= keyed  # a key fails to decode, nothing else
            out[KEY_CONNECT_STAGE] = out.get(KEY_CONNECT_STAGE, 0) + keyed
    return dict(sorted((stage, n) for stage, n in out.items() if n))


def dead_letters(source: KafkaSource, topic: str, timeout: float = 10.0) -> pd.DataFrame:
    """The records on a dead-letter topic: where each sits there (``partition``, ``offset``), its
    ``key`` and ``value`` as the source had them, and — with
    ``errors.deadletterqueue.context.headers.enable`` — where it came from (``source_topic``,
    ``source_partition``, ``source_offset``), its ``kind``, the error ``message`` and the ``table``."""
    columns = ["partition", "offset", "source_topic", "source_partition", "source_offset", "kind", "table", "message",
               "key", "value"]
    rows: list[dict[str, Any]] = []
    with TopicReader(_bootstrap(source), topic) as reader:
        for batch in reader.read(timeout=timeout):
            for m in batch:
                headers = {k: (v.decode(errors="replace") if v is not None else None) for k, v in m.headers() or []}
                source_partition = headers.get("__connect.errors.partition")
                source_offset = headers.get("__connect.errors.offset")
                rows.append({
                    "partition": m.partition(), "offset": m.offset(),
                    "source_topic": headers.get("__connect.errors.topic"),
                    "source_partition": int(source_partition) if source_partition is not None else None,
                    "source_offset": int(source_offset) if source_offset is not None else None,
                    "kind": headers.get("__sinklab.errors.kind"), "table": headers.get("__sinklab.errors.table"),
                    "message": headers.get("__connect.errors.exception.message"), "key": m.key(), "value": m.value(),
                })
    frame = pd.DataFrame(rows, columns=columns) if rows else _empty(columns)
    for column in ("source_partition", "source_offset"):
        frame[column] = frame[column].astype("Int64")
    return frame.sort_values(["partition", "offset"], ignore_index=True)


# ---- derived views
def _sink_snapshots(snaps: pd.DataFrame, sink: str | None) -> pd.DataFrame:
    own = snaps[snaps["sink"].notna() & snaps["offsets"].notna()]
    return own[own["sink"] == sink] if sink is not None else own


def cadence(snaps: pd.DataFrame, interval_ms: int | None = None, sink: str | None = None) -> pd.DataFrame:
    """The gaps between a table's consecutive sink commits, against the configured interval.

    ``gap_s`` is the time between two commits becoming visible; ``ratio`` is ``gap_s`` over the
    interval (1 = on time; above 1 when a cycle outlasts the interval or nothing new arrived).
    """
    own = _sink_snapshots(snaps, sink).sort_values(["table", "visible_at"])
    out = pd.DataFrame({
        "table": own["table"], "snapshot_id": own["snapshot_id"], "at": own["visible_at"],
        "gap_s": own.groupby("table")["visible_at"].diff().dt.total_seconds(),
    })
    if "series" in own.columns:  # a readable name for the table's series (the explorer's)
        out["series"] = own["series"]
    out = out.dropna(subset=["gap_s"]).reset_index(drop=True)
    out["interval_s"] = interval_ms / 1000 if interval_ms else np.nan
    out["ratio"] = out["gap_s"] / out["interval_s"]
    return out


def pace(cycle_frame: pd.DataFrame, interval_ms: int, last: int = 10) -> dict[str, Any] | None:
    """What sets the pace of the recent commits: the ``interval`` (cycles end within it, the sink
    waits out the rest) or the ``cycle`` (a cycle outlasts the interval, and the next one starts at
    once with what arrived meanwhile). None before the first cycle."""
    recent = cycle_frame.tail(last)
    if recent.empty:
        return None
    cycle_s = float(recent["duration_ms"].median()) / 1000
    interval_s = interval_ms / 1000
    return {"cycle_s": cycle_s, "interval_s": interval_s, "cycles": len(recent),
            "binds": "cycle" if cycle_s >= interval_s else "interval"}


def freshness(snaps: pd.DataFrame, now: pd.Timestamp | None = None, sink: str | None = None) -> pd.DataFrame:
    """How stale each table is over time: ``now − VTTS`` of the newest visible commit.

    For every sink commit: ``at`` (visible), ``vtts``, ``fresh_s`` (at − vtts, the staleness right
    after it) and ``stale_s`` (``until`` − vtts, the staleness just before the next commit or, for
    the newest, at ``now``). Plotted in order it is a sawtooth.
    """
    now = pd.Timestamp.now(tz="UTC") if now is None else now
    own = _sink_snapshots(snaps, sink)
    own = own[own["vtts"].notna()].sort_values(["table", "visible_at"])
    out = pd.DataFrame({"table": own["table"], "snapshot_id": own["snapshot_id"], "at": own["visible_at"],
                        "vtts": own["vtts"]})
    if "series" in own.columns:
        out["series"] = own["series"]
    out["until"] = out.groupby("table")["at"].shift(-1).fillna(now)
    out["fresh_s"] = (out["at"] - out["vtts"]).dt.total_seconds()
    out["stale_s"] = (out["until"] - out["vtts"]).dt.total_seconds()
    return out.reset_index(drop=True)


# ---- per-record visibility
def record_times(source: KafkaSource, topics: str | Iterable[str], until: Offsets | None = None,
                 timeout: float = 30.0) -> pd.DataFrame:
    """The Kafka timestamp of every record of ``topics`` (up to ``until`` per partition, else the
    end): ``topic, partition, offset, produced_at``. Only offsets and timestamps are kept, so
    millions of records fit; a record's timestamp is its producer's CreateTime unless the topic
    says LogAppendTime. TimeoutError (naming the partitions) after ``timeout`` s without progress."""
    out: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
    with TopicReader(_bootstrap(source), topics) as reader:
        for batch in reader.read(until, timeout=timeout, batch=10_000, missing_ok=False):
            # Per partition, as arrays: a batch holds runs of a few partitions' records.
            found: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
            for m in batch:
                offsets, stamps = found.setdefault((m.topic(), m.partition()), ([], []))
                offsets.append(m.offset())
                stamps.append(m.timestamp()[1])
            for (topic, p), (offsets, stamps) in found.items():
                out["topic"].append(np.full(len(offsets), topic, dtype=object))
                out["partition"].append(np.full(len(offsets), p, dtype=np.int64))
                out["offset"].append(np.asarray(offsets, dtype=np.int64))
                out["produced_at"].append(np.asarray(stamps, dtype=np.int64))
    if not out["offset"]:
        return _empty(RECORD_COLUMNS)
    frame = pd.DataFrame({c: np.concatenate(v) for c, v in out.items()})
    frame["produced_at"] = pd.to_datetime(frame["produced_at"], unit="ms", utc=True)
    return frame.sort_values(["topic", "partition", "offset"], ignore_index=True)


def table_record_times(source: MetadataSource, table: str, field: str = METADATA_FIELD,
                       snapshot_id: int | None = None) -> pd.DataFrame:
    """The same columns as :func:`record_times` plus ``table``, read from the table's own Kafka
    metadata columns (the ``KafkaMetadataTransform``, flat or nested): exactly the records the
    table holds, which is what per-table visibility needs under fan-out."""
    tbl = load_table(source, table)
    names = {f.name for f in tbl.schema().fields}
    parts = ("topic", "partition", "offset", "record_timestamp")
    if all(f"{field}_{p}" in names for p in parts):
        columns = [f"{field}_{p}" for p in parts]
    elif field in names:
        columns = [f"{field}.{p}" for p in parts]
    else:
        raise ValueError(f"table {table} has no Kafka metadata columns ({field}_topic, … or a {field} struct): "
                         f"configure the KafkaMetadataTransform, or use record_times() to read Kafka")
    scan = tbl.scan(selected_fields=tuple(columns), snapshot_id=snapshot_id).to_arrow()
    frame = _metadata_frame(scan, columns, field)
    frame["table"] = table
    return frame.sort_values(["topic", "partition", "offset"], ignore_index=True)


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


def visibility(snaps: pd.DataFrame, records: pd.DataFrame, sink: str | None = None) -> pd.DataFrame:
    """When each record became readable, and how long after it was produced.

    A record at offset ``o`` of partition ``p`` is in the first sink snapshot whose recorded
    ``sinklab.offsets`` for ``p`` is above ``o`` (offsets never go back along a lineage, so this is
    a binary search per partition, not a scan); it became visible at that snapshot's
    ``visible_at``. ``latency_s`` = visible_at − produced_at. Records not committed yet get NaT/NaN.

    ``warmup`` marks the records of the sink's first snapshot of each table in ``snaps``: that cycle
    carries the backlog produced before the sink started and Spark's warm-up, not the steady
    latency; :func:`latency_percentiles` and the figures keep them apart.

    With a ``table`` column in ``records`` (:func:`table_record_times`) each record is matched
    against its own table only; without it (:func:`record_times`) against every table in ``snaps``,
    which is right when every table takes every record (no routing).
    """
    own = _sink_snapshots(snaps, sink)
    out = []
    for table, tsnaps in own.groupby("table", sort=True):
        tsnaps = tsnaps.sort_values("sequence_number")
        recs = records[records["table"] == table] if "table" in records.columns else records
        for (topic, partition), group in recs.groupby(["topic", "partition"], sort=False):
            marks = np.maximum.accumulate(np.asarray(
                [o.get(topic, {}).get(int(partition), 0) for o in tsnaps["offsets"]], dtype=np.int64))
            idx = np.searchsorted(marks, group["offset"].to_numpy(), side="right")
            found = idx < len(marks)
            safe = np.where(found, idx, 0)
            visible = tsnaps["visible_at"].to_numpy()[safe]
            ids = tsnaps["snapshot_id"].to_numpy()[safe]
            chunk = group[RECORD_COLUMNS].copy()
            chunk["table"] = table
            chunk["snapshot_id"] = pd.array(np.where(found, ids, 0), dtype="Int64")
            chunk.loc[~found, "snapshot_id"] = pd.NA
            chunk["visible_at"] = pd.to_datetime(visible, utc=True)
            chunk.loc[~found, "visible_at"] = pd.NaT
            chunk["warmup"] = found & (safe == 0)
            out.append(chunk)
    if not out:
        return _empty(VISIBILITY_COLUMNS)
    frame = pd.concat(out, ignore_index=True)
    frame["latency_s"] = (frame["visible_at"] - frame["produced_at"]).dt.total_seconds()
    return frame[VISIBILITY_COLUMNS]


def steady(vis: pd.DataFrame) -> pd.DataFrame:
    """The committed records outside the warm-up cycle (see :func:`visibility`)."""
    done = vis.dropna(subset=["latency_s"])
    return done[~done["warmup"].astype(bool)] if "warmup" in done.columns else done


def latency_percentiles(vis: pd.DataFrame, quantiles: Iterable[float] = (0.5, 0.9, 0.99),
                        warmup: bool = False) -> pd.DataFrame:
    """Per table: committed records and their visibility latency quantiles (``p50``, ``p99``, …) in
    seconds — without the warm-up cycle's records unless ``warmup`` (``warmup_records`` counts them)."""
    qs = list(quantiles)
    rows = []
    done = vis.dropna(subset=["latency_s"])
    kept = done if warmup else steady(vis)
    skipped = (done.groupby("table")["latency_s"].size() - kept.groupby("table")["latency_s"].size()) \
        .fillna(0).astype(int) if not done.empty else pd.Series(dtype="int64")
    for table, group in kept.groupby("table"):
        row: dict[str, Any] = {"table": table, "records": len(group)}
        row.update({f"p{round(q * 100):g}": group["latency_s"].quantile(q) for q in qs})
        row["max"] = group["latency_s"].max()
        row["warmup_records"] = int(skipped.get(table, 0))
        rows.append(row)
    return pd.DataFrame(rows, columns=["table", "records", *[f"p{round(q * 100):g}" for q in qs], "max",
                                       "warmup_records"])


# ---- consumer lag
def consumer_lag(source: KafkaSource, group: str, topics: str | Iterable[str], timeout: float = 10.0) -> pd.DataFrame:
    """Now, per partition: the end offset, the group's committed offset (what the sink's last
    complete cycle reached) and the lag between them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": _bootstrap(source), "group.id": group, "enable.auto.commit": False})
    try:
        tps = []
        for topic in _names(topics):
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is not None and meta.error is None:
                tps.extend(TopicPartition(topic, p) for p in sorted(meta.partitions))
        committed = {(c.topic, c.partition): c.offset for c in consumer.committed(tps, timeout=timeout)} if tps else {}
        at = pd.Timestamp.now(tz="UTC")
        rows = []
        for tp in tps:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
            done = committed.get((tp.topic, tp.partition), -1)
            done = low if done < 0 else done
            rows.append({"at": at, "topic": tp.topic, "partition": tp.partition, "end": high, "committed": done,
                         "lag": max(0, high - done)})
    finally:
        consumer.close()
    return pd.DataFrame(rows, columns=LAG_COLUMNS) if rows else _empty(LAG_COLUMNS)


def lag_history(source: KafkaSource, cycle_frame: pd.DataFrame, timeout: float = 10.0) -> pd.DataFrame:
    """The sink's lag per partition right after each completed cycle, reconstructed afterwards.

    At a cycle's ``completed_at`` the topic held every record timestamped before it: Kafka's
    ``offsets_for_times`` gives that end offset, and the cycle's end offset is what was
    committed. Assumes timestamps grow with offsets within a partition (one producer, CreateTime).
    """
    from confluent_kafka import Consumer, TopicPartition

    if cycle_frame.empty:
        return _empty(LAG_COLUMNS)
    consumer = Consumer({"bootstrap.servers": _bootstrap(source), "group.id": f"sinklab-viz-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    rows = []
    try:
        highs: dict[tuple[str, int], int] = {}
        for cycle in cycle_frame.itertuples(index=False):
            ms = int(cycle.completed_at.timestamp() * 1000)
            tps = [TopicPartition(t, p, ms) for t, parts in cycle.offsets.items() for p in parts]
            for found in consumer.offsets_for_times(tps, timeout=timeout):
                key = (found.topic, found.partition)
                end = found.offset
                if end < 0:  # nothing at or after that time: everything the partition holds was there
                    if key not in highs:
                        highs[key] = consumer.get_watermark_offsets(TopicPartition(*key), timeout=timeout)[1]
                    end = highs[key]
                done = cycle.offsets[found.topic][found.partition]
                rows.append({"at": cycle.completed_at, "topic": found.topic, "partition": found.partition,
                             "end": end, "committed": done, "lag": max(0, end - done)})
    finally:
        consumer.close()
    return pd.DataFrame(rows, columns=LAG_COLUMNS)


# ---- fan-out
def flows(cycle_frame: pd.DataFrame, commit_frame: pd.DataFrame) -> pd.DataFrame:
    """Records from each topic into the sink, and from the sink into each table (the dead-letter table
    too), to the dead-letter topic (those no dead-letter table took), or skipped: ``source, target,
    records``, for a sankey.

    Records read per topic are the growth of the cycles' end offsets (the first cycle counted from
    offset 0, as a sink that starts at the beginning of its topics does); with one topic, the
    cycles' own read counts.
    """
    rows: list[dict[str, Any]] = []
    for sink, own in cycle_frame.groupby("sink", sort=False):
        topics = sorted({t for offsets in own["offsets"] for t in offsets})
        if len(topics) == 1:
            rows.append({"source": topics[0], "target": sink, "records": int(own["read"].sum())})
        else:
            last: dict[tuple[str, int], int] = {}
            read: dict[str, int] = {}
            for offsets in own["offsets"]:
                for topic, parts in offsets.items():
                    for p, end in parts.items():
                        read[topic] = read.get(topic, 0) + max(0, end - last.get((topic, p), 0))
                        last[(topic, p)] = max(end, last.get((topic, p), 0))
            rows.extend({"source": t, "target": sink, "records": n} for t, n in sorted(read.items()))
        mine = commit_frame[commit_frame["sink"] == sink]
        for table, n in mine.groupby("table", sort=True)["records"].sum().items():
            rows.append({"source": sink, "target": table, "records": int(n)})
        counters: dict[str, int] = {}
        for c in own["counters"]:
            for key, value in c.items():
                counters[key] = counters.get(key, 0) + int(value)
        if counters.get(DEAD_LETTERED):
            untabled = counters[DEAD_LETTERED] - counters.get(DEAD_LETTER_TABLE, 0)
            if untabled > 0:
                rows.append({"source": sink, "target": "dead letters", "records": untabled})
        elif counters.get(NO_TABLE):
            rows.append({"source": sink, "target": "no table (skipped)", "records": counters[NO_TABLE]})
        if counters.get("tombstones"):
            rows.append({"source": sink, "target": "tombstones (skipped)", "records": counters["tombstones"]})
    return pd.DataFrame(rows, columns=["source", "target", "records"])


def _partition_text(partition: dict[str, Any] | None) -> str:
    if not partition:
        return "(unpartitioned)"
    return ", ".join(f"{k}={v}" for k, v in partition.items())


# ---- maintenance
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


MAINTENANCE_COLUMNS = ["sink", "ts", "table", "duration_ms", "delay_ms", "snapshot_id", "rewritten_data_files",
                       "added_data_files", "rewritten_bytes", "expired_snapshots", "orphan_files"]


def maintenance_runs(source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC,
                     log: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per table per maintenance run a sink scheduled (``sinklab.maintenance.*``), from the
    control topic: when, how long it took, how much it delayed the next cycle, and what it did."""
    log = control_log(source, sink, control_topic) if log is None else log
    runs = log[log["type"] == PayloadType.MAINTENANCE]
    rows = []
    for run in runs.itertuples():
        counters = dict(run.counters)
        for t in run.tables:
            rows.append({"sink": run.sink, "ts": run.ts, "table": t["table"], "duration_ms": t["write_ms"],
                         "delay_ms": counters.get("delay_ms", 0), "snapshot_id": t["snapshot_id"],
                         "rewritten_data_files": counters.get("compact.rewritten_data_files", 0),
                         "added_data_files": counters.get("compact.added_data_files", 0),
                         "rewritten_bytes": t["bytes"],
                         "expired_snapshots": counters.get("expire.expired_snapshots", 0),
                         "orphan_files": counters.get("clean.orphan_files", 0)})
    if not rows:
        return _empty(MAINTENANCE_COLUMNS)
    return pd.DataFrame(rows, columns=MAINTENANCE_COLUMNS)
