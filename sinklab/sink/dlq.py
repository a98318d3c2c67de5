"""The dead-letter topic: records the sink may not write (errors.tolerance=all) keep their key,
value and headers, plus Kafka Connect's context headers, and go out in the cycle's transaction."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sinklab.exceptions import record_error_kind
from sinklab.sink.columns import ERROR, META

if TYPE_CHECKING:
    from confluent_kafka import Producer
    from pyspark.sql import DataFrame

    from sinklab.sink.config import SinkConfig

log = logging.getLogger("sinklab.sink.errors")
EXCEPTION_CLASS = "sinklab.sink.errors.RecordError"
# Where the record failed, in Kafka Connect's stage names.
STAGES = {"undecodable": "VALUE_CONVERTER", "malformed-json": "VALUE_CONVERTER", "not-an-object": "VALUE_CONVERTER",
          "transform": "TRANSFORMATION"}


@dataclass
class DeadLetter:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    table: str | None
    reason: str

    @property
    def kind(self) -> str:
        return record_error_kind(self.reason)

    def context(self, sink: str) -> list[tuple[str, bytes]]:
        out = [
            ("__connect.errors.topic", self.topic), ("__connect.errors.partition", str(self.partition)),
            ("__connect.errors.offset", str(self.offset)), ("__connect.errors.connector.name", sink),
            ("__connect.errors.stage", STAGES.get(self.kind, "TASK_PUT")),
            ("__connect.errors.exception.class.name", EXCEPTION_CLASS),
            ("__connect.errors.exception.message", self.reason), ("__sinklab.errors.kind", self.kind),
        ]
        if self.table:
            out.append(("__sinklab.errors.table", self.table))
        return [(k, v.encode()) for k, v in out]


def collect(bad: DataFrame, table: str | None) -> list[DeadLetter]:
    """Bad records (META, key, value, headers, ERROR) in (topic, partition, offset) order."""
    rows = bad.select(*META, "key", "value", "headers", ERROR).orderBy("topic", "partition", "offset")
    return [DeadLetter(r.topic, r.partition, r.offset, _bytes(r.key), _bytes(r.value),
                       [(h.key, _bytes(h.value)) for h in r.headers] if r.headers else [], table, r[ERROR])
            for r in rows.toLocalIterator()]


def _bytes(value: bytes | bytearray | None) -> bytes | None:
    return bytes(value) if value is not None else None


def produce(producer: Producer, config: SinkConfig, letters: Iterable[DeadLetter]) -> int:
    """Send to the dead-letter topic through the (transactional) producer; returns how many."""
    assert config.dlq_topic is not None
    sent = 0
    for letter in letters:
        headers = list(letter.headers)
        if config.dlq_context_headers:
            headers.extend(letter.context(config.name))
        while True:
            try:
                producer.produce(config.dlq_topic, letter.value, letter.key, headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
    return sent


def log_letter(letter: DeadLetter) -> None:
    log.error("bad record %s[%d]@%d%s: %s", letter.topic, letter.partition, letter.offset,
              f" -> table {letter.table}" if letter.table else "", letter.reason)
