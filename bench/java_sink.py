"""The peer of bench/ingest.py: Apache Iceberg's own Kafka Connect sink (its worker is
``sinklab.stack.apache_sink``), measured. One warm worker drains a warm-up topic first and the measured
backlog next, as sinklab's drains run on a warm Spark (``drain_backlog``); ``latency`` is the latency run
of ``harness.latency`` with this sink in the background; ``bench/sustained.py`` runs it under the
sustained-rate contract.

What a commit made visible: the Java sink records the offsets of its control topic in a snapshot, not
those of the source topic; its control topic's data-complete events have those, so each snapshot is
given the source offsets of its commit (``readings.with_offsets``) and measured as sinklab's are.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from harness import NAMESPACE, LatencyResult, create_empty_table, epoch_ms

from sinklab import readings
from sinklab.exceptions import ApacheSinkError as JavaSinkError
from sinklab.generators import PizzaGenerator
from sinklab.sink.tables import identifier
from sinklab.stack import apache_sink
from sinklab.stack.apache_sink import ConnectWorker, require_jars, scratch_dir

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from sinklab.stack import Stack

__all__ = ["ConnectWorker", "JavaSinkError", "connector_config", "require_jars", "scratch_dir"]

# Its tables, with sinklab's columns: warm-up, the backlog, and the latency run.
JAVA_WARM, JAVA, JAVA_LATENCY = f"{NAMESPACE}.java_warm", f"{NAMESPACE}.java_pizzas", f"{NAMESPACE}.java_latency"


def connector_config(stack: Stack, name: str, topic: str, table: str, interval_ms: int,
                     tasks: int | None = None) -> dict[str, str]:
    """``apache_sink.connector_config`` with a control topic and groups of the connector's own: a run
    never reads an earlier run's commit events."""
    return {**apache_sink.connector_config(stack, name, topic, table, interval_ms, tasks),
            "iceberg.control.topic": control_topic(name), "iceberg.control.group-id-prefix": f"{name}-cg-control-"}


def control_topic(name: str) -> str:
    return f"{name}-control"


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


def record_visibility(stack: Stack, table_name: str, connector: str, topic: str
                      ) -> tuple[np.ndarray, np.ndarray, list[Commit]]:
    """Each record's Kafka timestamp and the publish of the snapshot that made it readable (ms; NaN for a
    record no commit holds yet): the table's snapshots given the source offsets of the commits that made
    them, from Apache's control topic (``readings.with_offsets``), as the explorer measures this sink;
    and the commits."""
    found = readings.commits(stack, sink=connector, control_topic=control_topic(connector))
    snaps = readings.with_offsets(readings.snapshots(stack, table_name), found)
    vis = readings.visibility(snaps, readings.record_times(stack, topic))
    done = commits(stack.catalog.load_table(identifier(table_name)))
    return epoch_ms(vis["produced_at"]), epoch_ms(vis["visible_at"]), done


def visibility(stack: Stack, table_name: str, connector: str, topic: str) -> tuple[np.ndarray, list[Commit]]:
    """Seconds from each record's Kafka timestamp to the publish of the snapshot that made it readable;
    every record must be in a commit."""
    produced, visible, done = record_visibility(stack, table_name, connector, topic)
    missing = int(np.isnan(visible).sum())
    if missing:
        raise JavaSinkError(f"{missing:,} of {len(produced):,} records are in no commit of {table_name}")
    return (visible - produced) / 1000, done


# ---- the runs bench/ingest.py makes

def drain_backlog(stack: Stack, worker: ConnectWorker, warm: int, records: int, interval_ms: int) -> JavaDrain:
    """The Java sink on a warm JVM, as sinklab's drains run: ``warm`` records of the warm-up topic
    first, then the backlog, each by a connector of its own on one worker."""
    create_empty_table(stack, JAVA_WARM)
    create_empty_table(stack, JAVA)
    drain(stack, worker, "bench-java-warm", "bench-warm", JAVA_WARM, interval_ms, warm)
    return drain(stack, worker, "bench-java", "bench-backlog", JAVA, interval_ms, records)


def latency(stack: Stack, topic: str, interval_ms: int, rate: float, seconds: float, partitions: int) -> LatencyResult:
    """The latency run of sinklab's (``harness.latency``), with the Java sink in the background."""
    count = int(rate * seconds)
    stack.create_topic(topic, partitions=partitions)
    create_empty_table(stack, JAVA_LATENCY)
    name = f"{topic}-sink"
    with ConnectWorker(stack, scratch_dir(stack)) as worker:
        worker.add(connector_config(stack, name, topic, JAVA_LATENCY, interval_ms))
        worker.wait_assigned(name, topic)  # the JVM's start and the group's join are no part of it
        PizzaGenerator(seed=7).produce(stack, topic, count=count, rate=rate, partitions=partitions).wait()
        wait_for_records(stack, worker, name, JAVA_LATENCY, count, timeout=interval_ms / 1000 + 120)
        worker.remove(name)
    lat, commits = visibility(stack, JAVA_LATENCY, name, topic)
    # The snapshot's own timestamp: the Java sink publishes the snapshot it makes, so both are one.
    return LatencyResult(
        interval_ms, rate, len(lat), float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), float(lat.max()),
        float(np.percentile(lat, 99)), len(commits), statistics.mean(len(c.files) for c in commits),
        statistics.mean(c.records for c in commits))
