"""What crosses Kafka: positions in topics (``offsets``), a topic read to its end (``topics``), a consumer
group's calls (``group``), the control topic's events (``control``, sinklab's; ``apache_events``, the
frame of Apache's sink's), and the formats of records a schema registry frames (``registry``, ``avro``,
``jsonschema``, ``protobuf``; ``apicurio``, Apicurio's own frame) with ``text``, bytes as text. The sink's bottom floor:
it imports nothing of the sink."""

from sinklab.sink.wire import apache_events, apicurio, offsets
from sinklab.sink.wire.apache_events import APACHE_CONTROL_TOPIC
from sinklab.sink.wire.apicurio import APICURIO_AVRO_CONVERTER, ApicurioClient
from sinklab.sink.wire.avro import AVRO_CONVERTER
from sinklab.sink.wire.control import (
    CONTROL_TOPIC,
    ControlEvent,
    PayloadType,
    events_of,
    log_frame,
    read_control_log,
)
from sinklab.sink.wire.jsonschema import JSON_SCHEMA_CONVERTER
from sinklab.sink.wire.offsets import Lag, OffsetRange, Offsets, TopicPartition, from_property, lag_json, to_property
from sinklab.sink.wire.protobuf import PROTOBUF_CONVERTER
from sinklab.sink.wire.registry import MAGIC, RegistryClient, subject
from sinklab.sink.wire.text import utf8_text
from sinklab.sink.wire.topics import TopicReader

__all__ = ["APACHE_CONTROL_TOPIC", "APICURIO_AVRO_CONVERTER", "AVRO_CONVERTER", "ApicurioClient", "CONTROL_TOPIC",
           "JSON_SCHEMA_CONVERTER", "MAGIC", "PROTOBUF_CONVERTER",
           "ControlEvent", "Lag", "OffsetRange", "Offsets", "PayloadType",
           "RegistryClient", "TopicPartition", "TopicReader", "apache_events", "apicurio", "events_of",
           "from_property", "lag_json", "log_frame", "offsets", "read_control_log", "subject", "to_property",
           "utf8_text"]
