"""The sustained-rate contract: the highest event rate each sink keeps up with.

A sink keeps up with a rate when, fed that many events per second for a window (``Contract.seconds``) at
the commit interval, at the window's close no more than two intervals of records are not yet readable,
and the 99th percentile of the window's records' visibility latency is within three intervals. Each rate
tried is a window (``keep_up``) on a fresh topic, with a sink (``RateSink``: sinklab into one table or
fanned out to three, the naive loop, the Java sink) running and caught up before it opens, fed by the
paced producer (``bench/paced_producer.py``), whose ceiling is measured first and never exceeded. The
rates are a seeded bisection (``next_rate``, ``sustained_rate``). bench/README.md, "The sustained-rate
contract", says why each choice.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import java_sink  # bench/java_sink.py
import numpy as np
import paced_producer  # bench/paced_producer.py
import pandas as pd
from harness import (
    FANOUT,
    NAMESPACE,
    Payloads,
    assign_all,
    completed_cycles,
    create_empty_table,
    drop_topics,
    epoch_ms,
    failure,
    naive_loop,
    sink_config,
    watermarks,
)

from sinklab import readings
from sinklab.generators import PizzaGenerator
from sinklab.generators.produce import PRODUCER_DEFAULTS
from sinklab.sink import IcebergSink

if TYPE_CHECKING:
    from sinklab.stack import Stack

# ---- the contract, and the producer that feeds it

CEILING_S = 5.0  # seconds the producer runs flat out for its ceiling
TOP_SHARE = 0.9  # the highest rate tried, as a share of the producer's ceiling
PRIMING = 100  # records a sinklab sink commits before the window opens (some for each of three tables)


@dataclass
class Contract:
    """Keeping up with a rate: for ``seconds`` at that rate, with a commit every ``interval_ms``, at
    most ``lag_intervals`` intervals of records not yet readable when the window closes, and the 99th
    percentile of the window's records' visibility latency within ``p99_intervals`` intervals. At
    most ``probes`` windows per sink."""

    interval_ms: int
    seconds: float
    probes: int
    lag_intervals: float = 2
    p99_intervals: float = 3

    @property
    def p99_limit_s(self) -> float:
        return self.p99_intervals * self.interval_ms / 1000

    def lag_limit(self, rate: float) -> float:
        return self.lag_intervals * self.interval_ms / 1000 * rate


def producer_ceiling(stack: Stack, payloads: Payloads, partitions: int,
                     seconds: float = CEILING_S) -> paced_producer.PacedRun:
    """The paced producer flat out for ``seconds`` into a fresh topic, with no sink running: the records/s
    the broker acknowledges (``delivered_rps``). No rate above it is tried."""
    topic = "bench-producer-ceiling"
    stack.create_topic(topic, partitions=partitions)
    try:
        return paced_producer.produce_paced(stack.bootstrap_servers, topic, payloads.path, partitions, seconds,
                                            config=PRODUCER_DEFAULTS)
    finally:
        drop_topics(stack, [topic])


# ---- what a sink made readable, and when

Steps = list[tuple[float, int]]  # per commit, in order: its publish (epoch ms), records of the topic readable from then


def readable_at(steps: Steps, at_ms: float) -> int:
    return max((n for t, n in steps if t <= at_ms), default=0)


def offsets_readable(stack: Stack, tables: list[str], sink_name: str, topic: str) -> Steps:
    """From the snapshots of ``sink_name`` (their ``sinklab.offsets``): each commit's publish, and the
    records of ``topic`` readable in all of ``tables`` from then on (fanned out: the least of the three)."""
    snaps = readings.snapshots(stack, tables)
    own = snaps[(snaps["sink"] == sink_name) & snaps["offsets"].notna()].sort_values("visible_at")
    latest = dict.fromkeys(tables, 0)
    steps = []
    for row in own.itertuples():
        latest[row.table] = max(latest[row.table], sum(row.offsets.get(topic, {}).values()))
        steps.append((row.visible_at.timestamp() * 1000, min(latest.values())))
    return steps


def offsets_latency(stack: Stack, tables: list[str], sink_name: str, topic: str) -> tuple[np.ndarray, np.ndarray]:
    """Every record of ``topic``: its Kafka timestamp and when it became readable (epoch ms, NaN: not yet), by
    ``readings.visibility`` from the snapshots' offsets; fanned out, when the last of the tables published past
    it (a record is matched against every table, and the three publish in the same cycle)."""
    records = readings.record_times(stack, topic)
    vis = readings.visibility(readings.snapshots(stack, tables), records, sink=sink_name)
    if vis.empty:
        return epoch_ms(records["produced_at"]), np.full(len(records), np.nan)
    produced = epoch_ms(vis["produced_at"])
    visible = produced + vis["latency_s"].to_numpy() * 1000
    if len(tables) > 1:
        per = pd.DataFrame({"partition": vis["partition"].to_numpy(), "offset": vis["offset"].to_numpy(),
                            "produced": produced, "visible": np.nan_to_num(visible, nan=np.inf)})
        last = per.groupby(["partition", "offset"], sort=False).agg(produced=("produced", "first"),
                                                                    visible=("visible", "max"))
        produced, visible = last["produced"].to_numpy(), last["visible"].to_numpy()
        visible = np.where(np.isinf(visible), np.nan, visible)
    return produced, visible


# ---- the sinks under the contract: sinklab (one table, fanned out to three), the naive loop, the Java sink

class RateSink:
    """A sink under the contract, on a fresh topic each probe: running and caught up before the window
    opens, stopped once the window's records are readable or the wait is over."""

    key = ""  # its name in the JSON line: ``{key}_sustained_rps``
    label = ""

    def start(self, topic: str, probe: int) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def check(self) -> None:
        """Raise when the sink has failed."""

    def readable(self, topic: str) -> Steps:
        raise NotImplementedError

    def record_latency(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        """Every record's Kafka timestamp and when it became readable (epoch ms; NaN: not yet)."""
        raise NotImplementedError

    def cycle_s(self) -> list[float]:
        """The durations of the probe's commit cycles, where the sink reports them."""
        return []


class SinklabRate(RateSink):
    """sinklab into one table, or fanned out to three on the sauce (as ``FANOUT``), exactly-once."""

    def __init__(self, stack: Stack, interval_ms: int, partitions: int, fanout: bool):
        self.stack, self.interval_ms, self.partitions, self.fanout = stack, interval_ms, partitions, fanout
        self.key, self.label = ("fanout", "sinklab, fan-out to 3") if fanout else ("sinklab", "sinklab, 1 table")
        self.sink: IcebergSink | None = None
        self.tables: dict[str, str] = {}
        self.name = ""

    def start(self, topic: str, probe: int) -> None:
        # The same tables for every probe (a new sink each time, its records told apart by its name in the
        # snapshots): the first priming cycle creates them, as the sink does.
        base = f"{NAMESPACE}.rate_{self.key}"
        self.tables = ({f"{base}_{t.rsplit('_', 1)[1]}": regex for t, regex in FANOUT.items()} if self.fanout
                       else {base: ""})
        self.name = f"{topic}-sink"
        PizzaGenerator(seed=500 + probe).produce(self.stack, topic, count=PRIMING, partitions=self.partitions).wait()
        self.sink = IcebergSink(self.stack, sink_config(self.name, topic, list(self.tables), self.interval_ms,
                                                        routes=self.tables))
        # This sink's first cycle (its session and consumers; creating its tables, as it does) is no part of it.
        self.sink.run_once()
        self.sink.start()

    def stop(self) -> None:
        if self.sink is not None:
            self.sink.stop()
            self.sink = None

    def check(self) -> None:
        status = self.sink.status() if self.sink is not None else None
        if status is not None and status.state == "FAILED":
            raise RuntimeError(f"sink {self.name} failed: {status.trace}")

    def readable(self, topic: str) -> Steps:
        return offsets_readable(self.stack, list(self.tables), self.name, topic)

    def record_latency(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        return offsets_latency(self.stack, list(self.tables), self.name, topic)

    def cycle_s(self) -> list[float]:
        done = completed_cycles(self.stack, self.name)
        return [d / 1000 for d in done["duration_ms"].iloc[1:]]  # not the priming cycle


class NaiveRate(RateSink):
    """The naive loop (``naive_loop``) in a thread of this process (the producer runs in its own)."""

    key, label = "naive", "naive pyiceberg"

    def __init__(self, stack: Stack, interval_ms: int):
        self.stack, self.interval_ms = stack, interval_ms
        self.table_name = self.name = ""
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, topic: str, probe: int) -> None:
        self.table_name = f"{NAMESPACE}.rate_naive_{probe}"
        table = create_empty_table(self.stack, self.table_name)
        self.name = f"{topic}-naive"
        consumer, _ = assign_all(self.stack, topic)
        self._halt.clear()
        self._error = None

        def run() -> None:
            try:
                naive_loop(consumer, table, self.interval_ms / 1000, lambda _: self._halt.is_set(), self.name)
            except BaseException as exc:  # noqa: BLE001 - check() raises it in the harness's thread
                self._error = exc

        self._thread = threading.Thread(target=run, name=f"naive-{probe}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(120)
            self._thread = None

    def check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the naive loop failed: {failure(self._error)}") from self._error

    def readable(self, topic: str) -> Steps:
        return offsets_readable(self.stack, [self.table_name], self.name, topic)

    def record_latency(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        return offsets_latency(self.stack, [self.table_name], self.name, topic)


class JavaRate(RateSink):
    """Apache Iceberg's Kafka Connect sink, ``tasks.max`` = cores, a connector per probe on one warm worker."""

    key, label = "java_sink", "Java Iceberg sink"

    def __init__(self, stack: Stack, worker: java_sink.ConnectWorker, interval_ms: int):
        self.stack, self.worker, self.interval_ms = stack, worker, interval_ms
        self.table_name = self.name = ""

    def start(self, topic: str, probe: int) -> None:
        self.table_name = f"{NAMESPACE}.rate_java_{probe}"
        create_empty_table(self.stack, self.table_name)
        self.name = f"{topic}-sink"
        self.worker.add(java_sink.connector_config(self.stack, self.name, topic, self.table_name, self.interval_ms))
        self.worker.wait_assigned(self.name, topic)  # the tasks' start and the group's join are no part of it

    def stop(self) -> None:
        self.worker.remove(self.name)

    def check(self) -> None:
        self.worker.check(self.name)

    def readable(self, topic: str) -> Steps:
        # It records no source offsets: a fresh table's total records, as each snapshot made them readable.
        snaps = readings.snapshots(self.stack, self.table_name)
        return [(row.visible_at.timestamp() * 1000, int(row.total_records))
                for row in snaps[snaps["added_records"] > 0].sort_values("visible_at").itertuples()]

    def record_latency(self, topic: str) -> tuple[np.ndarray, np.ndarray]:
        produced, visible, _ = java_sink.record_visibility(self.stack, self.table_name, self.name, topic)
        return produced, visible


# ---- one window at a rate

@dataclass
class Probe:
    """One window at ``rate`` records/s."""

    rate: float
    produced: int
    produced_rps: float  # what the producer kept, first record to last
    behind_s: float  # the most the producer fell behind its schedule
    lag_end: int  # records produced by the window's close and not readable then
    lag_limit: float
    committed_rps: float  # records/s the sink made readable inside the window, first commit there to last
    commits: int  # commits published inside the window
    p50_s: float | None  # None: not measured, the lag already failed the contract
    p99_s: float | None
    why: str  # what failed; empty: it kept up
    seconds: float  # the probe's wall time, setup and analysis included
    cycle_s: list[float] = field(default_factory=list)  # sinklab's cycle durations

    @property
    def passed(self) -> bool:
        return not self.why


def committed_rate(steps: Steps, start_ms: float, end_ms: float) -> tuple[float, int]:
    """Records/s the sink made readable inside the window (from its opening to its last commit there) and
    its commits there: what it does when it cannot keep up. From its first commit there instead, a
    fan-out's three tables publishing a cycle milliseconds apart read as 201M records/s (2026-11-29)."""
    inside = [(t, n) for t, n in steps if start_ms <= t <= end_ms]
    if inside and inside[-1][0] > start_ms:
        return (inside[-1][1] - readable_at(steps, start_ms)) / ((inside[-1][0] - start_ms) / 1000), len(inside)
    return (readable_at(steps, end_ms) - readable_at(steps, start_ms)) / ((end_ms - start_ms) / 1000), len(inside)


def wait_readable(sink: RateSink, topic: str, total: int, deadline: float) -> None:
    """Until ``total`` records of ``topic`` are readable, or the epoch second ``deadline``."""
    while time.time() < deadline:
        sink.check()
        steps = sink.readable(topic)
        if steps and steps[-1][1] >= total:
            return
        time.sleep(0.25)


def keep_up(stack: Stack, sink: RateSink, contract: Contract, payloads: Payloads, rate: float, probe: int,
            partitions: int) -> Probe:
    """One window at ``rate``: a fresh topic, the sink running, the paced producer for ``contract.seconds``.
    Then the lag at the window's close (from the commits' publish times) and, when producer and lag held,
    every record's visibility latency, after waiting for the tail up to the p99 limit past the close (a
    record still not readable then counts as readable at that deadline: a lower bound, above the limit;
    when more than 1% are, the p99 is above the limit without reading a record back)."""
    began = time.monotonic()
    topic = f"bench-rate-{sink.key}-{probe}"
    stack.create_topic(topic, partitions=partitions)
    sink.start(topic, probe)
    try:
        run = paced_producer.produce_paced(stack.bootstrap_servers, topic, payloads.path, partitions,
                                           contract.seconds, rate, PRODUCER_DEFAULTS)
        sink.check()
        total = sum(high - low for low, high in watermarks(stack, topic).values())
        lag_end = total - readable_at(sink.readable(topic), run.last_ms)
        held = run.kept_pace() and lag_end <= contract.lag_limit(rate)
        deadline_ms = run.last_ms + (contract.p99_limit_s + 0.5) * 1000
        if held:
            wait_readable(sink, topic, total, deadline_ms / 1000)
    finally:
        sink.stop()
    steps = sink.readable(topic)
    committed_rps, commits = committed_rate(steps, run.started_ms, run.last_ms)
    late = total - readable_at(steps, deadline_ms) if held else 0
    p50 = p99 = None
    if held and late <= 0.01 * run.produced:
        produced, visible = sink.record_latency(topic)
        latency = (np.where(np.isnan(visible), deadline_ms, visible) - produced) / 1000
        window = latency[produced >= run.started_ms - 100]  # not a priming record
        p50, p99 = (float(q) for q in np.quantile(window, [0.5, 0.99], method="higher"))
    drop_topics(stack, [topic])
    why = []
    if not run.kept_pace():
        why.append(f"producer {run.behind_s:.1f} s behind")
    if lag_end > contract.lag_limit(rate):
        why.append(f"lag {lag_end:,} > {contract.lag_limit(rate):,.0f}")
    if p99 is not None and p99 > contract.p99_limit_s:
        why.append(f"p99 {p99:.1f} s > {contract.p99_limit_s:.0f} s")
    if late > 0.01 * run.produced:
        why.append(f"p99 > {contract.p99_limit_s:.0f} s ({late:,} records not readable {contract.p99_limit_s:.0f} s "
                   "after the close)")
    return Probe(rate, run.produced, run.rps, run.behind_s, lag_end, contract.lag_limit(rate), committed_rps,
                 commits, p50, p99, "; ".join(why), time.monotonic() - began, sink.cycle_s())


# ---- the search: a seeded bisection over windows

@dataclass
class Sustained:
    key: str
    label: str
    rps: float | None  # the highest rate it kept up with; None: none of those tried
    top: float  # the highest rate that could be tried (TOP_SHARE of the producer's ceiling)
    probes: list[Probe]

    @property
    def producer_bound(self) -> bool:
        """It kept up with the highest rate tried: the producer, not the sink, set the figure."""
        return self.rps is not None and self.rps >= self.top * 0.99

    @property
    def below(self) -> float | None:
        """The lowest rate above ``rps`` it did not keep up with: the figure lies between the two."""
        return min((p.rate for p in self.probes if not p.passed and (self.rps is None or p.rate > self.rps)),
                   default=None)


def round_rate(rate: float) -> float:
    return float(f"{rate:.2g}")


def next_rate(probes: list[Probe], top: float) -> float | None:
    """The next rate to try; None once found to within 10%, or when the highest rate that may be tried held.

    - Every rate so far held: 4x the highest, at most ``top``, so that a search ends bracketed (a rate
      that held and one that did not) early. Doubling from a drain's rate ended ``--quick``'s three
      windows with every rate held; ``top`` itself (0.9x the producer's ceiling, 0.8-1.2M/s on
      2026-11-29) flooded a sink with 15-22M records, in whose window it committed nothing to learn from.
    - None held yet: 0.9 x what the lowest failure committed per second (the sink's throughput while it
      could not keep up), at most 0.8 x and at least a quarter of that failure's rate.
    - Otherwise the geometric middle of the highest success and the lowest failure above it: a bisection.
      (0.9 x what that failure carried, tried 2026-11-29, guessed low: an overloaded sinklab commits once
      in a 20 s window, bench/README.md.)
    """
    lo = max((p.rate for p in probes if p.passed), default=None)
    above = [p for p in probes if not p.passed and (lo is None or p.rate > lo)]
    if not above:
        assert lo is not None
        return None if lo >= top * 0.99 else round_rate(min(top, 4 * lo))
    hi = min(above, key=lambda p: p.rate)
    if lo is None:
        return round_rate(max(min(0.9 * hi.committed_rps, 0.8 * hi.rate), hi.rate / 4))
    return None if hi.rate / lo <= 1.1 else round_rate(math.sqrt(lo * hi.rate))


def sustained_rate(stack: Stack, sink: RateSink, contract: Contract, payloads: Payloads, seed: float, top: float,
                   partitions: int) -> Sustained:
    """The highest rate ``sink`` keeps up with under ``contract``: the first window at ``seed`` (the
    sink's drain rate in this run), each next one at ``next_rate``, ``contract.probes`` windows at most."""
    probes: list[Probe] = []
    rate: float | None = round_rate(min(seed, top))
    while rate is not None and len(probes) < contract.probes:
        probes.append(keep_up(stack, sink, contract, payloads, rate, len(probes), partitions))
        print(f"sustained, {sink.label}: {describe_probe(probes[-1])}", flush=True)
        rate = next_rate(probes, top)
    return Sustained(sink.key, sink.label, max((p.rate for p in probes if p.passed), default=None), top, probes)


def describe_probe(p: Probe) -> str:
    verdict = "kept up" if p.passed else f"no ({p.why})"
    tail = f", p50 / p99 {p.p50_s:.1f} / {p.p99_s:.1f} s" if p.p99_s is not None else ""
    cycles = (f"; cycles {statistics.mean(p.cycle_s):.1f} s mean, {max(p.cycle_s):.1f} s max" if p.cycle_s else "")
    return (f"{p.rate:,.0f}/s: {verdict}; lag at the close {p.lag_end:,}{tail}; committed {p.committed_rps:,.0f}/s "
            f"in {p.commits} commit(s) inside the window{cycles} ({p.seconds:.0f} s)")


def java_seed(drain: java_sink.JavaDrain, interval_ms: int) -> float:
    """The Java sink's drain rate less its commit timer: its first commit comes one interval after its
    coordinator starts, whatever it has read, so a drain of a backlog is mostly that wait."""
    return drain.records / max(drain.seconds - interval_ms / 1000, 1.0)


# ---- the figures: the JSON line's keys and the table's rows

SUSTAINED_KEYS = ("sinklab", "fanout", "java_sink", "naive")


def sustained_figures(contract: Contract, found: dict[str, Sustained], ceiling: paced_producer.PacedRun | None,
                      payloads: Payloads | None) -> dict[str, Any]:
    """The contract's figures for the JSON line: ``{key}_sustained_rps`` and ``_mbps_per_core`` beside
    each (null for a sink not measured), the producer's ceiling, and every probe."""
    cores = os.cpu_count() or 1

    def per_core_mbps(rps: float | None) -> float | None:
        return None if rps is None or payloads is None else rps * payloads.mean_bytes / 1e6 / cores

    out: dict[str, Any] = {}
    for key in SUSTAINED_KEYS:
        rps = found[key].rps if key in found else None
        out[f"{key}_sustained_rps"], out[f"{key}_sustained_mbps_per_core"] = rps, per_core_mbps(rps)
    out["producer_ceiling_rps"] = ceiling.delivered_rps if ceiling else None
    out["producer_ceiling_mbps_per_core"] = per_core_mbps(out["producer_ceiling_rps"])
    out["sustained"] = {
        "interval_ms": contract.interval_ms, "window_s": contract.seconds, "max_probes": contract.probes,
        "lag_limit_intervals": contract.lag_intervals, "p99_limit_s": contract.p99_limit_s, "cores": cores,
        "bytes_per_record": payloads.mean_bytes if payloads else None,
        "top_rps": TOP_SHARE * ceiling.delivered_rps if ceiling else None,
        "producer_bound": [k for k, r in found.items() if r.producer_bound],
        "failed_above": {k: r.below for k, r in found.items()},
        "probes": {k: [{**asdict(p), "passed": p.passed} for p in r.probes] for k, r in found.items()},
    }
    return out


def sustained_rows(contract: Contract, found: dict[str, Sustained], f: dict[str, Any]) -> list[tuple[str, str, str]]:
    cores = f["sustained"]["cores"]
    rows = [(f"sustained rate, {cores} cores", "records/s",
             f"kept up for {contract.seconds:.0f} s at a {contract.interval_ms:,} ms interval: lag at the close "
             f"<= {contract.lag_intervals:g} intervals of records, p99 visibility <= {contract.p99_limit_s:g} s")]
    if f["producer_ceiling_rps"] is not None:
        rows.append(("producer ceiling", f"{f['producer_ceiling_rps']:,.0f}/s",
                     f"{f['producer_ceiling_mbps_per_core']:.1f} MB/s per core; pre-encoded pizzas flat out for "
                     f"{CEILING_S:.0f} s, no sink running; rates tried up to {f['sustained']['top_rps']:,.0f}/s"))
    for key in SUSTAINED_KEYS:
        if key not in found:
            continue
        r = found[key]
        value = f"{r.rps:,.0f}/s" if r.rps is not None else "none"
        figure = (f"{r.rps / cores:,.0f}/s and {f[f'{key}_sustained_mbps_per_core']:.1f} MB/s per core"
                  + (" (the producer bound it)" if r.producer_bound else "") if r.rps is not None
                  else "kept up with none of the rates tried")
        bracket = (f" (not {r.below:,.0f})" if r.below is not None
                   else " (a lower bound: every rate tried held)" if r.rps is not None and not r.producer_bound
                   else "")
        rows.append((r.label, value, figure + bracket + "; tried " + ", ".join(
            f"{p.rate:,.0f} {'yes' if p.passed else 'no'}" for p in r.probes)))
    return rows
