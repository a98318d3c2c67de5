"""What can stop a sink, each naming what the user needs to act on."""

from __future__ import annotations


class SinkError(RuntimeError):
    """Base of the sink's own errors."""


class RecordError(SinkError):
    """A record could not be converted; nothing of the cycle was committed."""

    def __init__(self, topic: str, partition: int, offset: int, table: str, reason: str):
        self.topic, self.partition, self.offset, self.table, self.reason = topic, partition, offset, table, reason
        super().__init__(f"record {topic}[{partition}]@{offset} -> table {table}: {reason}")


class TableMissing(SinkError):
    """A destination table does not exist and may not be created."""


class SinkFenced(SinkError):
    """A newer instance of the same sink took over; this one must stop."""


class CommitTimeout(SinkError):
    """Committing the tables took longer than iceberg.control.commit.timeout-ms."""
