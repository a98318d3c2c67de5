"""Destination tables: what the sink knows of them (snapshot, recorded offsets, the ``sinklab.*`` properties)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table.snapshots import ancestors_of

from sinklab.exceptions import TableUnfit
from sinklab.sink.config import keys
from sinklab.sink.config.sink_config import SinkConfig
from sinklab.sink.wire.offsets import Offsets, from_property

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

SINK_PROP = "sinklab.sink"
OFFSETS_PROP = "sinklab.offsets"
COMMIT_ID_PROP = "sinklab.commit-id"
VTTS_PROP = "sinklab.vtts"
REPLAY_PROP = "sinklab.replay"  # a replay's snapshot: which replay, of which dead letters (sinklab.sink.replay)
# A table property per sink that writes the table: its shareable settings (SinkConfig.shareable), so a
# fresh read (sinklab.fresh) converts the table's Kafka tail as that sink does, with no config at hand.
SETTINGS_PREFIX = "sinklab.settings."
# How far back through snapshots of other writers (compaction, users) to look for our last commit.
MAX_ANCESTORS = 1000


@dataclass
class TableState:
    """A table as the cycle planned against it: the branch head and what this sink recorded."""

    name: str
    branch: str
    exists: bool
    snapshot_id: int | None = None
    offsets: Offsets = field(default_factory=dict)
    table: Table | None = None


def identifier(name: str) -> tuple[str, ...]:
    return tuple(name.split("."))


def load_state(catalog: Catalog, name: str, branch: str, sink: str) -> TableState:
    try:
        table = catalog.load_table(identifier(name))
    except NoSuchTableError:
        return TableState(name=name, branch=branch, exists=False)
    ref = table.metadata.refs.get(branch)
    snapshot_id = ref.snapshot_id if ref else None
    return TableState(name=name, branch=branch, exists=True, snapshot_id=snapshot_id,
                      offsets=recorded_offsets(table, snapshot_id, sink), table=table)


def ancestry(table: Table, snapshot_id: int | None) -> Iterator[Snapshot]:
    """The snapshot and its ancestors, newest first, up to the first one expired (at most MAX_ANCESTORS)."""
    head = table.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    return islice(ancestors_of(head, table.metadata), MAX_ANCESTORS)


def _summaries(table: Table, snapshot_id: int | None) -> Iterator[dict[str, str]]:
    """The summary properties of the snapshot and its ancestors, newest first."""
    for snap in ancestry(table, snapshot_id):
        yield snap.summary.additional_properties if snap.summary else {}


def recorded_offsets(table: Table, snapshot_id: int | None, sink: str) -> Offsets:
    """The offsets in this sink's newest commit on the branch (other writers' snapshots carry none)."""
    for props in _summaries(table, snapshot_id):
        if props.get(SINK_PROP) == sink and OFFSETS_PROP in props:
            return from_property(props[OFFSETS_PROP])
    return {}


def replay_landed(state: TableState, replay: str) -> bool:
    """Whether the replay ``replay`` already published to the table (on the branch's history)."""
    assert state.table is not None
    return any(props.get(REPLAY_PROP) == replay for props in _summaries(state.table, state.snapshot_id))


def ensure_properties(table: Table, extra: dict[str, str]) -> None:
    """The table's properties the sink needs, set in one commit when one differs: WAP (row-level changes
    are staged through ``spark.wap.branch``, which Iceberg only honours with WAP enabled) and ``extra``
    (merge-on-read for row-level changes, the sink's shareable settings)."""
    wanted = {"write.wap.enabled": "true", **extra}
    if any(table.properties.get(k) != v for k, v in wanted.items()):
        with table.transaction() as txn:
            txn.set_properties(wanted)


def quote(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def row_ids(config: SinkConfig, state: TableState) -> list[str]:
    """A row-level table's row identity: the configured id columns, else the table's identifier fields."""
    ids = config.table_id_columns(state.name)
    if not ids and state.table is not None:
        ids = list(state.table.schema().identifier_field_names())
    if not ids:
        raise TableUnfit(keys.TABLES_DEFAULT_ID_COLUMNS, f"table {state.name} has no identifier fields; upsert/"
                         f"CDC needs id columns ({keys.table_key(state.name, keys.ID_COLUMNS)})",
                         table=state.name, sink=config.name)
    return ids
