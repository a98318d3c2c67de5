"""Fresh reads against committed reads, in one run (bench/README.md, "Fresh reads").

Phases on one embedded stack, each a steady stream of pre-encoded pizzas (bench/paced_producer.py), after a
short one that warms the code up:

1. **A long interval, read fresh**, once per ``--sink-tasks`` setting (the sink's ``sinklab.cycle.max-tasks``:
   a task per core, then one). A sink commits every ``--interval-s`` (60 s); meanwhile a reader runs
   the seed's top-producing-stores query on a fresh read (``sinklab.fresh``) every ``--every-s`` (0.5 s),
   and, every fourth time, the same query on the plain table. A record is visible to fresh reads from the
   end of the first query whose read's watermark is past its offset (each read holds every record up to its
   watermark: tests/test_fresh.py). Committed visibility of the same records: the publish of the first
   snapshot past them.
2. **A 1 s interval, committed.** The same stream into another table, committed every second.

It prints p50/p99 visibility (Kafka timestamp to readable) fresh at the long interval, committed at the
long interval and committed at 1 s; the fresh query's time against the plain one's as the tail grows
from nothing to one interval; and files and snapshots per day of both intervals.

    python bench/fresh.py                 # 5,000 events/s, 60 s interval, 150 s of stream per phase
    python bench/fresh.py --quick         # 20 s interval, 50 s per phase
    python bench/fresh.py --cost          # no sink running: what one read of a Reader costs (about 3 min)

``--cost`` measures a read alone, the goal's case: a table of 20,000 pizzas, a tail of one interval's
records (``--rate`` x ``--interval-s``, 300,000), and the records of ``--every-s`` (2,500) more before
each of 10 reads of one ``fresh.Reader``; the median over reads 3-10 of the read (pin and tail), of the
query on it and of the plain table's query. Then 5 reads with nothing new: what a read costs besides
converting records; and two floors of this machine: a two-stage Spark job over nothing
(``spark.range(...).count()``, the plain query's shape) and a count of the newest records of one read
straight from Kafka (Spark's Kafka source, no conversion).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paced_producer  # bench/paced_producer.py
from harness import completed_cycles, pizza_payloads, record_visibility, sink_config, topic_timestamps, wait_committed
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sinklab import fresh
from sinklab.generators import PizzaGenerator
from sinklab.generators.produce import PRODUCER_DEFAULTS
from sinklab.sink import IcebergSink
from sinklab.sink.config import keys
from sinklab.sink.records import read_ranges
from sinklab.sink.wire import OffsetRange
from sinklab.sink.wire import offsets as off
from sinklab.stack import Stack

DAY_S = 86_400
PARTITIONS = 2


@dataclass
class Query:
    done_ms: float  # when the query's answer was in (epoch ms)
    seconds: float  # the fresh read's pin and tail plus the query; or the plain query
    tail: int  # offsets in the fresh read's tail (0 for a plain query)
    watermark: dict[int, int]  # partition -> the read's watermark (fresh only)


def top_stores(df: DataFrame) -> list[tuple[int, int]]:
    """The seed's query: the stores with the most orders."""
    rows = df.groupBy("store_id").agg(F.count(F.lit(1)).alias("orders")).orderBy(F.desc("orders")).limit(10)
    return [(r.store_id, r.orders) for r in rows.collect()]


def stream(stack: Stack, topic: str, payloads: Path, rate: float, seconds: float) -> threading.Thread:
    def run() -> None:
        paced_producer.produce_paced(stack.bootstrap_servers, topic, payloads, PARTITIONS, seconds, rate=rate,
                                     config=PRODUCER_DEFAULTS)

    thread = threading.Thread(target=run, name=f"producer-{topic}")
    thread.start()
    return thread


def percentiles(latency_s: np.ndarray) -> tuple[float, float]:
    return float(np.percentile(latency_s, 50)), float(np.percentile(latency_s, 99))


def per_day(stack: Stack, table: str, sink: str, seconds: float) -> tuple[float, float]:
    """Snapshots and data files a day at the rate the sink committed them while the stream ran."""
    loaded = stack.catalog.load_table(tuple(table.split(".")))
    own = [s for s in loaded.metadata.snapshots
           if s.summary and s.summary.additional_properties.get("sinklab.sink") == sink]
    files = sum(int(s.summary.additional_properties.get("added-data-files", 0)) for s in own if s.summary)
    return len(own) * DAY_S / seconds, files * DAY_S / seconds


