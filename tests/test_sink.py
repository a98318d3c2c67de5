"""The sink on the embedded stack: delivery, resumption, exactly-once under crashes and zombies."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import order_ids, produce, run_cli, sink_config, sink_snapshots

from sinklab.demo import SEED_CONFIG
from sinklab.generators import produce_json
from sinklab.sink import IcebergSink, RecordError, SinkFenced, read_control_log
from sinklab.sink.config.keys import CYCLE_MAX_TASKS
from sinklab.sink.cycle import coordinator as coordinator_module
from sinklab.sink.records.reader import MIN_TASK_RECORDS, read_ranges
from sinklab.sink.tables.create import infer_schema
from sinklab.sink.wire import OffsetRange
from sinklab.stack import Stack
from sinklab.stack.process import stop_pid

pytestmark = pytest.mark.spark


def test_all_records_arrive_and_resume(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=3)
    ids = produce(stack, unique, 3000, seed=1)
    sink = IcebergSink(stack, sink_config(unique))
    try:
        first = sink.run_once()
        assert first is not None and first.records == 3000
        table = f"{unique}.pizzas"
        assert sorted(order_ids(stack, table)) == sorted(ids)
        assert sink.run_once() is None  # nothing new: no cycle, no snapshot
        assert len(sink_snapshots(stack, table)) == 1

        more = produce(stack, unique, 1000, seed=2)
        second = sink.run_once()
        assert second is not None and second.records == 1000
        assert sorted(order_ids(stack, table)) == sorted(ids + more)
        snaps = sink_snapshots(stack, table)
        assert len(snaps) == 2 and {s["sinklab.commit-id"] for s in snaps} == {first.commit_id, second.commit_id}
        assert json.loads(snaps[-1]["sinklab.offsets"])[unique] == {"0": second.offsets[unique][0],
                                                                    "1": second.offsets[unique][1],
                                                                    "2": second.offsets[unique][2]}
        assert int(snaps[-1]["sinklab.vtts"]) > 0

        log = read_control_log(stack.bootstrap_servers, sink=f"sink-{unique}")
        complete = log[log["type"] == "commit-complete"]
        assert list(complete["commit_id"]) == [first.commit_id, second.commit_id]
        assert [t[0]["records"] for t in complete["tables"]] == [3000, 1000]
        assert all(t[0]["data_files"] for t in complete["tables"])
        assert all(t[0]["write_ms"] > 0 and t[0]["commit_ms"] >= 0 for t in complete["tables"])
        status = sink.status()
        assert status.records == 4000 and status.cycles == 2 and sum(status.lag.values()) == 0
        # The driver's data files and manifests and the catalog's metadata files, all without a Hadoop
        # checksum beside them (spark.no_local_checksums: a fork of chmod for each .crc otherwise).
        location = Path(stack.catalog.load_table((unique, "pizzas")).location().removeprefix("file:"))
        written = {p.suffix for p in location.rglob("*") if p.is_file()}
        assert {".parquet", ".avro", ".json"} <= written and ".crc" not in written, written
    finally:
        sink.stop()


def test_a_cycle_reads_through_sparks_v2_kafka_reader_committed_records_only(stack: Stack, unique: str) -> None:
    """The sink's session and the stack's read Kafka through Spark's V2 reader (KAFKA_V2_READS), which
    skips an aborted transaction's records and the markers as the V1 source did."""
    stack.create_topic(unique, partitions=1)
    producer = Producer({**stack.kafka_config(), "transactional.id": f"tx-{unique}"})
    producer.init_transactions(30)
    for batch, commit in ((range(0, 5), True), (range(5, 8), False), (range(8, 12), True)):
        producer.begin_transaction()
        for i in batch:
            producer.produce(unique, json.dumps({"order_id": f"o{i}"}).encode())
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    probe = Consumer({**stack.kafka_config(), "group.id": f"probe-{unique}"})
    end = probe.get_watermark_offsets(TopicPartition(unique, 0), timeout=10)[1]  # markers included
    probe.close()
    sink = IcebergSink(stack, sink_config(unique))
    try:
        for session in (sink._session(), stack.spark):
            raw = read_ranges(session, stack.kafka_config(), [OffsetRange(unique, 0, 0, end)])
            assert "BatchScan KafkaTable" in raw._jdf.queryExecution().executedPlan().toString()
            assert sorted(json.loads(r.value)["order_id"] for r in raw.collect()) == sorted(
                f"o{i}" for i in (*range(0, 5), *range(8, 12)))
        assert sink.run_once().records == 9
    finally:
        sink.stop()
    assert sorted(order_ids(stack, f"{unique}.pizzas")) == sorted(f"o{i}" for i in (*range(0, 5), *range(8, 12)))


