"""The kinds of bad records: the first word of every per-record error, a counter, a dead letter's header."""

# Kinds of bad records: the first word of every per-record error, a counter, a DLQ header.
UNDECODABLE = "undecodable"
MALFORMED_JSON = "malformed-json"
NOT_AN_OBJECT = "not-an-object"
TRANSFORM = "transform"
TYPE_MISMATCH = "type-mismatch"
MISSING_REQUIRED = "missing-required"
OUT_OF_RANGE = "out-of-range"
NO_TABLE = "no-table"
# A replay's (sinklab.sink.replay): a dead letter of a row-level table whose row changed again after it, and
# one whose partition's later records Kafka no longer holds (so that cannot be told).
SUPERSEDED = "superseded"
HISTORY_GONE = "history-gone"
# A cycle's counters of its dead letters: all of them (whatever their kind), and of those the ones its
# dead-letter table took (that table is among the cycle's tables: a picture of where records went counts
# them there, once).
DEAD_LETTERED = "dead-lettered"
DEAD_LETTER_TABLE = "dead-letter-table"
# Of a cycle's dead letters, those whose key its converter could not read (counted under their kind too):
# Kafka Connect tells the key's converter stage from the value's.
KEY_CONVERTER_FAILED = "key-converter"


BAD_KINDS = (UNDECODABLE, MALFORMED_JSON, NOT_AN_OBJECT, TRANSFORM, TYPE_MISMATCH, MISSING_REQUIRED, OUT_OF_RANGE,
             NO_TABLE)
# Kinds whose detail names the field at fault first: ``kind: field: detail`` (convert's ``_err``).
FIELD_KINDS = (TYPE_MISMATCH, MISSING_REQUIRED, OUT_OF_RANGE)
CONVERTER_KINDS = (UNDECODABLE, MALFORMED_JSON, NOT_AN_OBJECT)


def field_at_fault(reason: str) -> str | None:
    """The field a per-record error names, for the kinds that name one (``FIELD_KINDS``)."""
    kind, _, detail = reason.partition(": ")
    field, sep, _ = detail.partition(": ")
    return field if kind in FIELD_KINDS and sep else None