def committed_latency(stack: Stack, topic: str, table: str, sink: str) -> np.ndarray:
    stamps, visible, _, _ = record_visibility(stack, topic, table, sink, completed_cycles(stack, sink))
    return (visible - stamps) / 1000


def fresh_latency(stack: Stack, topic: str, reads: list[Query]) -> np.ndarray:
    """Per record produced while the reads ran, from the second on: from its Kafka timestamp to the end of
    the first fresh query whose watermark passed it. Records before waited for the reader to start: its
    first read converts the whole tail there was (a start-up, reported as ``first_read_s``), as a sink's
    first cycle is left out of its figures; records after the last read waited for none."""
    out = []
    began_ms = reads[1].done_ms - reads[1].seconds * 1000
    for partition, (offsets, stamps) in topic_timestamps(stack, topic).items():
        marks = np.maximum.accumulate(np.array([q.watermark.get(partition, 0) for q in reads]))
        done = np.array([q.done_ms for q in reads])
        idx = np.searchsorted(marks, offsets, side="right")  # the first read whose watermark is past the offset
        seen = (idx < len(reads)) & (stamps >= began_ms)
        out.append((done[idx[seen]] - stamps[seen]) / 1000)
    return np.concatenate(out)


def phase_fresh(stack: Stack, payloads: Path, rate: float, interval_s: float, seconds: float,
                every_s: float, sink_tasks: int | None, label: str) -> dict[str, object]:
    topic = name = f"fresh-{label}"
    table = f"bench.fresh_{label.replace('-', '_')}"
    stack.create_topic(topic, partitions=PARTITIONS)
    producer = stream(stack, topic, payloads, rate, seconds)
    extra = {keys.CYCLE_MAX_TASKS: str(sink_tasks)} if sink_tasks else {}
    sink = IcebergSink(stack, sink_config(name, topic, [table], int(interval_s * 1000), **extra)).start()
    spark = stack.spark
    reads: list[Query] = []
    plain: list[Query] = []
    try:
        while not stack.catalog.table_exists(tuple(table.split("."))) or stack.catalog.load_table(
                tuple(table.split("."))).current_snapshot() is None:  # the first commit: the sink's settings are there
            time.sleep(0.2)
        began = time.monotonic()
        i = 0
        reader = fresh.Reader(stack, table, spark=spark)
        while producer.is_alive():
            t0 = time.monotonic()
            read = reader.read()
            top_stores(read.df)
            reads.append(Query(time.time() * 1000, time.monotonic() - t0, read.tail_offsets,
                               {p: n for _, parts in read.watermark.items() for p, n in parts.items()}))
            if i % 4 == 3:
                t1 = time.monotonic()
                top_stores(spark.table(f"sinklab.{table}"))
                plain.append(Query(time.time() * 1000, time.monotonic() - t1, 0, {}))
                plain[-1].tail = read.tail_offsets  # the tail the fresh read beside it carried
            i += 1
            time.sleep(max(0.0, every_s - (time.monotonic() - t0)))
        ran_s = time.monotonic() - began
        reader.close()
        producer.join()
        wait_committed(stack, sink, topic, table, interval_s + 120)
    finally:
        sink.stop()
    fresh_s = fresh_latency(stack, topic, reads)
    committed_s = committed_latency(stack, topic, table, name)
    snaps, files = per_day(stack, table, name, seconds)
    # The query's time as the tail grows: buckets of a quarter interval's records each.
    interval_records = rate * interval_s
    buckets = []
    for lo in (0.0, 0.25, 0.5, 0.75):
        hi = lo + 0.25 if lo < 0.75 else float("inf")
        f = [q.seconds for q in reads if lo <= q.tail / interval_records < hi]
        p = [q.seconds for q in plain if lo <= q.tail / interval_records < hi]
        if f and p:
            buckets.append({"tail": f"{lo:.2f}-{'' if hi == float('inf') else f'{hi:.2f}'} interval",
                            "fresh_s": statistics.median(f), "plain_s": statistics.median(p),
                            "ratio": statistics.median(f) / statistics.median(p), "reads": len(f)})
    return {"reads": len(reads), "reads_per_s": len(reads) / ran_s, "first_read_s": reads[0].seconds,
            "read_p50_s": statistics.median(q.seconds for q in reads[1:]),
            "read_max_s": max(q.seconds for q in reads[1:]),
            "read_s": [round(q.seconds, 3) for q in reads], "fresh_p50_s": percentiles(fresh_s)[0],
            "fresh_p99_s": percentiles(fresh_s)[1], "committed_p50_s": percentiles(committed_s)[0],
            "committed_p99_s": percentiles(committed_s)[1], "snapshots_per_day": snaps, "files_per_day": files,
            "by_tail": buckets}


