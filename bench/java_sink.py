"""The peer of bench/ingest.py: Apache Iceberg's own Kafka Connect sink, in a standalone Connect worker.

Its runtime zip is not on Maven Central, so the worker runs on the classpath ``jars.JAVA_SINK``
assembles (fetched on first use, never by ``make setup``). The worker is a managed process of the
stack's kind: bound to 127.0.0.1 on a free port, logged to a file, stopped by PID. Connectors are
added and removed through its REST API, so that one warm JVM can drain a warm-up topic first and
the measured backlog next, as sinklab's drains run on a warm Spark.

What a commit made visible is read back from the table: the Java sink records the offsets of its
control topic in a snapshot, not those of the source topic, so a record is found by its key column
(``order_id``) in the data files each snapshot added.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.parquet as pq
import requests

from sinklab.sink.tables import identifier
from sinklab.stack import jars
from sinklab.stack.broker import LOG4J2_CONSOLE
from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from sinklab.stack import Stack

CONNECTOR_CLASS = "org.apache.iceberg.connect.IcebergSinkConnector"
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


class JavaSinkError(RuntimeError):
    """The Java sink did not run or did not commit everything; the message says what failed."""


class ConnectWorker:
    """``ConnectStandalone`` on the Java sink's classpath, with connectors added over REST."""

    def __init__(self, stack: Stack, workdir: Path, heap_opts: list[str] | None = None):
        self.stack = stack
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

    def failure(self, what: str) -> JavaSinkError:
        """An error that says ``what`` failed and shows the end of the worker's log."""
        return JavaSinkError(f"{what}; worker log {self.process.log_path}:\n{self.process.log_tail(40)}")

    # ---- connectors
    def add(self, config: dict[str, str]) -> None:
        name = config["name"]
        # Created before the tasks start: the sink's control consumers read from the end of the
        # topic, and one that subscribes before the broker auto-creates it misses commit requests
        # until its next metadata refresh (each such commit then times out).
        self.stack.create_topic(config["iceberg.control.topic"], partitions=1)
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
        from confluent_kafka import ConsumerGroupState

        admin = self.stack.admin()
        partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
        group = f"connect-{name}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check(name)
            described = admin.describe_consumer_groups([group], request_timeout=5)[group].result(10)
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
    exists (created beforehand with sinklab's schema, so both sinks write the same columns)."""
    config = {
        "name": name,
        "connector.class": CONNECTOR_CLASS,
        # One task per core, as sinklab reads with one task per core.
        "tasks.max": str(tasks or os.cpu_count() or 1),
        "topics": topic,
        "iceberg.tables": table,
        "iceberg.tables.auto-create-enabled": "false",
        "iceberg.catalog": stack.info.catalog_name,
        "iceberg.catalog.type": "rest",
        "iceberg.catalog.uri": stack.info.catalog_uri,
        "iceberg.catalog.warehouse": stack.info.warehouse,
        **{f"iceberg.catalog.{k}": v for k, v in stack.info.catalog_properties.items()},
        "iceberg.control.commit.interval-ms": str(interval_ms),
        # A control topic and group of its own: a run never reads an earlier run's commit events.
        "iceberg.control.topic": f"{name}-control",
        "iceberg.control.group-id-prefix": f"{name}-cg-control-",
        "iceberg.kafka.bootstrap.servers": stack.bootstrap_servers,
    }
    if stack.info.catalog_token:
        config["iceberg.catalog.token"] = stack.info.catalog_token
    return config


# ---- what the sink committed

@dataclass
class Commit:
    snapshot_id: int
    published_ms: int  # when the table's main branch reached this snapshot (its snapshot-log entry)
    snapshot_ms: int
    files: list[str]  # data files the snapshot added
    records: int


def commits(table: Table) -> list[Commit]:
    """The table's snapshots that added records, in commit order, with the data files each added."""
    published = {e.snapshot_id: e.timestamp_ms for e in table.metadata.snapshot_log}
    found = []
    for snap in table.metadata.snapshots:
        props = snap.summary.additional_properties if snap.summary else {}
        if int(props.get("added-records", 0)) == 0:
            continue
        files = [entry.data_file.file_path
                 for manifest in snap.manifests(table.io) if manifest.added_snapshot_id == snap.snapshot_id
                 for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                 if entry.snapshot_id == snap.snapshot_id]
        found.append(Commit(snap.snapshot_id, published.get(snap.snapshot_id, snap.timestamp_ms), snap.timestamp_ms,
                            files, int(props["added-records"])))
    return sorted(found, key=lambda c: c.published_ms)


def total_records(table: Table) -> int:
    snap = table.current_snapshot()
    if snap is None or snap.summary is None:
        return 0
    return int(snap.summary.additional_properties.get("total-records", 0))


def wait_for_records(stack: Stack, worker: ConnectWorker, name: str, table_name: str, expected: int,
                     timeout: float) -> float:
    """Poll the table until it holds ``expected`` records; returns the monotonic time that was seen."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        seen = total_records(stack.catalog.load_table(identifier(table_name)))
        if seen >= expected:
            return time.monotonic()
        worker.check(name)
        time.sleep(0.1)
    raise worker.failure(f"{table_name} held {seen:,} of {expected:,} records after {timeout:.0f} s")


@dataclass
class JavaDrain:
    records: int
    seconds: float
    commits: int
    files_per_commit: float
    max_files_per_commit: int
    # Seconds from the connector's creation to each commit's publish: how much of the drain was
    # the commit timer (the first commit comes one interval after the coordinator starts).
    commit_at_s: list[float]

    @property
    def rps(self) -> float:
        return self.records / self.seconds


def drain(stack: Stack, worker: ConnectWorker, name: str, topic: str, table_name: str, interval_ms: int,
          expected: int, timeout: float = 900) -> JavaDrain:
    """The Java sink drains ``topic`` into an empty ``table_name``: from the connector's creation to
    the table holding every record (polled every 0.1 s)."""
    started, started_wall = time.monotonic(), time.time()
    worker.add(connector_config(stack, name, topic, table_name, interval_ms))
    try:
        ended = wait_for_records(stack, worker, name, table_name, expected, timeout)
    finally:
        worker.remove(name)
    table = stack.catalog.load_table(identifier(table_name))
    done = commits(table)
    files = [len(c.files) for c in done]
    return JavaDrain(total_records(table), ended - started, len(done), float(np.mean(files)) if files else 0.0,
                     max(files, default=0), [c.published_ms / 1000 - started_wall for c in done])


def record_visibility(table: Table, stamps: dict[bytes, int], key: str = "order_id"
                      ) -> tuple[np.ndarray, np.ndarray, list[Commit]]:
    """Each record's Kafka timestamp (``stamps``: key -> ms) and the publish of the snapshot that
    added it (ms; NaN for a record no commit holds yet), found by the record's key column in the
    data files each snapshot added; and the commits."""
    done = commits(table)
    visible: dict[bytes, int] = {}
    for commit in done:
        for path in commit.files:
            with table.io.new_input(path).open() as f:
                for k in pq.read_table(f, columns=[key]).column(key).to_pylist():
                    visible.setdefault(k.encode(), commit.published_ms)
    produced = np.fromiter(stamps.values(), dtype=np.float64, count=len(stamps))
    seen = np.fromiter((visible.get(k, np.nan) for k in stamps), dtype=np.float64, count=len(stamps))
    return produced, seen, done


def visibility(table: Table, stamps: dict[bytes, int], key: str = "order_id") -> tuple[np.ndarray, list[Commit]]:
    """Seconds from each record's Kafka timestamp (``stamps``: key -> ms) to the publish of the
    snapshot that added it; every record must be in a commit."""
    produced, visible, done = record_visibility(table, stamps, key)
    missing = int(np.isnan(visible).sum())
    if missing:
        raise JavaSinkError(f"{missing:,} of {len(stamps):,} records are in no commit of {table.name()}")
    return (visible - produced) / 1000, done


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
    except jars.JarsNotFound as exc:
        raise JavaSinkError(str(exc)) from exc

