"""sinklab: stream Kafka topics into Apache Iceberg tables on Spark, and watch it happen."""

from sinklab.stack import SparkSettings, Stack

__version__ = "0.1.0"

__all__ = ["SparkSettings", "Stack", "__version__"]
