"""Drain a pizza backlog with the sink; baseline: one confluent-kafka consumer reading the same topic.

    .venv/bin/python bench/backlog.py [--records 1000000]

Prints a table, then one JSON object as the last line. Not a test: nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from sinklab.generators import pizza_events, produce_json
from sinklab.sink import IcebergSink
from sinklab.stack import Stack

TOPIC = "bench-pizzas"


def raw_consume(stack: Stack, partitions: int) -> float:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False})
    total, started = 0, time.monotonic()
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
        consumer.assign([TopicPartition(TOPIC, p, low)])
        pos = low
        while pos < high:
            for m in consumer.consume(min(10_000, high - pos), timeout=5):
                pos = m.offset() + 1
                total += 1
    consumer.close()
    return total / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    with Stack.embedded() as stack:
        stack.create_topic(TOPIC, partitions=args.partitions)
        t = time.monotonic()
        produce_json(stack.bootstrap_servers, TOPIC, pizza_events(args.records), key_field="order_id")
        produce_s = time.monotonic() - t
        raw_rps = raw_consume(stack, args.partitions)
        sink = IcebergSink(stack, {"name": "bench", "topics": TOPIC, "iceberg.tables": "bench.pizzas",
                                   "iceberg.catalog": "sinklab", "iceberg.tables.auto-create-enabled": "true",
                                   "value.converter.schemas.enable": "false"})
        stack.spark  # noqa: B018 - start Spark before timing the drain
        t = time.monotonic()
        result = sink.run_once()
        drain_s = time.monotonic() - t
        assert result is not None
        fixed = []
        for i in range(5):
            produce_json(stack.bootstrap_servers, TOPIC, pizza_events(1, seed=1000 + i))
            t = time.monotonic()
            sink.run_once()
            fixed.append(time.monotonic() - t)
        t = time.monotonic()
        sink.run_once()
        empty_s = time.monotonic() - t
        sink.stop()
    figures = {
        "records": args.records,
        "produce_rps": round(args.records / produce_s),
        "raw_consume_rps": round(raw_rps),
        "sinklab_drain_rps": round(result.records / drain_s),
        "sinklab_drain_s": round(drain_s, 2),
        "cycle_fixed_cost_s_median": round(statistics.median(fixed), 3),
        "empty_cycle_s": round(empty_s, 3),
    }
    for key, value in figures.items():
        print(f"{key:28} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
