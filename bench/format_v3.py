"""Format v2 against v3 for a CDC table: position-delete files against deletion vectors.

One embedded stack, one CDC stream (``data-generators/cdc.yaml``: 50% inserts, 40% updates, 10%
deletes over 1,000 keys), two sinks reading it into two tables that differ only in
``iceberg.tables.auto-create-props.format-version``. Each round produces a batch of changes and
runs one cycle of each sink, alternating which goes first, so both see the same records on the same
warm JVM. Then for each table: delete files and deletion vectors per commit, metadata size (the
metadata JSON, manifest lists and manifests of the current version), the time to read the table
(best of 3), and the sink's records per second over its cycles.

    .venv/bin/python bench/format_v3.py                 # 60 cycles of 2,000 changes
    .venv/bin/python bench/format_v3.py --cycles 50 --batch 500

Not a test: prints a table and, last, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sinklab.generators import CdcGenerator, produce_json
from sinklab.sink import IcebergSink
from sinklab.stack import Stack

VERSIONS = ("2", "3")


def config(topic: str, version: str) -> dict[str, Any]:
    return {
        "name": f"bench-v{version}", "topics": topic, "iceberg.tables": f"bench.cdc_v{version}",
        "iceberg.catalog": "sinklab", "iceberg.tables.auto-create-enabled": "true",
        "iceberg.tables.cdc-field": "op", "iceberg.tables.default-id-columns": "id",
        "iceberg.tables.auto-create-props.format-version": version,
        "iceberg.control.commit.interval-ms": "1000",
    }


def metadata_bytes(stack: Stack, table: str) -> int:
    """The current metadata JSON, its manifest lists and the manifests they list (local warehouse)."""
    tbl = stack.catalog.load_table(tuple(table.split(".")))
    paths = {tbl.metadata_location}
    for snap in tbl.snapshots():
        paths.add(snap.manifest_list)
    current = tbl.current_snapshot()
    if current is not None:
        paths.update(m.manifest_path for m in current.manifests(tbl.io))
    return sum(os.path.getsize(urlparse(p).path) for p in paths)


def per_commit(stack: Stack, table: str) -> dict[str, float]:
    snaps = [s.summary.additional_properties for s in stack.catalog.load_table(tuple(table.split("."))).snapshots()
             if s.summary]
    n = max(len(snaps), 1)
    return {
        "commits": len(snaps),
        "delete_files_per_commit": sum(int(s.get("added-delete-files", 0)) for s in snaps) / n,
        "dvs_per_commit": sum(int(s.get("added-dvs", 0)) for s in snaps) / n,
        "live_delete_files": int(snaps[-1].get("total-delete-files", 0)) if snaps else 0,
        "live_data_files": int(snaps[-1].get("total-data-files", 0)) if snaps else 0,
    }


def read_seconds(stack: Stack, table: str) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(3):
        began = time.perf_counter()
        rows = len(stack.spark.table(f"sinklab.{table}").collect())
        best = min(best, time.perf_counter() - began)
    return best, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=60)
    parser.add_argument("--batch", type=int, default=2000, help="changes produced before each round")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sinklab-bench-v3-") as workdir, Stack.embedded(Path(workdir)) as stack:
        topic = "customers-cdc"
        stack.create_topic(topic, partitions=2)
        changes = CdcGenerator(seed=11).events()
        sinks = {v: IcebergSink(stack, config(topic, v)) for v in VERSIONS}
        spent = dict.fromkeys(VERSIONS, 0.0)
        records = dict.fromkeys(VERSIONS, 0)
        try:
            for cycle in range(args.cycles):
                produce_json(stack.bootstrap_servers, topic, [next(changes) for _ in range(args.batch)], key_field="id")
                order = VERSIONS if cycle % 2 == 0 else VERSIONS[::-1]
                for v in order:
                    began = time.perf_counter()
                    result = sinks[v].run_once()
                    if cycle > 0:  # the first cycle creates the table on a cold JVM
                        spent[v] += time.perf_counter() - began
                        records[v] += result.records if result else 0
        finally:
            for sink in sinks.values():
                sink.stop()
        figures: dict[str, dict[str, Any]] = {}
        for v in VERSIONS:
            table = f"bench.cdc_v{v}"
            seconds, rows = read_seconds(stack, table)
            figures[f"v{v}"] = {**per_commit(stack, table), "metadata_bytes": metadata_bytes(stack, table),
                                "read_s": round(seconds, 3), "rows": rows,
                                "records_per_s": round(records[v] / spent[v]) if spent[v] else None}
    assert figures["v2"]["rows"] == figures["v3"]["rows"], "the two tables disagree"
    keys = ["commits", "delete_files_per_commit", "dvs_per_commit", "live_delete_files", "live_data_files",
            "metadata_bytes", "read_s", "records_per_s", "rows"]
    print(f"{args.cycles} cycles of {args.batch} changes (CDC generator, 2 partitions)")
    print(f"{'':26s}{'v2':>14s}{'v3':>14s}")
    for key in keys:
        print(f"{key:26s}{_fmt(figures['v2'][key]):>14s}{_fmt(figures['v3'][key]):>14s}")
    print(json.dumps({"cycles": args.cycles, "batch": args.batch, **figures}))


def _fmt(value: Any) -> str:
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)


if __name__ == "__main__":
    main()
