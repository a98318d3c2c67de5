"""IcebergSink: the public face of the sink, Kafka Connect-like in what it reports."""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaException

from sinklab.exceptions import ConfigError, CycleTooLarge
from sinklab.retry import jvm_gone, out_of_memory, text_of, transient
from sinklab.sink.config import keys
from sinklab.sink.config.sink_config import SinkConfig, load_config
from sinklab.sink.cycle.pace import Cost, LagTarget, due
from sinklab.sink.wire import apicurio
from sinklab.sink.wire.offsets import Lag, TopicPartition
from sinklab.stack.spark import OUT_OF_MEMORY_EXIT, driver_exit_status

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from sinklab.sink.cycle.coordinator import Coordinator, CycleResult
    from sinklab.sink.replay import ReplayResult
    from sinklab.sink.wire.control import Chore
    from sinklab.stack import Stack

log = logging.getLogger("sinklab.sink")
# How often a sink waiting for its next cycle looks at what is waiting in Kafka, with
# sinklab.commit.max-records/-bytes: a cycle starts at most this late after the trigger is reached.
TRIGGER_POLL_S = 0.1
RETUNE_POLL_S = 0.2  # how soon a wait for the next cycle sees a retuned interval
# What ``retune`` changes, by keyword, and the config key each stands for.
RETUNABLE = {"commit_interval_ms": keys.COMMIT_INTERVAL_MS, "commit_target_lag_ms": keys.COMMIT_TARGET_LAG_MS,
             "commit_max_records": keys.COMMIT_MAX_RECORDS}
RETRY_DELAY_MAX_S = 10.0
MAX_FAULTS = 100  # kept in status().faults, the newest


