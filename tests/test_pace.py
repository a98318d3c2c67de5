"""The lag-target controller against a simulated sink (pure logic: the integration tests run the real one)."""

from __future__ import annotations

import logging
import random
import time

import pytest
from confluent_kafka import KafkaException

from sinklab.sink import IcebergSink
from sinklab.sink.cycle.pace import Cost, LagTarget, due, fit


def simulate(target: LagTarget, phases: list[tuple[float, float]], cost: tuple[float, float], noise: float,
             seed: int = 7) -> list[tuple[float, float, float, float]]:
    """Cycles of a sink whose cycle carrying n records takes ``a + b·n`` s (± ``noise``), fed at each
    phase's rate (records/s) for its seconds. Returns (start s, interval chosen s, p99 latency s, rate)."""
    rng = random.Random(seed)
    a, b = cost
    now, previous, out = 0.0, None, []
    ends = []
    t = 0.0
    for seconds, rate in phases:
        t += seconds
        ends.append((t, rate))
    while now < t:
        rate = next(r for end, r in ends if now < end)
        since = None if previous is None else now - previous
        records = int(rate * (since if since is not None else target.interval_s))
        took = max(0.01, a + b * records + rng.gauss(0, noise))
        # The longest wait: a record that arrived just after the previous cycle planned.
        out.append((now, target.interval_s, (since or 0.0) + took, rate))
        target.record(Cost(records, took, since))
        previous = now
        now += max(target.interval_s, took)  # a cycle longer than the interval is followed at once
    return out


def test_a_steady_rate_settles_within_ten_percent_and_holds_the_target() -> None:
    target = LagTarget(2000, 300_000)
    cycles = simulate(target, [(120, 2000)], cost=(0.35, 20e-6), noise=0.03)
    settled = [interval for start, interval, _, _ in cycles if start > 15]
    final = settled[-1]
    assert all(abs(i - final) <= 0.1 * final for i in settled), settled
    assert 0.8 < final < 1.6  # not a timid choice: few commits
    latencies = sorted(lat for start, _, lat, _ in cycles if start > 15)
    assert latencies[int(0.99 * (len(latencies) - 1))] <= 2.0
    assert target.floor_s() is None and "chosen" in target.pace().note


def test_a_rate_step_resettles_within_thirty_seconds() -> None:
    target = LagTarget(2000, 300_000)
    cycles = simulate(target, [(60, 1000), (60, 5000), (60, 1000)], cost=(0.35, 40e-6), noise=0.02)

    def settled_by(begin: float, end: float) -> float:
        """When the interval stays within 10 % of where it ends the phase."""
        phase = [(s, i) for s, i, _, _ in cycles if begin <= s < end]
        final = phase[-1][1]
        for k, (start, _) in enumerate(phase):
            if all(abs(i - final) <= 0.1 * final for _, i in phase[k:]):
                return start - begin
        raise AssertionError(phase)

    assert settled_by(60, 120) <= 30
    assert settled_by(120, 180) <= 30
    fast = [i for s, i, _, _ in cycles if 100 <= s < 120]
    slow = [i for s, i, _, _ in cycles if 40 <= s < 60]
    assert max(fast) < min(slow)  # more records per second cost more per cycle: shorter intervals


def test_a_target_below_the_floor_is_reported_with_the_measured_floor() -> None:
    target = LagTarget(300, 300_000)
    simulate(target, [(30, 1000)], cost=(0.35, 20e-6), noise=0.01)
    floor = target.floor_s()
    assert floor is not None and 0.6 < floor < 1.0
    pace = target.pace()
    assert pace.floor_ms == int(floor * 1000) and pace.interval_ms < 50
    assert "below what this sink achieves" in pace.note


def test_the_interval_never_exceeds_the_clock() -> None:
    target = LagTarget(60_000, 5_000)
    simulate(target, [(60, 100)], cost=(0.3, 10e-6), noise=0.01)
    assert target.interval_s <= 5.0


def test_fit_finds_cost_and_ignores_a_slope_it_cannot_see() -> None:
    a, b, spread = fit([(n, 0.3 + 1e-5 * n) for n in (1000, 5000, 2000, 8000)])
    assert abs(a - 0.3) < 1e-6 and abs(b - 1e-5) < 1e-9 and spread < 1e-6
    assert fit([(1000, 0.5), (1000, 0.7)])[1] == 0.0


def test_triggers() -> None:
    assert due(100, 0, 100, None) and not due(99, 10**9, 100, None)
    assert due(0, 2048, None, 2048) and not due(10**6, 10**6, None, None)


def test_a_broker_out_of_sight_leaves_the_clock_to_start_the_cycle(caplog: pytest.LogCaptureFixture) -> None:
    class Unreachable:
        looks = 0

        def waiting(self) -> int:
            self.looks += 1
            raise KafkaException("broker down (test)")

    sink = IcebergSink(None, {"name": "s", "topics": "t", "iceberg.tables": "db.t",  # type: ignore[arg-type]
                              "iceberg.control.commit.interval-ms": "300", "sinklab.commit.max-records": "1"})
    coordinator = sink._coordinator = Unreachable()  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="sinklab.sink"):
        sink._wait_for_next(time.monotonic())
    assert coordinator.looks == 1  # then it waited out the clock, without looking again
    assert [r.getMessage() for r in caplog.records] == [
        "sink s: cannot see what waits in Kafka (broker down (test)); the next cycle starts on the clock"]
