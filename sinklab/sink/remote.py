"""A sink that runs on the stack's Connect server, for a process whose Spark is a Spark Connect client.

The sink drives Iceberg's Java API through py4j (``write``), which a Spark Connect client has no JVM
for; the server's driver does, and serves Spark Connect too. ``RemoteSink`` has ``IcebergSink``'s
surface and asks the server, under ``/sinklab/sinks``, to run it there: one cycle, a background run,
its status. Each is its own ``IcebergSink`` on the server, with its own Spark session, so what one
client's sink sets never reaches another's. They are not Kafka Connect connectors: they are not
stored, and a server that stops takes them with it.

The wire: a config as ``SinkConfig``'s JSON, a cycle as ``result_json``, a status as ``SinkStatus``'s
fields, a failure as ``error_json`` (its class, and a ``RecordError``'s fields), raised here again as
that class.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from sinklab.exceptions import (
    CommitTimeout,
    ConfigError,
    CycleTooLarge,
    KafkaUnavailable,
    RecordError,
    RemoteSinkError,
    ReplayError,
    SinkError,
    SinkFenced,
    StuckCall,
    TableMissing,
)
from sinklab.retry import text_of
from sinklab.sink.config.sink_config import SinkConfig, load_config
from sinklab.sink.sink import SinkStatus

if TYPE_CHECKING:
    from sinklab.sink.cycle.coordinator import CycleResult
    from sinklab.sink.replay import ReplayResult
    from sinklab.sink.sink import BetweenCycles, IcebergSink
    from sinklab.stack import Stack

log = logging.getLogger("sinklab.sink")
PATH = "/sinklab/sinks"
# A request that runs cycles waits for them: a first cycle on a cold server takes tens of seconds.
CYCLE_TIMEOUT_S = 600.0
# What a client raises again by name, beside RecordError and ConfigError: each takes its message.
_BY_NAME: dict[str, type[SinkError]] = {cls.__name__: cls for cls in (
    TableMissing, SinkFenced, KafkaUnavailable, StuckCall, CommitTimeout, CycleTooLarge, ReplayError)}


def result_json(result: CycleResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    out = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.name != "tables"}
    # A Staged's own objects on the server (tables, snapshots: repr=False) stay there.
    out["tables"] = {name: {f.name: getattr(staged, f.name) for f in dataclasses.fields(staged) if f.repr}
                     for name, staged in result.tables.items()}
    return out


def result_from_json(body: dict[str, Any] | None) -> CycleResult | None:
    from sinklab.sink.cycle.coordinator import CycleResult
    from sinklab.sink.tables.write import Staged

    if body is None:
        return None
    # JSON's keys are strings: partitions are numbers again.
    offsets = {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in body["offsets"].items()}
    tables = {name: Staged(**staged) for name, staged in body["tables"].items()}
    return CycleResult(**{**body, "offsets": offsets, "tables": tables})


def error_json(exc: BaseException) -> dict[str, Any]:
    """A sink's failure as the server answers it: 500, Connect's error body, and what raises it again."""
    out: dict[str, Any] = {"error_code": 500, "message": text_of(exc), "exception": type(exc).__name__}
    if isinstance(exc, RecordError):
        out["record"] = {"topic": exc.topic, "partition": exc.partition, "offset": exc.offset, "table": exc.table,
                         "reason": exc.reason, "kind": exc.kind, "sink": exc.sink}
    elif isinstance(exc, ConfigError):
        out["key"], out["problem"] = exc.key, exc.problem
    return out


def error_from_json(status: int, body: Any, doing: str) -> Exception:
    if not isinstance(body, dict):
        return RemoteSinkError(f"{doing}: HTTP {status}")
    message = str(body.get("message", f"HTTP {status}"))
    kind = body.get("exception")
    if kind == "RecordError" and isinstance(body.get("record"), dict):
        return RecordError(**body["record"])
    if "key" in body or (status == 400 and kind is None):
        # A ConfigError (or one of its kinds) comes back as one; a 400 of the Connect API names no key.
        return ConfigError(body.get("key"), str(body.get("problem", message)))
    known = _BY_NAME.get(str(kind))
    return known(message) if known is not None else RemoteSinkError(f"{doing}: {message}")


class RemoteSink:
    """``IcebergSink`` on the stack's Connect server (``stack.info.connect_url``), whose driver also serves
    this process's Spark Connect. Made by ``open_sink`` for a stack made with ``spark="connect"``.

    A sink of the same name that is not running on the server is replaced; one that runs is not
    (``RemoteSinkError``, the server's 409): two clients never run one sink. Table maintenance from the
    config runs between cycles on the server, as the Connect server's own connectors do."""

    def __init__(self, stack: Stack, config: SinkConfig | dict[str, Any] | str | Path):
        if not stack.info.connect_url:
            raise RemoteSinkError("the stack runs no Connect server (no connect_url in its stack.json): a sink on "
                                  "its Spark Connect server is run by that server")
        self.stack = stack
        self.config = config if isinstance(config, SinkConfig) else load_config(config)
        self._url = f"{stack.info.connect_url}{PATH}/{quote(self.config.name, safe='')}"
        self._http = requests.Session()
        self._http.auth = stack.info.connect_auth()
        self._call("PUT", "", self.config.model_dump(mode="json"), f"creating sink {self.config.name}")
        # The tables it writes, under the config's catalog name, in this process's queries too.
        stack.register_spark_catalog(self.config.catalog_name)
        atexit.register(self._end_with_process)

    def _end_with_process(self) -> None:
        """A sink in a kernel ends with its kernel; this one, on the server, is stopped when this process
        exits. A process that is killed cannot: its sink runs on, and a new one of its name is refused
        while it does."""
        try:
            answer = self._http.get(self._url + "/status", timeout=10)
        except requests.ConnectionError:
            return  # the server stopped, and its sinks with it
        if answer.status_code == 404:
            return  # deleted meanwhile
        if not answer.ok:
            log.warning("sink %s on %s: its status unknown as this process exits (HTTP %d), left as it is",
                        self.config.name, self.stack.info.connect_url, answer.status_code)
            return
        if answer.json().get("state") != "RUNNING":
            return
        try:
            self.stop(timeout=30)
        except SinkError as exc:
            log.warning("sink %s on %s: not stopped as this process exits: %s", self.config.name,
                        self.stack.info.connect_url, exc)

    def _call(self, method: str, path: str, body: Any = None, doing: str = "", timeout: float = 30.0) -> Any:
        doing = doing or f"sink {self.config.name}: {method} {path or '/'}"
        try:
            answer = self._http.request(method, self._url + path, json=body, timeout=timeout)
        except requests.RequestException as exc:
            raise RemoteSinkError(f"{doing}: the Connect server {self.stack.info.connect_url} did not answer: "
                                  f"{exc}") from exc
        payload = answer.json() if answer.content else None
        if answer.status_code >= 400:
            raise error_from_json(answer.status_code, payload, doing)
        return payload

    def run_once(self) -> CycleResult | None:
        """One commit cycle on the server; None when nothing new arrived. A failure is raised here as
        its own class (``RecordError`` with its topic, partition and offset)."""
        return result_from_json(self._call("POST", "/cycle", timeout=CYCLE_TIMEOUT_S))

    def run_until_idle(self, idle_seconds: float) -> int:
        return int(self._call("POST", f"/run-until-idle?idle_s={idle_seconds:g}",
                              timeout=CYCLE_TIMEOUT_S + idle_seconds)["cycles"])

    def replay(self, where: str | None = None) -> list[ReplayResult]:
        """``IcebergSink.replay`` on the server: the sink's dead letters into their tables, exactly once."""
        from sinklab.sink.replay import ReplayResult

        answer = self._call("POST", "/replay", {"where": where}, timeout=CYCLE_TIMEOUT_S)
        return [ReplayResult(**r) for r in answer]

    def start(self) -> RemoteSink:
        self._call("PUT", "/start")
        return self

    def halt(self) -> None:
        self._call("PUT", "/halt")

    def stop(self, timeout: float = 120) -> None:
        self._call("PUT", f"/stop?timeout_s={timeout:g}", timeout=timeout + 30)

    def status(self) -> SinkStatus:
        return SinkStatus.from_json(self._call("GET", "/status"))

    def delete(self) -> None:
        """Stop it and forget it on the server."""
        self._call("DELETE", "")
        atexit.unregister(self._end_with_process)

    def __repr__(self) -> str:
        return f"RemoteSink({self.config.name} on {self.stack.info.connect_url})"


def open_sink(stack: Stack, config: SinkConfig | dict[str, Any] | str | Path,
              between_cycles: BetweenCycles | None = None) -> IcebergSink | RemoteSink:
    """The sink for ``stack``: in this process (``IcebergSink``), or, when the stack's ``spark`` is a Spark
    Connect client (``Stack.from_file(path, spark="connect")``), on the stack's Connect server."""
    from sinklab.sink.sink import IcebergSink

    if not stack.spark_client:
        return IcebergSink(stack, config, between_cycles=between_cycles)
    if between_cycles is not None:
        raise ConfigError("between_cycles", "a sink on the Connect server runs the table maintenance its config "
                          "asks for there (sinklab.maintenance.* keys); a hook from this process cannot run there")
    return RemoteSink(stack, config)
