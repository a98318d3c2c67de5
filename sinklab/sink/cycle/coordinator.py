"""The coordinator: one commit cycle in the exactly-once order (docs/protocol.md).

1. plan     each source partition's range, from where the last complete cycle ended  (plan, recovery)
2. stage    every table's rows as data files and a snapshot no one sees yet          (worker, write)
3. fence    open the Kafka transaction; ``commit-start`` flushed: a zombie fails here (channel)
4. publish  each table once, by compare-and-swap on its branch; lost, staged again   (publish, land)
5. complete the group's offsets and ``commit-complete`` in the transaction; commit    (channel)

A crash at any step leaves what ``recovery`` resolves on the next start; a catalog answer lost in
step 4 is resolved by reading the table (``publish.landed``), never by committing blindly again.
Before its first cycle, a sink finishes a commit Apache's sink left half done on the same connector
(``takeover``), in steps 3 to 5 of a transaction of its own.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sinklab.exceptions import CommitContended, CommitTimeout
from sinklab.sink.apache import takeover
from sinklab.sink.config import keys
from sinklab.sink.cycle.channel import Channel
from sinklab.sink.cycle.commit_state import Cycle
from sinklab.sink.cycle.plan import Plan, Planner
from sinklab.sink.cycle.publish import publish
from sinklab.sink.cycle.recovery import drop_stale_stages
from sinklab.sink.cycle.worker import Worker
from sinklab.sink.records.kinds import DEAD_LETTER_TABLE, DEAD_LETTERED
from sinklab.sink.tables.state import TableState, load_state
from sinklab.sink.wire import control
from sinklab.sink.wire import offsets as off

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from sinklab.sink.config.sink_config import SinkConfig
    from sinklab.sink.tables.write import Staged
    from sinklab.sink.wire.control import Chore
    from sinklab.sink.wire.offsets import Lag, Offsets

log = logging.getLogger("sinklab.sink")
CRASH_ENV = "SINKLAB_CRASH_AT"
CRASH_POINTS = ("after-data-files", "between-table-commits", "after-table-commits", "inside-kafka-transaction")
REPLAY_CRASH_POINTS = ("replay-after-claim", "replay-after-table-commits")  # sinklab.sink.replay's
MAX_REPLANS = 5  # swaps lost in a row before a cycle gives up on a table (CommitContended)


def crash_point(name: str) -> None:
    """Test-only hook: die here, as a killed process would, when SINKLAB_CRASH_AT names this point."""
    if os.environ.get(CRASH_ENV) == name:
        log.error("crash point %s reached: exiting", name)
        os._exit(86)


@dataclass
class CycleResult:
    commit_id: str
    records: int
    tables: dict[str, Staged] = field(default_factory=dict)
    offsets: Offsets = field(default_factory=dict)
    vtts_ms: int | None = None
    counters: dict[str, int] = field(default_factory=dict)
    duration_ms: int = 0
    passes: int = 1  # over the records: 2 when the cycle had to look before writing (Worker._two_passes)


class Coordinator:
    def __init__(self, config: SinkConfig, spark: SparkSession, catalog: Catalog, kafka_conf: dict[str, Any]):
        self.config, self.spark, self.catalog = config, spark, catalog
        kafka_conf = config.kafka_settings(kafka_conf)
        self.channel = Channel(config, kafka_conf)  # first: its producer fences every older instance
        self.planner = Planner(config, self.channel.group, kafka_conf.get("bootstrap.servers", ""),
                               self.channel.timeout_s)
        self.worker = Worker(config, spark, catalog, kafka_conf)
        self._recovered: set[str] = set()
        self._taken_over = False
        self._unadvanced: takeover.Inherited | None = None  # a takeover whose read Apache's group does not know yet

    def run_cycle(self) -> CycleResult | None:
        started = time.monotonic()
        if not self._taken_over:
            self._take_over()
            self._taken_over = True
        elif self._unadvanced is not None and takeover.advance(self.channel.kafka_conf, self.config.group_id,
                                                               self._unadvanced.read_to):
            self._unadvanced = None
        configured = {name: self._load(name) for name in self.config.tables}
        plan = self.planner.plan(configured.values())
        if not plan.ranges:
            return None
        cycle = self.worker.stage(plan, control.new_commit_id(), configured, self._load)
        published: dict[str, Staged] = {}
        try:
            crash_point("after-data-files")
            return self._commit(cycle, published, started)
        finally:
            self.worker.release(cycle, published)

    def _commit(self, cycle: Cycle, published: dict[str, Staged], started: float) -> CycleResult:
        name, began = self.config.name, time.monotonic()
        with self.channel.transaction(cycle.commit_id):
            self.channel.start(control.CommitStart(name, cycle.commit_id, _now_ms()))
            if cycle.letters:
                cycle.counters[DEAD_LETTERED] = len(cycle.letters)
                if self.config.dlq_topic:
                    self.channel.dead_letters(cycle.letters)
            for i, table in enumerate([t for t, w in cycle.tables.items() if w.staged is not None]):
                landed = self._publish(cycle, table)
                if landed is not None:
                    published[table] = landed
                if i == 0:
                    crash_point("between-table-commits")
            crash_point("after-table-commits")
            if self.config.dlq_table in published:
                cycle.counters[DEAD_LETTER_TABLE] = published[self.config.dlq_table].records
            elapsed_ms = (time.monotonic() - began) * 1000
            if elapsed_ms > self.config.commit_timeout_ms:
                raise CommitTimeout(
                    f"sink {name}: table commits took {elapsed_ms:.0f} ms, more than {keys.COMMIT_TIMEOUT_MS}="
                    f"{self.config.commit_timeout_ms}; the Kafka transaction is aborted and the next cycle resumes "
                    f"from the tables' recorded offsets", sink=name)
            result = CycleResult(cycle.commit_id, cycle.counters["records"], published, cycle.plan.ends, cycle.vtts_ms,
                                 cycle.counters, int((time.monotonic() - started) * 1000), cycle.passes)
            self.channel.complete(cycle.plan.ends, _complete_event(name, cycle, result))
            crash_point("inside-kafka-transaction")
        return result

    def _publish(self, cycle: Cycle, name: str) -> Staged | None:
        return publish_table(self.catalog, self.worker, cycle, name)

    def _take_over(self) -> None:
        """Finish what Apache's sink left half done on this connector (``takeover``): fenced, one
        compare-and-swap per table, the group's offsets unchanged (they already count those records)."""
        config = self.config
        inherited = takeover.find(self.channel.kafka_conf, config.name, config.group_id,
                                  self.planner.group_offsets(), [self._load(n) for n in config.tables])
        if inherited is None:
            return
        if inherited.tables:
            commit_id, began = control.new_commit_id(), time.monotonic()
            with self.channel.transaction(commit_id):
                self.channel.start(control.CommitStart(config.name, commit_id, _now_ms()))
                landed = [s for n in inherited.tables if (s := self._finish(inherited, n, commit_id)) is not None]
                self.channel.complete(inherited.group_offsets,
                                      inherited.event(commit_id, landed, int((time.monotonic() - began) * 1000)))
            for s in landed:
                log.warning("sink %s: finished Apache's sink's last commit on table %s: %d records in %d files",
                            config.name, s.table, s.records, len(s.data_files))
        if not takeover.advance(self.channel.kafka_conf, config.group_id, inherited.read_to):
            self._unadvanced = inherited

    def _finish(self, inherited: takeover.Inherited, name: str, commit_id: str) -> Staged | None:
        state = self._load(name)
        if not state.exists:
            log.warning("table %s, named by Apache's sink's pending commit, does not exist: skipped", name)
            return None
        # Apache's files are never deleted here, even when the table moved: the next swap lands them.
        return land(self.catalog, state, inherited.stage(self.catalog, state, commit_id), self.config.name,
                    "finishing Apache's sink's commit", lambda fresh, lost: inherited.stage(self.catalog, fresh,
                                                                                            commit_id))

    def _load(self, name: str) -> TableState:
        """The table as a cycle plans against it; the first time this instance meets it, recovered."""
        state = load_state(self.catalog, name, self.config.table_branch(name), self.config.name)
        if state.exists and name not in self._recovered:
            drop_stale_stages(self.catalog, name, self.config.name)
            self._recovered.add(name)
        return state

    # ---- what the sink asks between cycles
    @property
    def last_plan(self) -> Plan | None:
        return self.planner.last

    def waiting(self) -> int:
        return self.planner.waiting()

    def lag(self) -> Lag:
        return self.planner.lag()

    def record_maintenance(self, reports: Sequence[Chore], delay_ms: int) -> None:
        self.channel.record_maintenance(reports, delay_ms)

    def close(self) -> None:
        self.channel.close()