@dataclass
class SinkStatus:
    name: str
    state: str  # UNASSIGNED, RUNNING, PAUSED, FAILED, STOPPED
    cycles: int = 0
    records: int = 0
    last_commit: dict[str, Any] | None = None
    lag: Lag = field(default_factory=dict)  # of the last planned cycle, per partition
    counters: dict[str, int] = field(default_factory=dict)
    trace: str | None = None
    pace: dict[str, Any] | None = None  # with sinklab.commit.target-lag-ms: what the controller chose (pace.Pace)
    # While cycles fail on a service away for now: {attempt, since (epoch s), error, next_in_s}.
    retrying: dict[str, Any] | None = None
    # What went wrong and when (epoch s), newest last: {at, kind: retry | recovered | failed, detail}.
    faults: list[dict[str, Any]] = field(default_factory=list)
    # What a person changed and when (epoch s), newest last: {at, kind: tuned | paused | resumed, detail}.
    marks: list[dict[str, Any]] = field(default_factory=list)

    def __repr__(self) -> str:
        retrying = f", retrying ({self.retrying['error']})" if self.retrying else ""
        return (f"SinkStatus({self.name}: {self.state}{retrying}, {self.cycles} cycles, {self.records} records, "
                f"lag={sum(self.lag.values())}{', error: ' + self.trace.splitlines()[-1] if self.trace else ''})")

    def to_json(self) -> dict[str, Any]:
        """The wire form (a remote sink's status): lag as ``[topic, partition, n]`` entries."""
        return {**asdict(self), "lag": [[tp.topic, tp.partition, n] for tp, n in self.lag.items()]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SinkStatus:
        return cls(**{**raw, "lag": {TopicPartition(t, p): n for t, p, n in raw.get("lag", [])}})


class BetweenCycles(Protocol):
    """Work a sink runs after each committed cycle, on its own thread, in the wait for the next one
    (so it never races the sink's commits): ``sinklab.maintenance.schedule`` is one. What it did is
    recorded in the control log; what it takes beyond the wait delays the next cycle."""

    def __call__(self, spark: SparkSession, catalog: Catalog, result: CycleResult) -> Sequence[Chore]: ...


class IcebergSink:
    """Streams the configured topics into Iceberg tables on the stack's Spark, one commit per
    table per ``iceberg.control.commit.interval-ms``, exactly once. ``between_cycles`` runs after
    each committed cycle (table maintenance: ``between_cycles=sinklab.maintenance.schedule(config)``)."""

    def __init__(self, stack: Stack, config: SinkConfig | dict[str, Any] | str | Path,
                 between_cycles: BetweenCycles | None = None):
        self.stack = stack
        self.config = config if isinstance(config, SinkConfig) else load_config(config)
        if self.config.maintenance_keys and between_cycles is None:
            raise ConfigError(
                ", ".join(sorted(self.config.maintenance_keys)), "table maintenance runs between cycles through "
                "the sink's hook: IcebergSink(stack, config, between_cycles=sinklab.maintenance.schedule(config)) "
                "(sinklab sink run and the Connect server do this themselves)")
        self._between_cycles = between_cycles
        for note in self.config.notes:
            log.info("config: %s", note)
        self._coordinator: Coordinator | None = None
        self._spark: SparkSession | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._lock = threading.Lock()
        # One cycle at a time: cycles share the session's spark.wap.branch (two row-level cycles at once
        # write into one staging branch, and it is published with both's rows) and the transactional producer.
        self._cycling = threading.Lock()
        self._status = SinkStatus(self.config.name, "UNASSIGNED")
        self._target = (LagTarget(self.config.commit_target_lag_ms, self.config.commit_interval_ms)
                        if self.config.commit_target_lag_ms is not None else None)
        self._last_began: float | None = None
        self._bytes_per_record: float | None = None  # measured: what max-bytes converts waiting records with
        self._failing_since: float | None = None  # epoch s of the first of the failed cycles in a row
        self._attempts = 0

    @classmethod
    def from_connect_json(cls, path: str | Path, stack: Stack) -> IcebergSink:
        return cls(stack, load_config(path))

    # ---- wiring
    def _connect(self) -> Coordinator:
        if self._coordinator is None:
            from sinklab.sink.cycle.coordinator import Coordinator

            self._coordinator = Coordinator(self.config, self._session(), self.stack.catalog, self.stack.kafka_config())
        return self._coordinator

    def _session(self) -> SparkSession:
        """The sink's own Spark session: its staging settings must never leak into the user's queries."""
        if self._spark is None:
            from sinklab.stack.spark import SINK_SESSION_CONF

            ignored = sorted(keys.CATALOG_PREFIX + k for k in self.config.catalog_properties
                             if k in keys.CATALOG_CONNECTION_KEYS)
            if ignored:
                log.info("config: %s replaced by the stack's catalog", ", ".join(ignored))
            stack_registry = self.stack.info.schema_registry_url
            for side, framed in (("value", self.config.value_registry), ("key", self.config.key_registry)):
                if framed is not None and not framed.registry_url and stack_registry:
                    # Apicurio's converter speaks the registry's native API; the stack's URL is its Confluent one.
                    native = framed.apicurio is not None
                    framed.registry_url = apicurio.native_url(stack_registry) if native else stack_registry
                    log.info("config: %s not set: the stack's registry %s",
                             keys.converter_key(side, apicurio.URL if native else keys.REGISTRY_URL),
                             framed.registry_url)
            spark = self.stack.driver(f"the sink {self.config.name}").newSession()
            self.stack.register_spark_catalog(self.config.catalog_name)
            for key, value in {**SINK_SESSION_CONF, **self.stack.spark_catalog_conf(self.config.catalog_name)}.items():
                spark.conf.set(key, value)
            self._spark = spark
        return self._spark

    def replay(self, where: str | None = None) -> list[ReplayResult]:
        """Replay this sink's dead letters from its dead-letter table with its current config, exactly
        once (``sinklab.sink.replay``); ``where`` picks which, as a Spark SQL condition on the table."""
        from sinklab.sink.replay import Replayer

        with self._cycling:  # one cycle or replay at a time: they share the session's staging settings
            kafka_conf = self.config.kafka_settings(self.stack.kafka_config())
            return Replayer(self.config, self._session(), self.stack.catalog, kafka_conf).run(where)

    # ---- running
    def run_once(self) -> CycleResult | None:
        """One commit cycle up to the current end offsets; None when nothing new arrived. A failure
        leaves the sink FAILED and is raised: a single cycle is not retried."""
        try:
            return self._cycle()
        except BaseException as exc:
            self._fail(exc)
            raise

    def _cycle(self) -> CycleResult | None:
        with self._cycling:
            began = time.monotonic()
            try:
                coordinator = self._connect()
                result = coordinator.run_cycle()
            except BaseException as exc:
                # In local mode a task out of memory ends the whole JVM, and only its exit status says
                # why (its log said so too, but once too late for a reader here, on 2 busy cores).
                if out_of_memory(exc) or (jvm_gone(exc) and driver_exit_status() == OUT_OF_MEMORY_EXIT):
                    raise self._too_large() from exc
                self._drop_if_transient(exc)
                raise
            self._record(result)
            self._paced(result, began)
            if result is not None and self._between_cycles is not None:
                try:
                    self._between(coordinator, result, began)
                except BaseException as exc:
                    # The cycle committed; its maintenance record's transaction did not, and the next
                    # cycle must not meet that producer.
                    self._drop_if_transient(exc)
                    raise
            return result

    def _drop_if_transient(self, exc: BaseException) -> None:
        if transient(exc):
            # Its producer may be in a state no later cycle can use: the next one makes a new
            # coordinator, whose transactional producer aborts this one's transaction.
            self._drop_coordinator()

    def _too_large(self) -> CycleTooLarge:
        plan = self._coordinator.last_plan if self._coordinator is not None else None
        records = f"{plan.records:,} records" if plan is not None else "records"
        settings = self.stack.spark_settings
        memory = settings.conf.get("spark.driver.memory", settings.driver_memory)
        return CycleTooLarge(
            f"sink {self.config.name}: a cycle of {records} did not fit in Spark's memory (driver memory {memory}); "
            f"set {keys.CYCLE_MAX_RECORDS} (now {self.config.max_records_per_cycle:,}) lower so that each cycle "
            f"takes fewer records, or give Spark more memory (spark.driver.memory, spark.executor.memory)")

    def _attempt(self) -> tuple[bool, CycleResult | None]:
        """One cycle of a running sink: (True, its result), or (False, None) when it failed on a service
        away for now (``sinklab.retry.transient``) and will be tried again after ``retry_delay_s``, as Kafka
        Connect retries a task's RetriableException; the failed cycle dropped its coordinator (its Kafka
        transaction is aborted when the next one starts, as a restarted task's would be). Any
        other failure, or one past sinklab.retry.timeout-ms of failing, leaves the sink FAILED and is raised."""
        try:
            result = self._cycle()
        except BaseException as exc:
            timeout_ms = self.config.retry_timeout_ms
            failing_ms = (time.time() - self._failing_since) * 1000 if self._failing_since is not None else 0
            if not transient(exc) or timeout_ms == 0 or (timeout_ms > 0 and failing_ms > timeout_ms):
                self._fail(exc)
                raise
            self._retry(exc)
            return False, None
        if self._failing_since is not None:
            with self._lock:
                since, self._failing_since, self._status.retrying = self._failing_since, None, None
                self._append_fault("recovered", f"after {time.time() - since:.1f} s of failed cycles")
            log.warning("sink %s: recovered after %.1f s of failed cycles", self.config.name, time.time() - since)
        return True, result

    def _retry(self, exc: BaseException) -> None:
        detail = _one_line(exc)
        with self._lock:
            self._failing_since = self._failing_since or time.time()
            self._attempts = self._attempts + 1 if self._status.retrying else 1
            self._status.counters["retries"] = self._status.counters.get("retries", 0) + 1
            self._status.retrying = {"attempt": self._attempts, "since": self._failing_since,
                                     "error": detail, "next_in_s": self.retry_delay_s()}
            self._append_fault("retry", detail)
        log.warning("sink %s: cycle failed (%s); trying again in %.0f s (attempt %d, failing for %.1f s)",
                    self.config.name, detail, self.retry_delay_s(), self._attempts,
                    time.time() - self._failing_since)

    def _drop_coordinator(self) -> None:
        coordinator, self._coordinator = self._coordinator, None
        self._spark = None  # the next coordinator's session is new, on a driver that may be new too
        if coordinator is not None:
            try:
                coordinator.close()
            except Exception as close_exc:  # noqa: BLE001 - a new coordinator is made either way
                log.warning("sink %s: closing the failed cycle's coordinator: %s", self.config.name, close_exc)

    def retry_delay_s(self) -> float:
        """The wait before the next attempt after a failed one: 1 s, doubling, at most RETRY_DELAY_MAX_S."""
        return min(RETRY_DELAY_MAX_S, 2.0 ** max(0, self._attempts - 1))

    def _append_fault(self, kind: str, detail: str) -> None:
        """Under ``_lock``."""
        self._status.faults.append({"at": time.time(), "kind": kind, "detail": detail})
        del self._status.faults[:-MAX_FAULTS]

    def _between(self, coordinator: Coordinator, result: CycleResult, began: float) -> None:
        """The between-cycles hook, in the wait for the next cycle; what it takes beyond that wait
        delays the next cycle, and is reported as such."""
        assert self._between_cycles is not None
        started = time.monotonic()
        reports = self._between_cycles(coordinator.spark, coordinator.catalog, result)
        if not reports:
            return
        took_ms = int((time.monotonic() - started) * 1000)
        delay_ms = max(0, int((time.monotonic() - began) * 1000) - int(self.interval_s() * 1000))
        coordinator.record_maintenance(reports, delay_ms)
        with self._lock:
            for key, value in {"maintenance-runs": 1, "maintenance-ms": took_ms, "maintenance-delay-ms": delay_ms
                               }.items():
                self._status.counters[key] = self._status.counters.get(key, 0) + value

    def run_until_idle(self, idle_seconds: float) -> int:
        """Cycles at the sink's pace until ``idle_seconds`` pass with nothing new; returns cycles run.
        Failed cycles are retried as in ``start``; time spent failing does not count as idle, nor does a
        cycle's own time (a driver starting on a busy laptop is not a quiet topic) or the wait after one
        that found records: the idle clock starts when the first cycle that found nothing planned (it
        ends right after)."""
        idle_since: float | None = None
        cycles = 0
        while not self._stop.is_set():
            began = time.monotonic()
            ok, result = self._attempt()
            if not ok:
                self._stop.wait(self.retry_delay_s())
                idle_since = None
                continue
            if result is not None:
                cycles += 1
                idle_since = None
            else:
                idle_since = time.monotonic() if idle_since is None else idle_since
                if time.monotonic() - idle_since >= idle_seconds:
                    break
            self._wait_for_next(began)
        return cycles

    def interval_s(self) -> float:
        """Seconds from one cycle's start to the next: the lag target's choice, or the commit interval."""
        return self._target.interval_s if self._target is not None else self.config.commit_interval_ms / 1000

    def _wait_for_next(self, began: float) -> None:
        """Until the next cycle is due: one interval after ``began`` (at once when the cycle outlasted
        it), or sooner once sinklab.commit.max-records/-bytes are waiting in Kafka."""
        c = self.config
        # Bytes are counted in records at the size the sink has read so far: unknown before its first records.
        max_bytes = c.commit_max_bytes if self._bytes_per_record else None
        polling = c.commit_max_records is not None or max_bytes is not None
        while not self._stop.is_set():
            left = began + self.interval_s() - time.monotonic()
            if left <= 0:
                return
            if polling and self._coordinator is not None:
                try:
                    waiting = self._coordinator.waiting()
                except KafkaException as exc:
                    # Nothing is lost by waiting for the clock: the next cycle meets the broker itself, and
                    # fails, named, if it is still away.
                    log.warning("sink %s: cannot see what waits in Kafka (%s); the next cycle starts on the clock",
                                c.name, exc)
                    polling = False
                    continue
                if due(waiting, int(waiting * (self._bytes_per_record or 0)), c.commit_max_records, max_bytes):
                    return
            self._stop.wait(min(left, TRIGGER_POLL_S if polling else RETUNE_POLL_S))

    def _paced(self, result: CycleResult | None, began: float) -> None:
        """What the pace learns from a cycle: the records' size, and for the lag target the cycle's cost
        and the arrival rate."""
        since = began - self._last_began if self._last_began is not None else None
        self._last_began = began
        records = result.records if result is not None else 0
        if result is not None and records:
            size = result.counters.get("bytes", 0) / records
            self._bytes_per_record = size if self._bytes_per_record is None else (self._bytes_per_record + size) / 2
        if self._target is not None:
            self._target.record(Cost(records, result.duration_ms / 1000 if result is not None else 0.0, since,
                                     warm_up=self._status.cycles <= 1))

    def start(self) -> IcebergSink:
        """Run cycles in a background thread (in a notebook, the kernel stays free)."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._failing_since, self._attempts = None, 0
        self._set_state("RUNNING")

        def loop() -> None:
            while not self._stop.is_set():
                if self._paused.is_set():
                    self._stop.wait(RETUNE_POLL_S)
                    continue
                began = time.monotonic()
                try:
                    ok, _ = self._attempt()
                except BaseException:  # noqa: BLE001 - recorded in status() as FAILED with its trace
                    return
                if ok:
                    self._wait_for_next(began)
                else:
                    self._stop.wait(self.retry_delay_s())
            self._set_state("STOPPED")

        self._thread = threading.Thread(target=loop, name=f"sinklab-{self.config.name}", daemon=True)
        self._thread.start()
        return self

    # ---- turned by hand (a notebook's control panel): from the next cycle, and marked for the dashboard
    def retune(self, **settings: int | None) -> None:
        """Change a running sink's pace from its next cycle, as its config's keys would:
        ``commit_interval_ms``, ``commit_target_lag_ms`` and ``commit_max_records`` (None turns the last
        two off). A wait under way for the next cycle sees the new interval within ``RETUNE_POLL_S``;
        the moment is marked in ``status().marks``."""
        unknown = sorted(set(settings) - set(RETUNABLE))
        if unknown:
            raise ConfigError(None, f"sink {self.config.name}: retune takes {', '.join(RETUNABLE)}, not "
                                    f"{', '.join(unknown)}")
        for name, value in settings.items():
            if value is None and name == "commit_interval_ms" or value is not None and (
                    not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(RETUNABLE[name], f"sink {self.config.name}: {RETUNABLE[name]} must be a whole "
                                                   f"number of at least 1, not {value!r}")
        self.config = self.config.model_copy(update=settings)
        c = self.config
        if "commit_target_lag_ms" in settings or ("commit_interval_ms" in settings and self._target is not None):
            self._target = (LagTarget(c.commit_target_lag_ms, c.commit_interval_ms)
                            if c.commit_target_lag_ms is not None else None)
        self._mark("tuned", ", ".join(f"{RETUNABLE[k]}={v}" for k, v in settings.items()))

    def pause(self) -> None:
        """Start no cycle until ``resume`` (the running one finishes), as Kafka Connect pauses a connector."""
        self._paused.set()
        self._mark("paused", "")

    def resume(self) -> None:
        self._paused.clear()
        self._mark("resumed", "")

    def _mark(self, kind: str, detail: str) -> None:
        with self._lock:
            self._status.marks.append({"at": time.time(), "kind": kind, "detail": detail})
            del self._status.marks[:-MAX_FAULTS]
            if self._status.state in ("RUNNING", "PAUSED") and self._thread is not None:
                self._status.state = "PAUSED" if self._paused.is_set() else "RUNNING"

    def halt(self) -> None:
        """Start no cycle after this returns; the running one finishes (``stop`` waits for it)."""
        self._stop.set()

    def stop(self, timeout: float = 120) -> None:
        self.halt()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None
        self._spark = None
        with self._lock:
            if self._status.state != "FAILED":
                self._status.state = "STOPPED"

    def status(self) -> SinkStatus:
        with self._lock:
            status = SinkStatus(**{**self._status.__dict__, "faults": list(self._status.faults),
                                   "marks": list(self._status.marks)})
        if self._coordinator is not None:
            status.lag = self._coordinator.lag()
        if self._target is not None:
            status.pace = asdict(self._target.pace())
        return status

    # ---- bookkeeping
    def _set_state(self, state: str) -> None:
        with self._lock:
            self._status.state = state
            self._status.trace = None if state == "RUNNING" else self._status.trace

    def _fail(self, exc: BaseException) -> None:
        detail = _one_line(exc)
        with self._lock:
            # One step: a reader never sees FAILED without its fault.
            self._status.state = "FAILED"
            self._status.trace = "".join(traceback.format_exception(exc))
            self._status.retrying = None
            self._append_fault("failed", detail)

    def _record(self, result: CycleResult | None) -> None:
        with self._lock:
            # A cycle that succeeds after a failure (a restart) clears it; without the background
            # thread the sink is not running between calls.
            self._status.state = ("STOPPED" if self._thread is None else "PAUSED" if self._paused.is_set()
                                  else "RUNNING")
            self._status.trace = None
            if result is None:
                return
            self._status.cycles += 1
            self._status.records += result.records
            for key, value in result.counters.items():
                self._status.counters[key] = self._status.counters.get(key, 0) + value
            self._status.last_commit = {
                "commit_id": result.commit_id, "records": result.records,
                "tables": {name: s.snapshot_id for name, s in result.tables.items()},
                "vtts_ms": result.vtts_ms, "duration_ms": result.duration_ms, "at": time.time(),
            }


def _one_line(exc: BaseException) -> str:
    """The exception in a line; for one from the JVM (py4j's "An error occurred while calling o79.sql."),
    the Java exception's own line, which says what failed."""
    text = text_of(exc)
    lines = [line.strip().lstrip(": ") for line in text.splitlines() if line.strip()]
    java = next((line for line in lines[1:] if re.match(r"[\w.$]+(Exception|Error)\b", line)), None)
    return f"{type(exc).__name__}: {java or (lines[0] if lines else '')}"[:300]

