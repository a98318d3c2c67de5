"""Fresh reads (sinklab.fresh): the table at a pinned snapshot plus its Kafka tail, each record once, while
the sink commits every second, across a SIGKILL and restart of the sink, for a fanned-out and a CDC table.

Each read is checked against Kafka itself: the records of the sink's topic up to the read's watermark,
read with a plain consumer, are the read's rows, no more, no fewer, none twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from helpers import KafkaLog, fresh_reads, once, produce_raw, sink_config, steady

from sinklab import fresh
from sinklab.exceptions import ConfigError, TableMissing
from sinklab.fresh.snapshot_and_tail import PIECES_PER_MERGE, tail_starts
from sinklab.sink import IcebergSink
from sinklab.sink.wire.offsets import TopicPartition
from sinklab.stack import Stack
from sinklab.stack.process import stop_pid

READS = 4


# ---- where a tail starts (pure)
def test_a_tail_starts_past_the_snapshot_and_the_group_and_where_the_sink_would_start_a_new_partition() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    low, high = {"t": {0: 0, 1: 5, 2: 7}}, {"t": {0: 100, 1: 50, 2: 70}}
    # The group is past the snapshot on a (cycles without rows for this table), behind it on b (the crash
    # window between a publish and the group's commit); c was never read: earliest is its low watermark.
    starts = tail_starts([a, b, c], {"t": {0: 10, 1: 40}}, {"t": {0: 20, 1: 30}},
                                                   low, high, "earliest")
    assert starts == {"t": {0: 20, 1: 40, 2: 7}}
    assert tail_starts([c], {}, {}, low, high, "latest") == {"t": {2: 70}}
    # Clamped to what the broker has: retention trimmed b below the snapshot's mark? never past the end.
    assert tail_starts([b], {"t": {1: 60}}, {}, low, high, "earliest") == {"t": {1: 50}}


def wait_for_table(stack: Stack, table: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if stack.catalog.load_table(tuple(table.split("."))).current_snapshot() is not None:
                return
        except Exception:  # noqa: BLE001 - not there yet
            pass
        assert time.monotonic() < deadline, f"{table} got no commit within {timeout} s"
        time.sleep(0.5)


@contextmanager
def running(stack: Stack, config: dict[str, Any]) -> Iterator[IcebergSink]:
    sink = IcebergSink(stack, config).start()
    try:
        yield sink
    finally:
        sink.stop()
        assert sink.status().state != "FAILED", sink.status().trace


def test_fresh_reads_under_a_sink_committing_every_second_hold_every_record_once(stack: Stack, unique: str) -> None:
    """Fanned out to two tables by a route field, with a record no table can take: each table's fresh read
    holds its own records up to the watermark, once, and counts the bad record as left out."""
    stack.create_topic(unique, partitions=3)
    tables = [f"{unique}.north", f"{unique}.south"]
    config = sink_config(unique, tables, **{
        "iceberg.control.commit.interval-ms": "1000", "iceberg.tables.route-field": "store_id",
        "iceberg.table." + tables[0] + ".route-regex": "[0-9]|[1-4][0-9]",
        "iceberg.table." + tables[1] + ".route-regex": "[5-9][0-9]|100",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{unique}-dlq"})
    kafka = KafkaLog(stack, unique)

    def routed(north: bool) -> Callable[[list[Any]], list[str]]:
        return lambda vs: [v["order_id"] for v in vs if v and "_bad" not in v and (v["store_id"] < 50) == north]

    try:
        with steady(stack, unique, 300), running(stack, config):
            for table in tables:
                wait_for_table(stack, table)
            north = fresh_reads(stack, tables[0], kafka, routed(True), reads=READS)
            fresh_reads(stack, tables[1], kafka, routed(False), reads=2)
        # The sink committed meanwhile, and the reads caught it between snapshots with a tail to add.
        assert len({r.snapshot_id for r in north}) > 1 and any(r.tail_offsets > 0 for r in north)
        # A record no table can take, in the tail of both (the sink stopped): left out of each, and counted.
        produce_raw(stack, unique, [b'{"order_id": "bad", "store_id": '])
        for table, north_side in zip(tables, (True, False), strict=True):
            last = fresh_reads(stack, table, kafka, routed(north_side), reads=1)[-1]
            assert last.left_out() == 1 and last.tail_offsets > 0
    finally:
        kafka.close()


def test_fresh_reads_across_a_sink_sigkilled_and_restarted(stack: Stack, stack_file: Path, tmp_path: Path,
                                                           unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    config = tmp_path / "sink.json"
    config.write_text(json.dumps(sink_config(unique, **{"iceberg.control.commit.interval-ms": "1000"})))
    table = f"{unique}.pizzas"
    kafka = KafkaLog(stack, unique)

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "sinklab.cli", "sink", "run", "--config", str(config),
                                 "--stack", str(stack_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

    def ids(values: list[Any]) -> list[str]:
        return [v["order_id"] for v in values if v]

    try:
        with steady(stack, unique, 200):
            proc = start()
            try:
                wait_for_table(stack, table)
                fresh_reads(stack, table, kafka, ids, reads=2)
                os.killpg(proc.pid, signal.SIGKILL)  # mid-cycle or between: wherever it is
                proc.wait(30)
            finally:
                stop_pid(proc.pid)
            down = fresh_reads(stack, table, kafka, ids, reads=2)  # nothing commits: the tail grows
            assert len({r.snapshot_id for r in down}) == 1 and down[-1].tail_offsets > down[0].tail_offsets
            proc = start()
            try:
                deadline = time.monotonic() + 120
                while fresh.read(stack, table).snapshot_id == down[-1].snapshot_id:
                    assert time.monotonic() < deadline, "the restarted sink committed nothing in 120 s"
                    time.sleep(0.5)
                fresh_reads(stack, table, kafka, ids, reads=2)
            finally:
                stop_pid(proc.pid)
    finally:
        kafka.close()


def test_a_reader_merging_the_tail_it_keeps_still_holds_every_record_once(stack: Stack, unique: str) -> None:
    """Read after read, a Reader merges what it keeps by size tiers (PIECES_PER_MERGE pieces of a tier make
    one of the next): nothing commits meanwhile, so every merge is of tail that stays, and each read still
    holds Kafka up to its watermark, once."""
    stack.create_topic(unique, partitions=2)
    table = f"{unique}.pizzas"
    kafka = KafkaLog(stack, unique)
    try:
        with steady(stack, unique, 300):
            with running(stack, sink_config(unique)):
                wait_for_table(stack, table)
            reads = PIECES_PER_MERGE**2 + 1  # enough for a merge of merged pieces
            with fresh.Reader(stack, table) as reader:
                tiers = []
                for _ in range(reads):
                    time.sleep(0.2)  # new records for each read
                    read = reader.read()
                    got = sorted(r[0] for r in read.df.select("order_id").collect())
                    want = sorted(v["order_id"] for v in kafka.upto(read.watermark) if v)
                    assert got == want, f"a fresh read with {len(reader._pieces)} pieces kept, tail {read.tail_offsets}"
                    tiers.append([p.tier for p in reader._pieces])
        assert max(tiers[-1]) == 2, tiers  # merged twice over
        assert all(len(t) < 2 * PIECES_PER_MERGE for t in tiers), tiers  # the query's plan stays small
    finally:
        kafka.close()


def test_a_fresh_read_of_a_transactional_topic_holds_its_committed_records_once(stack: Stack, unique: str) -> None:
    """Transaction markers and aborted records occupy offsets that no record shows: each read of a Reader
    holds the committed records up to its watermark and none of the aborted ones."""
    stack.create_topic(unique, partitions=2)
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "transactional.id": f"tx-{unique}"})
    producer.init_transactions(30)

    def batch(first: int, count: int, commit: bool) -> list[str]:
        producer.begin_transaction()
        for i in range(first, first + count):
            producer.produce(unique, json.dumps({"order_id": f"o{i}", "qty": i}).encode(), partition=i % 2)
        assert producer.flush(30) == 0  # in the log before the abort: else the abort drops them unsent
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
        return [f"o{i}" for i in range(first, first + count)] if commit else []

    committed = batch(0, 6, True)
    once(stack, sink_config(unique))
    table = f"{unique}.pizzas"
    with fresh.Reader(stack, table) as reader:
        for first in (6, 20, 40):
            committed += batch(first, 5, False) + batch(first + 5, 5, True) + batch(first + 10, 3, False)
            read = reader.read()
            assert sorted(r[0] for r in read.df.select("order_id").collect()) == sorted(committed)
        # Each batch's marker and the aborted records are in the tail's offsets, not in its rows.
        assert (read.tail_offsets, read.left_out()) == (3 * (5 + 5 + 3) + 3 * 3 * 2, 0)


@pytest.mark.parametrize("version", [2, 3])
def test_a_fresh_read_of_a_cdc_table_applies_its_tail_as_the_next_commit_would(stack: Stack, unique: str,
                                                                                version: int) -> None:
    """Changes (I/U/D over 40 ids) stream while the sink commits each second: each read equals the changes up
    to its watermark replayed in Kafka's order, the newest change per id winning, a delete removing it; on
    format v2 (position deletes) and v3 (deletion vectors)."""
    stack.create_topic(unique, partitions=1)
    config = sink_config(unique, **{"iceberg.control.commit.interval-ms": "1000", "iceberg.tables.cdc-field": "op",
                                    "iceberg.tables.default-id-columns": "id",
                                    "iceberg.tables.auto-create-props.format-version": str(version)})
    table = f"{unique}.pizzas"
    stop = threading.Event()

    def changes() -> None:
        producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "enable.idempotence": True})
        i = 0
        while not stop.is_set():
            for _ in range(20):
                key = i % 40
                op = "I" if i < 40 else ("D" if i % 7 == 0 else "U")
                producer.produce(unique, json.dumps({"id": key, "op": op, "version": i}).encode(), str(key).encode())
                i += 1
            producer.flush(30)
            stop.wait(0.2)
        assert producer.flush(30) == 0

    def replay(values: list[Any]) -> list[str]:
        rows: dict[int, int] = {}
        for v in values:
            if v["op"] == "D":
                rows.pop(v["id"], None)
            else:
                rows[v["id"]] = v["version"]
        return [f"{k}:{n}" for k, n in rows.items()]

    kafka = KafkaLog(stack, unique)
    thread = threading.Thread(target=changes)
    thread.start()
    try:
        with running(stack, config):
            wait_for_table(stack, table)
            with fresh.Reader(stack, table) as reader:
                for _ in range(4):
                    read = reader.read()
                    got = sorted(f"{r.id}:{r.version}" for r in read.df.select("id", "version").collect())
                    assert got == sorted(replay(kafka.upto(read.watermark))), f"at snapshot {read.snapshot_id}"
                    time.sleep(1)
        assert stack.catalog.load_table((unique, "pizzas")).format_version == version
    finally:
        stop.set()
        thread.join()
        kafka.close()


def test_a_fresh_read_takes_a_new_field_into_the_tables_columns_and_names_a_table_not_there_yet(
        stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=1)
    config = sink_config(unique, **{"iceberg.tables.evolve-schema-enabled": "true"})
    table = f"{unique}.pizzas"
    with pytest.raises(TableMissing, match=table) as missing:
        fresh.read(stack, table, config)
    assert missing.value.table == table and missing.value.sink == config["name"]
    produce_raw(stack, unique, [json.dumps({"order_id": "a", "qty": 1}).encode()])
    sink = IcebergSink(stack, config)
    try:
        assert sink.run_once() is not None
    finally:
        sink.stop()
    produce_raw(stack, unique, [json.dumps({"order_id": "b", "qty": 2, "topping": "basil"}).encode()])
    read = fresh.read(stack, table)  # the settings from the table: the sink kept them there
    assert read.df.columns == ["order_id", "qty"]  # the new field comes with the commit that evolves the table
    assert sorted(tuple(r) for r in read.df.collect()) == [("a", 1), ("b", 2)]
    # A view for SQL, pinned as read.
    fresh.view(stack, table, f"fresh_{unique}")
    assert stack.spark.sql(f"SELECT sum(qty) FROM fresh_{unique}").first()[0] == 3
    # The table keeps the settings without the sink's credentials.
    kept = stack.catalog.load_table((unique, "pizzas")).properties[f"sinklab.settings.{config['name']}"]
    assert json.loads(kept)["name"] == config["name"] and "catalog_properties" not in json.loads(kept)
    with pytest.raises(ConfigError, match="keeps no settings of sink other"):
        fresh.read(stack, table, sink="other")
