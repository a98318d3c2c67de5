"""Generators producing to the embedded broker: every record delivered once, bad records where the handle says,
CDC keys on one partition, daily topics, pacing through an injected clock, delivery errors surfaced, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from sinklab.generators import CdcGenerator, DeliveryError, Generator, PaymentGenerator, PizzaGenerator
from sinklab.stack import Stack


def consume(stack: Stack, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record in the topic."""
    consumer = Consumer(stack.kafka_config(**{"group.id": uuid.uuid4().hex, "enable.auto.commit": False}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        out = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            consumer.assign([TopicPartition(topic, p, low)])
            position = low
            while position < high:
                for m in consumer.consume(min(5000, high - position), timeout=5):
                    assert m.error() is None, m.error()
                    out.append((p, m.offset(), m.key(), m.value()))
                    position = m.offset() + 1
        return out
    finally:
        consumer.close()


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_delivered_equals_requested(stack: Stack, unique: str) -> None:
    gen = PizzaGenerator(seed=21)
    run = gen.produce(stack, unique, count=5000, partitions=3)
    assert run.wait(120) is run
    assert (run.requested, run.sent, run.delivered, run.failed, run.state) == (5000, 5000, 5000, 0, "done")
    assert run.topics == {unique: 5000}
    got = consume(stack, unique)
    assert {p for p, *_ in got} == {0, 1, 2}
    assert Counter((k, v) for _, _, k, v in got) == Counter((r.key, r.value) for r in gen.records(5000))
    assert "5000/5000 delivered" in repr(run) and 'value="5000" max="5000"' in run._repr_html_()


def test_bad_records_land_where_the_handle_says(stack: Stack, unique: str) -> None:
    gen = PaymentGenerator(seed=4, bad_records=0.05)
    run = gen.produce(stack, unique, count=3000).wait(120)
    expected = Counter(r.bad for r in gen.records(3000) if r.bad)
    assert run.delivered == 3000 and run.bad == expected and len(expected) == 7  # every kind but no-table
    by_offset = {(p, o): v for p, o, _, v in consume(stack, unique)}
    records = list(gen.records(3000))
    assert len(run.bad_offsets) == sum(expected.values())
    for bad in run.bad_offsets:
        assert records[bad.index].bad == bad.kind
        assert by_offset[(bad.partition, bad.offset)] == records[bad.index].value
    good = len(by_offset) - len(run.bad_offsets)
    assert good == sum(1 for r in records if not r.bad)


def test_cdc_changes_of_a_key_share_a_partition(stack: Stack, unique: str) -> None:
    gen = CdcGenerator(seed=8, format="debezium", snapshot=100, key_space=300)
    gen.produce(stack, unique, count=4000, partitions=4).wait(120)
    partitions: dict[bytes | None, set[int]] = defaultdict(set)
    got = consume(stack, unique)
    for p, _, key, _ in got:
        partitions[key].add(p)
    assert len(got) == 4000 and len(partitions) > 100
    assert all(len(ps) == 1 for ps in partitions.values())
    # In offset order, the changes of each key arrive in the order they were made.
    arrived: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for _, _, key, value in sorted(got):
        arrived[key].append(value)
    made: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for r in gen.records(4000):
        made[r.key].append(r.value)
    assert arrived == made


def test_daily_topics_follow_event_time(stack: Stack, unique: str) -> None:
    # Six hours between orders: 12 orders span four days.
    gen = PizzaGenerator(seed=1).spec.model_dump()
    gen["fields"]["date_ordered"]["step"] = 6 * 3600
    pizzas = Generator(gen)
    run = pizzas.produce(stack, unique, count=12, daily_topics=True, partitions=1).wait(60)
    assert run.topics == {f"{unique}.20240104": 2, f"{unique}.20240105": 4, f"{unique}.20240106": 4,
                          f"{unique}.20240107": 2}
    day = [json.loads(v or b"")["date_ordered"][:10] for *_, v in consume(stack, f"{unique}.20240105")]
    assert day == ["2024-01-05"] * 4


def test_rate_with_injected_clock(stack: Stack, unique: str) -> None:
    clock = FakeClock()
    run = PizzaGenerator().produce(stack, unique, count=300, rate=100, clock=clock).wait(60)
    assert run.delivered == 300
    # 300 events at 100/s: the last may go 2.99 s after the first, by the clock the pacer was given.
    assert clock.t == pytest.approx(2.99)
    clock = FakeClock()
    bursty = {"per_second": 10, "burst": {"every": 10, "duration": 2, "per_second": 100}}
    PaymentGenerator().produce(stack, unique, count=281, rate=bursty, clock=clock).wait(60)
    assert clock.t == pytest.approx(10.0)


def test_stop_an_endless_run(stack: Stack, unique: str) -> None:
    run = PaymentGenerator().produce(stack, unique, count=None)
    while run.delivered < 1000:
        time.sleep(0.05)
    run.stop()
    assert run.done and run.state == "stopped" and run.failed == 0
    assert run.delivered == run.sent >= 1000
    assert len(consume(stack, unique)) == run.delivered
    run.wait()  # a stopped run with everything delivered is not an error


def test_delivery_errors_are_reported(tmp_path: Path) -> None:
    # Nothing listens on the port: every record times out in the real producer.
    nowhere = Stack.external(bootstrap_servers="127.0.0.1:9", catalog_uri="http://127.0.0.1:9", warehouse=str(tmp_path))
    run = PizzaGenerator().produce(nowhere, "pizzas", count=20, create_topics=False,
                                   producer_config={"message.timeout.ms": 1000})
    with pytest.raises(DeliveryError, match="20 of 20 records were not delivered"):
        run.wait(60)
    assert run.delivered == 0 and run.failed == 20 and run.state == "failed" and run.errors
    assert "20 FAILED" in repr(run)


def test_notebook_progress_updates_itself(stack: Stack, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # IPython is not a dependency: stand in for its display module and record what the handle shows.
    shown: list[str] = []

    class DisplayHandle:
        def update(self, obj: types.SimpleNamespace) -> None:
            shown.append(obj.data)

    def display(obj: types.SimpleNamespace, display_id: bool = False) -> DisplayHandle:
        shown.append(obj.data)
        return DisplayHandle()

    module = types.ModuleType("IPython.display")
    module.HTML = lambda data: types.SimpleNamespace(data=data)  # type: ignore[attr-defined]
    module.display = display  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    monkeypatch.setitem(sys.modules, "IPython.display", module)
    run = PizzaGenerator().produce(stack, unique, count=3000, rate=3000)
    run._ipython_display_()
    run.wait(60)
    assert 'max="3000"' in shown[0] and 'value="3000"' not in shown[0]
    assert 'value="3000" max="3000"' in shown[-1] and "done" in shown[-1]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sinklab.cli", *args], capture_output=True, text=True, timeout=300)


def test_cli_generate(stack: Stack, unique: str, tmp_path: Path) -> None:
    stack_file = str(stack.write(tmp_path / "stack.json"))
    done = run_cli("generate", "payments", "--topic", unique, "--count", "700", "--rate", "100000",
                   "--bad-ratio", "0.1", "--seed", "3", "--stack", stack_file)
    assert done.returncode == 0, done.stderr
    assert f"produced 700 payments to {unique} (" in done.stdout
    assert len(consume(stack, unique)) == 700
    expected = Counter(r.bad for r in PaymentGenerator(seed=3, bad_records=0.1).records(700) if r.bad)
    assert f"{sum(expected.values())} bad" in done.stdout

    spec = tmp_path / "orders.yaml"
    spec.write_text("name: orders\nkey: n\nfields:\n  n: {kind: sequence}\n  total: {kind: float, max: 99}\n")
    done = run_cli("generate", "--spec", str(spec), "--topic", f"{unique}-o", "--count", "50", "--stack", stack_file)
    assert done.returncode == 0, done.stderr
    assert sorted(k for _, _, k, _ in consume(stack, f"{unique}-o")) == sorted(str(i).encode() for i in range(1, 51))

    done = run_cli("generate", "cdc", "--cdc-format", "debezium", "--topic", f"{unique}-c", "--count", "30",
                   "--stack", stack_file)
    assert done.returncode == 0, done.stderr
    assert {json.loads(v or b"")["op"] for *_, v in consume(stack, f"{unique}-c")} <= {"c", "u", "d"}

    spec.write_text("name: orders\nfields:\n  n: {kind: sequence, stepp: 2}\n")
    bad = run_cli("generate", "--spec", str(spec), "--topic", unique, "--count", "5", "--stack", stack_file)
    assert bad.returncode == 1 and "fields.n.stepp: Extra inputs are not permitted" in bad.stderr


def test_a_running_stream_changes_its_rate_and_pauses(stack: Stack, unique: str) -> None:
    # What the control panel's rate slider and pause button do: from the next record, no catching up.
    run = PizzaGenerator().produce(stack, unique, count=None, rate=50, partitions=1)
    assert run.rate == 50
    time.sleep(1.0)
    slow = run.sent
    run.set_rate(1000)
    assert run.rate == 1000
    time.sleep(1.0)
    fast = run.sent - slow
    run.pause()
    time.sleep(0.3)
    at_pause = run.sent
    time.sleep(1.0)
    held = run.sent - at_pause
    assert run.state == "paused"
    run.resume()
    time.sleep(0.5)
    resumed = run.sent - at_pause
    run.stop()
    assert slow <= 100 and fast >= 300 and held == 0
    assert 0 < resumed < 1200  # 0.5 s at 1000/s, not the 1.3 s paused caught up on
    assert run.state == "stopped" and run.failed == 0
    with pytest.raises(ValueError, match="more than 0"):
        run.set_rate(0)
