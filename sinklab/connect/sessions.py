"""Sinks that clients of this server's Spark Connect run here (``sinklab.sink.remote``): by name, each
an ``IcebergSink`` with its own Spark session, none stored. Unlike a connector's, their cycles run
in the request that asks for one (``run_once``), as they would in the client's own kernel."""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any

from sinklab.exceptions import Conflict, NotFound
from sinklab.sink import result_json
from sinklab.sink.config import SinkConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from sinklab.sink import IcebergSink


class SinkSessions:
    def __init__(self, factory: Callable[[SinkConfig], IcebergSink], connector_names: Callable[[], list[str]]):
        self._factory = factory
        self._connector_names = connector_names
        self._sinks: dict[str, IcebergSink] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._sinks)

    def put(self, name: str, body: Any) -> bool:
        """Make the sink ``name`` from a ``SinkConfig``'s JSON; True when it replaced a stopped one."""
        config = SinkConfig.model_validate(body)
        if config.name != name:
            raise Conflict(f"the config names the sink {config.name!r}, the path {name!r}")
        if name in self._connector_names():
            # One consumer group, one transactional id: the two would fence each other.
            raise Conflict(f"a connector named {name} is on this server; its name is the sink's group and "
                           "transactional id")
        with self._lock:
            old = self._sinks.get(name)
            if old is not None and old.status().state == "RUNNING":
                raise Conflict(f"sink {name} is running on this server: stop it first (PUT {name}/stop)")
            self._sinks[name] = self._factory(config)
        if old is not None:
            old.stop()
        return old is not None

    def get(self, name: str) -> IcebergSink:
        with self._lock:
            sink = self._sinks.get(name)
        if sink is None:
            raise NotFound(f"Sink {name} not found")
        return sink

    def delete(self, name: str) -> None:
        with self._lock:
            sink = self._sinks.pop(name, None)
        if sink is None:
            raise NotFound(f"Sink {name} not found")
        sink.stop()

    def cycle(self, name: str) -> dict[str, Any] | None:
        return result_json(self.get(name).run_once())

    def replay(self, name: str, where: str | None) -> list[dict[str, Any]]:
        return [dataclasses.asdict(r) for r in self.get(name).replay(where)]

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).status().to_json()

    def close(self) -> None:
        with self._lock:
            sinks, self._sinks = list(self._sinks.values()), {}
        for sink in sinks:
            sink.halt()
        for sink in sinks:
            sink.stop()
