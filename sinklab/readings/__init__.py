"""What the workbench and the benchmarks observe, as tidy pandas frames: one reading layer under the
figures (``sinklab.viz``) and the measurements (``bench/``), so a number means the same in both.

    from sinklab import readings
    snaps = readings.snapshots(stack, "rpc.pizzas")      # a branch's lineage, sinklab.* properties parsed
    vis = readings.visibility(snaps, readings.record_times(stack, "completed-pizzas"))
    readings.latency_percentiles(vis)                    # per table: p50, p90, p99 (warm-up cycle apart)

One file one job: ``tables`` reads Iceberg's metadata, ``control`` the control topic, ``kafka`` the
records' times, the consumer lag and a dead-letter topic; ``derive`` holds the pure derivations over
those frames (no I/O: cadence, freshness, visibility, pace, flows, …); ``columns`` the frames' columns
and dtypes. Every time is a UTC ``pandas.Timestamp``. It reads the sink only through its faces.
"""

from sinklab.readings.columns import (
    COMMIT_COLUMNS,
    CYCLE_COLUMNS,
    FLOAT_COLUMNS,
    LAG_COLUMNS,
    MAINTENANCE_COLUMNS,
    OBJECT_COLUMNS,
    RECORD_COLUMNS,
    SNAPSHOT_COLUMNS,
    TIME_COLUMNS,
    VISIBILITY_COLUMNS,
)
from sinklab.readings.control import ControlLog, commits, control_log, cycles, maintenance_runs
from sinklab.readings.derive import (
    cadence,
    dead_letter_stages,
    flows,
    freshness,
    latency_percentiles,
    pace,
    steady,
    visibility,
    with_offsets,
)
from sinklab.readings.kafka import consumer_lag, dead_letters, lag_history, record_times
from sinklab.readings.tables import (
    MAIN,
    METADATA_FIELD,
    SUMMARY_INTS,
    added_offsets,
    files,
    history,
    load_table,
    metadata_history,
    refs,
    schemas,
    snapshots,
    table_record_times,
)

__all__ = [
    "COMMIT_COLUMNS", "CYCLE_COLUMNS", "FLOAT_COLUMNS", "LAG_COLUMNS", "MAIN", "MAINTENANCE_COLUMNS", "METADATA_FIELD",
    "OBJECT_COLUMNS", "RECORD_COLUMNS", "SNAPSHOT_COLUMNS", "SUMMARY_INTS", "TIME_COLUMNS", "VISIBILITY_COLUMNS",
    "ControlLog", "added_offsets", "cadence", "commits", "consumer_lag", "control_log", "cycles", "dead_letter_stages",
    "dead_letters", "files", "flows", "freshness", "history", "lag_history", "latency_percentiles", "load_table",
    "maintenance_runs", "metadata_history", "pace", "record_times", "refs", "schemas", "snapshots", "steady",
    "table_record_times", "visibility", "with_offsets"
]
