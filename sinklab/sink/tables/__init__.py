"""The sink's tables: what a table holds of the sink (``state``: its recorded offsets, the ``sinklab.*``
snapshot properties, auto-create), how its schema grows (``evolve``), and its part of a cycle written as
data files and a snapshot no one sees yet (``write``: a staged append, or row-level changes on a
``sinklab-stage-`` branch; ``fan_out``: several tables' appends from one Spark job)."""

from sinklab.sink.tables import fan_out
from sinklab.sink.tables.create import connect_to_spark
from sinklab.sink.tables.state import (
    COMMIT_ID_PROP,
    OFFSETS_PROP,
    SETTINGS_PREFIX,
    SINK_PROP,
    VTTS_PROP,
    TableState,
    identifier,
    load_state,
    quote,
    row_ids,
)
from sinklab.sink.tables.write import STAGE_PREFIX, Staged, lost_sequence_race, write_files

__all__ = ["COMMIT_ID_PROP", "OFFSETS_PROP", "SETTINGS_PREFIX", "SINK_PROP", "STAGE_PREFIX", "VTTS_PROP", "Staged",
           "TableState", "connect_to_spark", "fan_out", "identifier", "load_state", "lost_sequence_race", "quote",
           "row_ids", "write_files"]
