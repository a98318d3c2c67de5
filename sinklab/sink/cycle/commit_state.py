"""A cycle's state, from the worker's staging to the coordinator's commit (Apache's sink keeps its own in
``CommitState``): what each table stages, the dead letters, the counters, and the ``sinklab.*``
properties of each snapshot it stages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sinklab.sink.records import dead_letters
from sinklab.sink.tables.state import COMMIT_ID_PROP, OFFSETS_PROP, REPLAY_PROP, SINK_PROP, VTTS_PROP, TableState
from sinklab.sink.tables.write import Staged
from sinklab.sink.wire import offsets as off

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sinklab.sink.cycle.plan import Plan

# How long a cycle waits for the metrics a write it ran observed (they come from Spark's listener
# bus, usually within milliseconds); past it, the cycle assumes the worst (two passes, a bad-row lookup).
OBSERVED_WAIT_S = 30.0


@dataclass
class TableWrite:
    """One table's part of a cycle: the table as the write planned against it, its good rows (staged
    again when a compare-and-swap finds the table moved), and what is staged (None: it holds them all)."""

    state: TableState
    rows: DataFrame | None  # None: the dead-letter table, whose rows are the cycle's letters
    staged: Staged | None = None


@dataclass
class Replay:
    """A replay of dead letters (``sinklab.sink.replay``): its marker, which a table it published to keeps,
    and its records (``reader.RAW_DDL``). For row-level tables the records also hold the later records of
    the letters' partitions, which tell whether a newer change of a letter's row exists; ``letters`` then
    names the letters among them (topic, partition, offset)."""

    marker: str
    records: DataFrame
    letters: DataFrame | None = None


@dataclass
class Cycle:
    """What a cycle carries from the worker to the commit."""

    plan: Plan
    commit_id: str
    vtts_ms: int
    counters: dict[str, int] = field(default_factory=dict)
    tables: dict[str, TableWrite] = field(default_factory=dict)
    letters: list[dead_letters.DeadLetter] = field(default_factory=list)
    passes: int = 1
    cached: DataFrame | None = None  # the prepared records, while the cycle's rows may be staged again
    replay: Replay | None = None

    def properties(self, sink: str, state: TableState) -> dict[str, str]:
        """The ``sinklab.*`` properties of the cycle's snapshot of a table."""
        return {
            SINK_PROP: sink,
            COMMIT_ID_PROP: self.commit_id,
            OFFSETS_PROP: off.to_property(off.merge_max(state.offsets, self.plan.ends)),
            # A replay's records are old: it moves no valid-through timestamp.
            **({REPLAY_PROP: self.replay.marker} if self.replay else {VTTS_PROP: str(self.vtts_ms)}),
        }


@dataclass
class Pass:
    """What one pass learns on the way: the tables whose write ran (only they report what they observed)."""

    cycle: Cycle
    wrote: set[str] = field(default_factory=set)

    def wait_s(self, table: str | None = None) -> float:
        ran = table in self.wrote if table is not None else bool(self.wrote)
        return OBSERVED_WAIT_S if ran else 0.0
