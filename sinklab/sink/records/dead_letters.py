"""Dead letters: records the sink may not write (errors.tolerance=all). They go, in the cycle that read
them, to the dead-letter topic (key, value and headers as they came, plus Kafka Connect's context
headers) inside the cycle's transaction, and/or to the dead-letter table (``TABLE_SCHEMA``), which the
cycle stages and publishes like any of its tables: a record is in its table or among the dead
letters, once (docs/dead-letters.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.exceptions import RecordError, record_error_kind
from sinklab.sink.records.columns import ERROR, META
from sinklab.sink.records.kinds import CONVERTER_KINDS, TRANSFORM, UNDECODABLE, field_at_fault

if TYPE_CHECKING:
    from confluent_kafka import Producer
    from pyspark.sql import DataFrame, Row

    from sinklab.sink.config.sink_config import SinkConfig

log = logging.getLogger(__name__)
DEAD_LETTERS_PROP = "sinklab.dead-letters"  # a table property: this is a dead-letter table
REPLAY_ID = "replay_id"
REPLAYED_AT = "replayed_at"
# The class a dead letter's exception-class header names, where it lives.
EXCEPTION_CLASS = f"{RecordError.__module__}.{RecordError.__qualname__}"

# The dead-letter table's columns. Where a record came from keeps Kafka's names behind ``source_``:
# the cycle's own topic/partition/offset columns (META) ride beside them until the write.
TABLE_SCHEMA = T.StructType([
    T.StructField("source_topic", T.StringType(), False),
    T.StructField("source_partition", T.IntegerType(), False),
    T.StructField("source_offset", T.LongType(), False),
    T.StructField("source_timestamp", T.TimestampType()),
    T.StructField("key", T.BinaryType()),
    T.StructField("value", T.BinaryType()),
    T.StructField("headers", T.ArrayType(T.StructType([
        T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())]))),
    T.StructField("target_table", T.StringType()),  # null: the record had no table (it failed before routing)
    T.StructField("stage", T.StringType(), False),  # Kafka Connect's stage: VALUE_CONVERTER, TRANSFORMATION, ...
    T.StructField("error_class", T.StringType(), False),  # the kind: malformed-json, type-mismatch, no-table, ...
    T.StructField("message", T.StringType(), False),
    T.StructField("field", T.StringType()),  # the column or field at fault, where the error names one
    T.StructField("sink", T.StringType(), False),
    T.StructField("commit_id", T.StringType(), False),  # the cycle that dead-lettered it
    # A replay (sinklab.sink.replay): which one took the record (null: waiting), and when it landed in its table.
    T.StructField(REPLAY_ID, T.StringType()),
    T.StructField(REPLAYED_AT, T.TimestampType()),
])
# Created with the table: a replay's UPDATE and MERGE run beside the sink appending dead letters, which
# do not conflict with them (serializable isolation would fail them on any new letter of the sink).
TABLE_PROPERTIES = {DEAD_LETTERS_PROP: "true", "write.update.isolation-level": "snapshot",
                    "write.merge.isolation-level": "snapshot", "write.delete.isolation-level": "snapshot"}


def connect_stage_of(kind: str, side: str = "value") -> str:
    """Where a record of this kind failed, in Kafka Connect's stage names; past conversion, the sink's put."""
    if kind in CONVERTER_KINDS:
        return f"{side.upper()}_CONVERTER"
    return "TRANSFORMATION" if kind == TRANSFORM else "TASK_PUT"


# Kafka Connect's stage of a record whose key its converter could not read.
KEY_CONNECT_STAGE = connect_stage_of(UNDECODABLE, "key")


@dataclass
class DeadLetter:
    topic: str
    partition: int
    offset: int
    timestamp: int | None  # Kafka's, in milliseconds
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    table: str | None
    reason: str

    @property
    def kind(self) -> str:
        return record_error_kind(self.reason)

    @property
    def connect_stage(self) -> str:
        return connect_stage_of(self.kind, "key" if self.reason.partition(": ")[2].startswith("key ") else "value")

    def context(self, sink: str) -> list[tuple[str, bytes]]:
        out = [
            ("__connect.errors.topic", self.topic), ("__connect.errors.partition", str(self.partition)),
            ("__connect.errors.offset", str(self.offset)), ("__connect.errors.connector.name", sink),
            ("__connect.errors.stage", self.connect_stage),
            ("__connect.errors.exception.class.name", EXCEPTION_CLASS),
            ("__connect.errors.exception.message", self.reason), ("__sinklab.errors.kind", self.kind),
        ]
        if self.table:
            out.append(("__sinklab.errors.table", self.table))
        return [(k, v.encode()) for k, v in out]


LETTER_FIELDS = [*META, "key", "value", "headers", ERROR]


def observed(tolerance: str, *extra: str, error: str = ERROR) -> Column:
    """An aggregate a cycle's write computes on the way (``records.observed.Observed``): its bad records, so that
    finding them costs no second read of the cycle's ranges (bench/README.md, "Dead letters"). All of
    them when they are dead-lettered (they go to the driver either way); else only the first, which
    stops the sink. ``extra``: columns the letters' rows carry besides; ``error``: the column that says
    why, when it is not ERROR (shown as ERROR)."""
    why = F.col(error).alias(ERROR)
    if tolerance == "all":
        fields = [why if f == ERROR else f for f in LETTER_FIELDS]
        return F.collect_list(F.when(F.col(error).isNotNull(), F.struct(*fields, *extra))).alias("letters")
    return F.min(F.when(F.col(error).isNotNull(), F.struct(*META, why, *extra))).alias("letters")


def observed_rows(value: list[Row] | Row | None) -> list[Row]:
    """``observed``'s result as rows, in (topic, partition, offset) order."""
    rows = value if isinstance(value, list) else [value] if value is not None else []
    return sorted(rows, key=lambda r: (r.topic, r.partition, r.offset))


def collect(bad: DataFrame, table: str | None) -> list[DeadLetter]:
    """Bad records (LETTER_FIELDS) in (topic, partition, offset) order."""
    # One job, sorted here: a sort in Spark is a job more, and a local iterator one job per partition
    # (bench/README.md, "Dead letters").
    return letters(observed_rows(bad.select(*LETTER_FIELDS).collect()), table)


def letters(rows: Iterable[Row], table: str | None) -> list[DeadLetter]:
    return [DeadLetter(r.topic, r.partition, r.offset, r.timestamp, _bytes(r.key), _bytes(r.value),
                       [(h.key, _bytes(h.value)) for h in r.headers] if r.headers else [], table, r[ERROR])
            for r in rows]


def _bytes(value: bytes | bytearray | None) -> bytes | None:
    return bytes(value) if value is not None else None


def arrow_rows(letters: Sequence[DeadLetter], sink: str, commit_id: str, schema: pa.Schema) -> pa.Table:
    """The letters as rows of the dead-letter table, whose Arrow ``schema`` it is (a column added to the
    table stays null)."""
    return pa.Table.from_pylist([{
        "source_topic": x.topic, "source_partition": x.partition, "source_offset": x.offset,
        "source_timestamp": None if x.timestamp is None else x.timestamp * 1000,  # microseconds
        "key": x.key, "value": x.value, "headers": [{"key": k, "value": v} for k, v in x.headers],
        "target_table": x.table, "stage": x.connect_stage, "error_class": x.kind, "message": x.reason,
        "field": field_at_fault(x.reason), "sink": sink, "commit_id": commit_id} for x in letters], schema)


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
