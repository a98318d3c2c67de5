"""What maintenance must keep for the sink's exactly-once recovery, and what is garbage.

A sink finds what a table already holds by walking the branch from its head to its own newest
snapshot carrying ``sinklab.offsets`` (``sink.tables.state.recorded_offsets``). Expiring that snapshot,
or any snapshot between it and the head (another writer's compaction, say), would cut the walk
and make a recovering sink write a half-finished cycle again. Every descendant of a snapshot is
younger than it, so expiring only what is older than the oldest such snapshot keeps every walk
whole; that is the whole rule. Apache's sink walks the same way to its newest snapshot carrying
``kafka.connect.offsets.<control topic>.<group>`` (its ``lastCommittedOffsetsForTable``), which keeps it
from committing a round's files twice: held alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sinklab.sink.tables import OFFSETS_PROP, SINK_PROP, STAGE_PREFIX
from sinklab.sink.wire import apache_events

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata


@dataclass(frozen=True)
class Snap:
    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    props: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Ref:
    name: str
    snapshot_id: int
    branch: bool


def snaps_of(metadata: TableMetadata) -> tuple[dict[int, Snap], list[Ref]]:
    snaps = {s.snapshot_id: Snap(s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms,
                                 dict(s.summary.additional_properties) if s.summary else {})
             for s in metadata.snapshots}
    refs = [Ref(name, ref.snapshot_id, ref.snapshot_ref_type.value == "branch") for name, ref in metadata.refs.items()]
    return snaps, refs


def lineage(snaps: dict[int, Snap], head: int | None) -> list[Snap]:
    """The head and its ancestors, newest first, up to the first one already expired."""
    out = []
    while head is not None and head in snaps:
        out.append(snaps[head])
        head = snaps[head].parent_id
    return out


def is_stage(ref: Ref) -> bool:
    return ref.name.startswith(STAGE_PREFIX)


def recovery_snapshots(snaps: dict[int, Snap], refs: list[Ref]) -> dict[tuple[str, str], Snap]:
    """(branch, sink) -> the sink's newest snapshot with recorded offsets on that branch; an Apache
    connector is named ``Apache's <control topic>.<group>``."""
    held: dict[tuple[str, str], Snap] = {}
    for ref in refs:
        if not ref.branch or is_stage(ref):
            continue
        for snap in lineage(snaps, ref.snapshot_id):
            sink = snap.props.get(SINK_PROP)
            names = [sink] if sink and OFFSETS_PROP in snap.props else []
            names += [f"Apache's {k.removeprefix(apache_events.OFFSETS_PREFIX)}" for k in snap.props
                      if k.startswith(apache_events.OFFSETS_PREFIX)]
            for name in names:
                held.setdefault((ref.name, name), snap)
    return held


def expiry_cutoff(older_than_ms: int, held: dict[tuple[str, str], Snap]) -> int:
    """Expire snapshots older than this: the requested age, held back to the oldest snapshot recovery needs."""
    return min([older_than_ms, *(s.timestamp_ms for s in held.values())])


def stale_stages(snaps: dict[int, Snap], refs: list[Ref], cutoff_ms: int) -> list[Ref]:
    """Staging branches of cycles that never published: older than any cycle still running can be."""
    return [r for r in refs if is_stage(r) and (r.snapshot_id not in snaps or snaps[r.snapshot_id].timestamp_ms
                                                < cutoff_ms)]


def unreachable(snaps: dict[int, Snap], refs: list[Ref], cutoff_ms: int) -> list[int]:
    """Snapshots on no branch or tag (staged by a cycle that died, its staging branch gone), older than
    ``cutoff_ms``: only their own files keep them, and expiring them deletes those files."""
    reachable = {s.snapshot_id for ref in refs for s in lineage(snaps, ref.snapshot_id)}
    return sorted(i for i, s in snaps.items() if i not in reachable and s.timestamp_ms < cutoff_ms)
