"""Helpers shared by the sink tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Producer

from sinklab.generators import pizza_events, produce_json
from sinklab.stack import Stack
from sinklab.stack.process import stop_pid

if TYPE_CHECKING:
    from sinklab.fresh import FreshRead
    from sinklab.sink.cycle.coordinator import CycleResult


def sink_config(unique: str, tables: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": f"sink-{unique}", "config": {
        "topics": unique, "iceberg.tables": ",".join(tables or [f"{unique}.pizzas"]), "iceberg.catalog": "sinklab",
        "iceberg.tables.auto-create-enabled": "true", "iceberg.control.commit.interval-ms": "500",
        "value.converter.schemas.enable": "false", **extra}}


def once(stack: Stack, config: dict[str, Any]) -> CycleResult:
    """One cycle of a sink made for it, which must find records."""
    from sinklab.sink import IcebergSink

    sink = IcebergSink(stack, config)
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None
    return result


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


def mongo_event(prefix: str, ts_ms: int = 0, **payload: Any) -> dict[str, Any]:
    """A Debezium MongoDB change event in JsonConverter's envelope, its schema named ``<prefix>.Envelope``:
    ``before``, ``after`` and ``updateDescription.updatedFields`` are texts of BSON's extended JSON."""
    text = {"type": "string", "optional": True, "name": "io.debezium.data.Json", "version": 1}
    schema = {"type": "struct", "name": f"{prefix}.Envelope", "optional": False, "fields": [
        {**text, "field": "before"}, {**text, "field": "after"},
        {"field": "updateDescription", "type": "struct", "optional": True, "fields": [
            {"field": "removedFields", "type": "array", "items": {"type": "string", "optional": False},
             "optional": True}, {**text, "field": "updatedFields"}]},
        {"field": "op", "type": "string", "optional": True}, {"field": "ts_ms", "type": "int64", "optional": True}]}
    return {"schema": schema, "payload": {"before": None, "after": None, "updateDescription": None, **payload,
                                          "ts_ms": ts_ms}}


def order_ids(stack: Stack, table: str) -> list[str]:
    return [r.order_id for r in stack.spark.table(f"sinklab.{table}").select("order_id").collect()]


def sink_snapshots(stack: Stack, table: str) -> list[dict[str, str]]:
    snaps = stack.catalog.load_table(tuple(table.split("."))).metadata.snapshots
    return [dict(s.summary.additional_properties) for s in snaps if s.summary]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sinklab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})




def mentioning(text: str) -> list[int]:
    """PIDs whose command line names ``text`` (a stack directory this suite made)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(proc.name))
    return pids


def stop_leftovers(text: str, grace: float = 15) -> list[int]:
    """Processes that name ``text`` exit with what started them (a kernel, a training run); those
    still there after ``grace`` were left behind. They are stopped either way, so a failure cannot
    leak them; returns them."""
    deadline = time.monotonic() + grace
    while (left := mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        stop_pid(pid, timeout=10, group=False)
    return left


@contextmanager
def steady(stack: Stack, topic: str, per_second: int) -> Iterator[list[str]]:
    """Pizza orders produced at about ``per_second``, a tenth of a second's worth at a time, until the
    block ends; yields their order ids as they go."""
    produced: list[str] = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "enable.idempotence": True})

    def run() -> None:
        seed = 1000
        while not stop.is_set():
            began = time.monotonic()
            for event in pizza_events(max(1, per_second // 10), seed=seed):
                producer.produce(topic, json.dumps(event).encode(), event["order_id"].encode())
                produced.append(event["order_id"])
            producer.flush(30)
            seed += 1
            stop.wait(max(0.0, 0.1 - (time.monotonic() - began)))

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield produced
    finally:
        stop.set()
        thread.join()
        assert producer.flush(30) == 0


class KafkaLog:
    """Every record of a topic up to a watermark, read with a plain consumer (read_committed), kept as
    read: what a fresh read (sinklab.fresh) up to that watermark must hold."""

    def __init__(self, stack: Stack, topic: str):
        from sinklab.sink.wire.topics import TopicReader

        self.reader = TopicReader(stack.bootstrap_servers, topic)
        self.values: list[dict[str, Any] | None] = []

    def upto(self, watermark: dict[str, dict[int, int]]) -> list[dict[str, Any] | None]:
        for batch in self.reader.read(until=watermark, timeout=30):
            for m in batch:
                value = m.value()
                try:
                    self.values.append(json.loads(value) if value is not None else None)
                except ValueError:
                    self.values.append({"_bad": value})
        return self.values

    def close(self) -> None:
        self.reader.close()


def fresh_reads(stack: Stack, table: str, kafka: KafkaLog, expected: Callable[[list[Any]], list[str]],
                column: str = "order_id", reads: int = 3) -> list[FreshRead]:
    """``reads`` fresh reads of ``table`` by one ``fresh.Reader`` (each converts what arrived since the last),
    about a second apart: each holds exactly ``expected`` of Kafka up to its watermark, none twice."""
    from sinklab import fresh

    done = []
    with fresh.Reader(stack, table) as reader:
        for _ in range(reads):
            read = reader.read()
            got = sorted(r[0] for r in read.df.select(column).collect())
            want = sorted(expected(kafka.upto(read.watermark)))
            assert len(got) == len(set(got)), f"duplicates in a fresh read of {table} at snapshot {read.snapshot_id}"
            missing, extra = set(want) - set(got), set(got) - set(want)
            assert got == want, (f"fresh read of {table} at snapshot {read.snapshot_id}, tail {read.tail_offsets}: "
                                 f"{len(missing)} missing, {len(extra)} not in Kafka up to {read.watermark}")
            done.append(read)
            time.sleep(1)
    return done


ROOT = Path(__file__).resolve().parent.parent


def build_site(executed: Path, site: Path, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``make docs``' build (strict: a broken link or anchor fails it) of the repository at ``root``, with
    the tutorials as executed in ``executed``."""
    env = {**os.environ, "SINKLAB_EXECUTED_NOTEBOOKS": str(executed), "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, env=env, timeout=300, cwd=root)
