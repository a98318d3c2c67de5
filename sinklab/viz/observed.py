"""A connector another program runs, watched from outside: Apache's Iceberg sink in a Kafka Connect
worker, the pipeline a team already has. ``Dashboard(Observed(stack, config))`` shows it as it shows a
sinklab sink: its config says where to look (topics, tables, group), its control topic what it
committed (Apache's events, read as sinklab's: ``sink.apache_log``), and its worker's REST API, when
given, its state.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from sinklab import readings
from sinklab.exceptions import ApacheSinkError, ConfigError
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
        self._marks: list[dict[str, Any]] = []  # what was changed through the worker, and when (epoch s)

    # ---- turned by hand, as its users would: through its worker's REST API
    def retune(self, commit_interval_ms: int) -> None:
        """Change the connector's commit interval with the Connect REST API's config update (its tasks
        restart with it, as they do when a team changes it); marked in ``status().marks``."""
        if isinstance(commit_interval_ms, bool) or not isinstance(commit_interval_ms, int) or commit_interval_ms < 1:
            raise ConfigError(keys.COMMIT_INTERVAL_MS, f"a whole number of at least 1, not {commit_interval_ms!r}")
        url = f"{self._worker()}/connectors/{self.config.name}/config"
        current = requests.get(url, timeout=10)
        if not current.ok:
            raise ApacheSinkError(f"{url} answered {current.status_code}: {current.text[:500]}")
        reply = requests.put(url, json={**current.json(), keys.COMMIT_INTERVAL_MS: str(commit_interval_ms)},
                             timeout=30)
        if not reply.ok:
            raise ApacheSinkError(f"updating {self.config.name}'s config answered {reply.status_code}: "
                                  f"{reply.text[:500]}")
        self.config = self.config.model_copy(update={"commit_interval_ms": commit_interval_ms})
        self._marks.append({"at": time.time(), "kind": "tuned",
                            "detail": f"{keys.COMMIT_INTERVAL_MS}={commit_interval_ms}"})

    def pause(self) -> None:
        """Connect's pause: its tasks stop taking records (and so commit nothing new) until ``resume``."""
        self._put("pause")

    def resume(self) -> None:
        self._put("resume")

    def _put(self, verb: str) -> None:
        reply = requests.put(f"{self._worker()}/connectors/{self.config.name}/{verb}", timeout=30)
        if not reply.ok:
            raise ApacheSinkError(f"{verb} of {self.config.name} answered {reply.status_code}: {reply.text[:500]}")
        self._marks.append({"at": time.time(), "kind": f"{verb}d", "detail": ""})

    def _worker(self) -> str:
        if not self.connect_url:
            raise ConfigError(None, f"{self.config.name} is watched without its Kafka Connect worker: give "
                                    "Observed(..., connect_url=...) to change it")
        return self.connect_url

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
                          trace=trace, marks=list(self._marks))

    def close(self) -> None:
        self._log.close()
