"""A running sink tries a cycle again when a service it needs is away for now, and only then."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from confluent_kafka import KafkaError, KafkaException
from helpers import sink_config
from py4j.protocol import Py4JJavaError
from pyiceberg.exceptions import CommitStateUnknownException, NoSuchTableError, ServiceUnavailableError
from pyspark.errors import PythonException

from sinklab.exceptions import CycleTooLarge, KafkaUnavailable, SinkFenced, StuckCall
from sinklab.retry import out_of_memory, transient
from sinklab.sink import IcebergSink, RecordError
from sinklab.sink import sink as sink_module
from sinklab.sink.cycle import channel
from sinklab.sink.cycle.coordinator import CycleResult
from sinklab.stack.spark import SparkSettings


class JavaError(Py4JJavaError):
    """What py4j raises for a Java exception, with its text given (no JVM in these tests)."""

    def __init__(self, text: str):
        Exception.__init__(self, text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class PythonError(PythonException):
    """What PySpark raises for a task's Python failure; its text kept as made (``str`` asks the JVM)."""

    def __init__(self, text: str):
        Exception.__init__(self, text)
        self._desc = text

    def __str__(self) -> str:
        raise RuntimeError("no JVM to ask")


@pytest.mark.parametrize("exc", [
    KafkaUnavailable("broker away"),
    requests.ConnectionError("refused"),
    ServiceUnavailableError("503"),
    CommitStateUnknownException("lost"),
    KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down")),
    JavaError("org.apache.spark.SparkException: Job aborted ... Caused by: java.net.ConnectException: refused"),
    JavaError("Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired"),
    JavaError("software.amazon.awssdk.services.s3.model.S3Exception: slow down (Service: S3, Status Code: 503)"),
    JavaError("org.apache.iceberg.exceptions.ServiceFailureException: Server error: 500"),
    OSError("AWS Error NETWORK_CONNECTION during PutObject"),
    PythonError("  File \"fan_out.py\", line 128, in _write_task\nOSError: When initiating multiple part upload "
                "for key 'warehouse/a/data/00000-0-x.parquet': AWS Error SERVICE_UNAVAILABLE (HTTP status 503)"),
], ids=lambda e: type(e).__name__)
def test_services_away_for_now_are_transient(exc: BaseException) -> None:
    assert transient(exc)


@pytest.mark.parametrize("exc", [
    RecordError("t", 0, 5, "db.t", "malformed-json: x"),
    SinkFenced("newer instance"),
    NoSuchTableError("db.t"),
    CycleTooLarge("too many"),
    KafkaException(KafkaError(KafkaError._FATAL, "fatal", fatal=True)),
    JavaError("org.apache.spark.sql.AnalysisException: cannot resolve column"),
    JavaError("java.lang.OutOfMemoryError: Java heap space ... Caused by: java.io.IOException"),
    JavaError("software.amazon.awssdk.services.s3.model.S3Exception: denied (Service: S3, Status Code: 403)"),
    FileNotFoundError("manifest gone"),
    TypeError("a bug"),
    PythonError("  File \"fan_out.py\", line 128, in _write_task\nValueError: Could not find field with name: a"),
], ids=lambda e: type(e).__name__)
def test_what_would_fail_again_is_not(exc: BaseException) -> None:
    assert not transient(exc)


def test_the_cause_decides() -> None:
    try:
        try:
            raise requests.ConnectionError("refused")
        except requests.ConnectionError as inner:
            raise RuntimeError("publishing failed") from inner
    except RuntimeError as outer:
        assert transient(outer)
    assert out_of_memory(JavaError("java.lang.OutOfMemoryError: Java heap space"))


class Flaky:
    """A coordinator whose cycles fail with the given errors first, then commit one record each."""

    made = 0

    def __init__(self, failures: list[BaseException]):
        self.failures = failures
        self.closed = False
        self.last_plan = None
        Flaky.made += 1

    def run_cycle(self) -> Any:
        if self.failures:
            raise self.failures.pop(0)
        return None

    def close(self) -> None:
        self.closed = True

    def lag(self) -> dict[str, int]:
        return {}


def flaky_sink(failures: list[BaseException], **extra: str) -> tuple[IcebergSink, list[Flaky]]:
    # No stack: the coordinator is this test's; the settings are what an error message names.
    stack = SimpleNamespace(spark_settings=SparkSettings())
    sink = IcebergSink(stack, sink_config("t", **{"iceberg.control.commit.interval-ms": "100", **extra}))  # type: ignore[arg-type]
    made: list[Flaky] = []

    def connect() -> Flaky:
        if sink._coordinator is None:
            made.append(Flaky(failures))
            sink._coordinator = made[-1]  # type: ignore[assignment]
        return sink._coordinator  # type: ignore[return-value]

    sink._connect = connect  # type: ignore[method-assign]
    return sink, made