def publish_table(catalog: Catalog, worker: Worker, cycle: Cycle, name: str) -> Staged | None:
    """The table's part of the cycle, landed by compare-and-swap; when the table moved, its rows are staged
    again on it as it is now. None when the table now holds them all."""
    write = cycle.tables[name]

    def stage_again(fresh: TableState, lost: Staged) -> Staged | None:
        worker.discard(lost)
        return worker.restage(cycle, name, fresh)

    return land(catalog, write.state, write.staged, worker.config.name, "committing", stage_again)


def land(catalog: Catalog, state: TableState, staged: Staged | None, sink: str, what: str,
         again: Callable[[TableState, Staged], Staged | None]) -> Staged | None:
    """``staged`` published on ``state`` by compare-and-swap. When the swap is lost, the table is read
    again and ``again(fresh, lost)`` stages its part anew on it (None: the table now holds it all), up to
    ``MAX_REPLANS`` swaps; then ``CommitContended`` names the table and ``what`` was being committed."""
    for _ in range(MAX_REPLANS):
        if staged is None:
            return None
        began = time.monotonic()
        if publish(catalog, state, staged):
            staged.commit_ms = int((time.monotonic() - began) * 1000)
            return staged
        fresh = load_state(catalog, state.name, state.branch, sink)
        if fresh.offsets != state.offsets:
            log.warning("table %s: another instance of sink %s committed since planning; re-planning", state.name,
                        sink)
        elif fresh.snapshot_id != state.snapshot_id:  # else only a sequence number was taken (publish says so)
            log.warning("table %s moved since planning (another writer); staging again on top of it", state.name)
        state, staged = fresh, again(fresh, staged)
    if staged is None:
        return None
    raise CommitContended(f"table {state.name}: gave up after {MAX_REPLANS} concurrent changes while {what}",
                          sink=sink, table=state.name)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _complete_event(sink: str, cycle: Cycle, result: CycleResult) -> control.CommitComplete:
    return control.CommitComplete(
        sink=sink, commit_id=cycle.commit_id, ts_ms=_now_ms(), vtts_ms=result.vtts_ms, offsets=result.offsets,
        counters=result.counters, duration_ms=result.duration_ms, tables=[
            control.TableCommit(
                table=s.table, branch=cycle.tables[s.table].state.branch, snapshot_id=s.snapshot_id,
                records=s.records, data_files=s.data_files, delete_files=s.delete_files, bytes=s.bytes,
                offsets=off.merge_max(cycle.tables[s.table].state.offsets, result.offsets),
                vtts_ms=result.vtts_ms, write_ms=s.write_ms, commit_ms=s.commit_ms)
            for s in result.tables.values()])
