"""The maintenance policy beside a sink sinklab does not run (Apache's, in a Connect worker).

sinklab's sink runs its policy between its own cycles (``schedule``). Beside another sink, the tables'
commits are watched in the catalog instead, and the same ``Scheduler`` is told of each as a cycle
would tell it: "every N commits" counts that sink's commits, and what maintenance itself commits
(compaction's ``replace`` snapshots) does not count. Cleaning keeps what Apache's sink has in flight
(``operations.clean``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyiceberg.exceptions import NoSuchTableError

from sinklab.maintenance.operations import Report
from sinklab.maintenance.policy import MaintenancePolicy
from sinklab.maintenance.schedule import Scheduler
from sinklab.sink.tables import identifier

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from sinklab.stack import Stack

# Snapshot operations that are a sink's commits; "replace" is a rewrite (compaction's, say).
SINK_OPERATIONS = frozenset({"append", "overwrite", "delete"})


@dataclass
class Follower:
    """Watches ``tables`` and runs ``policy`` on each as its commits come."""

    stack: Stack
    tables: list[str]
    policy: MaintenancePolicy
    control_topics: tuple[str, ...] = ()
    catalog_name: str = "sinklab"
    # The head each table had at the last look (id, timestamp): expiry may remove that snapshot later.
    heads: dict[str, tuple[int, int] | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.scheduler = Scheduler(self.policy, self.catalog_name, kafka=self.stack.kafka_config(),
                                   control_topics=self.control_topics)
        self.spark = self.stack.driver("maintenance beside a sink")
        self.stack.register_spark_catalog(self.catalog_name)
        for name in self.tables:  # what a table held before the follower started is not counted
            self.heads[name] = _head(self._load(name))

    def poll(self) -> list[Report]:
        """What is due after the commits made since the last look, run; its reports."""
        reports: list[Report] = []
        for name in self.tables:
            table = self._load(name)
            for added in self._new_commits(name, table):
                reports.extend(self.scheduler.after_commit(self.spark, self.stack.catalog, {name: added}))
            self.heads[name] = _head(table)  # maintenance's own snapshots above it are not a sink's commits
        return reports

    def _new_commits(self, name: str, table: Table | None) -> list[int]:
        """The data files each commit of a sink added since the last look, oldest first."""
        if table is None:
            return []
        seen, out = self.heads.get(name), []
        snap = table.current_snapshot()
        while snap is not None and (seen is None or (snap.snapshot_id != seen[0] and snap.timestamp_ms > seen[1])):
            summary = snap.summary
            if summary is not None and summary.operation.value in SINK_OPERATIONS:
                out.append(int(summary.additional_properties.get("added-data-files", 0)))
            parent = snap.parent_snapshot_id
            snap = table.metadata.snapshot_by_id(parent) if parent is not None else None
        return out[::-1]

    def _load(self, name: str) -> Table | None:
        try:
            return self.stack.catalog.load_table(identifier(name))
        except NoSuchTableError:  # not created yet (auto-create on the sink's first commit)
            return None


def follow(follower: Follower, poll_s: float = 5.0, seconds: float | None = None,
           stop: Callable[[], bool] = lambda: False) -> Iterator[Report]:
    """``follower``'s reports as its tables' commits make maintenance due, looking every ``poll_s``, for
    ``seconds`` (None: until ``stop()``)."""
    deadline = time.monotonic() + seconds if seconds is not None else None
    while not stop() and (deadline is None or time.monotonic() < deadline):
        yield from follower.poll()
        time.sleep(poll_s)


def _head(table: Table | None) -> tuple[int, int] | None:
    snap = table.current_snapshot() if table is not None else None
    return (snap.snapshot_id, snap.timestamp_ms) if snap is not None else None
