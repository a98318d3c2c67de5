"""The control topic: the sink's commit log, one typed event per record (as Apache Iceberg's Kafka
Connect sink has its ``events``: one class per payload, a ``PayloadType``).

A cycle writes ``CommitStart`` (its Kafka transaction opened, the fence) and ``CommitComplete`` (every
table's commit, in the same transaction as the group's offsets); maintenance run between cycles writes
``Maintenance``. On the wire an event is the magic byte 0x5C, the schema version (1), then the event as
Avro (schemaless) under ``EVENT_SCHEMA``, offsets as their snapshot-property text.

Apache's sink writes its own events (``apache_events``) to its control topic and decodes every record
there before it filters by group: a record of sinklab's makes its tasks fail. So sinklab keeps a default
topic of its own, and ``apache_groups`` finds Apache's events in a topic it is asked to use (the sink
refuses it). Readers here skip records that are not sinklab's.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import fastavro

from sinklab.exceptions import ControlEventError
from sinklab.sink.wire import apache_events
from sinklab.sink.wire.offsets import Offsets, from_property, to_property
from sinklab.sink.wire.topics import TopicReader

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    import pandas as pd
    from confluent_kafka import Message

MAGIC = 0x5C
# The default control topic. Not Apache's sink's `control-iceberg`: that sink decodes every record of its
# control topic and fails on sinklab's (docs/protocol.md).
CONTROL_TOPIC = "control-sinklab"
SCHEMA_VERSION = 1


class PayloadType(StrEnum):
    COMMIT_START = "commit-start"
    COMMIT_COMPLETE = "commit-complete"
    MAINTENANCE = "maintenance"


@dataclass(frozen=True)
class TableCommit:
    """One table's commit in a cycle; in a maintenance run, the table's head after it (``bytes`` rewritten,
    ``write_ms`` its duration)."""

    table: str
    branch: str
    snapshot_id: int
    records: int
    data_files: list[str]
    delete_files: list[str]
    bytes: int
    offsets: Offsets  # what the table recorded: the next offset to read per partition
    vtts_ms: int | None
    write_ms: int
    commit_ms: int


@dataclass(frozen=True)
class CommitStart:
    type: ClassVar[PayloadType] = PayloadType.COMMIT_START
    sink: str
    commit_id: str
    ts_ms: int


@dataclass(frozen=True)
class CommitComplete:
    type: ClassVar[PayloadType] = PayloadType.COMMIT_COMPLETE
    sink: str
    commit_id: str
    ts_ms: int
    vtts_ms: int | None
    offsets: Offsets  # the cycle's ends
    tables: list[TableCommit]
    counters: dict[str, int]
    duration_ms: int


@dataclass(frozen=True)
class Maintenance:
    """Maintenance run between cycles: one TableCommit per table, the operations' counts as
    ``<operation>.<count>`` counters (and ``delay_ms``, how late it made the next cycle)."""

    type: ClassVar[PayloadType] = PayloadType.MAINTENANCE
    sink: str
    commit_id: str
    ts_ms: int
    tables: list[TableCommit]
    counters: dict[str, int]
    duration_ms: int


ControlEvent = CommitStart | CommitComplete | Maintenance
_EVENT_CLASSES: dict[str, type[ControlEvent]] = {c.type: c for c in (CommitStart, CommitComplete, Maintenance)}


class Chore(Protocol):
    """What work run between cycles (maintenance) did to one table, as its event records it."""

    table: str
    operation: str
    duration_ms: int
    counts: dict[str, int]
    snapshot_id: int | None  # the branch head after it


_TABLE_COMMIT = {
    "type": "record",
    "name": "TableCommit",
    "fields": [
        {"name": "table", "type": "string"},
        {"name": "branch", "type": "string"},
        {"name": "snapshot_id", "type": "long"},
        {"name": "records", "type": "long"},
        {"name": "data_files", "type": {"type": "array", "items": "string"}},
        {"name": "delete_files", "type": {"type": "array", "items": "string"}},
        {"name": "bytes", "type": "long"},
        {"name": "offsets", "type": "string", "doc": "JSON {topic: {partition: next offset}}"},
        {"name": "vtts_ms", "type": ["null", "long"], "default": None},
        {"name": "write_ms", "type": "long"},
        {"name": "commit_ms", "type": "long"},
    ],
}
# Every payload type under one record: the fields a type does not have take their defaults.
EVENT_SCHEMA = fastavro.parse_schema({
    "type": "record",
    "name": "SinklabControlEvent",
    "namespace": "io.sinklab",
    "fields": [
        {"name": "type", "type": "string"},
        {"name": "sink", "type": "string"},
        {"name": "commit_id", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "vtts_ms", "type": ["null", "long"], "default": None},
        {"name": "offsets", "type": "string", "default": "{}"},
        {"name": "tables", "type": {"type": "array", "items": _TABLE_COMMIT}, "default": []},
        {"name": "counters", "type": {"type": "map", "values": "long"}, "default": {}},
        {"name": "duration_ms", "type": "long", "default": 0},
    ],
})


def new_commit_id() -> str:
    return str(uuid.uuid4())


def _to_avro(obj: ControlEvent | TableCommit) -> dict[str, Any]:
    record = {f.name: getattr(obj, f.name) for f in fields(obj)}
    if "offsets" in record:
        record["offsets"] = to_property(record["offsets"])
    if "tables" in record:
        record["tables"] = [_to_avro(t) for t in record["tables"]]
    return record


def _from_avro(cls: type[Any], record: dict[str, Any]) -> Any:
    values = {f.name: record[f.name] for f in fields(cls)}
    if "offsets" in values:
        values["offsets"] = from_property(values["offsets"])
    if "tables" in values:
        values["tables"] = [_from_avro(TableCommit, t) for t in values["tables"]]
    return cls(**values)


def encode(event: ControlEvent) -> bytes:
    buf = io.BytesIO()
    buf.write(bytes((MAGIC, SCHEMA_VERSION)))
    fastavro.schemaless_writer(buf, EVENT_SCHEMA, {"type": event.type.value, **_to_avro(event)})
    return buf.getvalue()


def decode(data: bytes) -> ControlEvent:
    """The event of a control-topic record; ControlEventError when it is none (``foreign`` when the
    record is not sinklab's at all)."""
    magic = data[0] if len(data) > 0 else None
    version = data[1] if len(data) > 1 else None
    if magic != MAGIC:
        raise ControlEventError(f"not a sinklab control event (first byte {magic}, sinklab's is {MAGIC})",
                                magic=magic, version=version, foreign=True)
    if version != SCHEMA_VERSION:
        raise ControlEventError(f"control event schema version {version} is not supported (this sinklab reads "
                                f"{SCHEMA_VERSION}): a newer sinklab wrote it?", magic=magic, version=version,
                                foreign=False)
    try:
        record: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(data[2:]), EVENT_SCHEMA)  # type: ignore[assignment]
        cls = _EVENT_CLASSES.get(record["type"])
        if cls is not None:
            return _from_avro(cls, record)
    except Exception as exc:  # noqa: BLE001 - whatever bytes past sinklab's header that are not its event raise
        raise ControlEventError(f"control event does not decode: {exc!r}", magic=magic, version=version,
                                foreign=False) from exc
    raise ControlEventError(f"control event of unknown type {record['type']!r}", magic=magic, version=version,
                            foreign=False)


