"""Ingest throughput and visibility latency of the sink, with its baselines measured in the same run.

    .venv/bin/python bench/ingest.py [--records 1000000] [--interval-ms 5000] [--quick]
                                     [--sweep 1000,2000,5000,10000] [--profile] [--no-java-sink]
                                     [--sustained-seconds 60] [--sustained-probes 5] [--no-sustained]
    .venv/bin/python bench/ingest.py --format avro|json-schema [--records 200000]
    .venv/bin/python bench/ingest.py --target-lag

With ``--target-lag`` it measures only the commit pace: one sink each with a 1 s interval, a 5 s
interval and ``sinklab.commit.target-lag-ms=2000`` through a step profile (1,000 → 5,000 → 1,000
events/s, 60 s each), p99 visibility and commits per minute per phase.

On the embedded stack, N pizza events go into a fresh topic once; then, one after the other:

- raw consume: one confluent-kafka consumer reads the topic, touching nothing (the broker's limit);
- naive (a drain): what a user would write instead: one Python process, confluent-kafka,
  ``json.loads``, a pyarrow table and a pyiceberg ``append`` (then an offset commit) once per commit
  interval;
- sinklab (a drain): the sink drains the same backlog with the same commit interval, exactly-once,
  into one table and fanned out to three (static routing on ``sauce``). The tables exist beforehand:
  a warm-up cycle creates them (its time is reported as ``auto_create_s``);
- the sustained-rate contract: the highest event rate each sink (sinklab into one table and fanned
  out to three, the naive loop, the Java sink) keeps up with for a window (60 s; ``--quick`` 20 s) at
  the commit interval: lag at the window's close within two intervals of records, p99 visibility
  within three intervals. Pre-encoded pizzas come from a paced producer in its own process
  (``bench/paced_producer.py``), whose ceiling is measured first and never exceeded; the rate is
  searched from the sink's drain rate (``next_rate``). A drain says how fast a backlog goes, which
  the commit timer quantizes; this says what rate a sink keeps up with;
- fixed cost: cycles that carry one record each;
- latency: events are produced at a fixed rate for T seconds while the sink runs in the
  background; each record's visibility latency is the publish time of the first snapshot whose
  ``sinklab.offsets`` pass it minus the record's Kafka timestamp;
- the Java sink (``bench/java_sink.py``; ``--no-java-sink`` skips it): Apache Iceberg's own Kafka
  Connect sink in a standalone Connect worker, ``tasks.max`` = cores, on the same broker, catalog
  and interval: it drains a warm-up topic, then the same backlog into a table with sinklab's
  columns, then goes through the sustained-rate contract on the same worker, then runs the same
  latency measurement (a record is found by its key in the data files
  each snapshot added, as that sink records no source offsets).

With ``--format avro`` (or ``json-schema``) it measures instead the same pizzas as JSON and as
Confluent-framed Avro (or JSON with a JSON Schema; the schema in the stack's schema registry, Apicurio
Registry), each drained by sinklab into one table on the same warm JVM: the JSON figure is the
baseline of the other.

The measurements shared with the other bench scripts are in ``bench/harness.py``, the sustained-rate
contract in ``bench/sustained.py``, the figures and their printing in ``bench/ingest_figures.py``, the
``--target-lag``, ``--format`` and ``--maintenance`` runs in ``bench/ingest_modes.py``.

Prints a table, then one JSON object as the last line. Not a test: nothing here asserts a duration.
Run it alone (``flock /tmp/sinklab-spark.lock ...`` on shared machines): the figures are only
comparable with each other.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import ingest_modes
import java_sink  # bench/java_sink.py, next to this script
from harness import (
    FANOUT,
    NAIVE,
    NAMESPACE,
    SINGLE,
    DrainResult,
    LatencyResult,
    NaiveResult,
    RssSampler,
    assign_all,
    create_empty_table,
    drain,
    drop_topics,
    failure,
    latency,
    naive_loop,
    pizza_payloads,
    produce,
    sink_config,
)
from ingest_figures import FRESH_MS, Figures, JavaResult, Run, report
from sustained import (
    TOP_SHARE,
    Contract,
    JavaRate,
    NaiveRate,
    SinklabRate,
    Sustained,
    java_seed,
    producer_ceiling,
    sustained_rate,
)

from sinklab.sink import IcebergSink
from sinklab.sink.tables import identifier
from sinklab.stack import Stack
from sinklab.stack.spark import SparkSettings

if TYPE_CHECKING:
    from pyiceberg.table import Table


# ---- the backlog's baselines

def spark_alone(stack: Stack, topic: str, workdir: Path) -> float:
    """Records/s of Spark alone on these cores: the topic's values, from local text files (one per
    core), parsed into the sink's table columns and written as zstd Parquet. No Kafka, no type checks,
    no Iceberg commit, no exactly-once: what any Spark pipeline here spends at the least."""
    from pyspark.sql import functions as F

    spark = stack.spark
    consumer, total = assign_all(stack, topic)
    cores = spark.sparkContext.defaultParallelism
    texts = workdir / "values"
    texts.mkdir(parents=True, exist_ok=True)
    files = [(texts / f"part-{i}.json").open("wb") for i in range(cores)]
    seen = 0
    while seen < total:
        for m in consumer.consume(10_000, timeout=1.0):
            files[seen % cores].write(m.value() + b"\n")
            seen += 1
    consumer.close()
    for f in files:
        f.close()
    schema = spark.table(f"sinklab.{SINGLE}").schema
    best = float("inf")
    for _ in range(2):  # the better of two: the first run also warms up the text and Parquet code paths
        started = time.monotonic()
        (spark.read.text(str(texts)).select(F.from_json("value", schema).alias("r")).select("r.*")
         .write.mode("overwrite").option("compression", "zstd").parquet(str(workdir / "parquet")))
        best = min(best, time.monotonic() - started)
    return seen / best


def raw_consume(stack: Stack, topic: str) -> float:
    consumer, total = assign_all(stack, topic)
    seen = 0
    started = time.monotonic()
    while seen < total:
        seen += len(consumer.consume(10_000, timeout=1.0))
    elapsed = time.monotonic() - started
    consumer.close()
    return seen / elapsed


def naive_pyiceberg(stack: Stack, topic: str, table: Table, interval_s: float) -> NaiveResult:
    """The loop a user writes without a sink: consume, json.loads, pyarrow, pyiceberg append per interval,
    draining the backlog of ``topic``.

    At-least-once (append, then commit offsets): cheaper than the sink's protocol, never dearer.
    """
    consumer, total = assign_all(stack, topic)
    return naive_loop(consumer, table, interval_s, lambda seen: seen >= total)


# ---- sinklab's drains

def warm_up(stack: Stack, records: int, interval_ms: int) -> tuple[float, float]:
    """Create the tables (auto-create, from 2,000 events), then drain ``records`` more through both
    sinks so that the measured drains run on a warm JVM, as a sink that has been running does.
    Returns the seconds creating took, and those of the very first cycle (a fresh JVM's first
    queries and the auto-create of one table)."""
    produce(stack, "bench-create", 2_000, partitions=1, seed=99)
    produce(stack, "bench-warm", records, partitions=6, seed=98)
    started = time.monotonic()
    first = []
    for name, tables in (("bench-create-single", [SINGLE]), ("bench-create-fanout", list(FANOUT))):
        first.append(drain(stack, name, "bench-create", tables, interval_ms, 2_000).cycles[0].duration_ms / 1000)
    created = time.monotonic() - started
    for name, tables in (("bench-warm-single", [SINGLE]), ("bench-warm-fanout", list(FANOUT))):
        drain(stack, name, "bench-warm", tables, interval_ms, records)
    return created, first[0]


def on_cluster(stack: Stack, workers: int, topic: str, interval_ms: int, records: int) -> DrainResult:
    """The backlog drained by a sink whose executors run on a standalone cluster of ``workers``
    one-core workers on this machine (the driver's Spark is restarted against it, then back)."""
    from sinklab.stack.cluster import StandaloneCluster

    local = stack.spark_settings
    with tempfile.TemporaryDirectory(prefix="sinklab-cluster-") as work, \
            StandaloneCluster(Path(work), workers=workers) as cluster:
        stack.stop_spark()
        stack.spark_settings = local.model_copy(update={"master": cluster.master_url, "conf": {
            **local.conf, "spark.executor.memory": "1g", "spark.executor.cores": "1"}})
        try:
            table = f"{NAMESPACE}.cluster_{workers}"
            drain(stack, f"bench-cluster-{workers}-warm", "bench-create", [table], interval_ms, 2_000)
            return drain(stack, f"bench-cluster-{workers}", topic, [table], interval_ms, records)
        finally:
            stack.stop_spark()
            stack.spark_settings = local


def fixed_cost(stack: Stack, topic: str, interval_ms: int, cycles: int = 3) -> tuple[float, float]:
    """Median seconds of a cycle that carries one record (the per-cycle overhead), and of one that
    finds nothing new."""
    stack.create_topic(topic, partitions=1)
    sink = IcebergSink(stack, sink_config("bench-fixed", topic, [SINGLE], interval_ms))
    times = []
    try:
        for i in range(cycles):
            produce(stack, topic, 1, partitions=1, seed=1000 + i)
            began = time.monotonic()
            assert sink.run_once() is not None
            times.append(time.monotonic() - began)
        began = time.monotonic()
        assert sink.run_once() is None
        empty = time.monotonic() - began
    finally:
        sink.stop()
    return statistics.median(times), empty


# ---- the run

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, help="backlog size (default 1,000,000; --format avro/json-schema: "
                                                    "200,000)")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--interval-ms", type=int, help="commit interval (sink and naive baseline; default 5000, "
                                                        "--maintenance 1000)")
    parser.add_argument("--latency-rate", type=float,
                        help="events/s in latency mode (default 5000, --maintenance 2000)")
    parser.add_argument("--latency-seconds", type=float, help="default 60 (--maintenance 40)")
    parser.add_argument("--sweep", default="", help="comma-separated commit intervals (ms) to measure latency and "
                                                    "the naive baseline at")
    parser.add_argument("--profile", action="store_true", help="print the Spark jobs of each drain cycle")
    parser.add_argument("--master", help="run every Spark part on this master (e.g. spark://host:7077) instead "
                                         "of local[*]")
    parser.add_argument("--cluster", default="", help="comma-separated worker counts: drain the backlog once more on "
                                                      "a local standalone cluster of that many one-core workers")
    parser.add_argument("--quick", action="store_true",
                        help="200k records, 20 s of latency, no sweep; the sustained contract with 20 s windows and "
                             "3 probes per sink")
    parser.add_argument("--sustained-seconds", type=float,
                        help="the sustained-rate contract's window at each rate tried (default 60, --quick 20)")
    parser.add_argument("--sustained-probes", type=int,
                        help="windows per sink at most in the sustained-rate contract (default 5, --quick 3)")
    parser.add_argument("--no-sustained", action="store_true",
                        help="skip the sustained-rate contract (its figures are null)")
    parser.add_argument("--no-java-sink", action="store_true",
                        help="skip the Java Iceberg Kafka Connect sink (its jars are fetched on first use)")
    parser.add_argument("--maintenance", action="store_true",
                        help="only maintenance: compaction throughput, and p99 visibility with and without a schedule")
    parser.add_argument("--target-lag", action="store_true",
                        help=f"only the commit pace: a step profile "
                             f"({', '.join(f'{r:,}/s' for r, _ in ingest_modes.STEPS)}, 60 s each) at "
                             f"sinklab.commit.target-lag-ms={ingest_modes.TARGET_LAG_MS}, beside fixed intervals "
                             "of 1 s and 5 s")
    parser.add_argument("--format", choices=["json", "avro", "json-schema"], default="json",
                        help="avro / json-schema: only that format (schema registry) vs JSON throughput, on the "
                             "same backlog size")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.target_lag:
        ingest_modes.target_lag(args.partitions, ingest_modes.STEPS)
    elif args.maintenance:
        ingest_modes.maintenance(args.records or 200_000, args.partitions, args.interval_ms or 1_000,
                                 args.latency_rate or 2_000, args.latency_seconds or 40)
    elif args.format != "json":
        ingest_modes.framed_vs_json(args.format, args.records or 200_000, args.partitions, args.interval_ms or 5_000)
    else:
        run = measure(args)
        report(run, Figures.of(run), profile=args.profile)


