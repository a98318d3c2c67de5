"""Apache's control topics as sinklab reads them: their events, and which of its ``DATA_WRITTEN`` events a
table has committed.

Apache's workers name the files they wrote in ``DATA_WRITTEN`` events; its coordinator appends them and
records, in the table's snapshot summary, how far it read its control topic
(``kafka.connect.offsets.<control topic>.<group>``). An event at or past that offset is not in the table
yet (its ``Coordinator.commitToTable`` skips the others): the takeover finishes such events' commit, and
maintenance keeps their files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sinklab.sink.tables.state import ancestry
from sinklab.sink.wire import apache_events
from sinklab.sink.wire.apache_events import OFFSETS_PREFIX, PayloadType, table_name, uuid_text
from sinklab.sink.wire.topics import TopicReader

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from sinklab.sink.wire.offsets import Offsets


@dataclass
class Event:
    """One event of Apache's frame: where it sits on its control topic, its connector's group, what."""

    topic: str
    partition: int
    offset: int
    group: str
    type: int  # a PayloadType
    ts_ms: int
    payload: dict[str, Any]

    @property
    def commit_id(self) -> str:
        return uuid_text(self.payload["commit_id"])


@dataclass
class Written:
    """One ``DATA_WRITTEN`` event: where it is on the control topic, and what files of which table."""

    topic: str
    partition: int
    offset: int
    group: str
    commit_id: str
    table: str
    table_uuid: str | None
    data_files: list[dict[str, Any]]
    delete_files: list[dict[str, Any]]

    @classmethod
    def of(cls, event: Event) -> Written:
        ref = event.payload["table_reference"]
        table_uuid = ref.get("table_uuid")
        return cls(event.topic, event.partition, event.offset, event.group, event.commit_id, table_name(ref),
                   uuid_text(table_uuid) if table_uuid else None, list(event.payload.get("data_files") or []),
                   list(event.payload.get("delete_files") or []))

    def of_table(self, table: Table, name: str) -> bool:
        return self.table == name and self.table_uuid in (None, str(table.metadata.table_uuid))


def read_events(kafka_conf: Mapping[str, Any], topics: Iterable[str], start: Offsets | None = None,
                group: str | None = None) -> tuple[list[Event], Offsets]:
    """The events in Apache's frame on ``topics`` (of ``group`` only, when given), committed ones only, from
    ``start`` (else each partition's beginning) to the end; and where the read ended on each partition."""
    conf = {k: v for k, v in kafka_conf.items() if k != "bootstrap.servers"}
    found = []
    with TopicReader(kafka_conf["bootstrap.servers"], sorted(topics), start=start, **conf) as reader:
        for batch in reader.read(timeout=30, idle_s=2.0):
            for m in batch:
                framed = apache_events.unframe(m.value() or b"")
                if framed is None or (group is not None and framed[1].get("group_id") != group):
                    continue
                event = framed[1]
                found.append(Event(m.topic(), m.partition(), m.offset(), str(event.get("group_id")),
                                   int(event["type"]), int(event["timestamp"]) // 1000, event["payload"]))
        return found, reader.positions


def read_written(kafka_conf: Mapping[str, Any], topics: Iterable[str], group: str,
                 start: Offsets) -> tuple[list[Written], Offsets]:
    """The ``DATA_WRITTEN`` events of ``group`` on ``topics`` from ``start``, and where the read ended."""
    events, positions = read_events(kafka_conf, topics, start, group)
    return [Written.of(e) for e in events if e.type == PayloadType.DATA_WRITTEN], positions


def offsets_property(control_topic: str, group: str) -> str:
    return f"{OFFSETS_PREFIX}{control_topic}.{group}"


def recorded_control(table: Table, branch: str, group: str) -> tuple[str | None, dict[int, int]]:
    """The control topic and offsets Apache's coordinator (or a takeover) last recorded on ``branch`` of
    ``table`` for ``group``: the newest snapshot of the branch's ancestry that carries them, as Apache's
    ``lastCommittedOffsetsForTable`` looks."""
    ref = table.metadata.refs.get(branch)
    suffix = f".{group}"
    for snap in ancestry(table, ref.snapshot_id if ref else None):
        props = snap.summary.additional_properties if snap.summary else {}
        for key, value in props.items():
            if key.startswith(OFFSETS_PREFIX) and key.endswith(suffix):
                topic = key[len(OFFSETS_PREFIX):-len(suffix)]
                return topic, {int(p): int(o) for p, o in json.loads(value).items()}
    return None, {}


def uncommitted(table: Table, name: str, branch: str, group: str, control_topic: str,
                written: Iterable[Written]) -> list[Written]:
    """Of ``group``'s ``written`` events on ``control_topic``, those naming ``table`` (``name``) that the
    branch has not committed: at or past the control offsets it recorded for the group."""
    recorded_topic, recorded = recorded_control(table, branch, group)
    if recorded_topic not in (None, control_topic):
        recorded = {}
    return [w for w in written if w.topic == control_topic and w.group == group and w.of_table(table, name)
            and w.offset >= recorded.get(w.partition, -1)]