def events_of(messages: Iterable[Message], sink: str | None = None) -> Iterator[ControlEvent]:
    """The sinklab events (of one sink) among control-topic records; another writer's are skipped."""
    for m in messages:
        try:
            event = decode(m.value() or b"")
        except ControlEventError as exc:
            if exc.foreign:
                continue
            raise
        if sink is None or event.sink == sink:
            yield event


# ---- the log as a frame
LOG_COLUMNS = ["type", "sink", "commit_id", "ts", "vtts", "offsets", "tables", "counters", "duration_ms"]


def _row(event: ControlEvent) -> dict[str, Any]:
    # What a payload type does not carry is empty, as on the wire (the schema's defaults).
    return {"type": event.type.value, "sink": event.sink, "commit_id": event.commit_id, "ts": event.ts_ms,
            "vtts": getattr(event, "vtts_ms", None), "offsets": getattr(event, "offsets", {}),
            "tables": [asdict(t) for t in getattr(event, "tables", [])], "counters": getattr(event, "counters", {}),
            "duration_ms": getattr(event, "duration_ms", 0)}


def log_frame(events: Iterable[ControlEvent]) -> pd.DataFrame:
    """One row per event (``LOG_COLUMNS``): ``type`` as its string, ``ts`` and ``vtts`` as UTC times,
    ``offsets`` as Offsets, ``tables`` as a list of TableCommit dicts (their ``offsets`` as Offsets)."""
    import pandas as pd

    frame = pd.DataFrame([_row(e) for e in events], columns=LOG_COLUMNS)
    for column in ("ts", "vtts"):
        frame[column] = pd.to_datetime(frame[column], unit="ms", utc=True)
    return frame.astype({"duration_ms": "int64"})


def read_control_log(kafka: str | Mapping[str, Any], topic: str = CONTROL_TOPIC, sink: str | None = None,
                     timeout: float = 10.0, idle_s: float = 1.0,
                     also: Callable[[list[Message]], list[ControlEvent]] | None = None) -> pd.DataFrame:
    """Every event committed on the control topic (of one sink) by the time nothing new arrives for
    ``idle_s``, one row per event (``log_frame``); ``also`` reads other writers' records as events
    (``apache.log``). It does not wait out an open transaction: one that a killed sink left stays open
    until the broker aborts it (its transaction.timeout.ms, 60 s and more). ``kafka``: a bootstrap address,
    or client settings (a stack's ``kafka_config()``)."""
    events: list[ControlEvent] = []
    with TopicReader(kafka, topic) as reader:
        for batch in reader.read(timeout=timeout, idle_s=idle_s):
            events.extend(events_of(batch, sink))
            events.extend(also(batch) if also is not None else ())
    return log_frame(events)


# How far back a topic is searched for Apache's events: its sink writes several per commit (start, one
# data-written per table and task, data-complete per task, one commit-to-table per table, complete).
APACHE_TAIL = 500


def apache_groups(kafka_conf: dict[str, Any], topic: str, tail: int = APACHE_TAIL, timeout: float = 10.0) -> set[str]:
    """The groups (``connect-<connector>``) of Apache's sink events among the last ``tail`` records of
    each partition of ``topic`` (``kafka_conf``: the client settings, bootstrap servers and security):
    empty when none are, or the topic does not exist."""
    # Uncommitted too: an Apache event in an open transaction is still Apache's.
    groups: set[str] = set()
    with TopicReader(kafka_conf, topic, tail=tail, **{"isolation.level": "read_uncommitted"}) as reader:
        for batch in reader.read(timeout=timeout, idle_s=1.0):
            groups.update(g for m in batch if (g := _apache_event(m.value() or b"")) is not None)
    return groups


def _apache_event(data: bytes) -> str | None:
    """The group of an Apache sink event, or None when ``data`` is not one."""
    try:
        framed = apache_events.unframe(data)
    except Exception:  # noqa: BLE001 - in Apache's frame but not decodable: not an event of its sink
        return None
    return None if framed is None else str(framed[1].get("group_id"))
