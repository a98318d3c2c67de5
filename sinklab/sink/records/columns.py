"""The working columns a cycle adds beside Kafka's own (``META``) while it converts and routes records:
named here once, for every step that reads or writes them (``convert``, ``transforms``, ``route``, the
dead-letter queue, the worker)."""

ERROR = "_sinklab_error"  # a bad record's error, "kind: detail" (sinklab.exceptions.record_error_kind)
ROUTE = "_sinklab_route"
OP = "_sinklab_op"
TABLES = "_sinklab_tables"  # the tables of a fanned-out write a record goes to, a bit each
ROWS = "_sinklab_row"  # + k: a record's row of a fanned-out write's k-th table schema, a struct
PARSED = "_sinklab_parsed"  # the value parsed once into the fields' types
CORRUPT = "_sinklab_corrupt"  # in PARSED: the value, when that parse could not take it as it is
VARIANT = "_sinklab_variant"  # the whole value parsed once as a VARIANT, for the VARIANT columns
PAYLOAD = "_payload"
SCHEMA_ID = "_sinklab_schema_id"
KEY_SCHEMA_ID = "_sinklab_key_schema_id"
KEY_TEXT = "_sinklab_key"  # a framed key decoded, for transforms (a Debezium event's key)
META = ["topic", "partition", "offset", "timestamp"]
