"""A connector's transform chain as Spark expressions, as Kafka Connect runs it on each record before the
sink sees it: no record goes through Python.

Each step works on the record's parts held as columns (``parts``): its value, the value's Connect schema,
its key, topic and headers, whether it is dropped, and the error that stops it (a transform that cannot
take a record names itself and why: the record is a dead letter, as Connect's error handling makes it).
A step is one projection (``chain``): the next refers to its columns by name, so a chain's expressions
never nest into each other. A predicate (``negate``) picks the records a step applies to; the others pass
it unchanged. The steps: Kafka Connect's (``kafka``), Iceberg's (``iceberg``), Debezium's (``debezium``).

Values keep JSON's shapes; what Kafka Connect holds as a ``java.util.Date`` (a timestamp after
TimestampConverter, without a schema) becomes ISO-8601 text, which a timestamp column reads as the
timestamp it is. With a schema, timestamps are epoch milliseconds with Connect's logical type, as the
JSON converter writes them.
"""

from sinklab.sink.records.transform.chain import apply_chain

__all__ = ["apply_chain"]
