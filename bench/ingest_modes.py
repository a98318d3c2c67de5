"""The other runs of bench/ingest.py, each on a stack of its own and printing its own table and JSON line:

- ``--target-lag`` (``target_lag``): the commit pace: one sink each with a 1 s interval, a 5 s interval and
  ``sinklab.commit.target-lag-ms=2000`` through a step profile (``STEPS``), p99 visibility and commits per
  minute per phase;
- ``--format avro|json-schema`` (``framed_vs_json``): the same pizzas as JSON and framed by the schema
  registry, each drained by sinklab into one table on the same warm JVM;
- ``--maintenance`` (``maintenance``): compaction of a table of many small files against rewriting the same
  rows with plain Spark, then visibility latency with and without a maintenance schedule.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import numpy as np
from harness import (
    FORMAT_NAMES,
    NAMESPACE,
    SINGLE,
    assign_all,
    completed_cycles,
    drain,
    latency,
    print_table,
    produce,
    record_visibility,
    rounded,
    sink_config,
    wait_committed,
)

from sinklab.generators import PizzaGenerator
from sinklab.sink import IcebergSink, read_control_log
from sinklab.sink.tables import identifier
from sinklab.sink.wire import PayloadType
from sinklab.stack import Stack

# The step profile of --target-lag: events/s for seconds, one phase after the other.
STEPS = [(1_000, 60.0), (5_000, 60.0), (1_000, 60.0)]
TARGET_LAG_MS = 2_000


def step_profile(stack: Stack, label: str, partitions: int, interval_ms: int, steps: list[tuple[int, float]],
                 **extra: str) -> dict[str, Any]:
    """One sink through the rate ``steps``: p99 visibility and commits per minute in each phase (a
    record's phase is when it was produced; a commit's, when it was published)."""
    topic = f"bench-steps-{label}"
    name = f"{topic}-sink"
    stack.create_topic(topic, partitions=partitions)
    sink = IcebergSink(stack, sink_config(name, topic, [SINGLE], interval_ms, **extra))
    bounds = []
    try:
        PizzaGenerator(seed=3).produce(stack, topic, count=10, partitions=partitions).wait()
        sink.run_once()  # the JVM's first cycle of this sink is not part of any phase
        sink.start()
        for rate, seconds in steps:
            began = time.time() * 1000
            PizzaGenerator(seed=int(began) % 10_000).produce(
                stack, topic, count=int(rate * seconds), rate=rate, partitions=partitions).wait()
            bounds.append((began, time.time() * 1000))
        wait_committed(stack, sink, topic, SINGLE, interval_ms / 1000 + 120)
        pace = sink.status().pace
    finally:
        sink.stop()
    stamps, visible, _, commits = record_visibility(stack, topic, SINGLE, name, completed_cycles(stack, name))
    lat = (visible - stamps) / 1000
    phases = []
    for (rate, _), (begin, end) in zip(steps, bounds, strict=True):
        mine = (stamps >= begin) & (stamps < end)
        published = [c for c in commits if begin <= c[0] < end and c[4] > 0]
        phases.append({"rate": rate, "records": int(mine.sum()), "p50_s": float(np.percentile(lat[mine], 50)),
                       "p99_s": float(np.percentile(lat[mine], 99)),
                       "commits_per_min": len(published) / ((end - begin) / 60_000)})
    return {"label": label, "phases": phases, "pace": pace}


def target_lag(partitions: int, steps: list[tuple[int, float]]) -> None:
    """``--target-lag``: the step profile at a 2 s target, beside the fixed intervals of 1 s and 5 s."""
    runs = []
    with Stack.embedded(connect=False) as stack:
        stack.spark  # noqa: B018 - the JVM's start is no part of any figure
        for label, interval, extra in (("interval-1s", 1_000, {}), ("interval-5s", 5_000, {}),
                                       ("target-2s", 60_000, {"sinklab.commit.target-lag-ms": str(TARGET_LAG_MS)})):
            runs.append(step_profile(stack, label, partitions, interval, steps, **extra))
    header = " / ".join(f"{rate:,}/s" for rate, _ in steps)
    print(f"\nstep profile {header}, {steps[0][1]:.0f} s each; p99 visibility (s) and commits per minute per phase")
    for run in runs:
        cells = "  ".join(f"p99 {p['p99_s']:5.2f} s, {p['commits_per_min']:5.1f}/min" for p in run["phases"])
        print(f"{run['label']:>12}  {cells}")
    print(json.dumps(rounded({"target_lag_ms": TARGET_LAG_MS, "steps": steps, "runs": runs})))


def framed_vs_json(framed: str, records: int, partitions: int, interval_ms: int) -> None:
    """The same pizzas as JSON and framed by the registry (``framed``: avro or json-schema), each
    drained into its own table by sinklab."""
    figures: dict[str, Any] = {"records": records, "partitions": partitions, "interval_ms": interval_ms}
    formats = ("json", framed)
    tables = {fmt: f"{NAMESPACE}.pizzas_{fmt.replace('-', '_')}" for fmt in formats}
    with Stack.embedded(connect=False, schema_registry=True) as stack:
        for fmt in formats:
            figures[f"produce_{fmt}_rps"] = produce(stack, f"bench-{fmt}", records, partitions, value_format=fmt)
            produce(stack, f"bench-warm-{fmt}", min(records // 5, 50_000), partitions, seed=98, value_format=fmt)
        figures["bytes_per_record"] = {fmt: _topic_bytes(stack, f"bench-{fmt}") / records for fmt in formats}
        stack.spark  # noqa: B018 - the JVM's start is no part of any figure
        for fmt, table in tables.items():  # creates the tables and warms the JVM up for both
            drain(stack, f"bench-warm-{fmt}", f"bench-warm-{fmt}", [table], interval_ms, min(records // 5, 50_000),
                  value_format=fmt)
        results = {fmt: drain(stack, f"bench-{fmt}-sink", f"bench-{fmt}", [table], interval_ms, records,
                              value_format=fmt) for fmt, table in tables.items()}
        figures["table_types"] = {fmt: dict(stack.spark.table(f"sinklab.{t}").dtypes) for fmt, t in tables.items()}
    for fmt, result in results.items():
        figures[f"sinklab_{fmt}_rps"] = result.rps
        figures[f"sinklab_{fmt}_cycles"] = len(result.cycles)
        figures[f"sinklab_{fmt}_cycle_s_mean"] = statistics.mean(c.duration_ms / 1000 for c in result.cycles)
    figures[f"{framed}_vs_json"] = figures[f"sinklab_{framed}_rps"] / figures["sinklab_json_rps"]
    f, name = figures, FORMAT_NAMES[framed]
    print_table([
        ("records in each backlog", f"{records:,}", f"{partitions} partitions, pizza events"),
        ("bytes per value", f"{f['bytes_per_record']['json']:.0f} / {f['bytes_per_record'][framed]:.0f}",
         f"JSON / {name} (Confluent framing)"),
        (f"produce JSON / {name}", f"{f['produce_json_rps']:,.0f} / {f[f'produce_{framed}_rps']:,.0f}/s",
         "framed: encoded + registry (schema registered once)"),
        ("sinklab, JSON (baseline)", f"{f['sinklab_json_rps']:,.0f}/s",
         f"{f['sinklab_json_cycles']} cycle(s), {f['sinklab_json_cycle_s_mean']:.2f} s mean"),
        (f"sinklab, {name} + registry", f"{f[f'sinklab_{framed}_rps']:,.0f}/s",
         f"{f[f'{framed}_vs_json']:.2f}x JSON; {f[f'sinklab_{framed}_cycles']} cycle(s), "
         f"{f[f'sinklab_{framed}_cycle_s_mean']:.2f} s mean"),
    ])
    print("column types: " + "; ".join(f"{fmt}: " + ", ".join(f"{k} {v}" for k, v in types.items())
                                       for fmt, types in f["table_types"].items()))
    print(json.dumps(rounded(figures)))


MAINTENANCE_SCHEDULE = {"sinklab.maintenance.compact.every-commits": "10",
                        "sinklab.maintenance.expire.older-than": "0s"}


def maintenance(records: int, partitions: int, interval_ms: int, rate: float, seconds: float) -> None:
    """Compaction of a table of many small files, against rewriting the same rows with plain Spark; then
    the sink's visibility latency at a short interval with and without a maintenance schedule."""
    from sinklab.maintenance import Target, compact

    figures: dict[str, Any] = {"records": records, "partitions": partitions, "interval_ms": interval_ms,
                               "latency_rate": rate, "latency_seconds": seconds, "schedule": MAINTENANCE_SCHEDULE}
    small, copy = f"{NAMESPACE}.pizzas_small", f"{NAMESPACE}.pizzas_copy"
    with Stack.embedded(connect=False) as stack:
        produce(stack, "bench-small", records, partitions)
        stack.spark  # noqa: B018 - the JVM's start is no part of any figure
        cycles = 50
        built = drain(stack, "bench-small-sink", "bench-small", [small], 100, records,
                      **{"sinklab.cycle.max-records": str(-(-records // cycles))})
        figures["small_files"] = sum(len(s.data_files) for c in built.cycles for s in c.tables.values())
        began = time.monotonic()
        stack.spark.sql(f"CREATE TABLE sinklab.{copy} USING iceberg AS SELECT * FROM sinklab.{small}")
        figures["spark_rewrite_s"] = time.monotonic() - began
        report = compact(Target.on(stack, small))
        figures["compact_s"] = report.duration_ms / 1000
        figures["compact_rows_per_s"] = report.counts["table_rows"] / figures["compact_s"]
        figures["compact_files_per_s"] = report.counts["rewritten_data_files"] / figures["compact_s"]
        figures["compact_files"] = (report.counts["rewritten_data_files"], report.counts["added_data_files"])
        figures["spark_rewrite_rows_per_s"] = records / figures["spark_rewrite_s"]
        runs = {}
        for label, extra in (("plain", {}), ("scheduled", MAINTENANCE_SCHEDULE)):
            runs[label] = latency(stack, f"bench-lat-{label}", f"{NAMESPACE}.lat_{label}", interval_ms, rate, seconds,
                                  partitions, **extra)
            table = stack.catalog.load_table(identifier(f"{NAMESPACE}.lat_{label}"))
            snap = table.current_snapshot()
            figures[f"{label}_live_files"] = int(snap.summary.additional_properties["total-data-files"]) if snap else 0
            figures[f"{label}_snapshots"] = len(table.metadata.snapshots)
        log = read_control_log(stack.bootstrap_servers, sink="bench-lat-scheduled-sink")
        done = log[log["type"] == PayloadType.MAINTENANCE]
        figures["maintenance_runs"] = len(done)
        figures["maintenance_ms_mean"] = float(done["duration_ms"].mean()) if len(done) else 0.0
        figures["maintenance_delay_ms_mean"] = float(done["counters"].map(lambda c: c.get("delay_ms", 0)).mean()) \
            if len(done) else 0.0
    for label, result in runs.items():
        figures[f"{label}_p50_s"], figures[f"{label}_p99_s"], figures[f"{label}_max_s"] = (
            result.p50_s, result.p99_s, result.max_s)
        figures[f"{label}_commits"] = result.commits
    f = figures
    print_table([
        ("small files to compact", f"{f['small_files']:,}", f"{records:,} rows in {cycles} cycles"),
        ("compaction (rewrite_data_files)", f"{f['compact_rows_per_s']:,.0f} rows/s",
         f"{f['compact_files_per_s']:,.1f} files/s; {f['compact_files'][0]} -> {f['compact_files'][1]} files in "
         f"{f['compact_s']:.1f} s"),
        ("Spark CTAS of the same rows (baseline)", f"{f['spark_rewrite_rows_per_s']:,.0f} rows/s",
         f"{f['spark_rewrite_s']:.1f} s"),
        ("sink p99 visibility, no maintenance", f"{f['plain_p99_s']:.2f} s",
         f"p50 {f['plain_p50_s']:.2f} s, max {f['plain_max_s']:.2f} s; {f['plain_live_files']} live files, "
         f"{f['plain_snapshots']} snapshots after {f['plain_commits']} commits"),
        ("sink p99 visibility, scheduled", f"{f['scheduled_p99_s']:.2f} s",
         f"p50 {f['scheduled_p50_s']:.2f} s, max {f['scheduled_max_s']:.2f} s; {f['scheduled_live_files']} live "
         f"files, {f['scheduled_snapshots']} snapshots; {f['maintenance_runs']} runs of "
         f"{f['maintenance_ms_mean']:.0f} ms, {f['maintenance_delay_ms_mean']:.0f} ms past the interval"),
    ])
    print(json.dumps(rounded(figures)))


def _topic_bytes(stack: Stack, topic: str) -> int:
    consumer, _ = assign_all(stack, topic)
    total = 0
    try:
        while True:
            msgs = consumer.consume(10_000, timeout=2.0)
            if not msgs:
                return total
            total += sum(len(m.value() or b"") for m in msgs if m.error() is None)
    finally:
        consumer.close()
