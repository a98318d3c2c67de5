"""How a cycle's cost grows with what is around it (#59, item 4): the source's partitions, the tables a
cycle fans out to, and the table's history. Whatever grows faster than the work is a defect.

For each point a fresh topic and sink on one embedded stack (one warm JVM): a first cycle of 5,000
pizzas (it creates the tables), a drain of ``--records`` pizzas in one cycle (records/s), then the
median of ``--fixed`` one-record cycles (seconds):

- ``--partitions 6,24,96``: one table, the topic's partition count (the records spread over them);
- ``--tables 1,3,10,30``: dynamic routing (``iceberg.tables.dynamic-enabled``) to that many
  auto-created tables of one schema, the records spread evenly;
- ``--history 10,1000,10000``: one table given that many snapshots of history before the drain (added in
  one catalog commit, each carrying the sink's properties as its own commits do; no expiry).

    python bench/growth.py [--records 100000] [--fixed 5] [--partitions ...] [--tables ...] [--history ...]

Prints a table and one JSON line: per dimension, per point, ``drain_rps`` and ``cycle_fixed_s``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import print_table

from sinklab.generators import PizzaGenerator, produce_json
from sinklab.sink import IcebergSink
from sinklab.stack import Stack


def config(name: str, topic: str, tables: int | None) -> dict[str, Any]:
    settings = {"topics": topic, "iceberg.catalog": "sinklab", "iceberg.tables.auto-create-enabled": "true",
                "value.converter.schemas.enable": "false"}
    if tables is None:
        settings["iceberg.tables"] = f"growth.{name}"
    else:
        settings |= {"iceberg.tables.dynamic-enabled": "true", "iceberg.tables.route-field": "dest"}
    return {"name": f"growth-{name}", "config": settings}


def pizzas(count: int, seed: int, tables: int | None, name: str) -> list[dict[str, Any]]:
    events = [dict(e) for e in itertools.islice(PizzaGenerator(seed=seed).events(count), count)]
    if tables is not None:
        for i, event in enumerate(events):
            event["dest"] = f"growth.{name}_{i % tables}"
    return events


def add_history(stack: Stack, table_name: str, snapshots: int) -> None:
    """``snapshots`` - 1 more snapshots on main, each like its head (the same manifest list and sinklab.*
    properties), committed at once."""
    from pyiceberg.table.snapshots import Snapshot
    from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate

    table = stack.catalog.load_table(table_name)
    head = table.current_snapshot()
    assert head is not None
    now_ms, parent, updates = int(time.time() * 1000), head.snapshot_id, []
    for i in range(snapshots - 1):
        snapshot_id = random.getrandbits(62)
        updates.append(AddSnapshotUpdate(snapshot=Snapshot(
            snapshot_id=snapshot_id, parent_snapshot_id=parent,
            sequence_number=table.metadata.last_sequence_number + i + 1, timestamp_ms=now_ms - snapshots + i,
            manifest_list=head.manifest_list, summary=head.summary, schema_id=head.schema_id)))
        parent = snapshot_id
    updates.append(SetSnapshotRefUpdate(ref_name="main", type="branch", snapshot_id=parent))
    stack.catalog.commit_table(table, (AssertRefSnapshotId(ref="main", snapshot_id=head.snapshot_id),),
                               tuple(updates))


def point(stack: Stack, name: str, records: int, fixed: int, partitions: int = 6, tables: int | None = None,
          history: int = 0) -> dict[str, float]:
    topic = f"growth-{name}"
    stack.create_topic(topic, partitions=partitions)
    sink = IcebergSink(stack, config(name, topic, tables))
    try:
        produce_json(stack.bootstrap_servers, topic, pizzas(5000, 1, tables, name))
        assert sink.run_once() is not None
        if history > 1:
            add_history(stack, f"growth.{name}", history)
        produce_json(stack.bootstrap_servers, topic, pizzas(records, 2, tables, name))
        began = time.perf_counter()
        result = sink.run_once()
        drain = time.perf_counter() - began
        assert result is not None and result.counters["records"] == records, result
        seconds = []
        for event in pizzas(fixed + 1, 3, tables, name):
            produce_json(stack.bootstrap_servers, topic, [event])
            began = time.perf_counter()
            assert sink.run_once() is not None
            seconds.append(time.perf_counter() - began)
    finally:
        sink.stop()
    return {"drain_rps": round(records / drain), "cycle_fixed_s": round(statistics.median(seconds[1:]), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--fixed", type=int, default=5)
    parser.add_argument("--partitions", default="6,24,96")
    parser.add_argument("--tables", default="1,3,10,30")
    parser.add_argument("--history", default="10,1000,10000")
    args = parser.parse_args()

    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x]

    out: dict[str, dict[int, dict[str, float]]] = {"partitions": {}, "tables": {}, "history": {}}
    with tempfile.TemporaryDirectory() as tmp, Stack.embedded(Path(tmp) / "stack") as stack:
        point(stack, "warmup", 20_000, 2)  # the JVM's first cycles, left out
        for p in ints(args.partitions):
            out["partitions"][p] = point(stack, f"p{p}", args.records, args.fixed, partitions=p)
        for t in ints(args.tables):
            out["tables"][t] = point(stack, f"t{t}", args.records, args.fixed, tables=t)
        for h in ints(args.history):
            out["history"][h] = point(stack, f"h{h}", args.records, args.fixed, history=h)
    print_table([(f"{dim} {n}", f"{v['drain_rps']:,}/s", f"{v['cycle_fixed_s']} s")
                 for dim, points in out.items() for n, v in points.items()])
    print(json.dumps({"records": args.records, **out}))


if __name__ == "__main__":
    main()
