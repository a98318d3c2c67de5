"""A sink's configuration: every key declared once (``keys``), a Kafka Connect config read by them into a
``SinkConfig`` (``sink_config``), the transforms it names (``transforms``), and the docs' key tables made
from the declarations (``reference``)."""

from sinklab.sink.config import keys
from sinklab.sink.config.reference import PAGES, render_blocks
from sinklab.sink.config.sink_config import SinkConfig, load_config, read_connect_json

__all__ = ["PAGES", "SinkConfig", "keys", "load_config", "read_connect_json", "render_blocks"]