def run_until_recovered(sink: IcebergSink) -> Any:
    """Run it in the background until it reports it recovered (10 s at most); its status then."""
    sink.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(f["kind"] == "recovered" for f in sink.status().faults):
        time.sleep(0.02)
    status = sink.status()
    sink.stop()
    return status


def test_transient_failures_are_retried_with_a_fresh_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "RETRY_DELAY_MAX_S", 0.05)
    sink, made = flaky_sink([KafkaUnavailable("broker away"), requests.ConnectionError("catalog refused")])
    status = run_until_recovered(sink)
    assert [f["kind"] for f in status.faults] == ["retry", "retry", "recovered"]
    assert "KafkaUnavailable: broker away" in status.faults[0]["detail"]
    assert status.state == "RUNNING" and status.retrying is None and status.counters["retries"] == 2
    assert len(made) == 3 and made[0].closed and made[1].closed  # each failed cycle's coordinator was dropped


def test_a_maintenance_record_that_fails_drops_its_coordinator_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle committed, then recording its maintenance run met a broker away: the next cycle gets
    a new coordinator rather than the producer whose transaction was left behind."""
    monkeypatch.setattr(sink_module, "RETRY_DELAY_MAX_S", 0.05)
    sink, made = flaky_sink([])
    sink._between_cycles = lambda spark, catalog, result: ["a chore"]  # type: ignore[assignment,return-value]
    recorded: list[Flaky] = []

    def run_cycle(self: Flaky) -> CycleResult:
        return CycleResult(f"c{len(made)}", 1)

    def record_maintenance(self: Flaky, reports: Any, delay_ms: int) -> None:
        recorded.append(self)
        if len(recorded) == 1:
            raise KafkaUnavailable("the transaction coordinator's broker died")

    monkeypatch.setattr(Flaky, "run_cycle", run_cycle, raising=False)
    monkeypatch.setattr(Flaky, "spark", None, raising=False)
    monkeypatch.setattr(Flaky, "catalog", None, raising=False)
    monkeypatch.setattr(Flaky, "record_maintenance", record_maintenance, raising=False)
    status = run_until_recovered(sink)
    assert [f["kind"] for f in status.faults][:2] == ["retry", "recovered"]
    assert made[0].closed and recorded[1] is made[1]


def test_retrying_shows_in_status_while_it_lasts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "RETRY_DELAY_MAX_S", 5)
    sink, _ = flaky_sink([ServiceUnavailableError("503 from the catalog")] * 3)
    sink.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sink.status().retrying is None:
        time.sleep(0.02)
    status = sink.status()
    sink.stop()
    assert status.state == "RUNNING"
    assert status.retrying is not None and status.retrying["attempt"] == 1
    assert "503 from the catalog" in status.retrying["error"] and "retrying" in repr(status)


def test_a_permanent_failure_is_failed_at_once() -> None:
    sink, made = flaky_sink([RecordError("t", 0, 7, "t.pizzas", "malformed-json: nope")])
    sink.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sink.status().state != "FAILED":
        time.sleep(0.02)
    status = sink.status()
    sink.stop()
    assert status.state == "FAILED" and "t[0]@7" in (status.trace or "")
    assert [f["kind"] for f in status.faults] == ["failed"] and len(made) == 1


def test_past_the_retry_timeout_the_sink_is_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "RETRY_DELAY_MAX_S", 0.1)
    sink, _ = flaky_sink([KafkaUnavailable("broker away")] * 100, **{"sinklab.retry.timeout-ms": "300"})
    with pytest.raises(KafkaUnavailable):
        sink.run_until_idle(60)
    status = sink.status()
    assert status.state == "FAILED" and status.counters["retries"] >= 2
    assert status.faults[-1]["kind"] == "failed"


def test_run_once_is_never_retried() -> None:
    sink, _ = flaky_sink([KafkaUnavailable("broker away")])
    with pytest.raises(KafkaUnavailable):
        sink.run_once()
    assert sink.status().state == "FAILED"


def test_an_out_of_memory_cycle_names_the_setting_that_fits_it() -> None:
    sink, _ = flaky_sink([JavaError("org.apache.spark.SparkException: Job aborted: java.lang.OutOfMemoryError: "
                                    "Java heap space")], **{"sinklab.cycle.max-records": "50000"})
    with pytest.raises(CycleTooLarge, match=r"sinklab.cycle.max-records \(now 50,000\) lower") as failed:
        sink.run_until_idle(5)
    assert isinstance(failed.value.__cause__, Py4JJavaError)
    assert sink.status().state == "FAILED"


class JvmGone(Py4JJavaError):
    """What py4j raises for a Java exception of a JVM that has since exited: asking its text fails."""

    def __init__(self) -> None:
        Exception.__init__(self)

    def __str__(self) -> str:
        raise ConnectionRefusedError(111, "Connection refused")


def test_a_driver_that_exited_out_of_memory_names_the_setting_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "driver_exit_status", lambda: 52)  # Spark's exit for OutOfMemoryError
    sink, _ = flaky_sink([JvmGone()])
    with pytest.raises(CycleTooLarge, match="sinklab.cycle.max-records"):
        sink.run_until_idle(5)
    monkeypatch.setattr(sink_module, "driver_exit_status", lambda: 137)  # killed: not a question of memory
    sink, _ = flaky_sink([JvmGone()])
    with pytest.raises(JvmGone):
        sink.run_until_idle(5)
    assert sink.status().faults[-1]["detail"] == "JvmGone: (its text died with Spark's driver JVM)"


def test_the_cli_names_an_error_whose_text_died_with_the_jvm(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from sinklab import cli

    def gone(args: object) -> int:
        raise JvmGone()

    monkeypatch.setattr(cli, "cmd_sink_status", gone)
    assert cli.main(["sink", "status", "--stack", "/nonexistent/stack.json"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == \
        "sinklab: error: JvmGone: (its text died with Spark's driver JVM)"


def test_a_transactional_call_stuck_past_its_timeout_fails_as_kafka_away(monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka's commit_transaction and send_offsets_to_transaction can wait for a dead coordinator
    past their timeout: the sink stops waiting and tries the cycle again with a new producer."""
    monkeypatch.setattr(channel, "TXN_GRACE_S", 0.2)
    forever = threading.Event()
    began = time.monotonic()
    with pytest.raises(StuckCall, match="commit_transaction did not return within 0s") as stuck:
        channel.bounded("commit_transaction", 0.1, forever.wait)
    assert time.monotonic() - began < 5 and transient(stuck.value)
    forever.set()
    assert channel.bounded("flush", 0.1, lambda: 7) == 7
    with pytest.raises(KafkaException):  # its own errors come through as they are
        channel.bounded("abort_transaction", 0.1, lambda: (_ for _ in ()).throw(
            KafkaException(KafkaError(KafkaError._TIMED_OUT))))


