"""The stack sinklab runs on: a Kafka-protocol broker, an Iceberg REST catalog and Spark."""

from sinklab.stack.info import STACK_FILE, StackInfo
from sinklab.stack.spark import SparkSettings
from sinklab.stack.stack import Stack
from sinklab.stack.stopping import stop_recorded

__all__ = ["STACK_FILE", "SparkSettings", "Stack", "StackInfo", "stop_recorded"]
