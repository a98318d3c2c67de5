"""A connector another program runs, watched from outside: Apache's Iceberg sink in a Kafka Connect
worker, the pipeline a team already has. ``Dashboard(Observed(stack, config))`` shows it as it shows a
sinklab sink: its config says where to look (topics, tables, group), its control topic what it
committed (Apache's events, read as sinklab's: ``sink.apache_log``), and its worker's REST API, when
given, its state.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from sinklab import readings
from sinklab.sink import SinkStatus
from sinklab.sink.config import SinkConfig, keys, load_config, read_connect_json
from sinklab.sink.wire import APACHE_CONTROL_TOPIC

if TYPE_CHECKING:
    from sinklab.stack import Stack


class Observed:
    """A connector run elsewhere, with the surface a dashboard reads of a sink (``stack``, ``config``,
    ``status()``). Its control topic is the config's ``iceberg.control.topic``, else Apache's default
    (``control-iceberg``); ``connect_url`` is the Kafka Connect worker that runs it, for its state."""

    def __init__(self, stack: Stack, config: str | Path | dict[str, Any] | SinkConfig, connect_url: str | None = None):
        self.stack = stack
        if isinstance(config, SinkConfig):
            self.config = config
        else:
            name, conf = read_connect_json(config)
            topic = conf.get(keys.CONTROL_TOPIC_KEY, APACHE_CONTROL_TOPIC)
            self.config = load_config({"name": name, "config": conf}).model_copy(update={"control_topic": topic})
        self.connect_url = connect_url
        self._log = readings.ControlLog(stack, sink=self.config.name, control_topic=self.config.control_topic)

    def status(self) -> SinkStatus:
        """What its control topic says it did, and what its worker says it is (``WATCHED`` without one)."""
        cycles = readings.cycles(self.stack, log=self._log.read(idle_s=0.2))
        last = None
        if not cycles.empty:
            row = cycles.iloc[-1]
            last = {"at": row["completed_at"].timestamp(), "records": int(row["written"]),
                    "duration_ms": int(row["duration_ms"])}
        state, trace = "WATCHED", None
        if self.connect_url:
            try:
                reply = requests.get(f"{self.connect_url}/connectors/{self.config.name}/status", timeout=5)
                connector = reply.json().get("connector", {}) if reply.ok else {"state": "UNASSIGNED"}
                state, trace = connector.get("state", "UNASSIGNED"), connector.get("trace")
            except requests.ConnectionError:
                state = "UNREACHABLE"
        return SinkStatus(name=self.config.name, state=state, cycles=len(cycles),
                          records=int(cycles["read"].sum()) if not cycles.empty else 0, last_commit=last,
                          trace=trace)

    def close(self) -> None:
        self._log.close()
