"""Row-level changes at speed: a CDC stream into a format v3 table (deletion vectors), one MERGE per
cycle, against the same records appended.

``--changes`` changes (default 1M) over ``--keys`` keys (100k) from the CDC generator (flat, ``op``
I/U/D: 50% inserts, 40% updates, 10% deletes; updates and deletes touch live rows), in 6 partitions.
Two sinks on one warm JVM drain them, one after the other:

- **append**: every change as a row of an append-only table (what the records cost without
  row-level work);
- **upsert into v3**: ``iceberg.tables.cdc-field=op``, id column ``id``, format version 3: each cycle
  is one MERGE that writes deletion vectors.

Each sink first takes ``--warmup`` changes in a cycle of its own (which creates its table), then
drains the rest with ``sinklab.cycle.max-records`` = changes / ``--cycles`` (5 MERGEs by default).
The figure is changes over the cycles' time (producing is not timed); MB/s per core uses the values'
mean size and ``os.cpu_count()``. Then the v3 table is checked against the changes replayed in
Python (every live key, its balance).

    .venv/bin/python bench/cdc.py                      # 1M changes over 100k keys
    .venv/bin/python bench/cdc.py --changes 200000 --keys 20000

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

from sinklab.generators import CdcGenerator, produce_json
from sinklab.sink import IcebergSink
from sinklab.stack import Stack

TOPIC = "customers-cdc"


def config(name: str, cycle_records: int, upsert: bool) -> dict[str, Any]:
    common = {"name": name, "topics": TOPIC, "iceberg.tables": f"bench.{name}", "iceberg.catalog": "sinklab",
              "iceberg.tables.auto-create-enabled": "true", "iceberg.control.commit.interval-ms": "1000",
              "sinklab.cycle.max-records": str(cycle_records),
              "iceberg.tables.auto-create-props.format-version": "3"}
    if upsert:
        common |= {"iceberg.tables.cdc-field": "op", "iceberg.tables.default-id-columns": "id"}
    return common


def drain(sink: IcebergSink, records: int) -> tuple[float, list[float]]:
    """Cycles until ``records`` more are in; (seconds in cycles, each cycle's seconds)."""
    cycles: list[float] = []
    taken = 0
    while taken < records:
        began = time.perf_counter()
        result = sink.run_once()
        cycles.append(time.perf_counter() - began)
        taken += result.records if result else 0
    return sum(cycles), cycles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--cycles", type=int, default=5, help="MERGEs (cycles) the changes are drained in")
    parser.add_argument("--warmup", type=int, default=20_000)
    args = parser.parse_args()
    cycle_records = -(-args.changes // args.cycles)
    events = CdcGenerator(seed=11, key_space=args.keys).events()
    warmup = [next(events) for _ in range(args.warmup)]
    changes = [next(events) for _ in range(args.changes)]
    live: dict[Any, Any] = {}
    for event in warmup + changes:
        if event["op"] == "D":
            live.pop(event["id"], None)
        else:
            live[event["id"]] = event["balance"]
    mean_bytes = sum(len(json.dumps(e)) for e in changes) / len(changes)
    cores = os.cpu_count() or 1

    with tempfile.TemporaryDirectory(prefix="sinklab-bench-cdc-") as workdir, Stack.embedded(Path(workdir)) as stack:
        stack.create_topic(TOPIC, partitions=6)
        sinks = {"append": IcebergSink(stack, config("cdc_append", cycle_records, upsert=False)),
                 "upsert_v3": IcebergSink(stack, config("cdc_upsert", cycle_records, upsert=True))}
        figures: dict[str, dict[str, Any]] = {}
        try:
            produce_json(stack.bootstrap_servers, TOPIC, warmup, key_field="id")
            for sink in sinks.values():
                drain(sink, len(warmup))  # creates its table on a JVM that then stays warm
            produce_json(stack.bootstrap_servers, TOPIC, changes, key_field="id")
            for name, sink in sinks.items():
                seconds, cycles = drain(sink, len(changes))
                rps = len(changes) / seconds
                figures[name] = {"seconds": round(seconds, 2), "cycles_s": [round(c, 2) for c in cycles],
                                 "rows_per_s": round(rps), "mbps_per_core": round(rps * mean_bytes / 1e6 / cores, 2)}
        finally:
            for sink in sinks.values():
                sink.stop()
        table = stack.spark.table("sinklab.bench.cdc_upsert")
        got = {r.id: r.balance for r in table.select("id", "balance").collect()}
        snapshot = stack.catalog.load_table(("bench", "cdc_upsert")).current_snapshot()
        summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    assert got == live, f"the v3 table holds {len(got)} rows, the replayed changes {len(live)}"
    ratio = figures["upsert_v3"]["rows_per_s"] / figures["append"]["rows_per_s"]
    print(f"{args.changes:,} changes over {args.keys:,} keys (+{args.warmup:,} warm-up), {args.cycles} cycles, "
          f"{mean_bytes:.0f} bytes a value, {cores} cores")
    for name, f in figures.items():
        print(f"{name:12s} {f['rows_per_s']:>10,} rows/s {f['mbps_per_core']:>6.2f} MB/s per core   cycles "
              f"{', '.join(f'{c:.1f}' for c in f['cycles_s'])} s")
    print(f"upsert / append: {ratio:.2f}x; the v3 table holds every live key with its balance ({len(got):,} rows); "
          f"its last commit: {summary.get('added-dvs', 0)} deletion vectors, "
          f"{summary.get('total-delete-files', 0)} live delete files")
    last = {k: summary.get(k) for k in ("added-dvs", "total-delete-files", "total-data-files")}
    print(json.dumps({"changes": args.changes, "keys": args.keys, "cycles": args.cycles,
                      "mean_bytes": round(mean_bytes), "cores": cores, **figures,
                      "upsert_vs_append": round(ratio, 3), "rows": len(got), "last_commit": last}))


if __name__ == "__main__":
    main()
