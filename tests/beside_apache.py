"""One connector config through Apache's sink in the stack's Connect worker and through sinklab, on the same
records, and the two tables it writes: what tests comparing sinklab with Apache's own classes (Kafka's and
Iceberg's transforms, Apicurio's converter) share. The worker is conftest's ``connect_worker``. Also what
tests running Apache's sink beside sinklab wait and count with (``wait_for``, ``order_id_counts``)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType, NestedField

from sinklab.sink import IcebergSink
from sinklab.stack import Stack
from sinklab.stack.apache_sink import ConnectWorker, on_stack


def rows(stack: Stack, table: str) -> list[dict[str, Any]]:
    found = stack.catalog.load_table(tuple(table.split("."))).scan().to_arrow().to_pylist()
    return sorted(found, key=lambda r: r.get("id", r.get("o_id", r.get("ts_ms"))))


def types(stack: Stack, table: str) -> dict[str, str]:
    """Each column's type, nested fields without their ids (each sink numbers them in its own order)."""
    schema = stack.catalog.load_table(tuple(table.split("."))).schema()
    return {f.name: re.sub(r"\b\d+: ", "", str(f.field_type)) for f in schema.fields}


def wait_for_rows(stack: Stack, worker: ConnectWorker, name: str, table: str, expected: int) -> None:
    deadline = time.monotonic() + 180
    while True:
        worker.check(name)  # a failed task raises with its trace
        try:
            if len(rows(stack, table)) >= expected:
                return
        except Exception as exc:  # not created yet (auto-create): try again
            if "NoSuchTable" not in type(exc).__name__:
                raise
        assert time.monotonic() < deadline, f"Apache's sink did not commit {expected} rows to {table}"
        time.sleep(0.5)


def through_both(stack: Stack, worker: ConnectWorker, unique: str, config: dict[str, str],
                 expected: int) -> tuple[str, str]:
    """``config`` run by Apache's sink into ``<unique>.apache`` and by sinklab into ``<unique>.sinklab``."""
    apache, ours = f"{unique}.apache", f"{unique}.sinklab"
    regex = config.pop(f"iceberg.table.{unique}.route-regex", None)

    def routed(table: str) -> dict[str, str]:  # the route regex given for <unique>, for each sink's own table
        return {f"iceberg.table.{table}.route-regex": regex} if regex else {}

    worker.add(on_stack(stack, {**config, "name": f"apache-{unique}", "iceberg.tables": apache, **routed(apache),
                                "iceberg.catalog": stack.info.catalog_name,
                                "iceberg.control.commit.interval-ms": "1000"}))
    try:  # the worker is the session's: its connector goes whatever happens
        sink = IcebergSink(stack, {"name": f"sinklab-{unique}", "config": {
            **config, "iceberg.tables": ours, **routed(ours), "iceberg.catalog": "sinklab"}})
        try:
            assert sink.run_once() is not None
        finally:
            sink.stop()
        wait_for_rows(stack, worker, f"apache-{unique}", apache, expected)
    finally:
        worker.remove(f"apache-{unique}")
    return apache, ours


def create_both(stack: Stack, namespace: str, columns: list[tuple[str, IcebergType]]) -> None:
    """The tables ``apache`` and ``sinklab`` in ``namespace``, alike: optional ``columns`` in order."""
    schema = Schema(*[NestedField(i + 1, n, t, required=False) for i, (n, t) in enumerate(columns)])
    stack.catalog.create_namespace_if_not_exists(namespace)
    for table in ("apache", "sinklab"):
        stack.catalog.create_table((namespace, table), schema)


def produce(stack: Stack, topic: str, records: list[tuple[dict[str, Any] | bytes | None, list[tuple[str, bytes]]]]
            ) -> None:
    """Each value (a dict as JSON, bytes as they are) with its headers, keyed k0, k1, ..."""
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    for i, (value, headers) in enumerate(records):
        body = value if value is None or isinstance(value, bytes) else json.dumps(value).encode()
        producer.produce(topic, body, f"k{i}".encode(), headers=headers)
    assert producer.flush(30) == 0


def order_id_counts(stack: Stack, table: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for order_id in stack.catalog.load_table(tuple(table.split("."))).scan(
            selected_fields=("order_id",)).to_arrow().column("order_id").to_pylist():
        counts[order_id] = counts.get(order_id, 0) + 1
    return counts


def wait_for(what: str, ready: Callable[[], bool], worker: ConnectWorker | None, name: str,
             timeout: float = 120) -> None:
    """Until ``ready()``, failing with the task's trace if ``worker`` (when given) fails first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if worker is not None:
            worker.check(name)
        assert time.monotonic() < deadline, what
        time.sleep(0.3)
