"""Kafka's records to each table's rows, in Spark: ``reader`` (Spark's Kafka source over a cycle's ranges),
``framed`` (records a schema registry frames), ``prepare`` (the payload, its schema, the route, the
transform chain), ``convert`` (JSON to the table's typed columns), ``changes`` (row-level operations),
``route`` (fan-out), ``observed`` (figures a write computes on its way) and ``dead_letters`` (the records
no table takes); ``columns`` names the working columns they add, ``kinds`` the kinds of bad records."""

from sinklab.sink.records import dead_letters, route
from sinklab.sink.records.changes import newest_changes, with_operation
from sinklab.sink.records.columns import ERROR, META, OP, ROUTE, TABLES
from sinklab.sink.records.convert import (
    RowColumns,
    convert,
    error_kind,
    error_of,
    row_columns,
    row_of,
    to_rows,
    to_rows_by_schema,
)
from sinklab.sink.records.dead_letters import DEAD_LETTERS_PROP, KEY_CONNECT_STAGE, REPLAY_ID, connect_stage_of
from sinklab.sink.records.framed import FramedDecoder, decoder, id_sets
from sinklab.sink.records.kinds import (
    BAD_KINDS,
    DEAD_LETTER_TABLE,
    DEAD_LETTERED,
    KEY_CONVERTER_FAILED,
    NO_TABLE,
    UNDECODABLE,
)
from sinklab.sink.records.observed import BadRows, Observed
from sinklab.sink.records.prepare import Preparation, preparation, prepare, with_payload
from sinklab.sink.records.reader import read_ranges

__all__ = ["BAD_KINDS", "DEAD_LETTERED", "DEAD_LETTERS_PROP", "DEAD_LETTER_TABLE", "ERROR", "KEY_CONNECT_STAGE",
           "KEY_CONVERTER_FAILED", "META", "NO_TABLE", "OP", "REPLAY_ID", "ROUTE", "TABLES", "UNDECODABLE", "BadRows",
           "FramedDecoder", "Observed", "Preparation", "RowColumns", "connect_stage_of", "convert", "dead_letters",
           "decoder", "error_kind", "error_of", "id_sets", "newest_changes", "prepare", "preparation", "read_ranges",
           "route", "row_columns", "row_of", "to_rows", "to_rows_by_schema", "with_operation", "with_payload"]
