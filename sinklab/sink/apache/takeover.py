"""Taking a connector over from Apache's Iceberg sink: finishing the commit it left half done.

Apache's workers commit the source offsets to the connector's group (``connect-<name>``) in the same
Kafka transaction as their ``DATA_WRITTEN`` events, which name the data files they wrote; only later
does its coordinator append those files to the tables, recording how far it read its *control* topic
(``kafka.connect.offsets.<control topic>.<group>``). Stopped or killed between the two, it leaves
records whose offsets the group has passed and whose files only its control topic names. sinklab
starting from the group's offsets would lose them; so before its first cycle it finishes that commit
exactly as Apache's coordinator would on its restart (docs/protocol.md, "Taking a connector over"):

- its control topic is read (read_committed) from where its coordinator's group
  (``<group>-coord``) says it last finished;
- a table's pending files are those of the group's ``DATA_WRITTEN`` events at control offsets at or past
  what the table recorded (Apache's own rule, ``Coordinator.commitToTable``);
- they land in one snapshot per table, by compare-and-swap and inside a fenced sinklab transaction, that
  records both Apache's control offsets past them (so neither sink commits them again, Apache's included
  after a hand-back) and ``sinklab.offsets`` at the group's offsets (so the next cycle, which starts there,
  keeps every record it reads).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from sinklab.exceptions import SinkError
from sinklab.sink.apache.control import Written, offsets_property, read_written, recorded_control, uncommitted
from sinklab.sink.tables.state import COMMIT_ID_PROP, OFFSETS_PROP, SINK_PROP, TableState, identifier
from sinklab.sink.tables.write import Staged, stage_append
from sinklab.sink.wire import offsets as off
from sinklab.sink.wire.apache_events import APACHE_CONTROL_TOPIC
from sinklab.sink.wire.apache_events import COMMIT_ID_PROP as APACHE_COMMIT_ID
from sinklab.sink.wire.control import CommitComplete, TableCommit
from sinklab.sink.wire.group import group_call
from sinklab.sink.wire.offsets import TopicPartition

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from pyiceberg.catalog import Catalog

    from sinklab.sink.wire.offsets import Offsets

log = logging.getLogger("sinklab.sink")

# How long a takeover waits for the members of a stopped or killed Apache sink to leave the group: a
# killed task's consumer stays a member until its session times out (Kafka Connect's default is 45 s).
GROUP_EMPTY_TIMEOUT_S = 90.0


@dataclass
class Pending:
    """What Apache's sink wrote for one table and never committed: its data files (as in its events),
    the commits they came from, and Apache's control offsets the table records once they land."""

    table: str
    control_topic: str
    files: list[dict[str, Any]] = field(default_factory=list)
    commit_ids: list[str] = field(default_factory=list)
    control_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(int(f["record_count"]) for f in self.files)


def apache_history(states: Iterable[TableState], group: str, coordinator_offsets: Offsets,
                   group_offsets: Offsets) -> set[str]:
    """The control topics to look for Apache's pending commit in; empty when this connector shows no sign
    of having run on Apache's sink. Signs: a table recording Apache's control offsets for ``group``, its
    coordinator's group having committed offsets, or the group having offsets that no table's
    ``sinklab.offsets`` account for (Apache's first commit never finished)."""
    states = [s for s in states if s.exists and s.table is not None]
    topics = {t for s in states if (t := recorded_control(s.table, s.branch, group)[0]) is not None}  # type: ignore[arg-type]
    topics.update(coordinator_offsets)
    if not topics and group_offsets and not any(s.offsets for s in states):
        topics.add(APACHE_CONTROL_TOPIC)
    return topics


def pending_for(state: TableState, control_topic: str, written: Iterable[Written], group: str) -> Pending | None:
    """What of ``written`` on ``control_topic`` ``state``'s table still lacks; None when nothing.
    Row-level changes (delete files) are not finished here: that raises, naming the commit."""
    assert state.table is not None
    recorded_topic, recorded = recorded_control(state.table, state.branch, group)
    pending = Pending(state.name, control_topic, control_offsets=recorded if recorded_topic == control_topic else {})
    seen: set[str] = set()
    for w in uncommitted(state.table, state.name, state.branch, group, control_topic, written):
        if any(int(f["record_count"]) > 0 for f in w.delete_files):
            raise SinkError(
                f"table {state.name}: Apache's sink left row-level changes (delete files) of its commit {w.commit_id} "
                f"uncommitted (control topic {control_topic}[{w.partition}]@{w.offset}); sinklab finishes appends "
                f"only. Start Apache's sink once more so that it finishes that commit, stop it cleanly, then start "
                f"sinklab", sink=None, table=state.name)
        for f in w.data_files:
            if int(f["record_count"]) > 0 and f["file_path"] not in seen:
                seen.add(f["file_path"])
                pending.files.append(f)
        if w.commit_id not in pending.commit_ids:
            pending.commit_ids.append(w.commit_id)
        pending.control_offsets[w.partition] = max(pending.control_offsets.get(w.partition, 0), w.offset + 1)
    return pending if pending.files else None


