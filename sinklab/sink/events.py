"""Control-topic events: the sink's commit log, Avro-encoded with a versioned schema."""

from __future__ import annotations

import io
import json
import struct
import uuid
from typing import TYPE_CHECKING, Any, Protocol

import fastavro

if TYPE_CHECKING:
    import pandas as pd

MAGIC = 0x5C
SCHEMA_VERSION = 1
COMMIT_START = "commit-start"
COMMIT_COMPLETE = "commit-complete"
# Maintenance the sink ran between cycles: one TableCommit per table (the head after it, bytes rewritten,
# write_ms its duration) and the operations' counts as ``<operation>.<count>`` counters.
MAINTENANCE = "maintenance"


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


def encode(event: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">BB", MAGIC, SCHEMA_VERSION))
    fastavro.schemaless_writer(buf, EVENT_SCHEMA, event)
    return buf.getvalue()


def decode(data: bytes) -> dict[str, Any]:
    magic, version = struct.unpack(">BB", data[:2])
    if magic != MAGIC:
        raise ValueError("not a sinklab control event (bad magic byte)")
    if version != SCHEMA_VERSION:
        raise ValueError(f"control event schema version {version} is not supported (this sinklab reads "
                         f"{SCHEMA_VERSION})")
    return fastavro.schemaless_reader(io.BytesIO(data[2:]), EVENT_SCHEMA)  # type: ignore[return-value]


def read_control_log(bootstrap_servers: str, topic: str = "control-iceberg", sink: str | None = None,
                     timeout: float = 10.0) -> pd.DataFrame:
    """Every committed event on the control topic, one row per event (tables as a list column)."""
    import pandas as pd
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"sinklab-log-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    rows: list[dict[str, Any]] = []
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is None or meta.error is not None:
            return pd.DataFrame(columns=["type", "sink", "commit_id", "ts", "vtts", "tables", "counters"])
        for partition in meta.partitions:
            tp = TopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            while True:
                msgs = consumer.consume(500, timeout=1.0)
                for m in msgs:
                    if m.error() is None and m.value():
                        event = decode(m.value())
                        if sink is None or event["sink"] == sink:
                            rows.append(event)
                if not msgs:
                    pos = consumer.position([tp])[0].offset
                    if pos < 0 or pos >= high:
                        break
    finally:
        consumer.close()
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=["type", "sink", "commit_id", "ts", "vtts", "tables", "counters"])
    frame["ts"] = pd.to_datetime(frame.pop("ts_ms"), unit="ms", utc=True)
    frame["vtts"] = pd.to_datetime(frame.pop("vtts_ms"), unit="ms", utc=True)
    frame["offsets"] = frame["offsets"].map(json.loads)
    return frame
