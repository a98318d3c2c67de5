"""Apache's Iceberg sink at one commit interval after another, for the explorer (``explorer``): the real
sink in a Kafka Connect worker of the stack's (``stack.apache_sink``), one connector per interval with
its own topic and table, measured from what it leaves: its table's snapshots, and the source offsets of
each commit from its control topic (``readings.with_offsets``), so that its records' visibility is
measured as sinklab's are.

Apache's sink writes records as they arrive and commits on a timer: what a commit costs is its round
(start-commit to commit-complete on the control topic), not a read of the records. Its first commit on
a fresh connector (table creation, the tasks' start) is taken by a few priming records, not by the
interval measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from sinklab import readings
from sinklab.stack.apache_sink import (
    APACHE_CONTROL_TOPIC,
    ConnectWorker,
    on_stack,
    require_jars,
    scratch_dir,
)

if TYPE_CHECKING:
    from sinklab.stack import Stack

CONTROL_TOPIC_KEY = "iceberg.control.topic"


class ApacheRuns:
    """A Connect worker running Apache's sink, for the runs of one exploration; stopped by ``close``.
    ``settings``: the connector config every run takes (its topics, tables, name and interval are the
    run's); ``worker``: worker properties (``offset.flush.interval.ms``, ...)."""

    def __init__(self, stack: Stack, settings: dict[str, Any], worker: dict[str, str] | None = None):
        require_jars()
        self.stack = stack
        self.settings = {k: v for k, v in settings.items() if k not in ("name", "connector.class")}
        self.control_topic = str(self.settings.get(CONTROL_TOPIC_KEY, APACHE_CONTROL_TOPIC))
        self.worker = ConnectWorker(stack, scratch_dir(stack), settings=worker)
        self.worker.start()

    def close(self) -> None:
        self.worker.stop()

    def run(self, run: dict[str, Any], prime: Callable[[], int], stream: Callable[[], int],
            catch_up_s: float) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """One interval: ``prime`` (produces, returns how many) until committed, then ``stream`` until
        committed; the stream's snapshots, its records' visibility and the connector's commits."""
        name, topic, table = run["sink"], run["topic"], run["table"]
        self.stack.catalog.create_namespace_if_not_exists(table.rsplit(".", 1)[0])
        config = on_stack(self.stack, {
            **self.settings, "name": name, "topics": topic, "iceberg.tables": table,
            "iceberg.tables.auto-create-enabled": "true",
            "iceberg.control.commit.interval-ms": str(run["interval_ms"])})
        self.worker.add(config)
        log = readings.ControlLog(self.stack, sink=name, control_topic=self.control_topic)
        try:
            self.worker.wait_assigned(name, topic)
            primed = prime()
            self._wait_committed(name, log, primed, catch_up_s)
            began = pd.Timestamp.now(tz="UTC")
            sent = stream()
            self._wait_committed(name, log, primed + sent, catch_up_s)
            events = log.read(idle_s=0.2)
        finally:
            log.close()
            self.worker.remove(name)
        commits = readings.commits(self.stack, log=events)
        snaps = readings.snapshots(self.stack, table)
        snaps = readings.with_offsets(snaps[(snaps["sink"] == name) & (snaps["committed_at"] > began)], commits)
        records = readings.record_times(self.stack, topic)
        vis = readings.visibility(snaps, records[records["produced_at"] >= began], sink=name)
        return snaps, vis, readings.cycles(self.stack, log=events)

    def _wait_committed(self, name: str, log: readings.ControlLog, expected: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (done := int(readings.commits(self.stack, log=log.read(idle_s=0.2))["records"].sum())) < expected:
            self.worker.check(name)
            if time.monotonic() > deadline:
                raise TimeoutError(f"Apache's sink {name}: {expected - done} of {expected} records still not "
                                   f"committed after {timeout:.0f}s")
            time.sleep(0.5)