@dataclass
class Inherited:
    """Apache's half-done commit on this connector, as found before sinklab's first cycle: the group's
    offsets (where sinklab starts), the group's ``DATA_WRITTEN`` events since its coordinator last
    finished, and the tables they name. Each table's part is staged against the table as it is when
    published (``stage``), so a table that moved meanwhile is looked at again."""

    sink: str
    group: str
    group_offsets: Offsets
    written: list[Written]
    read_to: Offsets  # where the read of Apache's control topics ended
    states: dict[str, TableState] = field(default_factory=dict)

    @property
    def tables(self) -> list[str]:
        return sorted({w.table for w in self.written})

    def stage(self, catalog: Catalog, state: TableState, commit_id: str) -> Staged | None:
        """``state``'s table's pending files as a snapshot no one sees yet; None when it lacks nothing."""
        self.states[state.name] = state
        topics = sorted({w.topic for w in self.written if w.table == state.name})
        parts = [p for t in topics if (p := pending_for(state, t, self.written, self.group)) is not None]
        if not parts:
            return None
        if len(parts) > 1:
            raise SinkError(f"table {state.name}: Apache's sink left commits on two control topics "
                            f"({', '.join(topics)}) for group {self.group}; finish them with Apache's sink",
                            sink=self.sink, table=state.name)
        return stage(catalog, state, parts[0], self.group, self.sink, commit_id, self.group_offsets)

    def event(self, commit_id: str, landed: list[Staged], duration_ms: int) -> CommitComplete:
        """``commit-complete`` of the takeover: what landed, and the group's offsets (unchanged)."""
        records = sum(s.records for s in landed)
        return CommitComplete(
            sink=self.sink, commit_id=commit_id, ts_ms=int(time.time() * 1000), vtts_ms=None,
            offsets=self.group_offsets, counters={"records": records, "taken-over": records},
            duration_ms=duration_ms, tables=[
                TableCommit(table=s.table, branch=self.states[s.table].branch, snapshot_id=s.snapshot_id,
                            records=s.records, data_files=s.data_files, delete_files=[], bytes=s.bytes,
                            offsets=off.merge_max(self.states[s.table].offsets, self.group_offsets), vtts_ms=None,
                            write_ms=s.write_ms, commit_ms=s.commit_ms)
                for s in landed])


