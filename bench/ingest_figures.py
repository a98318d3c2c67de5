"""The figures of a run of bench/ingest.py: what the run measured (``Run``, the measurements' own results),
the JSON line's figures made from it (``Figures``, one field per key, in the line's order), and the table
printed before that line (``report``). bench/README.md says what each figure is.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from harness import print_table, rounded
from sustained import sustained_figures, sustained_rows

if TYPE_CHECKING:
    import java_sink
    from harness import DrainResult, LatencyResult, NaiveResult, Payloads, RssSampler
    from paced_producer import PacedRun
    from sustained import Contract, Sustained

FRESH_MS = 1_000  # the short interval whose p99 the run reports for both sinks


@dataclass
class JavaResult:
    """The Java sink's runs; ``error`` says what failed (or that it was skipped)."""

    drain: java_sink.JavaDrain | None = None
    latency: LatencyResult | None = None
    latency_1s: LatencyResult | None = None  # at FRESH_MS
    sustained: Sustained | None = None
    error: str | None = None


@dataclass
class Run:
    """What a run measured, each measurement's result as it returned it, and the settings it ran with."""

    records: int
    partitions: int
    interval_ms: int
    latency_seconds: float
    master: str | None
    produce_rps: float
    raw_consume_rps: float
    auto_create_s: float
    first_cycle_s: float
    naive: NaiveResult
    spark_alone_rps: float
    single: DrainResult
    fanout: DrainResult
    cycle_fixed_s: float
    empty_cycle_s: float
    contract: Contract
    sustained: dict[str, Sustained]  # by sink key, the Java sink's last
    payloads: Payloads | None
    ceiling: PacedRun | None
    java: JavaResult
    lat: LatencyResult
    lat_1s: LatencyResult
    swept: list[tuple[NaiveResult, LatencyResult]]  # per --sweep interval: the naive drain and the latency run
    clusters: dict[int, DrainResult]
    rss: RssSampler
    elapsed_s: float


