"""Recovery: what a cycle finds after a crash, at whichever step of the protocol it came
(docs/protocol.md, "Crash points"), and the three steps that make it whole:

- ``start_offsets``: where each partition resumes (the group's offsets, else the tables', else
  ``auto.offset.reset``);
- ``unrecorded``: each table keeps only records past what it recorded, so a cycle replayed
  after a crash between two table commits adds nothing twice;
- ``drop_stale_stages``: staging branches a crashed cycle left are dropped before the sink's first
  cycle on a table (their snapshots never reached the target branch).
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from pyiceberg.table.update import RemoveSnapshotRefUpdate
from pyspark.sql import functions as F

from sinklab.sink.tables.state import identifier
from sinklab.sink.tables.write import STAGE_PREFIX
from sinklab.sink.wire import offsets as off
from sinklab.sink.wire.offsets import OffsetRange, Offsets, TopicPartition

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import Column


def start_offsets(partitions: list[TopicPartition], group: Offsets, tables: list[Offsets], low: Offsets,
                  high: Offsets, reset: str) -> Offsets:
    """Where each partition resumes: the group's committed offset (the last complete cycle); without
    it the lowest offset any table recorded (a half-finished cycle is filtered per table); without
    that ``auto.offset.reset``. Clamped to what the broker still has."""
    out: Offsets = {}
    for tp in partitions:
        if off.get(group, tp) >= 0:
            start = off.get(group, tp)
        else:
            recorded = [off.get(t, tp) for t in tables if off.get(t, tp) >= 0]
            if recorded and len(recorded) == len(tables):
                start = min(recorded)
            else:
                start = off.get(low, tp) if reset == "earliest" else off.get(high, tp)
        off.put(out, tp, min(max(start, off.get(low, tp)), off.get(high, tp)))
    return out


def unrecorded(recorded: Offsets, ranges: list[OffsetRange]) -> Column | bool | None:
    """Which records of ``ranges`` a table that recorded ``recorded`` does not have: a condition,
    True for all of them, None for none."""
    keep, whole = [], True
    for r in ranges:
        mark = off.get(recorded, r.tp)
        if mark >= r.end:
            whole = False
            continue
        cond = (F.col("topic") == r.topic) & (F.col("partition") == r.partition)
        if mark > r.start:
            whole = False
            cond = cond & (F.col("offset") >= mark)
        keep.append(cond)
    if not keep:
        return None
    return True if whole else reduce(lambda a, b: a | b, keep)


def drop_stale_stages(catalog: Catalog, table_name: str, sink: str) -> None:
    """Staging branches this sink's crashed cycles left behind; their snapshots never reached the target."""
    table = catalog.load_table(identifier(table_name))
    stale = [name for name in table.metadata.refs if name.startswith(f"{STAGE_PREFIX}{sink}-")]
    if stale:
        catalog.commit_table(table, (), tuple(RemoveSnapshotRefUpdate(ref_name=name) for name in stale))