def find(kafka_conf: Mapping[str, Any], sink: str, group: str, group_offsets: Offsets,
         states: Iterable[TableState]) -> Inherited | None:
    """Apache's half-done commit on connector group ``group`` (its ``tables`` empty when nothing of it is
    pending), or None when the connector shows no sign of having run on Apache's sink
    (``apache_history``). Waits for the group to have no members first: Apache's tasks must be gone
    before sinklab commits the group's offsets."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"log_level": 4, **kafka_conf})
    coordinator = committed(admin, f"{group}-coord")
    topics = apache_history(states, group, coordinator, group_offsets)
    if not topics:
        return None
    wait_group_empty(lambda: members(admin, group), group, sink)
    written, read_to = read_written(kafka_conf, topics, group, coordinator)
    if written:
        log.info("sink %s: %d data-written events of Apache's sink on %s since its last complete commit; "
                 "finishing what the tables lack", sink, len(written), ", ".join(sorted(topics)))
    return Inherited(sink, group, group_offsets, written, read_to)


def advance(kafka_conf: Mapping[str, Any], group: str, read_to: Offsets) -> bool:
    """Once the takeover's transaction committed (or there was nothing to finish): Apache's coordinator's
    group (``<group>-coord``) moves to where the read ended, as that coordinator does after its own
    commits. The next start then reads only what came since, and so does Apache's sink after a hand-back;
    everything before is in the tables. Not needed for correctness: False when it could not (a killed
    coordinator's consumer is a member until its session times out), and the caller tries again later."""
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka import TopicPartition as KafkaPartition

    positions = [KafkaPartition(tp.topic, tp.partition, o) for tp, o in off.entries(read_to)]
    if not positions:
        return True
    consumer = Consumer({"log_level": 4, **kafka_conf, "group.id": f"{group}-coord", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=positions, asynchronous=False)
        return True
    except KafkaException as exc:
        log.info("group %s-coord not moved past what the takeover read yet (%s); tried again after the next cycle",
                 group, exc)
        return False
    finally:
        consumer.close()


def stage(catalog: Catalog, state: TableState, pending: Pending, group: str, sink: str, commit_id: str,
          group_offsets: Offsets) -> Staged:
    """The snapshot that appends ``pending``'s files to the branch, built and not committed (``publish``
    commits it by compare-and-swap), with Apache's and sinklab's offsets in its summary."""
    started = time.monotonic()
    table = state.table or catalog.load_table(identifier(state.name))
    version = table.metadata.format_version
    properties = {
        SINK_PROP: sink, COMMIT_ID_PROP: commit_id,
        OFFSETS_PROP: off.to_property(off.merge_max(state.offsets, group_offsets)),
        offsets_property(pending.control_topic, group): json.dumps(
            {str(p): o for p, o in sorted(pending.control_offsets.items())}),
        APACHE_COMMIT_ID: pending.commit_ids[-1],
    }
    snapshot, _ = stage_append(table, state.branch, properties,
                               lambda _metadata, _uuid: [data_file(f, version) for f in pending.files])
    return Staged(state.name, None, snapshot.snapshot_id, pending.records,
                  sum(int(f["file_size_in_bytes"]) for f in pending.files), [f["file_path"] for f in pending.files], [],
                  int((time.monotonic() - started) * 1000), loaded=table, snapshot=snapshot)


def data_file(avro: Mapping[str, Any], format_version: int) -> DataFile:
    """A data file of Apache's event (Iceberg's ``DataFile`` struct, its maps as key/value arrays) as
    pyiceberg's."""
    partition = avro.get("partition") or {}
    return DataFile.from_args(
        _table_format_version=format_version,
        content=DataFileContent.DATA,
        file_path=avro["file_path"],
        file_format=FileFormat(str(avro["file_format"]).upper()),
        partition=Record(*partition.values()),
        record_count=int(avro["record_count"]),
        file_size_in_bytes=int(avro["file_size_in_bytes"]),
        column_sizes=_map(avro.get("column_sizes")),
        value_counts=_map(avro.get("value_counts")),
        null_value_counts=_map(avro.get("null_value_counts")),
        nan_value_counts=_map(avro.get("nan_value_counts")),
        lower_bounds=_map(avro.get("lower_bounds")),
        upper_bounds=_map(avro.get("upper_bounds")),
        key_metadata=avro.get("key_metadata"),
        split_offsets=avro.get("split_offsets"),
        sort_order_id=avro.get("sort_order_id"),
        spec_id=avro.get("spec_id"),
    )


def committed(admin: AdminClient, group: str) -> Offsets:
    """Every offset ``group`` committed (empty when it has none, or does not exist)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    found = group_call(lambda: admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=10)[group].result(15))
    return off.of((TopicPartition(tp.topic, tp.partition), tp.offset) for tp in found.topic_partitions
                  if tp.offset >= 0)


def members(admin: AdminClient, group: str) -> tuple[str, list[str]]:
    """The state of ``group`` and its members' client ids."""
    described = group_call(lambda: admin.describe_consumer_groups([group], request_timeout=10)[group].result(15))
    return str(described.state), [f"{m.client_id}@{m.host}" for m in described.members]


def wait_group_empty(describe: Callable[[], tuple[str, list[str]]], group: str, sink: str,
                     timeout_s: float = GROUP_EMPTY_TIMEOUT_S) -> None:
    """Until the connector's group has no members. A sink that commits the group's offsets from outside
    it is refused while members hold it (Apache's tasks still running, or killed and not yet timed out)."""
    deadline, told = time.monotonic() + timeout_s, False
    while True:
        state, members = describe()
        if not members:
            return
        if time.monotonic() >= deadline:
            raise SinkError(
                f"sink {sink}: the consumer group {group} still has members after {timeout_s:.0f} s "
                f"({', '.join(members)}; state {state}): another sink (Apache's, in a Connect worker?) runs this "
                f"connector. Stop it first",
                sink=sink)
        if not told:
            log.warning("sink %s: waiting for the members of group %s (%s) to leave: a stopped or killed sink's tasks "
                        "leave when their sessions time out", sink, group, ", ".join(members))
            told = True
        time.sleep(1.0)


def _map(pairs: Any) -> dict[int, Any] | None:
    if pairs is None:
        return None
    if isinstance(pairs, dict):
        return {int(k): v for k, v in pairs.items()}
    return {int(p["key"]): p["value"] for p in pairs}