def phase_committed(stack: Stack, payloads: Path, rate: float, seconds: float) -> dict[str, object]:
    topic, table, name = "fresh-short", "bench.fresh_short", "fresh-short"
    stack.create_topic(topic, partitions=PARTITIONS)
    producer = stream(stack, topic, payloads, rate, seconds)
    sink = IcebergSink(stack, sink_config(name, topic, [table], 1000)).start()
    try:
        producer.join()
        wait_committed(stack, sink, topic, table, 120)
    finally:
        sink.stop()
    latency_s = committed_latency(stack, topic, table, name)
    snaps, files = per_day(stack, table, name, seconds)
    return {"committed_p50_s": percentiles(latency_s)[0], "committed_p99_s": percentiles(latency_s)[1],
            "snapshots_per_day": snaps, "files_per_day": files}


def cost(stack: Stack, tail: int, new: int, reads: int = 10) -> dict[str, float]:
    topic, table = "fresh-cost", "bench.fresh_cost"
    stack.create_topic(topic, partitions=PARTITIONS)
    generator = PizzaGenerator(seed=3)
    generator.produce(stack, topic, count=20_000, partitions=PARTITIONS).wait()
    sink = IcebergSink(stack, sink_config("fresh-cost", topic, [table], 1000))
    try:
        while sink.run_once() is not None:
            pass
    finally:
        sink.stop()
    generator.produce(stack, topic, count=tail, partitions=PARTITIONS).wait()
    spark = stack.spark
    times: list[tuple[float, float, float]] = []
    with fresh.Reader(stack, table, spark=spark) as reader:
        for i in range(reads):
            generator.produce(stack, topic, count=new, partitions=PARTITIONS).wait()
            t0 = time.monotonic()
            read = reader.read()
            t1 = time.monotonic()
            top_stores(read.df)
            t2 = time.monotonic()
            top_stores(spark.table(f"sinklab.{table}"))
            times.append((t1 - t0, t2 - t1, time.monotonic() - t2))
            print(f"read {i + 1}: pin and tail {t1 - t0:.2f} s, query {t2 - t1:.2f} s, plain {times[-1][2]:.2f} s "
                  f"(tail {read.tail_offsets:,} offsets)", flush=True)
        idle = []
        for _ in range(5):
            t0 = time.monotonic()
            top_stores(reader.read().df)
            idle.append(time.monotonic() - t0)
        newest = [OffsetRange(tp.topic, tp.partition, start, end) for tp, end in off.entries(read.watermark)
                  if (start := max(0, end - new // PARTITIONS)) < end]
    job, kafka = [], []
    for _ in range(5):
        t0 = time.monotonic()
        spark.range(new, numPartitions=PARTITIONS).count()
        t1 = time.monotonic()
        read_ranges(spark, stack.kafka_config(), newest).count()
        job.append(t1 - t0)
        kafka.append(time.monotonic() - t1)
    read_s, query_s, plain_s = (statistics.median(t[k] for t in times[2:]) for k in range(3))
    return {"read_s": read_s, "query_s": query_s, "fresh_s": read_s + query_s, "plain_s": plain_s,
            "ratio": (read_s + query_s) / plain_s, "nothing_new_s": statistics.median(idle),
            "job_s": statistics.median(job), "kafka_new_s": statistics.median(kafka)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=5000)
    parser.add_argument("--interval-s", type=float, default=60)
    parser.add_argument("--seconds", type=float, help="of stream per phase (default 2.5 intervals)")
    parser.add_argument("--every-s", type=float, default=0.5, help="between fresh reads")
    parser.add_argument("--quick", action="store_true", help="a 20 s interval, 50 s per phase")
    parser.add_argument("--cost", action="store_true", help="one read's cost, no sink running")
    parser.add_argument("--sink-tasks", default="cores,1",
                        help=f"the long-interval sink's {keys.CYCLE_MAX_TASKS}, a run each, comma-separated "
                             "(cores: unset)")
    args = parser.parse_args()
    if args.cost:
        with tempfile.TemporaryDirectory(prefix="sinklab-bench-fresh-") as tmp, Stack.embedded(Path(tmp)) as stack:
            stack.spark.range(1).count()
            c = cost(stack, int(args.rate * args.interval_s), int(args.rate * args.every_s))
        print(f"\na read (reads 3-10, median): pin and tail {c['read_s']:.2f} s + query {c['query_s']:.2f} s = "
              f"{c['fresh_s']:.2f} s; the plain table's query {c['plain_s']:.2f} s ({c['ratio']:.1f}x); a read and "
              f"its query with nothing new {c['nothing_new_s']:.2f} s ({c['nothing_new_s'] / c['plain_s']:.1f}x)")
        print(f"floors: a two-stage job over nothing {c['job_s']:.2f} s; counting the newest records of a read "
              f"from Kafka {c['kafka_new_s']:.2f} s")
        print(json.dumps({"cost": c}))
        return
    interval_s = 20.0 if args.quick else args.interval_s
    seconds = args.seconds or 2.5 * interval_s
    with tempfile.TemporaryDirectory(prefix="sinklab-bench-fresh-") as tmp, Stack.embedded(Path(tmp)) as stack:
        payloads = pizza_payloads(Path(tmp))
        # A warm driver, as a reader in a notebook has: the first query's start is not what is measured.
        stack.spark.range(1).count()
        # And warm code: the phase that ran first was the slower in each order (bench/README.md, "Fresh reads").
        phase_fresh(stack, payloads.path, args.rate, 10, 40, args.every_s, None, "warm-up")
        longs = {tasks: phase_fresh(stack, payloads.path, args.rate, interval_s, seconds, args.every_s,
                                    None if tasks == "cores" else int(tasks), f"long-{tasks}")
                 for tasks in args.sink_tasks.split(",")}
        short = phase_committed(stack, payloads.path, args.rate, seconds)
    print(f"\n{args.rate:.0f} events/s, {seconds:.0f} s per phase, {PARTITIONS} partitions")
    print(f"{'':52} {'p50 s':>7} {'p99 s':>7} {'snapshots/day':>14} {'files/day':>10}")
    for tasks, long in longs.items():
        sink = f"the sink's tasks: {tasks}"
        print(f"{f'fresh reads, {interval_s:.0f} s interval, {sink}':52} {long['fresh_p50_s']:7.2f} "
              f"{long['fresh_p99_s']:7.2f} {long['snapshots_per_day']:14.0f} {long['files_per_day']:10.0f}")
        print(f"{f'committed, {interval_s:.0f} s interval, {sink}':52} {long['committed_p50_s']:7.2f} "
              f"{long['committed_p99_s']:7.2f} {long['snapshots_per_day']:14.0f} {long['files_per_day']:10.0f}")
    print(f"{'committed, 1 s interval':52} {short['committed_p50_s']:7.2f} {short['committed_p99_s']:7.2f} "
          f"{short['snapshots_per_day']:14.0f} {short['files_per_day']:10.0f}")
    for tasks, long in longs.items():
        print(f"\nthe sink's tasks {tasks}: fresh reads: {long['reads']} ({long['reads_per_s']:.2f}/s; the first "
              f"{long['first_read_s']:.2f} s, the others {long['read_p50_s']:.2f} s median, "
              f"{long['read_max_s']:.2f} s at most); the top-stores query by tail:")
        for b in long["by_tail"]:  # type: ignore[attr-defined]
            print(f"  tail {b['tail']:>18}: fresh {b['fresh_s']:.2f} s, plain {b['plain_s']:.2f} s, "
                  f"{b['ratio']:.2f}x ({b['reads']} reads)")
    print(json.dumps({"rate": args.rate, "interval_s": interval_s, "seconds": seconds, "fresh": longs,
                      "short": short}))


if __name__ == "__main__":
    main()
