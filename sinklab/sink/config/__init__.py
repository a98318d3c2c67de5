"""A sink's configuration: every key declared once (``keys``), a Kafka Connect config (its JSON read by
``connect_json``) read by them into a ``SinkConfig`` (``sink_config``), the transforms it names
(``transforms``), and the docs' key tables made from the declarations (``reference``, a command of its
own: ``python -m sinklab.sink.config.reference``, which the docs site's build imports)."""

from sinklab.sink.config import keys
from sinklab.sink.config.connect_json import read_connect_json
from sinklab.sink.config.sink_config import SinkConfig, load_config
from sinklab.sink.config.transforms import register_transform

__all__ = ["SinkConfig", "keys", "load_config", "read_connect_json", "register_transform"]
