"""The frames' shapes: the columns of each frame the readings return, and the dtype of every column,
so that a frame with no rows has the dtypes a filled one has."""

from __future__ import annotations

import pandas as pd

SNAPSHOT_COLUMNS = [
    "table", "branch", "snapshot_id", "parent_id", "sequence_number", "operation", "schema_id", "committed_at",
    "visible_at", "sink", "commit_id", "offsets", "vtts", "added_records", "deleted_records", "added_files",
    "removed_files", "added_delete_files", "added_dvs", "removed_dvs", "added_bytes", "removed_bytes",
    "total_records", "total_files", "total_delete_files", "total_bytes",
]
COMMIT_COLUMNS = [
    "sink", "cycle", "commit_id", "started_at", "completed_at", "vtts", "table", "branch", "snapshot_id", "records",
    "data_files", "delete_files", "bytes", "write_ms", "commit_ms", "duration_ms", "offsets",
]
CYCLE_COLUMNS = [
    "sink", "cycle", "commit_id", "started_at", "completed_at", "vtts", "read", "written", "tables", "data_files",
    "bytes", "duration_ms", "offsets", "counters",
]
RECORD_COLUMNS = ["topic", "partition", "offset", "produced_at"]
VISIBILITY_COLUMNS = [*RECORD_COLUMNS, "table", "snapshot_id", "visible_at", "latency_s", "warmup"]
LAG_COLUMNS = ["at", "topic", "partition", "end", "committed", "lag"]
MAINTENANCE_COLUMNS = ["sink", "ts", "table", "duration_ms", "delay_ms", "snapshot_id", "rewritten_data_files",
                       "added_data_files", "rewritten_bytes", "expired_snapshots", "orphan_files"]

TIME_COLUMNS = {"committed_at", "visible_at", "vtts", "started_at", "completed_at", "produced_at", "at", "until",
                "made_current_at", "ts"}
FLOAT_COLUMNS = {"gap_s", "interval_s", "ratio", "fresh_s", "stale_s", "latency_s"}
OBJECT_COLUMNS = {"table", "branch", "operation", "sink", "commit_id", "offsets", "counters", "topic", "content",
                  "file_path", "source", "target", "source_topic", "kind", "message", "key", "value", "type"}


def empty(columns: list[str]) -> pd.DataFrame:
    """No rows, but the dtypes a filled frame has: code downstream (``.dt``, sums) works the same."""
    def dtype(c: str) -> str:
        if c in TIME_COLUMNS:
            return "datetime64[ns, UTC]"
        if c in FLOAT_COLUMNS:
            return "float64"
        return "object" if c in OBJECT_COLUMNS else "int64"
    return pd.DataFrame({c: pd.Series(dtype=dtype(c)) for c in columns})
