"""Publishing a cycle's staged write: one catalog commit per table that moves the target branch to the
staged snapshot iff the branch is still where the cycle planned (a compare-and-swap), and what to do
when the catalog's answer is lost (read the table: never commit blindly again).

Iceberg's automatic commit retry rebases an append onto a concurrent one, which is exactly how two
instances of a sink duplicate data; so these commits assert the branch's snapshot and are never
retried by Iceberg (docs/protocol.md, "The zombie guard").
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import requests
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    CommitStateUnknownException,
    ServiceUnavailableError,
)
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    RemoveSnapshotRefUpdate,
    SetSnapshotRefUpdate,
    TableUpdate,
)

from sinklab.sink.tables.state import TableState, identifier
from sinklab.sink.tables.write import Staged, lost_sequence_race

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger("sinklab.sink")

# Answers that say nothing of whether a commit landed: it failed inside the catalog after arriving
# (500/502/504), the catalog refused for now (503), or the answer never came back.
UNKNOWN_OUTCOME = (CommitStateUnknownException, ServiceUnavailableError, requests.ConnectionError, requests.Timeout)
PUBLISH_ATTEMPTS = 3


def publish(catalog: Catalog, state: TableState, staged: Staged) -> bool:
    """Make the staged snapshot the target branch's head iff the branch still points at the planned
    snapshot: one REST commit, which also adds an append's snapshot or drops a private branch.

    Returns False when the table moved since planning (the caller re-plans), or when a commit on another
    branch took the sequence number the snapshot was built with (nothing landed: the caller writes
    again). A publish whose answer is lost is resolved by reading the table (``landed``), never by
    committing blindly again: the compare-and-swap makes a second attempt safe only once the table says
    the first did not land.
    """
    # The requirement, not the loaded metadata, is what the catalog checks: any loaded copy serves.
    table = staged.loaded or state.table or catalog.load_table(identifier(state.name))
    head = SetSnapshotRefUpdate(ref_name=state.branch, type="branch", snapshot_id=staged.snapshot_id)
    updates: tuple[TableUpdate, ...] = (
        (AddSnapshotUpdate(snapshot=staged.snapshot), head) if staged.snapshot is not None
        else (head, RemoveSnapshotRefUpdate(ref_name=staged.stage)))
    for attempt in range(1, PUBLISH_ATTEMPTS + 1):
        try:
            catalog.commit_table(table, (AssertRefSnapshotId(ref=state.branch, snapshot_id=state.snapshot_id),),
                                 updates)
            return True
        except (CommitFailedException, BadRequestError) as exc:
            # Apache's REST server answers a lost sequence race with 409 since 1.11, 400 before.
            if lost_sequence_race(exc):
                log.warning("table %s: a commit on another branch took the sequence number of snapshot %d; "
                            "writing it again", state.name, staged.snapshot_id)
            elif isinstance(exc, BadRequestError):
                raise
            return False
        except UNKNOWN_OUTCOME as exc:
            outcome = landed(catalog, state, staged)
            if outcome is not None:
                log.warning("table %s: the catalog's answer to publishing snapshot %d was lost (%s); the table says "
                            "it %s", state.name, staged.snapshot_id, exc, "landed" if outcome else "did not land")
                return outcome
            if attempt == PUBLISH_ATTEMPTS:
                raise
            log.warning("table %s: publishing snapshot %d got no answer (%s) and did not land; publishing again",
                        state.name, staged.snapshot_id, exc)
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def landed(catalog: Catalog, state: TableState, staged: Staged) -> bool | None:
    """After a publish without an answer: True when the target branch holds the staged snapshot
    (it landed, perhaps with commits of others on top), False when the branch moved to something
    else (the caller re-plans), None when the branch did not move (it did not land)."""
    from pyiceberg.table.snapshots import ancestors_of

    table = catalog.load_table(identifier(state.name))
    ref = table.metadata.refs.get(state.branch)
    head = ref.snapshot_id if ref is not None else None
    if head == state.snapshot_id:
        return None
    current = table.metadata.snapshot_by_id(head) if head is not None else None
    return any(s.snapshot_id == staged.snapshot_id for s in ancestors_of(current, table.metadata))


def discard(catalog: Catalog, staged: Staged) -> None:
    """Take back a staged write that will not be published: a private branch is dropped; an append's
    files are deleted, once the table shows its snapshot is not there (a publish whose outcome stayed
    unknown may have landed it)."""
    if staged.stage is None and staged.snapshot is None:
        return  # nothing was written
    table = catalog.load_table(identifier(staged.table))
    if staged.stage is not None:
        if staged.stage in table.metadata.refs:
            catalog.commit_table(table, (), (RemoveSnapshotRefUpdate(ref_name=staged.stage),))
        return
    if staged.snapshot is None or table.metadata.snapshot_by_id(staged.snapshot_id) is not None:
        return
    written = [m.manifest_path for m in staged.snapshot.manifests(table.io)
               if m.added_snapshot_id == staged.snapshot_id]
    for path in [*staged.data_files, *written, staged.snapshot.manifest_list]:
        table.io.delete(path)
