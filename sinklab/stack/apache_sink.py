"""Apache Iceberg's own Kafka Connect sink, in a standalone Connect worker: the peer that bench/ingest.py
measures sinklab against, and that the tests run sinklab beside (tests/test_apache_sink.py).

Its runtime zip is not on Maven Central, so the worker runs on the classpath ``jars.JAVA_SINK``
assembles (fetched on first use, never by ``make setup``). The worker is a managed process of the
stack's kind: bound to 127.0.0.1 on a free port, logged to a file, stopped by PID. Connectors are
added and removed through its REST API.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from sinklab.exceptions import ApacheSinkError, JarsNotFound
from sinklab.security import java_settings
from sinklab.stack import jars
from sinklab.stack.broker import COORDINATOR_MOVING, LOG4J2_CONSOLE
from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port

if TYPE_CHECKING:
    from sinklab.stack.stack import Stack

CONNECTOR_CLASS = "org.apache.iceberg.connect.IcebergSinkConnector"
# Its default iceberg.control.topic, which the worker this launches creates before the connector starts. The
# sink reads Apache's protocol by its own name for it (sinklab.sink.wire.APACHE_CONTROL_TOPIC): the stack sits below.
APACHE_CONTROL_TOPIC = "control-iceberg"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
# A workshop's worker: 1 GB of heap is plenty for two tasks writing one unpartitioned table.
JVM_OPTS = ["-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"]
# Warnings, plus the sink's own commit lines ("Commit ... complete"), which show what it did when
# a run fails.
LOG4J2 = LOG4J2_CONSOLE + """logger.iceberg.name = org.apache.iceberg.connect
logger.iceberg.level = info
logger.herder.name = org.apache.kafka.connect.runtime.standalone
logger.herder.level = info
"""


class ConnectWorker:
    """``ConnectStandalone`` on the Java sink's classpath, with connectors added over REST."""

    def __init__(self, stack: Stack, workdir: Path, heap_opts: list[str] | None = None,
                 settings: dict[str, str] | None = None):
        """``settings``: worker properties over the defaults below (``offset.flush.interval.ms``, say)."""
        self.stack = stack
        self.settings = settings or {}
        self.workdir = workdir
        self.port = free_port()
        self.worker_props = workdir / "worker.properties"
        self.process = ManagedProcess("Kafka Connect (Iceberg sink)", [], workdir / "connect.log")
        self.jvm_opts = heap_opts or JVM_OPTS

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def properties(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.stack.bootstrap_servers,
            # The sink ignores the key; the value is the generator's plain JSON, as sinklab reads it.
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            # Source offsets live in the sink's own commits (and the consumer group); this file only
            # holds what a standalone worker insists on keeping.
            "offset.storage.file.filename": str(self.workdir / "connect.offsets"),
            # The sink reads its control topic (the coordinator's "start a commit") only in put(),
            # which Connect calls after each poll of the source topic; once the source runs dry, a
            # poll waits until the next offset flush, 60 s by default, and so does every commit. The
            # sink's flush itself costs nothing (it commits offsets in its own transactions).
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://{LOOPBACK}:{self.port}",
            "rest.advertised.host.name": LOOPBACK,
            # The connector and converters declare themselves in META-INF/services: no need to scan
            # the whole classpath's ~100 jars at every start.
            "plugin.discovery": "service_load",
            **worker_security(self.stack),
            **self.settings,
        }

    def start(self, timeout: float = 120) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The sink reads the worker's properties file back (from the JVM's command line) for the
        # Kafka clients of its control topic: one plain file, no spaces in its path.
        self.worker_props.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.workdir / "log4j2.properties").write_text(LOG4J2)
        classpath = jars.classpath(jars.JAVA_SINK)
        self.process.argv = [jars.java(), *self.jvm_opts,
                             f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                             "-cp", classpath, MAIN_CLASS, str(self.worker_props)]
        self.process.start()
        self.process.wait_ready(lambda: requests.get(f"{self.url}/connectors", timeout=2).ok, timeout)

    def stop(self) -> None:
        # A task stopped mid-commit loses only that commit: the next run starts from the offsets
        # the last complete one recorded.
        self.process.stop(timeout=20)

    def __enter__(self) -> ConnectWorker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def failure(self, what: str) -> ApacheSinkError:
        """An error that says ``what`` failed and shows the end of the worker's log."""
        return ApacheSinkError(f"{what}; worker log {self.process.log_path}:\n{self.process.log_tail(40)}")

    # ---- connectors
    def add(self, config: dict[str, str]) -> None:
        name = config["name"]
        # Created before the tasks start: the sink's control consumers read from the end of the
        # topic, and one that subscribes before the broker auto-creates it misses commit requests
        # until its next metadata refresh (each such commit then times out).
        self.stack.create_topic(config.get("iceberg.control.topic", APACHE_CONTROL_TOPIC), partitions=1)
        # Kept next to the log: `curl -X POST -H 'Content-Type: application/json' -d @FILE` replays it.
        (self.workdir / f"{name}.json").write_text(json.dumps({"name": name, "config": config}, indent=2))
        reply = requests.post(f"{self.url}/connectors", json={"name": name, "config": config}, timeout=30)
        if not reply.ok:
            raise self.failure(f"creating connector {name} answered {reply.status_code}: {reply.text}")

    def remove(self, name: str) -> None:
        requests.delete(f"{self.url}/connectors/{name}", timeout=30)

    def status(self, name: str) -> dict[str, Any]:
        reply = requests.get(f"{self.url}/connectors/{name}/status", timeout=5)
        return reply.json() if reply.ok else {}

    def check(self, name: str) -> None:
        """Fail fast, with the task's own trace, when the worker died or a task failed."""
        if self.process.popen is None or self.process.popen.poll() is not None:
            raise self.failure("the Connect worker exited")
        status = self.status(name)
        for task in status.get("tasks", []):
            if task.get("state") == "FAILED":
                raise self.failure(f"task {task.get('id')} of {name} failed: {task.get('trace', '')[:3000]}")
        if status.get("connector", {}).get("state") == "FAILED":
            raise self.failure(f"connector {name} failed: {status['connector'].get('trace', '')[:3000]}")

    def wait_assigned(self, name: str, topic: str, timeout: float = 60) -> None:
        """Until the connector's consumer group holds every partition of ``topic``: records produced
        from then on wait for no rebalance."""
        from confluent_kafka import ConsumerGroupState, KafkaException

        admin = self.stack.admin()
        partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
        group = f"connect-{name}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check(name)
            try:
                described = admin.describe_consumer_groups([group], request_timeout=5)[group].result(10)
            except KafkaException as exc:
                if exc.args[0].code() not in COORDINATOR_MOVING:
                    raise
                time.sleep(0.2)
                continue
            held = sum(len([tp for tp in m.assignment.topic_partitions if tp.topic == topic])
                       for m in described.members)
            if described.state == ConsumerGroupState.STABLE and held == partitions:
                return
            time.sleep(0.2)
        raise self.failure(f"the consumer group {group} did not take all {partitions} partitions of {topic} "
                           f"within {timeout:.0f} s")


