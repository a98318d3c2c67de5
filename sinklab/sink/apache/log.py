"""Apache's sink's commit log, read as sinklab's: its control events (start-commit, data-written,
data-complete, commit-to-table, commit-complete; ``wire.apache_events`` reads their frame) become sinklab's
``commit-start`` and ``commit-complete`` (``control``), so that the workbench's frames, dashboard and
status read the pipeline a team already runs on Apache's sink as they read a sinklab sink's.

One Apache commit is several events from several tasks; a ``commit-complete`` is made when its
coordinator's commit-complete arrives, with a table for each commit-to-table, the files and records
of that table's data-written events, the source offsets of its data-complete events, and the
valid-through time its coordinator committed. A commit whose start came before the read began has no ``commit-start``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sinklab.sink.wire import apache_events
from sinklab.sink.wire import offsets as off
from sinklab.sink.wire.apache_events import PayloadType, table_name, uuid_text
from sinklab.sink.wire.control import CommitComplete, CommitStart, ControlEvent, TableCommit, read_control_log
from sinklab.sink.wire.offsets import Offsets, TopicPartition

if TYPE_CHECKING:
    import pandas as pd
    from confluent_kafka import Message

GROUP_PREFIX = "connect-"  # Kafka Connect's consumer group of a connector: connect-<name>


@dataclass
class _Table:
    data_files: list[str] = field(default_factory=list)
    delete_files: list[str] = field(default_factory=list)
    records: int = 0
    bytes: int = 0
    snapshot_id: int | None = None


@dataclass
class _Commit:
    started_ms: int | None = None
    tables: dict[str, _Table] = field(default_factory=dict)
    offsets: Offsets = field(default_factory=dict)


class ApacheLog:
    """Translates Apache's events of one connector (``sink``, its name), or of every connector, as they
    are fed in topic order; keeps the commits still open between feeds."""

    def __init__(self, sink: str | None = None):
        self.group = f"{GROUP_PREFIX}{sink}" if sink is not None else None
        self._open: dict[tuple[str, str], _Commit] = {}

    def feed(self, messages: Iterable[Message]) -> list[ControlEvent]:
        out: list[ControlEvent] = []
        for m in messages:
            try:
                framed = apache_events.unframe(m.value() or b"")
            except Exception:  # noqa: BLE001 - in Apache's frame but not its event: not this log's
                continue
            if framed is None:
                continue
            event = framed[1]
            group = str(event.get("group_id"))
            if self.group is not None and group != self.group:
                continue
            event_out = self._take(group, event)
            if event_out is not None:
                out.append(event_out)
        return out

    def _take(self, group: str, event: dict[str, Any]) -> ControlEvent | None:
        payload, kind = event["payload"], event["type"]
        commit_id, ts_ms = uuid_text(payload["commit_id"]), int(event["timestamp"]) // 1000
        sink = group.removeprefix(GROUP_PREFIX)
        commit = self._open.setdefault((group, commit_id), _Commit())
        if kind == PayloadType.START_COMMIT:
            commit.started_ms = ts_ms
            return CommitStart(sink, commit_id, ts_ms)
        if kind == PayloadType.DATA_WRITTEN:
            table = commit.tables.setdefault(table_name(payload["table_reference"]), _Table())
            for f in payload.get("data_files") or []:
                table.data_files.append(f["file_path"])
                table.records += int(f["record_count"])
                table.bytes += int(f["file_size_in_bytes"])
            table.delete_files.extend(f["file_path"] for f in payload.get("delete_files") or [])
        elif kind == PayloadType.DATA_COMPLETE:
            for a in payload.get("assignments") or []:
                if a.get("offset") is not None:
                    off.put(commit.offsets, TopicPartition(a["topic"], a["partition"]), int(a["offset"]))
        elif kind == PayloadType.COMMIT_TO_TABLE:
            table = commit.tables.setdefault(table_name(payload["table_reference"]), _Table())
            table.snapshot_id = payload.get("snapshot_id")
        elif kind == PayloadType.COMMIT_COMPLETE:
            del self._open[(group, commit_id)]
            vtts = payload.get("valid_through_ts")
            vtts_ms = int(vtts) // 1000 if vtts is not None else None
            landed = {n: t for n, t in commit.tables.items() if t.snapshot_id is not None}
            return CommitComplete(
                sink=sink, commit_id=commit_id, ts_ms=ts_ms, vtts_ms=vtts_ms, offsets=commit.offsets,
                counters={"records": sum(t.records for t in landed.values())},
                duration_ms=ts_ms - commit.started_ms if commit.started_ms is not None else 0, tables=[
                    TableCommit(table=n, branch="main", snapshot_id=int(t.snapshot_id or -1), records=t.records,
                                data_files=t.data_files, delete_files=t.delete_files, bytes=t.bytes,
                                offsets=commit.offsets, vtts_ms=vtts_ms, write_ms=0, commit_ms=0)
                    for n, t in landed.items()])
        return None


def read_log(kafka: str | Mapping[str, Any], topic: str, sink: str | None = None, timeout: float = 10.0,
             idle_s: float = 1.0) -> pd.DataFrame:
    """``control.read_control_log`` of a topic that may carry Apache's events: sinklab's events and
    Apache's commits (translated), one row per event."""
    return read_control_log(kafka, topic, sink, timeout, idle_s, also=ApacheLog(sink).feed)