def test_a_slow_first_cycle_is_not_idleness() -> None:
    """``--until-idle N`` on a quiet topic: a first cycle that outlasts N (a driver starting) is not N
    seconds of nothing new; the sink looks again before it stops."""
    sink, made = flaky_sink([])
    checks: list[float] = []

    def slow_first() -> None:
        checks.append(time.monotonic())
        if len(checks) == 1:
            time.sleep(0.5)
        return None

    coordinator = Flaky([])
    coordinator.run_cycle = slow_first  # type: ignore[method-assign]
    sink._connect = lambda: coordinator  # type: ignore[method-assign]
    assert sink.run_until_idle(0.3) == 0
    assert len(checks) >= 2  # it looked again after the slow one, and then found nothing for 0.3 s


def test_idleness_counts_from_the_cycle_that_found_nothing() -> None:
    """``--until-idle N`` after records: N seconds from the planning of the first cycle that found
    nothing, not from the last cycle that found some (the interval between them is not idleness)."""
    from sinklab.sink.cycle.coordinator import CycleResult

    sink, _ = flaky_sink([], **{"iceberg.control.commit.interval-ms": "200"})
    checks: list[tuple[float, bool]] = []

    def one_then_nothing() -> CycleResult | None:
        found = not checks
        checks.append((time.monotonic(), found))
        return CycleResult("c1", 1) if found else None

    coordinator = Flaky([])
    coordinator.run_cycle = one_then_nothing  # type: ignore[method-assign]
    sink._connect = lambda: coordinator  # type: ignore[method-assign]
    assert sink.run_until_idle(0.3) == 1
    first_empty = next(t for t, found in checks if not found)
    assert checks[-1][0] - first_empty >= 0.3  # it stopped only N seconds after it first found nothing
    assert len([c for c in checks if not c[1]]) >= 3  # at 0, 0.2 and 0.4 s: three looks, not two
