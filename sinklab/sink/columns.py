"""The working columns a cycle adds beside Kafka's own (``META``) while it converts and routes records:
named here once, for every step that reads or writes them (``convert``, ``transforms``, ``route``, the
dead-letter queue, the coordinator)."""

ERROR = "_sinklab_error"
ROUTE = "_sinklab_route"
OP = "_sinklab_op"
PARSED = "_sinklab_parsed"
VARIANT = "_sinklab_variant"  # the whole value parsed once as a VARIANT, for the VARIANT columns
PAYLOAD = "_payload"
SCHEMA_ID = "_sinklab_schema_id"
KEY_SCHEMA_ID = "_sinklab_key_schema_id"
KEY_TEXT = "_sinklab_key"  # a framed key decoded, for transforms (a Debezium event's key)
META = ["topic", "partition", "offset", "timestamp"]
