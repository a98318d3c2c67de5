"""Apache's Iceberg sink, as sinklab meets it: its commits read as sinklab's (``log``, for the workbench),
its control topics and what a table has committed of them (``control``), the files it has in flight on a
table, which maintenance keeps (``in_flight``), and the commit it left half done on a connector sinklab
takes over, finished (``takeover``)."""

from sinklab.sink.apache.in_flight import InFlight, in_flight
from sinklab.sink.apache.log import ApacheLog, read_log

__all__ = ["ApacheLog", "InFlight", "in_flight", "read_log"]