def connector_config(stack: Stack, name: str, topic: str, table: str, interval_ms: int,
                     tasks: int | None = None) -> dict[str, str]:
    """The Java sink on the stack's REST catalog, with sinklab's commit interval, into a table that
    exists (created beforehand with sinklab's schema, so both sinks write the same columns), on its
    default control topic and groups."""
    return on_stack(stack, {
        "name": name,
        # One task per core, as sinklab reads with one task per core.
        "tasks.max": str(tasks or os.cpu_count() or 1),
        "topics": topic,
        "iceberg.tables": table,
        "iceberg.tables.auto-create-enabled": "false",
        "iceberg.catalog": stack.info.catalog_name,
        "iceberg.control.commit.interval-ms": str(interval_ms),
    })


def on_stack(stack: Stack, config: dict[str, Any]) -> dict[str, str]:
    """A connector's config (the seed's ``pizzas-on-ice.json``, say) for Apache's sink on the stack: its
    connector class (the seed names Tabular's, which Apache's sink replaced), the stack's catalog and
    broker; every other key as it is, as text (Connect's REST API takes strings)."""
    out = {k: str(v) for k, v in config.items() if not k.startswith("iceberg.catalog.")}
    out.update({
        "connector.class": CONNECTOR_CLASS,
        "iceberg.catalog.type": "rest",
        "iceberg.catalog.uri": stack.info.catalog_uri,
        "iceberg.catalog.warehouse": stack.info.warehouse,
        **{f"iceberg.catalog.{k}": v for k, v in stack.info.catalog_properties.items()},
        "iceberg.kafka.bootstrap.servers": stack.bootstrap_servers,
        # Its control topic's clients log in as the stack says (the references resolved in the worker).
        **{f"iceberg.kafka.{k}": v for k, v in java_settings(stack.info.kafka_security).items()},
    })
    if stack.info.catalog_token:
        out["iceberg.catalog.token"] = stack.info.catalog_token
    return out


def worker_security(stack: Stack) -> dict[str, str]:
    """A Connect worker's Kafka login, for its own clients and its connectors' (``consumer.``, ``producer.``,
    ``admin.``), in Java's names; secrets stay references, which the worker resolves with Kafka's config
    providers (``${env:...}``, ``${file:...}``, ``${directory:...}``): its properties file holds none."""
    security = java_settings(stack.info.kafka_security)
    if not security:
        return {}
    providers = {"config.providers": "env,file,directory", **{
        f"config.providers.{name}.class": f"org.apache.kafka.common.config.provider.{cls}ConfigProvider"
        for name, cls in (("env", "EnvVar"), ("file", "File"), ("directory", "Directory"))}}
    return {**providers, **security, **{f"{side}.{k}": v for side in ("consumer", "producer", "admin")
                                        for k, v in security.items()}}


def scratch_dir(stack: Stack) -> Path:
    """A fresh directory for one worker's files and log: in the stack's workdir, which goes with
    an embedded stack (a failure's message carries the log's end), else a temporary one."""
    if stack.workdir is not None:
        folder = stack.workdir / "connect"
        folder.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="worker-", dir=folder))
    return Path(tempfile.mkdtemp(prefix="sinklab-connect-"))


def require_jars() -> None:
    """Resolve the Java sink's jars now, so that a failure names the coordinate before anything runs."""
    try:
        jars.jars(jars.JAVA_SINK)
    except JarsNotFound as exc:
        raise ApacheSinkError(str(exc)) from exc

