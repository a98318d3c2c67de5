"""The connectors of one Connect server: their configs, target states and sinks (Connect's "herder").

Each connector is one ``IcebergSink`` running its commit cycles in a background thread. A request
only records what the user wants (a config, a target state, a restart) and wakes the connector's
own worker thread, which stops and starts the sink: stopping waits for the cycle in flight, and an
HTTP request must not. The state reported is what the sink is doing, not what was asked: a paused
connector reads PAUSED once its last cycle has finished.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sinklab.connect.store import TARGET_STATES, ConnectorStore, StoredConnector
from sinklab.exceptions import BadRequest, ConfigError, Conflict, NotFound
from sinklab.maintenance import schedule
from sinklab.security import redact
from sinklab.sink import SinkStatus
from sinklab.sink.config import SinkConfig, keys, load_config

log = logging.getLogger("sinklab.connect")

# The Iceberg sink's class names, before and after it moved from Tabular to Apache Iceberg: a config
# written for either runs here.
PLUGIN_CLASSES = ("io.tabular.iceberg.connect.IcebergSinkConnector", "org.apache.iceberg.connect.IcebergSinkConnector")
# Connect also accepts a plugin's simple name and its alias without the "Connector" suffix.
PLUGIN_ALIASES = {"IcebergSinkConnector", "IcebergSink"}



def shown_config(config: dict[str, Any]) -> dict[str, Any]:
    """A connector's config as the REST API answers it: a literal secret as ``[hidden]``, a reference
    (``${file:...}``) as written, never resolved (Kafka Connect's answer since KAFKA-5117)."""
    return redact(config)


class SinkLike(Protocol):
    def start(self) -> Any: ...
    def halt(self) -> None: ...
    def stop(self, timeout: float = ...) -> None: ...
    def status(self) -> SinkStatus: ...


SinkFactory = Callable[[SinkConfig], SinkLike]


class OffsetsBackend(Protocol):
    """The sink's consumer-group offsets (KIP-875's offsets of a sink connector)."""

    def get(self, group: str) -> dict[tuple[str, int], int]: ...
    def alter(self, group: str, offsets: dict[tuple[str, int], int | None]) -> None: ...
    def reset(self, group: str) -> None: ...


def is_plugin(name: str) -> bool:
    return name in PLUGIN_CLASSES or name in PLUGIN_ALIASES


def normalize(name: str, config: Any) -> dict[str, str]:
    """Connect's view of a config: every value a string (Jackson coerces numbers and booleans), plus
    ``name``. Used for storing and for comparing (``sinklab connect diff``)."""
    if not isinstance(config, dict):
        raise BadRequest("a connector config must be a JSON object of string values")
    out: dict[str, str] = {}
    for key, value in config.items():
        if value is None or isinstance(value, dict | list):
            # The type, not the value: a value may hold secrets.
            raise BadRequest(f"{key}: config values must be strings, numbers or booleans, got "
                             f"{'null' if value is None else type(value).__name__}", key=str(key))
        out[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    if out.get(keys.NAME, name) != name:
        raise BadRequest(f"{keys.NAME}: connector name {out[keys.NAME]!r} in the config does not match {name!r} "
                         "in the URL",
                         key=keys.NAME)
    out[keys.NAME] = name
    return out


def validate(name: str, config: dict[str, str]) -> SinkConfig:
    """The checks Connect makes (a known ``connector.class``, ``tasks.max``) and then the sink's own.
    Raises ConfigError naming the key."""
    if not name or "/" in name:
        raise ConfigError(keys.NAME, f"{name!r} is not a valid connector name")
    cls = config.get(keys.CONNECTOR_CLASS)
    if not cls:
        raise ConfigError(keys.CONNECTOR_CLASS, f'missing required configuration "{keys.CONNECTOR_CLASS}"')
    if not is_plugin(cls):
        raise ConfigError(keys.CONNECTOR_CLASS, f"failed to find any class that implements Connector and which name "
                          f"matches {cls}; this server runs {' and '.join(PLUGIN_CLASSES)}")
    tasks_max(config)
    loaded = load_config({keys.NAME: name, "config": config})
    schedule(loaded)  # its sinklab.maintenance.* keys, checked now rather than when the sink starts
    return loaded


def tasks_max(config: dict[str, str]) -> int:
    raw = config.get(keys.TASKS_MAX, str(keys.TASKS_MAX_DEFAULT))
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(keys.TASKS_MAX, f"expected an integer, got {raw!r}") from None
    if value < 1:
        raise ConfigError(keys.TASKS_MAX, f"must be at least 1, got {value}")
    return value


@dataclass
class State:
    state: str  # RUNNING, PAUSED, STOPPED, FAILED, UNASSIGNED
    trace: str | None = None


class Connector:
    """One connector: what the user asked for, and the worker thread that makes the sink do it."""

    def __init__(self, name: str, config: dict[str, str], target_state: str, factory: SinkFactory,
                 topics: list[str] | None = None):
        self.name = name
        self.config = config
        self.target_state = target_state
        self.topics: set[str] = set(topics or [])
        self._factory = factory
        self._generation = 0  # bumped by every config update: the sink is rebuilt on it
        self._cond = threading.Condition()
        self._dirty = True
        self._busy = False
        self._closing = False
        self._restart = False
        self._sink: SinkLike | None = None
        self._sink_generation = -1
        self._started = False
        self._error: str | None = None  # the sink could not even be built or started
        self._thread = threading.Thread(target=self._work, name=f"connect-{name}", daemon=True)
        self._thread.start()

    # ---- what the user asks for
    def reconfigure(self, config: dict[str, str]) -> None:
        with self._cond:
            self.config = config
            self._generation += 1
            self._wake()

    def set_target(self, state: str) -> None:
        with self._cond:
            self.target_state = state
            self._wake()

    def restart(self) -> None:
        with self._cond:
            self._restart = True
            self._wake()

    def close(self, timeout: float = 120) -> None:
        self.halt()
        self._thread.join(timeout)

    def halt(self) -> None:
        """Closing, at once: the running sink starts no cycle after this returns (the worker then
        waits for its current one), and the worker starts no sink any more."""
        with self._cond:
            self._closing = True
            sink = self._sink if self._started else None
            self._wake()
        if sink is not None:
            sink.halt()

    def _wake(self) -> None:
        self._dirty = True
        self._cond.notify_all()

    @property
    def settled(self) -> bool:
        """Whether the worker has done everything asked of it so far."""
        with self._cond:
            return not self._dirty and not self._busy

    # ---- the worker
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._dirty:
                    self._cond.wait()
                self._dirty = False
                self._busy = True
                closing, target, restart = self._closing, self.target_state, self._restart
                generation, config = self._generation, self.config
                self._restart = False
            try:
                self._apply(closing, target, restart, generation, config)
            except Exception:  # noqa: BLE001 - reported as the connector's FAILED state and trace
                self._error = traceback.format_exc()
                log.exception("connector %s", self.name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            if closing:
                return

    def _apply(self, closing: bool, target: str, restart: bool, generation: int, config: dict[str, str]) -> None:
        rebuild = generation != self._sink_generation
        if self._sink is not None and (closing or target != "RUNNING" or rebuild or restart):
            log.info("connector %s: stopping its sink", self.name)
            self._remember_topics()
            self._sink.stop()
            self._started = False
            if rebuild or closing:
                self._sink = None
        if closing:
            return
        if target == "RUNNING" and (not self._started or restart or self._error):
            self._error = None
            if self._sink is None:
                self._sink = self._factory(validate(self.name, config))
                self._sink_generation = generation
            with self._cond:
                if self._closing:  # deleted while the sink was being built: it never runs
                    return
                log.info("connector %s: starting its sink", self.name)
                self._sink.start()
                self._started = True

    def _remember_topics(self) -> None:
        if self._sink is not None:
            # The lag of the last planned cycle names every partition the sink read.
            # A new set, not an update in place: request threads may be iterating the old one.
            self.topics = self.topics | {tp.topic for tp in self._sink.status().lag}

    # ---- what it is doing
    def state(self) -> State:
        if self._error is not None:
            return State("FAILED", self._error)
        sink, started = self._sink, self._started
        if started and sink is not None:
            status = sink.status()
            if status.state == "FAILED":
                return State("FAILED", status.trace)
            return State("RUNNING" if status.state == "RUNNING" else "UNASSIGNED")
        if self.target_state in ("PAUSED", "STOPPED"):
            return State(self.target_state)
        return State("UNASSIGNED")

    @property
    def stopped(self) -> bool:
        """STOPPED and done stopping: KIP-875's condition for altering offsets."""
        return self.target_state == "STOPPED" and not self._started and self.settled

    def active_topics(self) -> list[str]:
        if self._started:
            self._remember_topics()
        return sorted(self.topics)

    def stored(self) -> StoredConnector:
        return StoredConnector(config=dict(self.config), target_state=self.target_state, topics=sorted(self.topics))

    def group_id(self) -> str:
        return validate(self.name, self.config).group_id


class Herder:
    """The registry of connectors, kept durable in a ``ConnectorStore``."""

    def __init__(self, factory: SinkFactory, store: ConnectorStore, offsets: OffsetsBackend, worker_id: str):
        self.factory = factory
        self.store = store
        self.offsets_backend = offsets
        self.worker_id = worker_id
        self._connectors: dict[str, Connector] = {}
        self._lock = threading.RLock()
        self._ready = False

    # ---- lifecycle
    def start(self) -> None:
        """Resume every stored connector in its target state; a RUNNING one resumes from its
        committed offsets (the sink's recovery makes that exactly once)."""
        for name, stored in self.store.load().items():
            log.info("resuming connector %s (%s)", name, stored.target_state)
            self._connectors[name] = Connector(name, stored.config, stored.target_state, self.factory, stored.topics)
        self._ready = True

    def close(self) -> None:
        """Stop every sink; the stored target states stay, so the next server resumes them."""
        with self._lock:
            self._ready = False
            connectors = list(self._connectors.values())
        threads = [threading.Thread(target=c.close) for c in connectors]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self._lock:
            self._save()

    def _save(self) -> None:
        self.store.save({name: c.stored() for name, c in self._connectors.items()})

    @property
    def ready(self) -> bool:
        """Serving requests: started, and not stopping."""
        return self._ready

    def _writable(self) -> None:
        if not self.ready:
            # Connect's answer while its worker group rebalances.
            raise Conflict("Cannot complete request momentarily due to no known leader URL, likely because a "
                           "rebalance is underway: the server is starting or stopping")

    def get(self, name: str) -> Connector:
        with self._lock:
            connector = self._connectors.get(name)
        if connector is None:
            raise NotFound(f"Connector {name} not found")
        return connector

    # ---- reading
    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._connectors)

    def info(self, name: str) -> dict[str, Any]:
        """Connect's connector info; its config as shown (``shown_config``)."""
        connector = self.get(name)
        return {"name": name, "config": shown_config(connector.config),
                "tasks": [{"connector": name, "task": i} for i in range(tasks_max(connector.config))],
                "type": "sink"}

    def status(self, name: str) -> dict[str, Any]:
        connector = self.get(name)
        state = connector.state()
        head: dict[str, Any] = {"state": state.state, "worker_id": self.worker_id}
        if state.trace:
            head["trace"] = state.trace
        # KIP-875: a STOPPED connector has no tasks.
        count = 0 if state.state == "STOPPED" else tasks_max(connector.config)
        return {"name": name, "connector": head, "tasks": [{"id": i, **head} for i in range(count)], "type": "sink"}

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        tasks = self.status(name)["tasks"]
        if not 0 <= task < len(tasks):
            raise NotFound(f"Task {name}-{task} not found")
        return tasks[task]

    def tasks(self, name: str) -> list[dict[str, Any]]:
        connector = self.get(name)
        count = 0 if connector.target_state == "STOPPED" else tasks_max(connector.config)
        return [{"id": {"connector": name, "task": i}, "config": {**connector.config, "task.id": str(i)}}
                for i in range(count)]

    def topics(self, name: str) -> dict[str, Any]:
        connector = self.get(name)
        known = set(connector.topics)
        topics = connector.active_topics()
        if set(topics) != known:
            with self._lock:
                self._save()  # Connect keeps active topics in its status topic: they outlive a restart
        return {name: {"topics": topics}}

    def reset_topics(self, name: str) -> None:
        self._writable()
        with self._lock:
            self.get(name).topics.clear()
            self._save()

    # ---- changing
    def create(self, name: str, config: Any, initial_state: str = "RUNNING") -> dict[str, Any]:
        """``POST /connectors``; KIP-980's ``initial_state`` creates it PAUSED or STOPPED."""
        self._writable()
        if initial_state not in TARGET_STATES:
            raise BadRequest(f"initial_state: expected one of {', '.join(TARGET_STATES)}, got {initial_state!r}")
        with self._lock:
            if name in self._connectors:
                raise Conflict(f"Connector {name} already exists")
            self.put_config(name, config, initial_state)
        return self.info(name)

    def put_config(self, name: str, config: Any, initial_state: str = "RUNNING") -> bool:
        """Create or update; True when created. An update restarts the sink on the new config."""
        self._writable()
        normalized = normalize(name, config)
        validate(name, normalized)
        with self._lock:
            existing = self._connectors.get(name)
            if existing is None:
                self._connectors[name] = Connector(name, normalized, initial_state, self.factory)
            elif existing.config != normalized:
                existing.reconfigure(normalized)
            self._save()
        return existing is None

    def delete(self, name: str) -> None:
        self._writable()
        with self._lock:
            connector = self.get(name)
            del self._connectors[name]
            self._save()
        # Answer only once the sink has stopped: a cycle still running would read the topics'
        # ends when it gets there and commit records produced after DELETE answered.
        connector.close()

    def set_target(self, name: str, state: str) -> None:
        self._writable()
        with self._lock:
            self.get(name).set_target(state)
            self._save()

    def restart(self, name: str, include_tasks: bool = False, only_failed: bool = False) -> bool:
        """Restart the sink (all of its tasks: they share one commit cycle). True when it restarts."""
        self._writable()
        connector = self.get(name)
        if connector.target_state != "RUNNING":
            return False
        if only_failed and connector.state().state != "FAILED":
            return False
        connector.restart()
        return True

    # ---- KIP-875 offsets
    def offsets(self, name: str) -> dict[str, Any]:
        group = self.get(name).group_id()
        return {"offsets": [{"partition": {"kafka_topic": t, "kafka_partition": p}, "offset": {"kafka_offset": o}}
                            for (t, p), o in sorted(self.offsets_backend.get(group).items())]}

    def _require_stopped(self, name: str) -> Connector:
        self._writable()
        connector = self.get(name)
        if connector.target_state != "STOPPED":
            raise BadRequest(f"Connectors must be in the STOPPED state before their offsets can be modified. This "
                             f"can be done for the specified connector by issuing a 'PUT' request to the "
                             f"'/connectors/{name}/stop' endpoint")
        if not connector.stopped:
            raise Conflict(f"Connector {name} is still stopping; retry in a moment")
        return connector

    def alter_offsets(self, name: str, body: Any) -> dict[str, str]:
        connector = self._require_stopped(name)
        offsets = parse_offsets_body(body)
        self.offsets_backend.alter(connector.group_id(), offsets)
        return {"message": "The offsets for this connector have been altered successfully"}

    def reset_offsets(self, name: str) -> dict[str, str]:
        connector = self._require_stopped(name)
        self.offsets_backend.reset(connector.group_id())
        return {"message": "The offsets for this connector have been reset successfully"}


def parse_offsets_body(body: Any) -> dict[tuple[str, int], int | None]:
    """KIP-875's request body for a sink connector: ``{"offsets": [{"partition": {"kafka_topic": t,
    "kafka_partition": p}, "offset": {"kafka_offset": o} | null}]}``."""
    if not isinstance(body, dict) or not isinstance(body.get("offsets"), list) or not body["offsets"]:
        raise BadRequest("Partitions / offsets need to be provided for an alter offsets request: "
                         '{"offsets": [{"partition": {...}, "offset": {...}}]}')
    out: dict[tuple[str, int], int | None] = {}
    for entry in body["offsets"]:
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(partition, dict) or not isinstance(partition.get("kafka_topic"), str) \
                or not isinstance(partition.get("kafka_partition"), int):
            raise BadRequest(f"partition: every entry needs a partition with a string kafka_topic and an integer "
                             f"kafka_partition, got {entry!r}")
        offset = entry.get("offset")
        if offset is not None and not (isinstance(offset, dict) and isinstance(offset.get("kafka_offset"), int)
                                       and offset["kafka_offset"] >= 0):
            raise BadRequest(f"offset: expected null or {{\"kafka_offset\": <non-negative integer>}}, got {offset!r}")
        out[(partition["kafka_topic"], partition["kafka_partition"])] = None if offset is None \
            else offset["kafka_offset"]
    return out
