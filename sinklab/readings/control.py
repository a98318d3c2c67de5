"""The control topic as tidy frames: its committed events (read incrementally, or once), one row per
table per completed cycle, one row per cycle, and the maintenance runs a sink scheduled. Apache's
sink's control topic reads the same (its commits as sinklab's events)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from sinklab.readings.columns import COMMIT_COLUMNS, CYCLE_COLUMNS, MAINTENANCE_COLUMNS, empty
from sinklab.readings.sources import kafka_of
from sinklab.sink.apache import ApacheLog
from sinklab.sink.records import DEAD_LETTER_TABLE
from sinklab.sink.wire import CONTROL_TOPIC, ControlEvent, PayloadType, TopicReader, events_of, log_frame

if TYPE_CHECKING:
    from sinklab.readings.sources import KafkaSource


class ControlLog:
    """The control topic's committed events, read incrementally: each ``read()`` fetches only what
    arrived since the last one and returns every event so far, in ``read_control_log``'s columns.

    Unlike a one-shot read it never waits for an open transaction: a sink that is mid-commit (or
    was killed mid-commit, until its next instance aborts the transaction) holds read_committed
    consumers back, so ``read()`` returns what is committed once nothing new arrives for ``idle_s``.
    """

    def __init__(self, source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC):
        self.kafka = kafka_of(source)
        self.sink = sink
        self.topic = control_topic
        self._events: list[ControlEvent] = []
        self._reader: TopicReader | None = None
        self._apache = ApacheLog(sink)

    def read(self, timeout: float = 10.0, idle_s: float = 0.5) -> pd.DataFrame:
        if self._reader is None:
            self._reader = TopicReader(self.kafka, self.topic)
        for batch in self._reader.read(timeout=timeout, idle_s=idle_s):
            self._events.extend(events_of(batch, self.sink))
            # Apache's sink's control topic reads the same: its commits as sinklab's events (apache_log).
            self._events.extend(self._apache.feed(batch))
        return self.frame()

    def frame(self) -> pd.DataFrame:
        return log_frame(self._events)

    def close(self) -> None:
        """Close the consumer; a later ``read()`` starts again from the beginning."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._events = []
        self._apache = ApacheLog(self.sink)

    def __enter__(self) -> ControlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def control_log(source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC) -> pd.DataFrame:
    """Every committed event on the control topic (of one sink), one row per event."""
    with ControlLog(source, sink, control_topic) as log:
        return log.read()


def commits(source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC,
            log: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per table per completed cycle, from the control topic's ``commit-complete`` events.

    ``started_at`` is the cycle's ``commit-start`` event (its Kafka transaction opened), ``completed_at``
    its ``commit-complete``; ``data_files``/``delete_files`` are counts; ``offsets`` is what the table
    recorded. ``log`` reuses a control log already read (:func:`control_log`, :class:`ControlLog`).
    """
    log = control_log(source, sink, control_topic) if log is None else log
    rows = []
    for cycle in _completed(log).itertuples(index=False):
        for t in cycle.tables:
            rows.append({
                "sink": cycle.sink, "cycle": cycle.cycle, "commit_id": cycle.commit_id,
                "started_at": cycle.started_at, "completed_at": cycle.ts, "vtts": cycle.vtts, "table": t["table"],
                "branch": t["branch"], "snapshot_id": t["snapshot_id"], "records": t["records"],
                "data_files": len(t["data_files"]), "delete_files": len(t["delete_files"]), "bytes": t["bytes"],
                "write_ms": t["write_ms"], "commit_ms": t["commit_ms"], "duration_ms": cycle.duration_ms,
                "offsets": t["offsets"],
            })
    return pd.DataFrame(rows, columns=COMMIT_COLUMNS) if rows else empty(COMMIT_COLUMNS)


def cycles(source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC,
           log: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per completed cycle: records ``read`` from Kafka and rows ``written`` to all its
    tables (more than read with fan-out to several tables, fewer with bad or unrouted records),
    files, bytes, the cycle's end ``offsets`` and its ``counters`` (tombstones, dead letters, …)."""
    log = control_log(source, sink, control_topic) if log is None else log
    done = _completed(log)
    if done.empty:
        return empty(CYCLE_COLUMNS)
    return pd.DataFrame({
        "sink": done["sink"], "cycle": done["cycle"], "commit_id": done["commit_id"],
        "started_at": done["started_at"], "completed_at": done["ts"], "vtts": done["vtts"],
        "read": done["counters"].map(lambda c: int(c.get("records", 0))),
        # The dead-letter table's rows are the cycle's bad records, not rows it wrote.
        "written": done["tables"].map(lambda ts: sum(int(t["records"]) for t in ts))
        - done["counters"].map(lambda c: int(c.get(DEAD_LETTER_TABLE, 0))),
        "tables": done["tables"].map(len),
        "data_files": done["tables"].map(lambda ts: sum(len(t["data_files"]) for t in ts)),
        "bytes": done["tables"].map(lambda ts: sum(int(t["bytes"]) for t in ts)),
        "duration_ms": done["duration_ms"], "offsets": done["offsets"],
        "counters": done["counters"].map(dict),
    }, columns=CYCLE_COLUMNS).reset_index(drop=True)


def _completed(log: pd.DataFrame) -> pd.DataFrame:
    """commit-complete events in commit order, numbered per sink, with their commit-start time."""
    if log.empty:
        return log.assign(cycle=pd.Series(dtype="int64"), started_at=pd.Series(dtype="datetime64[ns, UTC]"))
    starts = log[log["type"] == PayloadType.COMMIT_START].drop_duplicates("commit_id", keep="last") \
        .set_index("commit_id")["ts"]
    done = log[log["type"] == PayloadType.COMMIT_COMPLETE].sort_values("ts", kind="stable").copy()
    done["started_at"] = done["commit_id"].map(starts)
    done["cycle"] = done.groupby("sink").cumcount() + 1
    return done.reset_index(drop=True)


def maintenance_runs(source: KafkaSource, sink: str | None = None, control_topic: str = CONTROL_TOPIC,
                     log: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per table per maintenance run a sink scheduled (``sinklab.maintenance.*``), from the
    control topic: when, how long it took, how much it delayed the next cycle, and what it did."""
    log = control_log(source, sink, control_topic) if log is None else log
    runs = log[log["type"] == PayloadType.MAINTENANCE]
    rows = []
    for run in runs.itertuples():
        counters = dict(run.counters)
        for t in run.tables:
            rows.append({"sink": run.sink, "ts": run.ts, "table": t["table"], "duration_ms": t["write_ms"],
                         "delay_ms": counters.get("delay_ms", 0), "snapshot_id": t["snapshot_id"],
                         "rewritten_data_files": counters.get("compact.rewritten_data_files", 0),
                         "added_data_files": counters.get("compact.added_data_files", 0),
                         "rewritten_bytes": t["bytes"],
                         "expired_snapshots": counters.get("expire.expired_snapshots", 0),
                         "orphan_files": counters.get("clean.orphan_files", 0)})
    if not rows:
        return empty(MAINTENANCE_COLUMNS)
    return pd.DataFrame(rows, columns=MAINTENANCE_COLUMNS)
