"""The sink: Kafka topics into Iceberg tables with central timed commits and exactly-once delivery.

Its floors, bottom up: ``wire`` (what crosses Kafka: offsets, the control topic's events, framed
formats), ``config`` (every key, declared once), ``records`` (Kafka's records to each table's rows, in
Spark, and the dead letters), ``tables`` (what a table holds of the sink; a cycle's part written, not yet
visible), ``apache`` (Apache's sink's commits read, its files in flight found, its half-done one
finished), ``cycle`` (what makes it exactly-once: plan -> worker -> publish -> channel, run by the
coordinator; docs/protocol.md), then ``sink`` (IcebergSink: cycle after cycle), ``replay`` (dead letters
back into their tables) and ``remote`` (a Spark Connect client's sink). docs/layout.md draws the whole
house.
"""

from sinklab.exceptions import (
    CommitTimeout,
    ConfigError,
    RecordError,
    RemoteSinkError,
    ReplayError,
    SinkError,
    SinkFenced,
    TableMissing,
)
from sinklab.sink.config import SinkConfig, load_config, register_transform
from sinklab.sink.cycle import CycleResult
from sinklab.sink.remote import PATH as SESSIONS_PATH
from sinklab.sink.remote import RemoteSink, error_json, open_sink, result_json
from sinklab.sink.sink import IcebergSink, SinkStatus
from sinklab.sink.wire import read_control_log

__all__ = ["SESSIONS_PATH", "CommitTimeout", "ConfigError", "CycleResult", "IcebergSink", "RecordError",
           "RemoteSink", "RemoteSinkError", "ReplayError", "SinkConfig", "SinkError", "SinkFenced", "SinkStatus",
           "TableMissing", "error_json", "load_config", "open_sink", "read_control_log", "register_transform",
           "result_json"]
