"""What starts a cycle besides the clock, on the real stack: records or bytes waiting in Kafka, and a
latency target the sink holds by choosing its interval."""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import order_ids, produce, sink_config, steady
from pyspark.errors import AnalysisException

from sinklab import viz
from sinklab.sink import IcebergSink, read_control_log
from sinklab.sink.wire.control import PayloadType
from sinklab.stack import Stack

COMMIT_START, COMMIT_COMPLETE = PayloadType.COMMIT_START, PayloadType.COMMIT_COMPLETE

# Serial: the interval a lag target chooses follows the cycles' cost, which another test's work on
# the same 2 cores moves (a run beside a second worker did not settle within 10 %).
pytestmark = [pytest.mark.spark, pytest.mark.serial]

TEN_MINUTES_MS = "600000"


def rows_in(stack: Stack, table: str) -> int:
    try:
        return len(order_ids(stack, table))
    except AnalysisException:  # not created yet
        return 0


def wait_for_rows(stack: Stack, table: str, count: int, sink: IcebergSink, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while rows_in(stack, table) < count:
        assert sink.status().state != "FAILED", sink.status().trace
        assert time.monotonic() < deadline, f"{count} rows never reached {table}: {sink.status()}"
        time.sleep(0.3)


def one_cycle_at_a_time(stack: Stack, sink: str) -> int:
    """Cycles in the control log, checked never to overlap: each commit-start is followed by its own
    commit-complete before the next cycle starts."""
    log = read_control_log(stack.bootstrap_servers, sink=sink)
    steps = [(row.type, row.commit_id) for row in log.itertuples() if row.type in (COMMIT_START, COMMIT_COMPLETE)]
    for (kind, commit), (next_kind, next_commit) in zip(steps[::2], steps[1::2], strict=True):
        assert (kind, next_kind) == (COMMIT_START, COMMIT_COMPLETE) and commit == next_commit, steps
    return len(steps) // 2




@pytest.mark.parametrize(("key", "limit"), [("sinklab.commit.max-records", 50), ("sinklab.commit.max-bytes", 10_000)])
def test_records_or_bytes_waiting_start_a_cycle_before_the_interval(
        stack: Stack, unique: str, key: str, limit: int) -> None:
    stack.create_topic(unique, partitions=2)
    table = f"{unique}.pizzas"
    config = sink_config(unique, **{"iceberg.control.commit.interval-ms": TEN_MINUTES_MS, key: str(limit)})
    sink = IcebergSink(stack, config)
    produced = produce(stack, unique, 10, seed=1)
    try:
        sink.start()  # the first cycle runs at once; the next one would wait ten minutes for the clock
        wait_for_rows(stack, table, 10, sink)
        produced += produce(stack, unique, 10, seed=2)  # 10 records, ~2.5 kB: below either limit
        time.sleep(2)  # twenty looks at what is waiting
        assert sink.status().cycles == 1
        produced += produce(stack, unique, 60, seed=3)  # 70 waiting, ~17 kB: above either
        wait_for_rows(stack, table, 80, sink)
        assert sink.status().cycles == 2
    finally:
        sink.stop()
    assert sorted(order_ids(stack, table)) == sorted(produced)
    assert one_cycle_at_a_time(stack, config["name"]) == 2


def test_a_lag_target_chooses_the_interval_and_settles(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    table = f"{unique}.pizzas"
    config = sink_config(unique, **{"iceberg.control.commit.interval-ms": "60000",
                                    "sinklab.commit.target-lag-ms": "2500"})
    sink = IcebergSink(stack, config)
    chosen: list[int] = []
    paces: list[dict[str, Any]] = []
    pace = None
    try:
        with steady(stack, unique, 200) as produced:
            sink.start()
            deadline = time.monotonic() + 120
            # 20 cycles: where cycles cost half the target (1.2 s measured on a busy 2-core machine), the fit's
            # spread fades over its window and the interval takes 12-15 cycles to settle.
            while len(chosen) < 20:
                assert time.monotonic() < deadline and sink.status().state == "RUNNING", (chosen, sink.status())
                status = sink.status()
                if status.cycles > len(chosen) and status.pace is not None:
                    chosen.append(status.pace["interval_ms"])
                    pace = status.pace
                    paces.append(pace)
                time.sleep(0.05)
        sink.run_until_idle(0)
    finally:
        sink.stop()
    assert pace is not None and pace["floor_ms"] is None and "chosen for a 2.50 s target" in pace["note"]
    assert pace["cycle_ms"] > 0 and 100 < pace["rate"] < 400, pace  # it measured the cycles and the rate
    # Far under the 60 s clock, and holding the target: each late interval plus the cycle it plans for
    # fits in 2.5 s. The cycles' cost follows the machine's load (it fell 25 % within 4 cycles on a busy
    # CI runner), and the interval follows it, so this checks the plan, not a fixed value; settling on
    # a known cost stream is tests/test_pace.py's.
    assert 500 < chosen[-1] < 2500, (chosen, pace)
    assert all(p["interval_ms"] + p["cycle_ms"] <= p["target_ms"] for p in paces[-5:]), paces[-5:]
    # Settled, not swinging: no late move of over 10 % is undone by the next one.
    moves = [b - a for a, b in zip(chosen[-8:], chosen[-7:], strict=False)]
    swings = [(m, n) for m, n in zip(moves, moves[1:], strict=False)
              if m * n < 0 and min(abs(m), abs(n)) > 0.1 * chosen[-1]]
    assert not swings, (swings, chosen)
    assert sorted(order_ids(stack, table)) == sorted(produced)
    one_cycle_at_a_time(stack, config["name"])


def test_a_lag_target_below_what_cycles_achieve_is_reported(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    config = sink_config(unique, **{"sinklab.commit.target-lag-ms": "100"})
    sink = IcebergSink(stack, config)
    try:
        with steady(stack, unique, 100):
            sink.start()
            deadline = time.monotonic() + 90
            while sink.status().cycles < 5:
                assert time.monotonic() < deadline and sink.status().state == "RUNNING", sink.status()
                time.sleep(0.2)
        pace = sink.status().pace
    finally:
        sink.stop()
    assert pace is not None and pace["floor_ms"] is not None and pace["floor_ms"] > 100
    assert "back-to-back cycles give" in pace["note"]
    assert "below what this sink achieves" in pace["note"]
    dash = viz.Dashboard(sink)
    dash.refresh()
    assert "target lag 0.1 s" in dash.header and "below what this sink achieves" in dash.header


def test_turning_the_knobs_of_a_running_sink(stack: Stack, unique: str) -> None:
    # The control panel's controls, from code: the interval from the next cycle (a ten-minute wait under
    # way is cut short), the record trigger, pause and resume; each marked for the dashboard.
    from sinklab.exceptions import ConfigError
    from sinklab.generators import PizzaGenerator

    stack.create_topic(unique, partitions=2)
    table = f"{unique}.pizzas"
    sink = IcebergSink(stack, sink_config(unique, **{"iceberg.control.commit.interval-ms": TEN_MINUTES_MS}))
    run = PizzaGenerator(seed=4).produce(stack, unique, count=None, rate=100, partitions=2)
    try:
        sink.start()  # the first cycle at once, the next in ten minutes
        wait_for_rows(stack, table, 1, sink)
        panel = viz.ControlPanel(sink, production=run)
        seen: list[dict[str, Any]] = []
        panel.changed.append(seen.append)
        panel.interval.value = 1.0  # as the slider does
        assert sink.config.commit_interval_ms == 1000 and seen[-1]["value"] == 1000
        deadline = time.monotonic() + 30
        while sink.status().cycles < 4:
            assert time.monotonic() < deadline, sink.status()
            time.sleep(0.2)
        panel.paused.value = True
        time.sleep(1.5)  # the running cycle finishes
        held = sink.status().cycles
        time.sleep(2.5)
        assert sink.status().cycles == held and sink.status().state == "PAUSED"
        panel.paused.value = False
        deadline = time.monotonic() + 30
        while sink.status().cycles <= held:
            assert time.monotonic() < deadline, sink.status()
            time.sleep(0.2)
        assert sink.status().state == "RUNNING"
        panel.rate.value = 400.0
        assert run.rate == 400.0
        with pytest.raises(ConfigError) as bad:
            sink.retune(commit_interval_ms=0)
        assert bad.value.key == "iceberg.control.commit.interval-ms"
        with pytest.raises(ConfigError, match="retune takes"):
            sink.retune(tasks_max=3)  # type: ignore[arg-type]
    finally:
        run.stop()
        sink.stop()
    marks = sink.status().marks
    assert [m["kind"] for m in marks] == ["tuned", "paused", "resumed"]
    assert marks[0]["detail"] == "iceberg.control.commit.interval-ms=1000"
    assert [e["what"] for e in panel.log] == ["interval", "sink", "sink", "rate"]
    assert sorted(order_ids(stack, table)) == sorted(set(order_ids(stack, table)))  # every record once
