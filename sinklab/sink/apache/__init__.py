"""Apache's Iceberg sink, as sinklab meets it: its commits read as sinklab's (``log``, for the workbench),
and the commit it left half done on a connector sinklab takes over, finished (``takeover``)."""

from sinklab.sink.apache.log import ApacheLog, read_log

__all__ = ["ApacheLog", "read_log"]
