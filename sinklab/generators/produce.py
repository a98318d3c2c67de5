"""Delivery: an idempotent producer in a background thread, paced by a rate schedule.

The schedule is pure arithmetic (when may event n go?) and the pacer reads time through an
injectable clock, so rate limiting is tested without waiting.
"""

from __future__ import annotations

import atexit
import bisect
import contextlib
import functools
import html
import itertools
import math
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from sinklab.exceptions import DeliveryError, SpecError
from sinklab.generators.spec import RateSpec

if TYPE_CHECKING:
    from confluent_kafka import Message, Producer

    from sinklab.generators.record import Record
    from sinklab.stack import Stack

PRODUCER_DEFAULTS = {"enable.idempotence": True, "acks": "all", "linger.ms": 20, "compression.type": "lz4"}
# At most this many delivery error messages are kept; the count is always exact.
KEEP_ERRORS = 100
# How often a live notebook display is refreshed.
DISPLAY_EVERY_S = 0.5


class Clock(Protocol):
    """Where the pacer reads the time and how it waits; the default is the real monotonic clock."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# ---- rate

@dataclass(frozen=True)
class RateSchedule:
    """`per_second` events per second; in the last `burst_for` seconds of every `burst_every`, `burst_rate`.
    Or a rate curve (a traffic profile's): `steps[i]` events per second for `step_s` seconds each, looped."""

    per_second: float
    burst_every: float = 0.0
    burst_for: float = 0.0
    burst_rate: float = 0.0
    steps: tuple[float, ...] = ()
    step_s: float = 0.0

    def __post_init__(self) -> None:
        if self.steps and (self.step_s <= 0 or sum(self.steps) <= 0 or min(self.steps) < 0):
            raise ValueError("a rate curve needs step_s > 0 and rates >= 0, not all 0")

    @property
    def bursty(self) -> bool:
        return self.burst_every > 0

    @functools.cached_property
    def _sent_by_step(self) -> list[float]:
        """Events sent by the start of each step of the curve, and by its end."""
        return [0.0, *itertools.accumulate(r * self.step_s for r in self.steps)]

    def allowed(self, t: float) -> float:
        """How many events may have been sent `t` seconds after the start."""
        if t <= 0:
            return 0.0
        if self.steps:
            loops, rem = divmod(t, self.step_s * len(self.steps))
            k = min(int(rem // self.step_s), len(self.steps) - 1)
            sent = self._sent_by_step
            return loops * sent[-1] + sent[k] + self.steps[k] * (rem - k * self.step_s)
        if not self.bursty:
            return self.per_second * t
        period, quiet = self.burst_every, self.burst_every - self.burst_for
        full, rem = divmod(t, period)
        in_burst = full * self.burst_for + max(0.0, rem - quiet)
        return self.per_second * (t - in_burst) + self.burst_rate * in_burst

    def time_for(self, n: int) -> float:
        """The earliest time (seconds after the start) at which event `n` (0-based) may be sent."""
        if n <= 0:
            return 0.0
        if self.steps:
            sent = self._sent_by_step
            loops = math.floor(n / sent[-1])
            left = n - loops * sent[-1]
            start = loops * self.step_s * len(self.steps)
            if left <= 0:
                return start
            # The step the event falls in; one on a step's end goes at the next step that sends.
            k = bisect.bisect_right(sent, left) - 1
            return start + k * self.step_s + (left - sent[k]) / self.steps[k]
        if not self.bursty:
            return n / self.per_second
        period, quiet = self.burst_every, self.burst_every - self.burst_for
        quiet_events = self.per_second * quiet
        per_period = quiet_events + self.burst_rate * self.burst_for
        full = math.floor(n / per_period)
        left = n - full * per_period
        if left <= 0:
            # Exactly a period's worth: the end of the previous burst.
            return full * period
        if left <= quiet_events:
            return full * period + left / self.per_second
        return full * period + quiet + (left - quiet_events) / self.burst_rate


def rate_schedule(rate: float | RateSpec | RateSchedule | Mapping[str, Any] | None) -> RateSchedule | None:
    if rate is None or isinstance(rate, RateSchedule):
        return rate
    try:
        spec = rate if isinstance(rate, RateSpec) else RateSpec.model_validate(rate)
    except ValidationError as exc:
        raise SpecError("rate", "is invalid:\n" + "\n".join(
            f"  rate.{'.'.join(map(str, e['loc']))}: {e['msg']}".replace("rate.:", "rate:") for e in exc.errors())
        ) from None
    if spec.burst is None:
        return RateSchedule(spec.per_second)
    return RateSchedule(spec.per_second, spec.burst.every, spec.burst.duration, spec.burst.per_second)


class Pacer:
    """Blocks until the schedule lets event n go; `idle` runs while waiting (it serves delivery reports)."""

    def __init__(self, schedule: RateSchedule, clock: Clock, idle: Callable[[float], None] | None = None,
                 stopped: Callable[[], bool] = lambda: False, first: int = 0):
        """``first``: the event the schedule starts at (a rate changed mid-run starts from now)."""
        self.schedule, self.clock = schedule, clock
        self.idle = idle or clock.sleep
        self.stopped = stopped
        self.started = clock.now()
        self.first = first

    def wait(self, n: int) -> None:
        due = self.started + self.schedule.time_for(n - self.first)
        while not self.stopped():
            left = due - self.clock.now()
            if left <= 0:
                return
            self.idle(min(left, 0.1))


# ---- the handle

@dataclass(frozen=True)
class BadOffset:
    """Where a bad record landed, so a test can find it in the sink's dead-letter topic."""

    topic: str
    partition: int
    offset: int
    index: int
    kind: str


class Production:
    """A background production run: progress, delivered counts, bad records, errors.

    ``wait()`` blocks until every record is delivered (raising :class:`DeliveryError` if any was
    not); ``stop()`` stops generating and waits for what is in flight. In a notebook the handle
    displays a progress bar that updates itself.
    """

    def __init__(self, name: str, topic: str, requested: int | None):
        self.name, self.topic, self.requested = name, topic, requested
        self.sent = 0
        self.delivered = 0
        self.failed = 0
        self.errors: list[str] = []
        self.bad: Counter[str] = Counter()  # delivered bad records by kind
        self.bad_offsets: list[BadOffset] = []
        self.topics: Counter[str] = Counter()  # delivered records by topic
        self.error: BaseException | None = None  # what stopped the run, if anything did
        self.started_at = time.monotonic()
        self.finished_at: float | None = None
        self.state = "running"
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._retimed: RateSchedule | None = None  # a rate set mid-run, for the producing thread to take
        self.rate: float | None = None  # records a second asked for (None: as fast as it goes)
        self._thread: threading.Thread | None = None
        self._displays: list[Any] = []

    # ---- control
    @property
    def done(self) -> bool:
        return self.finished_at is not None

    def wait(self, timeout: float | None = None) -> Production:
        """Wait until done; raise if anything was not delivered or the run failed."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"{self.name} -> {self.topic}: still producing after {timeout}s "
                                   f"({self.delivered} of {self._requested_text()} delivered)")
        self.raise_for_errors()
        return self

    def stop(self, timeout: float | None = 60) -> Production:
        """Stop generating; what was sent is still delivered (or reported failed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self

    def set_rate(self, per_second: float) -> None:
        """From the next record on, ``per_second`` records a second (a burst schedule is dropped); a run
        started without a rate gets one."""
        if not per_second > 0:
            raise ValueError(f"{self.name} -> {self.topic}: a rate is more than 0 records a second, not {per_second}")
        self._retimed = RateSchedule(per_second)
        self.rate = per_second

    def pause(self) -> None:
        """Send nothing until ``resume``; what was sent is still delivered."""
        self._paused.set()
        self.state = "paused"

    def resume(self) -> None:
        self._paused.clear()
        self.state = "running"

    def raise_for_errors(self) -> None:
        if self.error is not None:
            raise DeliveryError(f"{self.name} -> {self.topic} failed after {self.delivered} records: "
                                f"{type(self.error).__name__}: {self.error}") from self.error
        if self.failed:
            raise DeliveryError(f"{self.name} -> {self.topic}: {self.failed} of {self.sent} records were not "
                                f"delivered; first errors: {self.errors[:3]}")

    # ---- figures
    @property
    def elapsed(self) -> float:
        return (self.finished_at or time.monotonic()) - self.started_at

    @property
    def events_per_second(self) -> float:
        return self.delivered / self.elapsed if self.elapsed > 0 else 0.0

    def _requested_text(self) -> str:
        return "∞" if self.requested is None else str(self.requested)

    def __repr__(self) -> str:
        bad = f", bad {dict(self.bad)}" if self.bad else ""
        failed = f", {self.failed} FAILED" if self.failed else ""
        return (f"<Production {self.name} -> {self.topic}: {self.delivered}/{self._requested_text()} delivered"
                f"{failed}{bad}, {self.state}, {self.events_per_second:,.0f} events/s>")

    def _repr_html_(self) -> str:
        value = self.delivered
        maximum = self.requested if self.requested else max(1, value)
        color = "#c62828" if self.failed or self.error else "#2e7d32" if self.done else "#1565c0"
        extra = ""
        if self.bad:
            extra += " · bad " + ", ".join(f"{k} {v}" for k, v in sorted(self.bad.items()))
        if self.failed or self.error:
            extra += f" · <b>{self.failed} failed</b> {html.escape(str(self.errors[:1] or self.error or ''))}"
        topics = ", ".join(sorted(self.topics)) or self.topic
        return (f'<div style="font-family:monospace"><progress value="{value}" max="{maximum}" '
                f'style="width:240px;vertical-align:middle"></progress> '
                f'<span style="color:{color}">{html.escape(self.name)} → {html.escape(topics)}: '
                f"{value:,}/{self._requested_text()} delivered, {self.state}, "
                f"{self.events_per_second:,.0f} events/s{extra}</span></div>")

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        handle = display(HTML(self._repr_html_()), display_id=True)
        if handle is not None and not self.done:
            self._displays.append(handle)
            if self.done:
                # The run finished between the check and the append: its last refresh missed this display.
                self._refresh_displays()

    def _refresh_displays(self) -> None:
        if not self._displays:
            return
        from IPython.display import HTML

        # A closed notebook or a dead kernel channel must not turn a production run into a failure.
        with contextlib.suppress(Exception):
            for handle in self._displays:
                handle.update(HTML(self._repr_html_()))
        if self.done:
            self._displays.clear()

    # ---- delivery reports (run on the producing thread, inside poll/flush)
    def _delivered(self, err: Any, msg: Message) -> None:
        if err is not None:
            self._failed(err, msg)
            return
        self.delivered += 1
        self.topics[msg.topic()] += 1

    def _delivered_bad(self, index: int, kind: str) -> Callable[[Any, Message], None]:
        def report(err: Any, msg: Message) -> None:
            if err is not None:
                self._failed(err, msg)
                return
            self.delivered += 1
            self.topics[msg.topic()] += 1
            self.bad[kind] += 1
            self.bad_offsets.append(BadOffset(msg.topic(), msg.partition(), msg.offset(), index, kind))
        return report

    def _failed(self, err: Any, msg: Message) -> None:
        self.failed += 1
        if len(self.errors) < KEEP_ERRORS:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")


# Runs still producing; at interpreter exit they are stopped and reported rather than cut off unseen.
_RUNNING: weakref.WeakSet[Production] = weakref.WeakSet()


@atexit.register
def _stop_at_exit() -> None:
    for run in list(_RUNNING):
        if not run.done:
            run.stop(timeout=10)
            print(f"sinklab: the interpreter exited while {run!r} was running; it was stopped "
                  f"(call .wait() to produce everything)", file=sys.stderr)


def produce_json(kafka: str | Mapping[str, Any], topic: str, events: Iterable[Any], key_field: str | None = None
                 ) -> int:
    """Produce JSON values synchronously with an idempotent producer; raises on any delivery error.
    ``kafka``: a bootstrap address, or client settings (a stack's ``kafka_config()``).

    For hand-written records in tests and scripts; generators use ``Generator.produce``.
    """
    import json

    from confluent_kafka import Producer

    settings = {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)
    producer = Producer({**settings, **PRODUCER_DEFAULTS})
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: Any, msg: Message) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(f"{msg.topic()}: {err}")
        else:
            delivered += 1

    for event in events:
        key = str(event[key_field]).encode() if key_field else None
        while True:
            try:
                producer.produce(topic, json.dumps(event).encode(), key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    if errors or remaining:
        raise DeliveryError(f"{len(errors)} events failed delivery, {remaining} undelivered; first: {errors[:1]}")
    return delivered


def daily_topic(prefix: str, when: datetime) -> str:
    return f"{prefix}.{when:%Y%m%d}"


def produce_records(stack: Stack, topic: str, records: Iterable[Record], *, count: int | None,
                    schedule: RateSchedule | None = None, name: str = "events", partitions: int = 6,
                    daily: bool = False, create_topics: bool = True,
                    producer_config: Mapping[str, Any] | None = None, clock: Clock | None = None,
                    today: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Production:
    """Start producing `records` in a background thread; returns the handle at once."""
    from confluent_kafka import Producer

    handle = Production(name, topic, count)
    handle.rate = schedule.per_second if schedule is not None else None
    # Its warnings (a coordinator still loading on a fresh broker) go to the stack's log, not to a
    # notebook's stderr; below warnings nothing is logged (librdkafka prints some of those itself
    # when the producer closes).
    producer = Producer(stack.kafka_config(**{**PRODUCER_DEFAULTS, "logger": stack.client_logger(), "log_level": 4,
                                              **(producer_config or {})}))
    created: set[str] = set()

    def topic_for(record: Record) -> str:
        target = daily_topic(topic, record.time or today()) if daily else topic
        if create_topics and target not in created:
            stack.create_topic(target, partitions=partitions)
            created.add(target)
        return target

    def run() -> None:
        try:
            _run(handle, producer, records, topic_for, schedule, clock)
        except BaseException as exc:  # noqa: BLE001 - kept on the handle, raised by wait()
            handle.error = exc
        finally:
            try:
                _drain(handle, producer)
            except BaseException as exc:  # noqa: BLE001 - kept on the handle, raised by wait()
                handle.error = handle.error or exc
            handle.finished_at = time.monotonic()
            handle.state = ("failed" if handle.error or handle.failed else
                            "stopped" if handle._stop.is_set() else "done")
            handle._refresh_displays()

    handle._thread = threading.Thread(target=run, name=f"sinklab-produce-{name}", daemon=True)
    _RUNNING.add(handle)
    handle._thread.start()
    return handle


def _run(handle: Production, producer: Producer, records: Iterable[Record], topic_for: Callable[[Record], str],
         schedule: RateSchedule | None, clock: Clock | None) -> None:
    stop = handle._stop
    pacer = None
    clock = clock or MonotonicClock()
    # With the real clock, waiting serves delivery reports; a fake clock only moves its own time.
    idle = producer.poll if isinstance(clock, MonotonicClock) else None
    if schedule is not None:
        pacer = Pacer(schedule, clock, idle, stop.is_set)
    refreshed = time.monotonic()
    on_delivery = handle._delivered
    for n, record in enumerate(records):
        if handle._paused.is_set():
            while handle._paused.is_set() and not stop.is_set():
                producer.poll(0.1)
            # Resumed: the schedule starts again from now, no catching up on the pause.
            handle._retimed = handle._retimed or (pacer.schedule if pacer is not None else None)
        if handle._retimed is not None:
            pacer = Pacer(handle._retimed, clock, idle, stop.is_set, first=n)
            handle._retimed = None
        if pacer is not None:
            pacer.wait(n)
        if stop.is_set():
            return
        target = topic_for(record)
        callback = on_delivery if record.bad is None else handle._delivered_bad(record.index, record.bad)
        while True:
            try:
                producer.produce(target, record.value, record.key, on_delivery=callback,
                                 **({} if record.partition is None else {"partition": record.partition}))
                break
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                producer.poll(0.05)
        handle.sent += 1
        producer.poll(0)
        if handle._displays and time.monotonic() - refreshed > DISPLAY_EVERY_S:
            handle._refresh_displays()
            refreshed = time.monotonic()


def _drain(handle: Production, producer: Producer) -> None:
    # Every sent record ends in a delivery report (success, or failure after message.timeout.ms),
    # so flushing until the queue is empty loses nothing silently.
    while len(producer) > 0:
        producer.flush(0.5)
        handle._refresh_displays()
