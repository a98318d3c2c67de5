"""What Apache's sink has in flight on a table: files no snapshot references yet, which it will commit.

Apache's workers write data files as records arrive, close them when its coordinator starts a commit
round (``START_COMMIT``), name them in ``DATA_WRITTEN`` events, and only then does the coordinator
append them to the table; a round whose table commit fails keeps them for the next one. Until then
they are, to the table, orphan files. For each connector (group) whose events name the table:

- its *named* files: those of its ``DATA_WRITTEN`` events the table has not committed (``control.uncommitted``,
  Apache's own rule), data and delete files, whether the connector runs or not (its restart commits them);
- its *unnamed* files: a running connector's workers may hold a file open since its newest finished
  round began (they close theirs at each round's start), so anything younger may be one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sinklab.sink.apache.control import Written, read_events, uncommitted
from sinklab.sink.apache.takeover import members
from sinklab.sink.wire.apache_events import APACHE_CONTROL_TOPIC, OFFSETS_PREFIX, PayloadType

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from pyiceberg.table import Table


@dataclass
class InFlight:
    """Apache's files in flight on one table (empty when no connector of Apache's writes it)."""

    table: str
    files: set[str] = field(default_factory=set)  # named in events the table has not committed
    open_since_ms: int | None = None  # a running connector's unnamed files are no older than this
    connectors: dict[str, str] = field(default_factory=dict)  # group -> "running" or "stopped"

    @property
    def any(self) -> bool:
        return bool(self.connectors)


def control_topics(table: Table, existing: Iterable[str], given: Iterable[str] = ()) -> set[str]:
    """The control topics to read for ``table``: those its snapshots record Apache's offsets of (the
    property ``kafka.connect.offsets.<topic>.<group>``, matched against the ``existing`` topics, as a
    topic's name may hold dots), Apache's default one, and ``given``; only those that exist."""
    existing = set(existing)
    found = {t for t in (*given, APACHE_CONTROL_TOPIC) if t in existing}
    for snap in table.metadata.snapshots:
        for key in (snap.summary.additional_properties if snap.summary else {}):
            if key.startswith(OFFSETS_PREFIX):
                rest = key[len(OFFSETS_PREFIX):]
                found.update(t for t in existing if rest.startswith(f"{t}."))
    return found


def in_flight(kafka_conf: Mapping[str, Any], admin: AdminClient, table: Table, name: str, branch: str = "main",
              topics: Iterable[str] = ()) -> InFlight:
    """What Apache's sink has in flight on branch ``branch`` of ``table`` (``name``), from its control topics
    (``control_topics``; ``topics``: any beyond its default one and those the table records), read whole."""
    out = InFlight(name)
    read = control_topics(table, admin.list_topics(timeout=10).topics, topics)
    if not read:
        return out
    events, _ = read_events(kafka_conf, read)
    written = [Written.of(e) for e in events if e.type == PayloadType.DATA_WRITTEN]
    groups = sorted({w.group for w in written if w.of_table(table, name)})
    started = {(e.group, e.commit_id): e.ts_ms for e in events if e.type == PayloadType.START_COMMIT}
    for group in groups:
        for topic in read:
            for w in uncommitted(table, name, branch, group, topic, written):
                out.files.update(f["file_path"] for f in (*w.data_files, *w.delete_files))
        running = any(members(admin, g)[1] for g in (group, f"{group}-coord"))
        out.connectors[group] = "running" if running else "stopped"
        if running:
            rounds = [started.get((e.group, e.commit_id)) for e in events
                      if e.group == group and e.type == PayloadType.COMMIT_COMPLETE]
            # No round finished yet: any file may be one of its workers' open ones.
            since = max((r for r in rounds if r is not None), default=0)
            out.open_since_ms = since if out.open_since_ms is None else min(out.open_since_ms, since)
    return out