@dataclass
class Figures:
    """The JSON line: one field per key, in the line's order. ``java_sink_*`` are None when the Java sink did
    not run, the ``*_sustained_*`` ones without the contract; ``sweep`` is in the line only with ``--sweep``."""

    records: int
    partitions: int
    interval_ms: int
    produce_rps: float
    raw_consume_rps: float
    auto_create_s: float
    first_cycle_s: float
    naive_pyiceberg_rps: float
    spark_alone_rps: float
    cycle_fixed_s: float
    empty_cycle_s: float
    sinklab_rps: float
    fanout_rps: float
    files_per_table_commit: int
    write_tasks: int
    sinklab_cycles: int
    spark_jobs_per_cycle: float
    jobs_per_cycle: float
    p99_visibility_1s_s: float
    p50_visibility_1s_s: float
    latency_cycle_s_mean_1s: float
    fanout_spark_jobs_per_cycle: float
    p50_visibility_s: float
    p99_visibility_s: float
    max_visibility_s: float
    p99_visibility_snapshot_ts_s: float
    latency_rate: float
    latency_records: int
    latency_commits: int
    latency_files_per_commit: float
    latency_cycle_s_mean: float
    latency_cycle_s_max: float
    peak_rss_mb: float
    peak_rss_by_process_mb: dict[str, float]
    peak_rss_by_phase_mb: dict[str, float]
    naive_appends: int
    elapsed_s: float
    reader: str
    master: str
    cluster_rps: dict[str, float]
    sinklab_vs_naive: float
    sinklab_vs_raw: float
    sinklab_vs_spark_alone: float
    java_sink_rps: float | None
    java_sink_files_per_commit: float | None
    java_sink_p99_s: float | None
    java_sink_p50_s: float | None
    java_sink_p99_1s_s: float | None
    java_sink_max_visibility_s: float | None
    java_sink_commits: int | None
    java_sink_records: int | None
    java_sink_tasks: int | None
    java_sink_commit_at_s: list[float] | None
    java_sink_latency_commits: int | None
    java_sink_latency_files_per_commit: float | None
    sinklab_vs_java_sink: float | None
    java_sink_error: str | None
    # The drains' commit times: a drain is quantized by them (a backlog the Java sink takes in one commit).
    sinklab_drain_cycle_s: list[float]
    fanout_drain_cycle_s: list[float]
    naive_drain_append_at_s: list[float]
    # The sustained-rate contract (``sustained.sustained_figures``).
    sinklab_sustained_rps: float | None
    sinklab_sustained_mbps_per_core: float | None
    fanout_sustained_rps: float | None
    fanout_sustained_mbps_per_core: float | None
    java_sink_sustained_rps: float | None
    java_sink_sustained_mbps_per_core: float | None
    naive_sustained_rps: float | None
    naive_sustained_mbps_per_core: float | None
    producer_ceiling_rps: float | None
    producer_ceiling_mbps_per_core: float | None
    sustained: dict[str, Any]
    sweep: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, run: Run) -> Figures:
        single, fanout, naive, lat, lat_1s, java = run.single, run.fanout, run.naive, run.lat, run.lat_1s, run.java
        jd, jl = java.drain, java.latency
        return cls(
            records=run.records, partitions=run.partitions, interval_ms=run.interval_ms, produce_rps=run.produce_rps,
            raw_consume_rps=run.raw_consume_rps, auto_create_s=run.auto_create_s, first_cycle_s=run.first_cycle_s,
            naive_pyiceberg_rps=naive.rps, spark_alone_rps=run.spark_alone_rps, cycle_fixed_s=run.cycle_fixed_s,
            empty_cycle_s=run.empty_cycle_s,
            sinklab_rps=single.rps, fanout_rps=fanout.rps,
            files_per_table_commit=max(single.files_per_table_commit, fanout.files_per_table_commit),
            write_tasks=_write_tasks(single),
            sinklab_cycles=len(single.cycles), spark_jobs_per_cycle=statistics.mean(len(j) for j in single.jobs),
            jobs_per_cycle=statistics.mean(len(j) for j in single.jobs),
            p99_visibility_1s_s=lat_1s.p99_s, p50_visibility_1s_s=lat_1s.p50_s,
            latency_cycle_s_mean_1s=statistics.mean(lat_1s.cycle_s),
            fanout_spark_jobs_per_cycle=statistics.mean(len(j) for j in fanout.jobs),
            p50_visibility_s=lat.p50_s, p99_visibility_s=lat.p99_s, max_visibility_s=lat.max_s,
            p99_visibility_snapshot_ts_s=lat.p99_snapshot_ts_s, latency_rate=lat.rate, latency_records=lat.records,
            latency_commits=lat.commits, latency_files_per_commit=lat.files_per_commit,
            latency_cycle_s_mean=statistics.mean(lat.cycle_s), latency_cycle_s_max=max(lat.cycle_s),
            peak_rss_mb=run.rss.peak["total"] / 2**20,
            peak_rss_by_process_mb={k: v / 2**20 for k, v in run.rss.peak.items() if k != "total"},
            peak_rss_by_phase_mb={k: v / 2**20 for k, v in run.rss.phase_peak.items()},
            naive_appends=naive.appends, elapsed_s=run.elapsed_s, reader="spark-sql-kafka",
            master=run.master or "local[*]", cluster_rps={str(n): r.rps for n, r in run.clusters.items()},
            sinklab_vs_naive=single.rps / naive.rps, sinklab_vs_raw=single.rps / run.raw_consume_rps,
            sinklab_vs_spark_alone=single.rps / run.spark_alone_rps,
            java_sink_rps=jd.rps if jd else None, java_sink_files_per_commit=jd.files_per_commit if jd else None,
            java_sink_p99_s=jl.p99_s if jl else None, java_sink_p50_s=jl.p50_s if jl else None,
            java_sink_p99_1s_s=java.latency_1s.p99_s if java.latency_1s else None,
            java_sink_max_visibility_s=jl.max_s if jl else None, java_sink_commits=jd.commits if jd else None,
            java_sink_records=jd.records if jd else None, java_sink_tasks=os.cpu_count(),
            java_sink_commit_at_s=jd.commit_at_s if jd else None,
            java_sink_latency_commits=jl.commits if jl else None,
            java_sink_latency_files_per_commit=jl.files_per_commit if jl else None,
            sinklab_vs_java_sink=single.rps / jd.rps if jd else None,
            java_sink_error=java.error,
            sinklab_drain_cycle_s=[c.duration_ms / 1000 for c in single.cycles],
            fanout_drain_cycle_s=[c.duration_ms / 1000 for c in fanout.cycles],
            naive_drain_append_at_s=naive.append_at_s,
            **sustained_figures(run.contract, run.sustained, run.ceiling, run.payloads),
            sweep=[{"interval_ms": lt.interval_ms, "naive_pyiceberg_rps": n.rps, "naive_appends": n.appends,
                    "p50_visibility_s": lt.p50_s, "p99_visibility_s": lt.p99_s, "max_visibility_s": lt.max_s,
                    "commits": lt.commits, "records_per_commit": lt.records_per_commit,
                    "cycle_s_mean": statistics.mean(lt.cycle_s),
                    "files_per_commit": lt.files_per_commit} for n, lt in run.swept] or None,
        )

    def line(self) -> dict[str, Any]:
        """The JSON line's object (its floats rounded to 3 decimals)."""
        out = asdict(self)
        if self.sweep is None:
            del out["sweep"]
        return rounded(out)


