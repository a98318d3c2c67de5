"""The Kafka Connect REST API: the seed's ``curl`` commands, Connect UIs and scripts drive sinklab.

``server`` (HTTP: Connect's paths, shapes and status codes) -> ``herder`` (connectors, target
states, one ``IcebergSink`` each) -> ``store`` (configs and target states, durable) and ``offsets``
(KIP-875: the sink's consumer-group offsets). ``worker`` is the server process; ``apply`` manages
connectors as code (a folder of JSON files).
"""

from sinklab.connect.herder import PLUGIN_CLASSES, Herder
from sinklab.exceptions import BadRequest, Conflict, ConnectError, NotFound

__all__ = ["PLUGIN_CLASSES", "BadRequest", "ConnectError", "Conflict", "Herder", "NotFound"]
