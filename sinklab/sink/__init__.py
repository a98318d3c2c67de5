"""The sink: Kafka topics into Iceberg tables with central timed commits and exactly-once delivery.

Where a record goes, one file a step: ``plan`` (which offset ranges a cycle reads) -> ``stage``
(``reader`` reads them in Spark, ``convert`` and ``route`` make each table's rows, ``write`` turns
them into data files and a snapshot no one sees yet) -> ``publish`` (each table by compare-and-swap)
-> ``channel`` (the Kafka transaction: ``control`` events and the group's offsets). ``coordinator``
runs those steps in the exactly-once order, ``recovery`` is what a restart finds;
docs/protocol.md tells the whole protocol. Records the sink may not write are dead letters (``dlq``: a
topic, a table), which ``replay`` writes into their tables after a fix (docs/dead-letters.md).
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
from sinklab.sink.config import SinkConfig, load_config
from sinklab.sink.control import read_control_log
from sinklab.sink.remote import RemoteSink, open_sink
from sinklab.sink.sink import IcebergSink, SinkStatus

__all__ = ["CommitTimeout", "ConfigError", "IcebergSink", "RecordError", "RemoteSink", "RemoteSinkError",
           "ReplayError", "SinkConfig", "SinkError", "SinkFenced", "SinkStatus", "TableMissing", "load_config",
           "open_sink", "read_control_log"]
