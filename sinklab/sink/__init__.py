"""The sink: Kafka topics into Iceberg tables with central timed commits and exactly-once delivery.

Where a record goes: ``reader`` (Spark tasks consume offset ranges) -> ``convert`` (JSON to the
table's columns) -> ``write`` (data files and a snapshot no one sees yet) -> ``coordinator`` (publish
every table by compare-and-swap, then the Kafka transaction with ``events`` and the group offsets).
"""

from sinklab.sink.config import ConfigError, SinkConfig, load_config
from sinklab.sink.errors import CommitTimeout, RecordError, SinkError, SinkFenced, TableMissing
from sinklab.sink.events import read_control_log
from sinklab.sink.remote import RemoteSink, RemoteSinkError, open_sink
from sinklab.sink.sink import IcebergSink, SinkStatus

__all__ = ["CommitTimeout", "ConfigError", "IcebergSink", "RecordError", "RemoteSink", "RemoteSinkError",
           "SinkConfig", "SinkError", "SinkFenced", "SinkStatus", "TableMissing", "load_config", "open_sink",
           "read_control_log"]
