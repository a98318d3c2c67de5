"""When the next cycle starts: a clock, what is waiting in Kafka, or a latency target.

``iceberg.control.commit.interval-ms`` is the clock (Connect's key): a cycle starts that long after
the previous one started, or at once when the previous one took longer. ``sinklab.commit.max-records``
and ``sinklab.commit.max-bytes`` start one early once that much is waiting in the source partitions.
``sinklab.commit.target-lag-ms`` lets ``LagTarget`` choose the interval instead, under the clock as
an upper bound. One cycle runs at a time whatever starts it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

# How much of the latest choice the interval takes each cycle: estimates from one noisy cycle move it
# half the way, so it settles instead of chasing them.
DAMPING = 0.5
WINDOW = 12  # cycles the cost model is fitted to
FORGET = 0.8  # weight of a cycle relative to the next one in the fit: older costs fade
MIN_CYCLES = 3  # before this many, the target is not judged reachable or not
HEADROOM = 0.95  # of the target planned for: the interval trails its choice by a cycle or two


@dataclass
class Cost:
    """What one cycle measured: records it carried, seconds it took, and seconds since the previous
    cycle started (what those records had arrived over). A ``warm_up`` cycle (a sink's first: a fresh
    JVM, perhaps creating its table, took 5-40 s measured) says nothing of the cycles after it."""

    records: int
    seconds: float
    since_previous_s: float | None
    warm_up: bool = False


@dataclass
class Pace:
    """The controller's state, for status and the dashboard."""

    target_ms: int
    interval_ms: int  # the interval it chose
    cycle_ms: int  # a cycle's expected duration at that interval
    rate: float  # records/s arriving, measured
    floor_ms: int | None  # latency that back-to-back cycles achieve, when the target is below it
    note: str


def due(waiting_records: int, waiting_bytes: int, max_records: int | None, max_bytes: int | None) -> bool:
    """Whether what waits in Kafka starts a cycle before the clock does."""
    return (max_records is not None and waiting_records >= max_records) or (
        max_bytes is not None and waiting_bytes >= max_bytes)


class LagTarget:
    """Chooses each interval so that visibility latency (Kafka timestamp to snapshot published) stays
    at or under ``target_ms`` with as few commits as possible, from the cycles' own costs.

    A record that arrives just after a cycle started waits one interval ``I`` for the next cycle,
    then that cycle's duration ``d``: its latency is at most ``I + d``. A cycle's duration grows with
    what it carries, ``d = a + b·n``, and at an arrival rate ``r`` a cycle every ``I`` carries
    ``n = r·I``. The longest interval within the target ``T`` is therefore

        I = (h·T − a − m) / (1 + b·r)

    with ``m`` twice the spread of recent durations around the fit, so that the slower cycles fit
    too, and ``h`` = 0.95 for the cycle or two the interval trails its choice by. ``a`` and ``b``
    are fitted by least squares to the last cycles (older ones weigh less); ``r`` is measured from
    the records each cycle found and the time since the previous one started. The interval moves
    half way to each new choice, so one noisy cycle cannot swing it. When ``I`` would be negative,
    not even back-to-back cycles make the target: each then carries what arrived during the
    previous one, ``d = a / (1 − b·r)``, and latency reaches ``2d``, the floor reported.
    """

    def __init__(self, target_ms: int, max_interval_ms: int):
        self.target_s = target_ms / 1000
        self.max_interval_s = max_interval_ms / 1000
        self.costs: deque[Cost] = deque(maxlen=WINDOW)
        self.rate = 0.0
        # Before any cycle: half for waiting, half for the cycle.
        self.interval_s = min(self.target_s / 2, self.max_interval_s)

    def record(self, cost: Cost) -> None:
        """A cycle ran (one that found nothing new costs nothing, and only tells the rate)."""
        if cost.since_previous_s:
            measured = cost.records / cost.since_previous_s
            self.rate = measured if not self.costs else self.rate + DAMPING * (measured - self.rate)
        if cost.records and not cost.warm_up:
            self.costs.append(cost)
        if self.costs:
            self.interval_s += DAMPING * (self._choose() - self.interval_s)

    def model(self) -> tuple[float, float, float]:
        """The fitted fixed cost ``a`` (s), cost per record ``b`` (s), and how far cycles fall from the fit (s)."""
        return fit([(c.records, c.seconds) for c in self.costs])

    def _choose(self) -> float:
        a, b, spread = self.model()
        room = HEADROOM * self.target_s - a - 2 * spread
        if room <= 0:
            return 0.0
        return min(self.max_interval_s, room / (1 + b * self.rate))

    def floor_s(self) -> float | None:
        """Latency of back-to-back cycles when that is above the target (None: the target is reachable)."""
        if len(self.costs) < MIN_CYCLES:
            return None
        a, b, spread = self.model()
        if HEADROOM * self.target_s - a - 2 * spread > 0:
            return None
        keeping_up = 1 - b * self.rate
        return math.inf if keeping_up <= 0 else 2 * (a + spread) / keeping_up

    def pace(self) -> Pace:
        a, b, _ = self.model()
        floor = self.floor_s()
        cycle = a + b * self.rate * self.interval_s
        if floor is None:
            note = (f"interval {self.interval_s:.2f} s chosen for a {self.target_s:.2f} s target "
                    f"(cycles of {cycle:.2f} s at {self.rate:.0f} records/s)")
        elif math.isinf(floor):
            note = (f"target {self.target_s:.2f} s cannot be held: at {self.rate:.0f} records/s cycles fall behind "
                    f"even back to back")
        else:
            note = (f"target {self.target_s:.2f} s is below what this sink achieves here: back-to-back cycles give "
                    f"{floor:.2f} s (measured: {a:.2f} s a cycle + {b * 1e6:.1f} µs a record at "
                    f"{self.rate:.0f} records/s)")
        return Pace(int(self.target_s * 1000), int(self.interval_s * 1000), int(cycle * 1000), self.rate,
                    None if floor is None or math.isinf(floor) else int(floor * 1000), note)


def fit(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """Weighted least squares of duration on records, newest weighing most: intercept, slope and the
    weighted spread of the residuals. Without a spread of sizes the slope is unknown and taken as 0
    (the mean duration is the cost); a negative slope (noise) is 0 too."""
    if not points:
        return 0.0, 0.0, 0.0
    weights = [FORGET ** (len(points) - 1 - i) for i in range(len(points))]
    total = sum(weights)
    mean_n = sum(w * n for w, (n, _) in zip(weights, points, strict=True)) / total
    mean_d = sum(w * d for w, (_, d) in zip(weights, points, strict=True)) / total
    var_n = sum(w * (n - mean_n) ** 2 for w, (n, _) in zip(weights, points, strict=True)) / total
    slope = 0.0
    if var_n > (0.05 * mean_n) ** 2 and var_n > 0:
        cov = sum(w * (n - mean_n) * (d - mean_d) for w, (n, d) in zip(weights, points, strict=True)) / total
        slope = max(0.0, cov / var_n)
    intercept = max(0.0, mean_d - slope * mean_n)
    residual = sum(w * (d - intercept - slope * n) ** 2 for w, (n, d) in zip(weights, points, strict=True)) / total
    return intercept, slope, math.sqrt(residual)