def test_a_cycle_takes_at_most_its_max_tasks_and_writes_a_file_per_task(stack: Stack, unique: str) -> None:
    """A cycle big enough for a task per core (two partitions, two cores) writes a data file per task;
    ``sinklab.cycle.max-tasks=1`` reads and writes it in one, leaving a core to other jobs."""
    stack.create_topic(unique, partitions=2)
    ids = produce(stack, unique, 2 * MIN_TASK_RECORDS + 2000, seed=12)
    files = {}
    for tasks in ("cores", "1"):
        extra = {} if tasks == "cores" else {CYCLE_MAX_TASKS: tasks}
        table = f"{unique}.pizzas_{tasks}"
        config = {**sink_config(unique, [table], **extra), "name": f"sink-{unique}-{tasks}"}  # a group each
        sink = IcebergSink(stack, config)
        try:
            assert sink.run_once().records == len(ids)
        finally:
            sink.stop()
        summary = stack.catalog.load_table((unique, f"pizzas_{tasks}")).current_snapshot().summary
        files[tasks] = int(summary["added-data-files"])
        assert sorted(order_ids(stack, table)) == sorted(ids)
    assert files == {"cores": stack.spark.sparkContext.defaultParallelism, "1": 1}


def test_background_thread_start_stop(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    sink = IcebergSink(stack, sink_config(unique)).start()
    try:
        assert sink.status().state == "RUNNING"
        ids = produce(stack, unique, 500, seed=11)
        deadline = time.monotonic() + 120
        while sink.status().records < 500 and time.monotonic() < deadline:
            time.sleep(0.5)
        status = sink.status()
        assert status.records == 500 and status.last_commit is not None and status.state == "RUNNING"
    finally:
        sink.stop()
    assert sink.status().state == "STOPPED"
    assert sorted(order_ids(stack, f"{unique}.pizzas")) == sorted(ids)


def test_types_follow_the_table(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    stack.spark.sql(
        f"CREATE TABLE sinklab.{unique}.typed (id BIGINT, ts TIMESTAMP, d DATE, amount DECIMAL(10,2), ok BOOLEAN, "
        "tags ARRAY<STRING>, attrs MAP<STRING, INT>, addr STRUCT<city: STRING, zip: INT>) USING iceberg")
    values = [
        {"id": 1, "ts": "2024-01-04 12:28:13", "d": "2024-01-04", "amount": 12.5, "ok": True, "tags": ["a"],
         "attrs": {"x": 1}, "addr": {"city": "Oslo", "zip": 150}, "extra": "ignored"},
        {"id": 2, "ts": "2024-01-04T12:28:13+01:00", "d": 19726, "amount": "7.25", "ok": False},
        {"id": 3, "ts": 1704371293000},
    ]
    produce_json(stack.bootstrap_servers, unique, values)
    sink = IcebergSink(stack, sink_config(unique, [f"{unique}.typed"]))
    try:
        assert sink.run_once().records == 3
    finally:
        sink.stop()
    rows = {r.id: r for r in stack.spark.table(f"sinklab.{unique}.typed").collect()}
    assert rows[1].ts.isoformat() == rows[3].ts.isoformat() == "2024-01-04T12:28:13"
    assert rows[2].ts.isoformat() == "2024-01-04T11:28:13"
    assert str(rows[1].d) == str(rows[2].d) == "2024-01-04"
    assert float(rows[1].amount) == 12.5 and float(rows[2].amount) == 7.25
    assert rows[1].tags == ["a"] and rows[1].attrs == {"x": 1} and rows[1].addr.zip == 150
    assert rows[3].ok is None and rows[3].tags is None


def test_connect_envelope_auto_create(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    schema = {"type": "struct", "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "at", "type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "optional": True},
        {"field": "day", "type": "int32", "name": "org.apache.kafka.connect.data.Date", "optional": True},
        {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2"}, "optional": True},
    ]}
    # 1234 unscaled at scale 2 = 12.34, base64 of big-endian 0x04D2.
    produce_json(stack.bootstrap_servers, unique, [
        {"schema": schema, "payload": {"id": 1, "at": 1704371293000, "day": 19726, "price": "BNI="}}])
    sink = IcebergSink(stack, sink_config(unique, [f"{unique}.env"], **{"value.converter.schemas.enable": "true"}))
    try:
        assert sink.run_once().records == 1
    finally:
        sink.stop()
    row = stack.spark.table(f"sinklab.{unique}.env").first()
    assert row.id == 1 and str(row.day) == "2024-01-04" and float(row.price) == 12.34
    table = stack.catalog.load_table((unique, "env"))
    assert str(table.schema().find_field("price").field_type) == "decimal(38, 2)"
    assert table.schema().find_field("id").required


def test_a_table_created_from_several_schemas_takes_them_in_the_order_their_records_came(stack: Stack) -> None:
    """As Apache's sink creates a table from its first record and evolves it record by record: the first
    schema's columns first, whatever order Spark's grouping gives the schemas (it differs by their text)."""
    for n in range(8):
        def schema(*names: str, n: int = n) -> str:
            return json.dumps({"type": "struct", "name": f"s{n}", "fields": [
                {"field": f, "type": "int64", "optional": True} for f in names]})

        records = stack.spark.createDataFrame(
            [("t", 0, 0, 5, b"{}", schema("a")), ("t", 0, 1, 5, b"{}", schema("b", "a")),
             ("t", 1, 0, 4, b"{}", schema("c"))],
            "topic string, partition int, offset long, timestamp long, value binary, _schema string")
        assert infer_schema(stack.spark, records, True).fieldNames() == ["c", "a", "b"], n


def test_bad_record_stops_before_commit(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    stack.spark.sql(f"CREATE TABLE sinklab.{unique}.t (id BIGINT) USING iceberg")
    produce_json(stack.bootstrap_servers, unique, [{"id": 1}, {"id": "seven"}])
    sink = IcebergSink(stack, sink_config(unique, [f"{unique}.t"]))
    try:
        with pytest.raises(RecordError) as info:
            sink.run_once()
        assert (info.value.topic, info.value.partition, info.value.offset) == (unique, 0, 1)
        assert info.value.table == f"{unique}.t" and "seven" in str(info.value)
        assert sink.status().state == "FAILED" and "seven" in sink.status().trace
        assert stack.spark.table(f"sinklab.{unique}.t").count() == 0
    finally:
        sink.stop()


@pytest.mark.parametrize("point", coordinator_module.CRASH_POINTS)
def test_crash_at_every_step_then_restart(stack: Stack, stack_file: Path, tmp_path: Path, unique: str,
                                          point: str) -> None:
    stack.create_topic(unique, partitions=2)
    tables = [f"{unique}.a", f"{unique}.b"]
    config = tmp_path / "sink.json"
    config.write_text(json.dumps(sink_config(unique, tables)))
    ids = produce(stack, unique, 500, seed=3)
    # The first cycle in this process (its Spark is warm); the crash is a process of its own.
    first = IcebergSink(stack, sink_config(unique, tables))
    try:
        assert first.run_once().records == 500
    finally:
        first.stop()
    more = produce(stack, unique, 700, seed=4)

    crashed = run_cli("sink", "run", "--config", str(config), "--stack", str(stack_file), "--once",
                      env={coordinator_module.CRASH_ENV: point})
    assert crashed.returncode == 86, crashed.stderr
    # The restart runs here again (a new instance of the sink, on the warm Spark): what it finds is
    # what the crashed process left, whichever process looks.
    recovered = IcebergSink(stack, sink_config(unique, tables))
    try:
        assert recovered.run_once() is not None
    finally:
        recovered.stop()
    for table in tables:
        assert sorted(order_ids(stack, table)) == sorted(ids + more), f"{table} after a crash at {point}"
        refs = stack.catalog.load_table(tuple(table.split("."))).metadata.refs
        assert list(refs) == ["main"], f"staging branches left behind: {list(refs)}"
    log = read_control_log(stack.bootstrap_servers, sink=f"sink-{unique}")
    assert (log["type"] == "commit-complete").sum() == 2  # the crashed cycle's events were never committed


@pytest.mark.parametrize("pace", [{}, {"sinklab.commit.target-lag-ms": "2000", "sinklab.commit.max-records": "400"}],
                         ids=["interval", "lag-target-and-max-records"])
def test_sigkill_while_records_arrive(stack: Stack, stack_file: Path, tmp_path: Path, unique: str,
                                      pace: dict[str, str]) -> None:
    stack.create_topic(unique, partitions=3)
    config = tmp_path / "sink.json"
    config.write_text(json.dumps(sink_config(unique, **pace)))
    produced: list[str] = []
    stop = threading.Event()

    def producer() -> None:
        seed = 100
        while not stop.is_set():
            produced.extend(produce(stack, unique, 300, seed=seed))
            seed += 1
            time.sleep(0.3)

    thread = threading.Thread(target=producer)
    thread.start()
    rng = random.Random(5)
    try:
        for _ in range(2):
            proc = subprocess.Popen([sys.executable, "-m", "sinklab.cli", "sink", "run", "--config", str(config),
                                     "--stack", str(stack_file)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                time.sleep(rng.uniform(8, 16))
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
            finally:
                stop_pid(proc.pid)
    finally:
        stop.set()
        thread.join()
    drained = run_cli("sink", "run", "--config", str(config), "--stack", str(stack_file), "--until-idle", "3")
    assert drained.returncode == 0, drained.stderr
    got = order_ids(stack, f"{unique}.pizzas")
    assert len(got) == len(set(got)), "duplicates after SIGKILLs"
    assert sorted(got) == sorted(produced)


def test_two_instances_zombie_is_fenced(stack: Stack, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.create_topic(unique, partitions=2)
    ids = produce(stack, unique, 800, seed=6)
    old = IcebergSink(stack, sink_config(unique))
    newer: list[IcebergSink] = []
    real_crash_point = coordinator_module.crash_point

    def newer_instance_takes_over(name: str) -> None:
        # After the old instance wrote its data files, a newer instance starts and runs a full cycle.
        if name == "after-data-files" and not newer:
            newer.append(IcebergSink(stack, sink_config(unique)))
            assert newer[0].run_once().records == 800
        real_crash_point(name)

    monkeypatch.setattr(coordinator_module, "crash_point", newer_instance_takes_over)
    try:
        with pytest.raises(SinkFenced, match="fenced"):
            old.run_once()
        assert old.status().state == "FAILED"
        got = order_ids(stack, f"{unique}.pizzas")
        assert sorted(got) == sorted(ids)
        more = produce(stack, unique, 100, seed=7)
        assert newer[0].run_once().records == 100
        assert sorted(order_ids(stack, f"{unique}.pizzas")) == sorted(ids + more)
    finally:
        old.stop()
        for sink in newer:
            sink.stop()


def test_unrelated_writer_during_commit_is_kept(stack: Stack, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.create_topic(unique)
    first = produce(stack, unique, 200, seed=8)
    sink = IcebergSink(stack, sink_config(unique))
    table = f"sinklab.{unique}.pizzas"
    try:
        sink.run_once()
        ids = produce(stack, unique, 300, seed=9)
        real_crash_point = coordinator_module.crash_point

        def someone_writes(name: str) -> None:
            if name == "after-data-files":
                stack.spark.sql(f"INSERT INTO {table} VALUES ('by-a-user', 0, NULL, NULL, NULL, NULL, NULL)")
            real_crash_point(name)

        monkeypatch.setattr(coordinator_module, "crash_point", someone_writes)
        assert sink.run_once().records == 300
    finally:
        sink.stop()
    assert sorted(order_ids(stack, f"{unique}.pizzas")) == sorted([*first, *ids, "by-a-user"])


def test_seed_config_verbatim_on_the_stack(stack: Stack, stack_file: Path) -> None:
    stack.create_topic("completed-pizzas", partitions=6)
    ids = produce(stack, "completed-pizzas", 2000, seed=10)
    # As the README says it, from the repository root: a bare name is the packaged seed config.
    result = run_cli("sink", "run", "--config", SEED_CONFIG.name, "--stack", str(stack_file), "--once")
    assert result.returncode == 0, result.stderr
    assert "committed 2000 records to rpc.pizzas" in result.stdout
    stack.register_spark_catalog("demo")
    assert sorted(r.order_id for r in stack.spark.table("demo.rpc.pizzas").collect()) == sorted(ids)

    status = run_cli("sink", "status", "pizzas-on-ice", "--stack", str(stack_file), "--json")
    assert status.returncode == 0, status.stderr
    [report] = json.loads(status.stdout)
    assert report["last_cycle"]["records"] == 2000 and report["cycles"] >= 1
    assert report["group_id"] == "connect-pizzas-on-ice"
    assert set(report["lag"]) == {f"completed-pizzas[{p}]" for p in range(6)} and sum(report["lag"].values()) == 0
    [table] = report["tables"]
    head = stack.catalog.load_table("rpc.pizzas").current_snapshot()
    assert (table["table"], table["snapshot_id"]) == ("rpc.pizzas", head.snapshot_id)
    assert table["total_records"] == stack.spark.table("demo.rpc.pizzas").count()
    text = run_cli("sink", "status", "--stack", str(stack_file))
    assert "pizzas-on-ice: " in text.stdout and "lag 0" in text.stdout and "rpc.pizzas@main" in text.stdout
    unknown = run_cli("sink", "status", "no-such-sink", "--stack", str(stack_file))
    assert unknown.returncode == 1 and "no sink no-such-sink" in unknown.stderr
    top = stack.spark.table("demo.rpc.pizzas").groupBy("store_id").count().sort("count", ascending=False).first()
    assert top.store_id == 1


def test_cycles_never_overlap_between_the_background_loop_and_a_call() -> None:
    """sink.start() then sink.run_once() (a notebook, run_until_idle after start): the cycles share
    the session's staging branch setting and the transactional producer, so they run one at a time."""
    running, most, cycles = 0, 0, 0
    guard = threading.Lock()

    class SlowCoordinator:
        def run_cycle(self) -> None:
            nonlocal running, most, cycles
            with guard:
                running += 1
                most = max(most, running)
            time.sleep(0.05)
            with guard:
                running -= 1
                cycles += 1

        def close(self) -> None:
            pass

    # No stack: the coordinator is this test's; a failed cycle would look for the Spark log.
    stack = SimpleNamespace(spark_log=Path("/nonexistent/spark.log"))
    sink = IcebergSink(stack, sink_config("t", **{"iceberg.control.commit.interval-ms": "100"}))  # type: ignore[arg-type]
    sink._coordinator = SlowCoordinator()  # type: ignore[assignment]
    sink.start()
    callers = [threading.Thread(target=sink.run_until_idle, args=(0.2,)) for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    sink.stop()
    assert cycles >= 4 and most == 1


def test_a_missing_config_file_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    result = run_cli("sink", "run", "--config", str(missing), "--stack", str(tmp_path / "stack.json"), "--once")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"sinklab: error: config file {missing} not found (a bare name is also looked up among sinklab's packaged "
        f"configs: pizzas-on-ice.json)"]


def test_cli_errors_go_to_stderr(stack_file: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "topics": "a", "iceberg.tables": "ns.t",
                               "iceberg.control.commit.interval-ms": "often"}))
    result = run_cli("sink", "run", "--config", str(bad), "--stack", str(stack_file), "--once")
    assert result.returncode != 0 and "iceberg.control.commit.interval-ms" in result.stderr


@pytest.fixture(autouse=True)
def _no_leftover_env() -> Iterator[None]:
    assert coordinator_module.CRASH_ENV not in os.environ
    yield
