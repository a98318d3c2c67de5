"""A topic's traffic shape read from its offsets and timestamps (and a sample for sizes and keys), saved as a
profile, and replayed by the generators at its rate curve, partition shares, sizes and hot keys; the CLI."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from helpers import run_cli

from sinklab.generators import Generator, PizzaGenerator, RateSchedule, TrafficProfile, profile_topic
from sinklab.generators.record import Record
from sinklab.generators.traffic import HotKey, pad
from sinklab.stack import Stack

# ---- pure logic


def test_a_rate_curve_sends_each_step_at_its_rate_and_loops() -> None:
    curve = RateSchedule(40 / 6, steps=(10.0, 0.0, 30.0), step_s=2.0)  # 20, 0, 60 events per loop of 6 s
    assert [curve.allowed(t) for t in (1, 2, 3, 4, 5, 6, 8)] == [10, 20, 20, 20, 50, 80, 100]
    assert curve.time_for(19) == 1.9  # the first step's last
    assert curve.time_for(20) == 4.0  # the silent step is skipped
    assert curve.time_for(21) == pytest.approx(4 + 1 / 30)
    assert curve.time_for(81) == pytest.approx(6.1)  # the second loop
    for n in range(0, 250, 7):
        assert curve.allowed(curve.time_for(n)) == pytest.approx(n)
    with pytest.raises(ValueError, match="rate curve"):
        RateSchedule(1, steps=(0.0, 0.0), step_s=1)


def test_padding_keeps_json_and_reaches_the_size() -> None:
    value = json.dumps({"order_id": "o-1", "qty": 2}).encode()
    grown = pad(value, 300)
    assert len(grown) == 300 and json.loads(grown)["order_id"] == "o-1" and "_pad" in json.loads(grown)
    assert pad(value, 10) == value  # already larger
    assert json.loads(pad(b"{}", 40)) == {"_pad": "x" * (40 - len('{"_pad":""}'))}


def profile(**extra: object) -> TrafficProfile:
    return TrafficProfile.model_validate({"topic": "t", "start_ms": 0, "bucket_s": 10,
                                          "partitions": {0: [300, 0, 600], 1: [100, 0, 0]}, **extra})


def test_a_profile_is_its_buckets_shares_and_curve() -> None:
    p = profile(value_bytes=list(range(200, 1300, 100)), hot_keys=[HotKey(share=0.2, partition=1)])
    assert p.records == 1000 and p.buckets == 3 and p.partition_count == 2
    assert p.rates == [40.0, 0.0, 60.0]
    assert p.shares == {0: 0.9, 1: 0.1}
    fast = p.schedule(speed=10)  # 10 s buckets played in 1 s, at their rates
    assert fast.time_for(39) == pytest.approx(39 / 40) and fast.time_for(40) == pytest.approx(2.0)
    assert TrafficProfile.model_validate_json(p.model_dump_json()) == p
    with pytest.raises(ValueError, match="no records"):
        profile(partitions={0: [0, 0]})
    with pytest.raises(ValueError, match="same number of buckets"):
        profile(partitions={0: [1, 2], 1: [1]})


def test_reshaping_gives_the_profiles_shares_sizes_and_hot_keys() -> None:
    p = profile(value_bytes=list(range(200, 1300, 100)), hot_keys=[HotKey(share=0.05, partition=1)])
    records = [Record(i, f"k{i}".encode(), json.dumps({"i": i}).encode(), {"i": i}) for i in range(20_000)]
    out = list(p.reshape(records, seed=3))
    parts = Counter(r.partition for r in out)
    assert parts[0] / len(out) == pytest.approx(0.9, abs=0.01)
    hot = [r for r in out if r.key == b"hot-0"]
    assert len(hot) / len(out) == pytest.approx(0.05, abs=0.01) and {r.partition for r in hot} == {1}
    sizes = sorted(len(r.value) for r in out)
    assert sizes[0] >= 200 and sizes[-1] <= 1200 and sizes[len(sizes) // 2] == pytest.approx(700, abs=30)
    assert [json.loads(r.value)["i"] for r in out] == list(range(20_000))  # the events themselves untouched


# ---- against the broker

def produce_shaped(stack: Stack, topic: str, end_ms: int) -> None:
    """Three 10 s buckets before ``end_ms``: partition 0 gets 300, 0, 600 records, partition 1 100, 0, 0;
    values of 100 to 1,000 bytes; key "hot" on a fifth of partition 0's newest records."""
    stack.create_topic(topic, partitions=2)
    producer = Producer(stack.kafka_config())
    rng = random.Random(1)
    for partition, counts in ((0, (300, 0, 600)), (1, (100, 0, 0))):
        for bucket, n in enumerate(counts):
            for i in range(n):
                at = end_ms - 30_000 + bucket * 10_000 + int(i * 10_000 / n)
                key = b"hot" if partition == 0 and bucket == 2 and i % 5 == 0 else uuid.uuid4().bytes
                producer.produce(topic, b"v" * rng.randint(100, 1000), key, partition=partition, timestamp=at)
    assert producer.flush(30) == 0