def report(run: Run, f: Figures, profile: bool = False) -> None:
    """The table, the contract's table, peak RSS by phase, the sweep, with ``profile`` each drain cycle's Spark
    jobs; then the JSON line."""
    print_table([
        ("records in the backlog", f"{f.records:,}", f"{f.partitions} partitions, pizza events"),
        ("produce", f"{f.produce_rps:,.0f}/s", "generator -> broker (idempotent producer)"),
        ("(a) raw consume of the backlog", f"{f.raw_consume_rps:,.0f}/s", "one confluent-kafka consumer, no parsing"),
        ("drain: (b) naive pyiceberg", f"{f.naive_pyiceberg_rps:,.0f}/s",
         f"json.loads + pyarrow + append every {f.interval_ms} ms ({f.naive_appends} appends, at "
         + ", ".join(f"{t:.1f}" for t in f.naive_drain_append_at_s) + " s)"),
        ("spark alone", f"{f.spark_alone_rps:,.0f}/s",
         "JSON text files -> from_json -> zstd Parquet: no Kafka, no checks, no commit"),
        ("drain: (c) sinklab, 1 table", f"{f.sinklab_rps:,.0f}/s",
         f"{f.sinklab_vs_naive:.1f}x naive, {f.sinklab_vs_raw:.2f}x raw; {f.sinklab_cycles} cycle(s) of "
         + ", ".join(f"{c:.2f}" for c in f.sinklab_drain_cycle_s)
         + f" s, {f.spark_jobs_per_cycle:.0f} Spark jobs/cycle"),
        ("drain: (c) sinklab, fan-out to 3", f"{f.fanout_rps:,.0f}/s",
         f"{len(f.fanout_drain_cycle_s)} cycle(s) of " + ", ".join(f"{c:.2f}" for c in f.fanout_drain_cycle_s)
         + f" s, {f.fanout_spark_jobs_per_cycle:.0f} Spark jobs/cycle"),
        ("files per table commit", f"{f.files_per_table_commit}", f"write tasks: {f.write_tasks}"),
        ("auto-create", f"{f.auto_create_s:.1f} s", "two sinks creating 1 + 3 tables from 2,000 events (cold JVM)"),
        ("first cycle", f"{f.first_cycle_s:.1f} s", "a fresh JVM's first cycle, auto-creating its table"),
        *[(f"(c) on a cluster, {n} worker(s)", f"{r:,.0f}/s", "local standalone master + one-core workers, "
           "executors in their own JVMs") for n, r in f.cluster_rps.items()],
        ("fixed cost per cycle", f"{f.cycle_fixed_s:.2f} s",
         f"median cycle carrying one record; a cycle with nothing new {f.empty_cycle_s:.2f} s"),
        ("visibility p50 / p99", f"{f.p50_visibility_s:.2f} / {f.p99_visibility_s:.2f} s",
         f"{f.latency_rate:,.0f} events/s for {run.latency_seconds:.0f} s, interval {f.interval_ms} ms, "
         f"{f.latency_commits} commits, {f.latency_files_per_commit:.1f} files/commit, cycles "
         f"{f.latency_cycle_s_mean:.2f} s mean / {f.latency_cycle_s_max:.2f} s max"),
        ("visibility at 1 s, p50 / p99", f"{f.p50_visibility_1s_s:.2f} / {f.p99_visibility_1s_s:.2f} s",
         f"interval {FRESH_MS} ms, same rate; cycles {f.latency_cycle_s_mean_1s:.2f} s mean"
         + (f"; the Java sink's p99 {f.java_sink_p99_1s_s:.2f} s" if f.java_sink_p99_1s_s else "")),
        *_java_rows(run.java, f),
        ("peak RSS", f"{f.peak_rss_mb:,.0f} MB",
         ", ".join(f"{k} {v:,.0f}" for k, v in f.peak_rss_by_process_mb.items())),
    ])
    if run.sustained or run.ceiling is not None:
        print()
        print_table(sustained_rows(run.contract, run.sustained, vars(f)))
    print("peak RSS by phase (MB): " + ", ".join(f"{k} {v:,.0f}" for k, v in f.peak_rss_by_phase_mb.items()))
    if f.sweep:
        print(f"\n{'interval ms':>11} {'naive rec/s':>12} {'appends':>8} {'p50 s':>7} {'p99 s':>7} {'max s':>7} "
              f"{'commits':>8} {'rec/commit':>11} {'files/commit':>13} {'cycle s':>8}")
        for s in f.sweep:
            print(f"{s['interval_ms']:>11} {s['naive_pyiceberg_rps']:>12,.0f} {s['naive_appends']:>8} "
                  f"{s['p50_visibility_s']:>7.2f} {s['p99_visibility_s']:>7.2f} {s['max_visibility_s']:>7.2f} "
                  f"{s['commits']:>8} {s['records_per_commit']:>11,.0f} {s['files_per_commit']:>13.1f} "
                  f"{s['cycle_s_mean']:>8.2f}")
    if profile:
        for label, result in (("1 table", run.single), ("fan-out", run.fanout)):
            for i, (cycle, jobs) in enumerate(zip(result.cycles, result.jobs, strict=True)):
                in_jobs = sum(j.seconds for j in jobs)
                total = cycle.duration_ms / 1000
                print(f"\n{label} cycle {i}: {cycle.records:,} records, {total:.2f} s, {len(jobs)} Spark jobs "
                      f"({in_jobs:.2f} s), outside jobs {total - in_jobs:.2f} s")
                for j in jobs:
                    print(f"  job {j.id:>4} {j.seconds:>7.2f} s  {j.name}")
                for s in cycle.tables.values():
                    print(f"  {s.table}: write {s.write_ms} ms, publish {s.commit_ms} ms, {len(s.data_files)} files")
    print(json.dumps(f.line()))


