"""Helpers shared by the sink tests."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from sinklab.generators import pizza_events, produce_json
from sinklab.stack import Stack


def sink_config(unique: str, tables: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": f"sink-{unique}", "config": {
        "topics": unique, "iceberg.tables": ",".join(tables or [f"{unique}.pizzas"]), "iceberg.catalog": "sinklab",
        "iceberg.tables.auto-create-enabled": "true", "iceberg.control.commit.interval-ms": "500",
        "value.converter.schemas.enable": "false", **extra}}


def produce(stack: Stack, topic: str, count: int, seed: int) -> list[str]:
    events = list(pizza_events(count, seed=seed))
    produce_json(stack.bootstrap_servers, topic, events, key_field="order_id")
    return [e["order_id"] for e in events]


def produce_raw(stack: Stack, topic: str, values: list[bytes | None], keys: list[bytes | None] | None = None) -> None:
    """Values exactly as given (bad bytes, tombstones), keyed as given or k0, k1, ..."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    for i, value in enumerate(values):
        producer.produce(topic, value, keys[i] if keys is not None else f"k{i}".encode())
    assert producer.flush(30) == 0


def order_ids(stack: Stack, table: str) -> list[str]:
    return [r.order_id for r in stack.spark.table(f"sinklab.{table}").select("order_id").collect()]


def sink_snapshots(stack: Stack, table: str) -> list[dict[str, str]]:
    snaps = stack.catalog.load_table(tuple(table.split("."))).metadata.snapshots
    return [dict(s.summary.additional_properties) for s in snaps if s.summary]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sinklab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


