"""What can stop a sink, each naming what the user needs to act on."""

from __future__ import annotations


class SinkError(RuntimeError):
    """Base of the sink's own errors."""


class RecordError(SinkError):
    """A record could not be converted; nothing of the cycle was committed."""

    def __init__(self, topic: str, partition: int, offset: int, table: str | None, reason: str):
        self.topic, self.partition, self.offset, self.table, self.reason = topic, partition, offset, table, reason
        self.kind = reason.split(":", 1)[0]
        target = f" -> table {table}" if table else ""
        super().__init__(f"record {topic}[{partition}]@{offset}{target}: {reason}")


class TableMissing(SinkError):
    """A destination table does not exist and may not be created."""


class SinkFenced(SinkError):
    """A newer instance of the same sink took over; this one must stop."""


class KafkaUnavailable(SinkError):
    """The broker did not answer a step of the cycle's Kafka transaction in time."""


class CommitTimeout(SinkError):
    """Committing the tables took longer than iceberg.control.commit.timeout-ms."""


# Kinds of bad records: the first word of every per-record error, a counter, a DLQ header.
UNDECODABLE = "undecodable"
MALFORMED_JSON = "malformed-json"
NOT_AN_OBJECT = "not-an-object"
TRANSFORM = "transform"
TYPE_MISMATCH = "type-mismatch"
MISSING_REQUIRED = "missing-required"
OUT_OF_RANGE = "out-of-range"
NO_TABLE = "no-table"
RECORD_KINDS = (UNDECODABLE, MALFORMED_JSON, NOT_AN_OBJECT, TRANSFORM)  # no table could take the record

