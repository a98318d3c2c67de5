"""Maintenance a running sink schedules between its cycles, per its ``sinklab.maintenance.*`` policy.

``schedule(config)`` is the sink's between-cycles hook (``IcebergSink(..., between_cycles=)``): it
runs in the sink's own thread after a cycle committed, inside the wait for the next one, so it
never races the sink's own commits; other sinks and users are handled by the compare-and-swap.
What it costs beyond that wait is the delay the sink reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sinklab.exceptions import ConfigError, PolicyError
from sinklab.maintenance.operations import (
    Report,
    Target,
    clean,
    compact,
    expire,
    rewrite_manifests,
    small_files,
    target_file_size,
)
from sinklab.maintenance.policy import MaintenancePolicy, parse_policy
from sinklab.sink.config import SinkConfig

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from sinklab.sink.cycle import CycleResult

# A file under this share of the target size counts as small (Iceberg's own bin-pack threshold).
SMALL_SHARE = 0.75


@dataclass
class TableCounters:
    commits_since_compaction: int = 0
    commits_since_expiry: int = 0
    files_since_check: int = 0
    most_small: int | None = None  # the most small files a partition held at the last check


def schedule(config: SinkConfig) -> Scheduler | None:
    """The between-cycles hook running a sink's ``sinklab.maintenance.*`` keys (None without any).
    Raises ConfigError naming a key that is unknown or does not fit with the others."""
    if not config.maintenance_keys:
        return None
    try:
        policy = parse_policy(config.maintenance_keys)
    except PolicyError as exc:
        raise ConfigError(exc.key, exc.problem) from None
    return Scheduler(policy, config.catalog_name)


@dataclass
class Scheduler:
    policy: MaintenancePolicy
    catalog_name: str
    counters: dict[str, TableCounters] = field(default_factory=dict)
    # Beside Apache's sink (``follow``): its Kafka and control topics, whose files in flight cleaning keeps.
    kafka: dict[str, Any] | None = None
    control_topics: tuple[str, ...] = ()

    def __call__(self, spark: SparkSession, catalog: Catalog, result: CycleResult) -> list[Report]:
        return self.after_commit(spark, catalog, {name: len(s.data_files) for name, s in result.tables.items()})

    def after_commit(self, spark: SparkSession, catalog: Catalog, tables: dict[str, int]) -> list[Report]:
        """``tables``: data files each table gained in the cycle just committed. Runs what is due."""
        reports: list[Report] = []
        for name, added in tables.items():
            c = self.counters.setdefault(name, TableCounters())
            c.commits_since_compaction += 1
            c.commits_since_expiry += 1
            c.files_since_check += added
            target = Target(spark, catalog, self.catalog_name, name, self.kafka, self.control_topics)
            if self._compaction_due(target, c):
                reports.append(compact(target, self.policy.target_file_size_bytes))
                if self.policy.rewrite_manifests:
                    reports.append(rewrite_manifests(target))
                c.commits_since_compaction, c.files_since_check, c.most_small = 0, 0, None
                if self.policy.expire_older_than_ms is not None:
                    reports.extend(self._expire(target, c))
            elif self.policy.expire_every_commits and c.commits_since_expiry >= self.policy.expire_every_commits:
                reports.extend(self._expire(target, c))
        return reports

    def _compaction_due(self, target: Target, c: TableCounters) -> bool:
        p = self.policy
        if p.compact_every_commits and c.commits_since_compaction >= p.compact_every_commits:
            return True
        if not p.compact_small_files:
            return False
        # A partition holding at most k small files at the last check needs M+1-k new files to hold more
        # than M: until then the check (a Spark job over the files table) cannot come out true.
        if c.most_small is not None and c.files_since_check < p.compact_small_files + 1 - c.most_small:
            return False
        table = target.load()
        small = int(target_file_size(table, p.target_file_size_bytes) * SMALL_SHARE)
        c.most_small, c.files_since_check = small_files(target, small, table), 0
        return c.most_small > p.compact_small_files

    def _expire(self, target: Target, c: TableCounters) -> list[Report]:
        assert self.policy.expire_older_than_ms is not None
        c.commits_since_expiry = 0
        reports = [expire(target, self.policy.expire_older_than_ms, self.policy.expire_retain_last)]
        if self.policy.orphans_older_than_ms is not None:
            reports.append(clean(target, self.policy.orphans_older_than_ms))
        return reports