def measure(args: argparse.Namespace) -> Run:  # noqa: C901 - one phase after the other, as they run
    """The backlog, its baselines, sinklab's drains, the sustained-rate contract, the Java sink, the latency
    runs, the sweep and the cluster drains, in that order, on one embedded stack."""
    interval_ms = args.interval_ms or 5_000
    latency_rate, latency_seconds = args.latency_rate or 5_000, args.latency_seconds or 60
    records = args.records or 1_000_000
    sweep_arg = args.sweep
    if args.quick:
        records, latency_seconds, sweep_arg = 200_000, 20, ""
    contract = Contract(interval_ms, args.sustained_seconds or (20 if args.quick else 60),
                        args.sustained_probes or (3 if args.quick else 5))
    sweep = [int(s) for s in sweep_arg.split(",") if s.strip()]
    workers = [int(n) for n in args.cluster.split(",") if n.strip()]
    partitions = args.partitions
    began = time.monotonic()
    # The Connect REST API is not measured.
    with Stack.embedded(spark=SparkSettings(master=args.master) if args.master else None, connect=False) as stack:
        services = {pid for pid in stack.info.pids.values() if pid}
        with RssSampler(services) as rss, tempfile.TemporaryDirectory(prefix="sinklab-bench-rate-") as rate_dir:
            with rss.phase("produce"):
                produce_rps = produce(stack, "bench-backlog", records, partitions)
            with rss.phase("raw"):
                raw_consume_rps = raw_consume(stack, "bench-backlog")
            with rss.phase("warm-up"):
                stack.spark  # noqa: B018 - the JVM's start is no part of any figure
                auto_create_s, first_cycle_s = warm_up(stack, min(records // 5, 200_000), interval_ms)
            with rss.phase("naive"):
                naive = naive_pyiceberg(stack, "bench-backlog", create_empty_table(stack), interval_ms / 1000)
            with rss.phase("spark-alone"), tempfile.TemporaryDirectory(prefix="sinklab-bench-") as scratch:
                spark_alone_rps = spark_alone(stack, "bench-backlog", Path(scratch))
            with rss.phase("sinklab"):
                single = drain(stack, "bench-single", "bench-backlog", [SINGLE], interval_ms, records)
            with rss.phase("fanout"):
                fanout = drain(stack, "bench-fanout", "bench-backlog", list(FANOUT), interval_ms, records)
            with rss.phase("fixed"):
                cycle_fixed_s, empty_cycle_s = fixed_cost(stack, "bench-fixed", interval_ms)
            # The sustained-rate contract, the same harness for every sink; the Java sink's in its phase below.
            sustained: dict[str, Sustained] = {}
            payloads = ceiling = None
            if not args.no_sustained:
                with rss.phase("sustained"):
                    payloads = pizza_payloads(Path(rate_dir))
                    ceiling = producer_ceiling(stack, payloads, partitions)
                    print(f"producer ceiling: {ceiling.delivered_rps:,.0f} records/s", flush=True)
                    # Each sink's first rate is its drain rate of this run.
                    for sink, seed in ((SinklabRate(stack, interval_ms, partitions, False), single.rps),
                                       (SinklabRate(stack, interval_ms, partitions, True), fanout.rps),
                                       (NaiveRate(stack, interval_ms), naive.rps)):
                        sustained[sink.key] = sustained_rate(stack, sink, contract, payloads, seed,
                                                             TOP_SHARE * ceiling.delivered_rps, partitions)
            java = JavaResult(error="skipped (--no-java-sink)" if args.no_java_sink else None)
            if not args.no_java_sink:
                with rss.phase("java-sink"):
                    try:
                        java_sink.require_jars()
                        with java_sink.ConnectWorker(stack, java_sink.scratch_dir(stack)) as worker:
                            java.drain = java_sink.drain_backlog(stack, worker, min(records // 5, 200_000), records,
                                                                 interval_ms)
                            if payloads is not None and ceiling is not None:
                                java.sustained = sustained_rate(
                                    stack, JavaRate(stack, worker, interval_ms), contract, payloads,
                                    java_seed(java.drain, interval_ms), TOP_SHARE * ceiling.delivered_rps,
                                    partitions)
                    except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is a figure too
                        java.error = f"{'sustained' if java.drain else 'drain'}: {failure(exc)}"
            naive_swept = [naive_pyiceberg(stack, "bench-backlog", stack.catalog.load_table(identifier(NAIVE)),
                                           interval / 1000) for interval in sweep]
            with rss.phase("latency"):
                lat = latency(stack, "bench-latency", SINGLE, interval_ms, latency_rate, latency_seconds, partitions)
            # The freshness users pick a short interval for: both sinks at 1 s, the same rate.
            with rss.phase("latency-1s"):
                lat_1s = lat if interval_ms == FRESH_MS else latency(
                    stack, "bench-latency-1s", SINGLE, FRESH_MS, latency_rate, latency_seconds, partitions)
            if java.drain is not None:
                with rss.phase("java-sink-latency"):
                    try:
                        java.latency = java_sink.latency(stack, "bench-latency-java", interval_ms, latency_rate,
                                                         latency_seconds, partitions)
                        java.latency_1s = java.latency if interval_ms == FRESH_MS else java_sink.latency(
                            stack, "bench-latency-java-1s", FRESH_MS, latency_rate, latency_seconds, partitions)
                    except Exception as exc:  # noqa: BLE001 - as above
                        java.error = f"latency: {failure(exc)}"
            swept: list[tuple[NaiveResult, LatencyResult]] = []
            for interval, n in zip(sweep, naive_swept, strict=True):
                seconds = max(latency_seconds, 4 * interval / 1000)
                topic = f"bench-sweep-{interval}"
                swept.append((n, latency(stack, topic, SINGLE, interval, latency_rate, seconds, partitions)))
                drop_topics(stack, [topic])  # the runs that follow find a broker holding what they need
            # Last: each restarts the driver's Spark, and every figure above is taken on a warm one.
            clusters = {n: on_cluster(stack, n, "bench-backlog", interval_ms, records) for n in workers}
    if java.sustained is not None:
        sustained["java_sink"] = java.sustained
    return Run(records, partitions, interval_ms, latency_seconds, args.master, produce_rps, raw_consume_rps,
               auto_create_s, first_cycle_s, naive, spark_alone_rps, single, fanout, cycle_fixed_s, empty_cycle_s,
               contract, sustained, payloads, ceiling, java, lat, lat_1s, swept, clusters, rss,
               time.monotonic() - began)


if __name__ == "__main__":
    main()