def _java_rows(java: JavaResult, f: Figures) -> list[tuple[str, str, str]]:
    """The Java sink's lines of the table, beside sinklab's; what failed when it could not run."""
    rows = []
    if java.drain is not None:
        d = java.drain
        rows.append(("drain: (d) Java Iceberg sink", f"{d.rps:,.0f}/s",
                     f"Kafka Connect, tasks.max={f.java_sink_tasks}; sinklab is {f.sinklab_vs_java_sink:.2f}x "
                     f"this; {d.commits} commit(s), {d.files_per_commit:.1f} files/commit "
                     f"(max {d.max_files_per_commit}); committed at "
                     + ", ".join(f"{t:.1f}" for t in d.commit_at_s) + " s"))
    if java.latency is not None:
        lt = java.latency
        rows.append(("Java sink visibility p50 / p99", f"{lt.p50_s:.2f} / {lt.p99_s:.2f} s",
                     f"same rate and interval; {lt.commits} commits, {lt.files_per_commit:.1f} files/commit, "
                     f"max {lt.max_s:.2f} s"))
    if java.error is not None:
        # The first line and a Java trace's root cause; the JSON line has the whole message and log.
        lines = java.error.splitlines()
        causes = [line.strip() for line in lines if line.startswith("Caused by:")]
        rows.append(("(d) Java Iceberg sink", "not run" if java.drain is None else "failed",
                     lines[0][:200] + (f" ... {causes[-1][:200]}" if causes else "")))
    return rows


def _write_tasks(result: DrainResult) -> int:
    """Tasks of the cycle's widest write (a cycle's data files are written by a job named ``save``)."""
    return max((j.tasks for jobs in result.jobs for j in jobs if j.name.startswith("save")), default=0)
