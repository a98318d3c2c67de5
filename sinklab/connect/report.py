"""``sinklab sink status``: what Kafka Connect's ``GET /connectors/{name}/status`` tells, for every sink
that has committed on a stack — however it runs (the stack's Connect server, ``sinklab sink run``, a
notebook) — plus what Connect cannot tell: the last cycle, the lag per partition and each table's
last snapshot.

Everything is read the way any observer can: the control topic (the sinks and their cycles), the
consumer groups' committed offsets against the end offsets (lag), the catalog (snapshots), and the
stack's Connect server (the state of the sinks it runs).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import requests
from pydantic import BaseModel, Field, field_serializer
from pyiceberg.expressions import And, EqualTo, IsNull

from sinklab.connect.herder import validate
from sinklab.connect.offsets import GroupOffsets
from sinklab.sink.apache import read_log
from sinklab.sink.records import DEAD_LETTERS_PROP, REPLAY_ID
from sinklab.sink.wire import APACHE_CONTROL_TOPIC, CONTROL_TOPIC, Lag, PayloadType, TopicPartition, lag_json

if TYPE_CHECKING:
    import pandas as pd

    from sinklab.stack import Stack


class TableReport(BaseModel):
    table: str
    branch: str
    snapshot_id: int | None
    total_records: int | None
    committed_at_ms: int | None
    # A dead-letter table (errors.deadletterqueue.table.name): the sink's dead letters no replay has taken.
    dead_letters_waiting: int | None = None


class SinkReport(BaseModel):
    name: str
    # The Connect server's state when it runs the sink; None when another process runs (or ran) it.
    state: str | None
    runs_on: str  # "connect <url>", "Apache's Iceberg sink (…)" or "another process (sinklab sink run, a notebook, …)"
    trace: str | None = None
    group_id: str
    cycles: int
    last_cycle: dict[str, Any] | None = None
    lag: Lag = Field(default_factory=dict)
    tables: list[TableReport] = Field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(self.lag.values())

    @field_serializer("lag")
    def _lag_json(self, lag: Lag) -> dict[str, int]:
        return lag_json(lag)


def connect_statuses(url: str | None, timeout: float = 5.0, auth: tuple[str, str] | None = None
                     ) -> dict[str, dict[str, Any]]:
    """``GET /connectors?expand=status&expand=info`` of the stack's Connect server: per connector its
    Connect status and info; empty when the stack runs no server or it does not answer."""
    if not url:
        return {}
    try:
        answer = requests.get(f"{url}/connectors", params=[("expand", "status"), ("expand", "info")],
                              timeout=timeout, auth=auth)
    except requests.ConnectionError:
        return {}
    answer.raise_for_status()
    return dict(answer.json())


def sink_reports(stack: Stack, names: list[str] | None = None, control_topic: str = CONTROL_TOPIC,
                 ) -> list[SinkReport]:
    """One report per sink named (default: every sink on the control topic or the Connect server)."""
    import pandas as pd

    # Apache's sink's connectors too: their commits, from its control topic, read as sinklab's (apache_log).
    logs = {topic: read_log(stack.kafka_config(), topic) for topic in {control_topic, APACHE_CONTROL_TOPIC}}
    log = pd.concat(logs.values(), ignore_index=True)
    on_apache = set(logs[APACHE_CONTROL_TOPIC]["sink"])
    connect = connect_statuses(stack.info.connect_url, auth=stack.info.connect_auth())
    known = sorted({*log["sink"], *connect})
    wanted = names or known
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise LookupError(f"no sink {', '.join(unknown)} on this stack (none has committed on {control_topic} "
                          f"or runs on its Connect server); sinks here: {', '.join(known) or 'none'}")
    groups = GroupOffsets(stack.kafka_config())
    reports = []
    for name in wanted:
        mine = log[(log["sink"] == name) & (log["type"] == PayloadType.COMMIT_COMPLETE)].sort_values("ts")
        on_connect = connect.get(name)
        group = f"connect-{name}"
        topics: set[str] = set()
        if on_connect is not None:
            config = validate(name, on_connect["info"]["config"])
            group = config.group_id
            topics = set(config.topics)
        for cycle_offsets in mine["offsets"]:
            topics |= set(cycle_offsets)
        report = SinkReport(
            name=name, group_id=group, cycles=len(mine),
            state=on_connect["status"]["connector"]["state"] if on_connect else None,
            trace=on_connect["status"]["connector"].get("trace") if on_connect else None,
            runs_on=f"connect {stack.info.connect_url}" if on_connect
            else f"Apache's Iceberg sink (its commits on {APACHE_CONTROL_TOPIC})" if name in on_apache
            else "another process (sinklab sink run, a notebook, …)",
            last_cycle=_last_cycle(mine), lag=_lag(stack, groups.get(group), sorted(topics)),
            tables=_tables(stack, mine, name))
        reports.append(report)
    return reports


def _last_cycle(mine: pd.DataFrame) -> dict[str, Any] | None:
    if mine.empty:
        return None
    last = mine.iloc[-1]
    return {"commit_id": last["commit_id"], "completed_at": last["ts"].isoformat(),
            "ago_s": round(time.time() - last["ts"].timestamp(), 1),
            "records": int(last["counters"].get("records", 0)),
            "written": sum(int(t["records"]) for t in last["tables"]), "duration_ms": int(last["duration_ms"])}


def _lag(stack: Stack, committed: dict[tuple[str, int], int], topics: list[str]) -> Lag:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaPartition

    consumer = Consumer(stack.kafka_config(**{"group.id": f"sinklab-status-{uuid.uuid4().hex}",
                                              "enable.auto.commit": False}))
    try:
        lag: Lag = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None:
                continue
            for p in sorted(meta.partitions):
                low, high = consumer.get_watermark_offsets(KafkaPartition(topic, p), timeout=10)
                lag[TopicPartition(topic, p)] = max(0, high - max(low, committed.get((topic, p), low)))
        return lag
    finally:
        consumer.close()


def _tables(stack: Stack, mine: pd.DataFrame, sink: str) -> list[TableReport]:
    """Each table the sink committed to, with the head of the branch it commits to now (another
    writer's snapshot, a compaction, shows here too: it is what readers see)."""
    branches: dict[str, str] = {}
    for tables in mine["tables"]:
        for t in tables:
            branches[t["table"]] = t["branch"]
    out = []
    for table, branch in sorted(branches.items()):
        loaded = stack.catalog.load_table(table) if stack.catalog.table_exists(table) else None
        snapshot = loaded.snapshot_by_name(branch) if loaded is not None else None
        summary = snapshot.summary if snapshot is not None else None
        total = summary.get("total-records") if summary is not None else None
        waiting = None
        if loaded is not None and snapshot is not None and loaded.properties.get(DEAD_LETTERS_PROP) == "true":
            scan = loaded.scan(row_filter=And(EqualTo("sink", sink), IsNull(REPLAY_ID)),
                               selected_fields=("source_offset",), snapshot_id=snapshot.snapshot_id)
            waiting = scan.to_arrow().num_rows
        out.append(TableReport(table=table, branch=branch, snapshot_id=snapshot.snapshot_id if snapshot else None,
                               total_records=int(total) if total is not None else None,
                               committed_at_ms=snapshot.timestamp_ms if snapshot else None,
                               dead_letters_waiting=waiting))
    return out


def format_reports(reports: list[SinkReport]) -> str:
    """The reports as text, one block per sink."""
    if not reports:
        return "no sinks on this stack yet (none has committed, and its Connect server runs none)"
    lines = []
    for r in reports:
        lines.append(f"{r.name}: {r.state or 'not run by the Connect server'} — {r.runs_on}; group {r.group_id}")
        if r.trace:
            lines.append(f"  error: {r.trace.strip().splitlines()[-1]}")
        last = r.last_cycle
        lines.append(f"  cycles {r.cycles}" + (
            f", last {last['ago_s']:.1f} s ago ({last['completed_at']}): {last['records']:,} records read, "
            f"{last['written']:,} rows written in {last['duration_ms']} ms, commit {last['commit_id']}"
            if last else ", none committed yet"))
        lines.append(f"  lag {r.total_lag:,}" + (
            " (" + ", ".join(f"{tp} {n:,}" for tp, n in sorted(r.lag.items())) + ")" if r.lag else ""))
        for t in r.tables:
            lines.append(f"  {t.table}@{t.branch}: snapshot {t.snapshot_id}, {t.total_records:,} rows"
                         if t.snapshot_id is not None else f"  {t.table}@{t.branch}: no snapshot")
            if t.dead_letters_waiting is not None:
                lines[-1] += f"; dead letters: {t.dead_letters_waiting:,} wait for replay (sinklab dlq replay)"
    return "\n".join(lines)