def record_times(stack: Stack, topic: str) -> list[tuple[int, int, int]]:
    """(timestamp ms, partition, value bytes) of every record on ``topic``."""
    consumer = Consumer(stack.kafka_config(**{"group.id": uuid.uuid4().hex}))
    out = []
    try:
        for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(KafkaPartition(topic, p), timeout=10)
            consumer.assign([KafkaPartition(topic, p, low)])
            while len([o for o in out if o[1] == p]) < high - low:
                out += [(m.timestamp()[1], p, len(m.value())) for m in consumer.consume(1000, timeout=5)]
    finally:
        consumer.close()
    return out


def test_a_topics_shape_is_read_from_its_offsets_and_replayed(stack: Stack, tmp_path: Path) -> None:
    topic = f"traffic-{uuid.uuid4().hex[:8]}"
    end_ms = int(time.time() * 1000) - 1000
    produce_shaped(stack, topic, end_ms)
    shape = profile_topic(stack.kafka_config(), topic, window_s=30, bucket_s=10, sample=200, end_ms=end_ms)
    assert shape.partitions == {0: [300, 0, 600], 1: [100, 0, 0]}  # from offsets alone, exactly
    assert shape.rates == [40.0, 0.0, 60.0]
    assert shape.value_bytes[0] >= 100 and shape.value_bytes[-1] <= 1000 and 450 <= shape.value_bytes[5] <= 650
    assert shape.hot_keys[0].partition == 0 and shape.hot_keys[0].share == pytest.approx(20 / 200)

    # Replayed ten times faster: 1 s at 40/s, 1 s of nothing, 1 s at 60/s; 90 % to partition 0.
    replay = f"replay-{uuid.uuid4().hex[:8]}"
    stack.create_topic(replay, partitions=2)
    Generator(PizzaGenerator().spec).produce(stack, replay, count=100, traffic=TrafficProfile.load(
        shape.save(tmp_path / "shape.json")), speed=10).wait()
    got = record_times(stack, replay)
    assert len(got) == 100
    times = sorted(t for t, _, _ in got)
    gap, after = max((b - a, i + 1) for i, (a, b) in enumerate(zip(times, times[1:], strict=False)))
    assert gap >= 900 and len(times) - after == 60, times  # the silent bucket, then the last bucket's 60
    assert times[after - 1] - times[0] <= 1100, times  # the first bucket's 40 within its second
    assert sum(1 for _, p, _ in got if p == 0) >= 80
    # Pizzas are about 175 bytes: padded to the profile's sizes (100-1,000, median about 550).
    sizes = sorted(size for _, _, size in got)
    assert 400 <= sizes[50] <= 700 and sizes[-1] <= 1000, sizes


def test_sinklab_traffic_prints_and_writes_the_profile(stack: Stack, stack_file: Path, tmp_path: Path) -> None:
    topic = f"traffic-{uuid.uuid4().hex[:8]}"
    produce_shaped(stack, topic, int(time.time() * 1000) - 1000)
    out = tmp_path / "profile.json"
    ran = run_cli("traffic", topic, "--stack", str(stack_file), "--window", "40s", "--bucket", "10s", "--out", str(out))
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert f"{topic}: 1,000 records" in ran.stdout and "partitions: 0 90%, 1 10%" in ran.stdout, ran.stdout
    assert TrafficProfile.load(out).records == 1000
    missing = run_cli("traffic", "no-such-topic", "--stack", str(stack_file))
    assert missing.returncode != 0 and "no-such-topic" in missing.stderr


@pytest.mark.spark
def test_the_explorer_runs_on_a_traffic_profile(stack: Stack, stack_file: Path, tmp_path: Path) -> None:
    """`sinklab explore --traffic`: the run's stream is the profile's (its curve for --seconds at --speed, its
    partitions and their shares), measured as any run is."""
    topic = f"traffic-{uuid.uuid4().hex[:8]}"
    end_ms = int(time.time() * 1000) - 1000
    produce_shaped(stack, topic, end_ms)
    shape = profile_topic(stack.kafka_config(), topic, window_s=30, bucket_s=10, sample=200, end_ms=end_ms)
    shape.save(tmp_path / "shape.json")
    out = tmp_path / "runs.json"
    ran = run_cli("explore", "--sink", "sinklab", "--stack", str(stack_file), "--intervals", "1s", "--traffic",
                  str(tmp_path / "shape.json"), "--speed", "10", "--seconds", "6", "--json", str(out), timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    [run] = json.loads(out.read_text())["runs"]
    assert run["records"] == 200  # two loops of the curve at ten times its speed: 40 + 0 + 60, twice
    assert run["p99_visibility_s"] is not None
    token = run["table"].rsplit("_", 1)[1]
    got = record_times(stack, f"explorer-sinklab-1000ms-{token}")
    assert len(got) == 200 and sum(1 for _, p, _ in got if p == 0) >= 160  # 90 % of them on partition 0
