"""The sink on Apache Kafka: a broker killed and brought back, transactional sources, fencing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource
from helpers import order_ids, produce, sink_config
from test_broker import consume_all

from sinklab.exceptions import KafkaUnavailable
from sinklab.sink import IcebergSink
from sinklab.sink.cycle import coordinator as coordinator_module
from sinklab.stack import Stack, StackInfo, stop_recorded
from sinklab.stack.process import pid_alive


def sinklab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sinklab.cli", *args], capture_output=True, text=True, timeout=180)


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    while pid_alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_killed_broker_comes_back_with_stack_up(tmp_path: Path) -> None:
    workdir = tmp_path / "stk"
    assert sinklab("stack", "up", "--workdir", str(workdir)).returncode == 0
    info = StackInfo.model_validate_json((workdir / "stack.json").read_text())
    try:
        producer = Producer({"bootstrap.servers": info.bootstrap_servers, "acks": "all", "enable.idempotence": True})
        acked: list[bytes] = []
        for i in range(500):
            producer.produce("kept", value=f"v{i}".encode(),
                             on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
        assert producer.flush(30) == 0 and len(acked) == 500
        group = Consumer({"bootstrap.servers": info.bootstrap_servers, "group.id": "g", "enable.auto.commit": False})
        group.commit(offsets=[TopicPartition("kept", 0, 321)], asynchronous=False)
        group.close()

        kill(info.pids["broker"])
        status = sinklab("stack", "status", "--workdir", str(workdir))
        assert status.returncode == 3 and json.loads(status.stdout)["processes"]["broker"]["state"] == "stopped"

        up = sinklab("stack", "up", "--workdir", str(workdir))
        assert up.returncode == 0, up.stderr
        assert "broker started" in up.stdout
        again = StackInfo.model_validate_json((workdir / "stack.json").read_text())
        # Only the dead process was started again, on its old address.
        assert again.pids["catalog"] == info.pids["catalog"] and again.pids["broker"] != info.pids["broker"]
        assert again.bootstrap_servers == info.bootstrap_servers
        info = again
        assert sorted(consume_all(info.bootstrap_servers, "kept")) == sorted(acked)
        group = Consumer({"bootstrap.servers": info.bootstrap_servers, "group.id": "g"})
        assert group.committed([TopicPartition("kept", 0)], timeout=10)[0].offset == 321
        group.close()
    finally:
        stop_recorded(info)


def test_three_brokers_replicate_and_a_dead_one_comes_back_with_stack_up(tmp_path: Path) -> None:
    workdir = tmp_path / "three"
    up = sinklab("stack", "up", "--workdir", str(workdir), "--brokers", "3")
    assert up.returncode == 0, up.stderr
    info = StackInfo.model_validate_json((workdir / "stack.json").read_text())
    try:
        assert info.brokers == 3 and len(info.bootstrap_servers.split(",")) == 3
        assert {"broker", "broker-2", "broker-3"} <= set(info.pids)
        producer = Producer({"bootstrap.servers": info.bootstrap_servers, "acks": "all", "enable.idempotence": True})
        for i in range(300):
            producer.produce("replicated", value=f"v{i}".encode())
        assert producer.flush(30) == 0
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": info.bootstrap_servers})
        meta = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0]
        assert sorted(meta.replicas) == [1, 2, 3] and sorted(meta.isrs) == [1, 2, 3]
        # A transactional producer creates __transaction_state, a group's commit __consumer_offsets.
        Producer({"bootstrap.servers": info.bootstrap_servers, "transactional.id": "t"}).init_transactions(30)
        group = Consumer({"bootstrap.servers": info.bootstrap_servers, "group.id": "g"})
        group.commit(offsets=[TopicPartition("replicated", 0, 1)], asynchronous=False)
        group.close()
        for topic in ("__consumer_offsets", "__transaction_state"):
            internal = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
            assert len(internal.replicas) == 3, topic
        configs = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
        broker_config = next(iter(configs.values())).result()
        assert broker_config["min.insync.replicas"].value == "2"
        assert broker_config["transaction.state.log.min.isr"].value == "2"

        # The leader dies: the records are on the other two, which carry on without it.
        leader = "broker" if meta.leader == 1 else f"broker-{meta.leader}"
        kill(info.pids[leader])
        deadline = time.monotonic() + 60  # the controller moves the leadership once the node's session ends

        def moved() -> bool:
            try:
                return admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0].leader != \
                    meta.leader
            except KafkaException:  # this metadata request went to the dead node; the next goes elsewhere
                return False

        while not moved():
            assert time.monotonic() < deadline, "the partition kept its dead leader"
            time.sleep(0.5)
        deadline = time.monotonic() + 60
        while True:
            try:  # a new client's first metadata may still name the dead leader: Kafka says so, and it asks again
                survived = consume_all(info.bootstrap_servers, "replicated")
                break
            except KafkaException:
                assert time.monotonic() < deadline, "the records were not readable from the other two nodes"
                time.sleep(1)
        assert sorted(survived) == sorted(f"v{i}".encode() for i in range(300))
        again = sinklab("stack", "up", "--workdir", str(workdir))
        assert again.returncode == 0, again.stderr
        assert f"({leader} started)" in again.stdout
        back = StackInfo.model_validate_json((workdir / "stack.json").read_text())
        assert back.bootstrap_servers == info.bootstrap_servers and back.brokers == 3
        assert back.pids[leader] != info.pids[leader]
        assert all(back.pids[n] == info.pids[n] for n in ("broker", "broker-2", "broker-3", "catalog") if n != leader)
        info = back
        assert sinklab("stack", "down", "--workdir", str(workdir)).returncode == 0
        refused = sinklab("stack", "up", "--workdir", str(workdir), "--brokers", "1")
        assert refused.returncode == 1 and "holds a stack of 3 broker(s)" in refused.stderr
    finally:
        stop_recorded(info)


@pytest.fixture()
def own_stack(stack: Stack, tmp_path: Path) -> Iterator[Stack]:
    """A stack of the test's own, whose broker it may kill; Spark moves over to it for the test."""
    stack.stop_spark()
    with Stack.embedded(tmp_path / "own") as own:
        yield own


@pytest.mark.spark
def test_broker_killed_mid_cycle_then_restarted(own_stack: Stack, unique: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    stack = own_stack
    stack.create_topic(unique, partitions=3)
    first = produce(stack, unique, 1500, seed=21)
    config = sink_config(unique, tables=[f"{unique}.a", f"{unique}.b"],
                         **{"iceberg.control.commit.timeout-ms": "5000"})
    real_crash_point = coordinator_module.crash_point

    def broker_dies(name: str) -> None:
        # One table has committed; the Kafka transaction (commit-start sent) is open.
        if name == "between-table-commits":
            kill(stack.info.pids["broker"])
        real_crash_point(name)

    sink = IcebergSink(stack, config)
    monkeypatch.setattr(coordinator_module, "crash_point", broker_dies)
    try:
        with pytest.raises(KafkaUnavailable, match=rf"sink-{unique}: the Kafka transaction of cycle .* failed") \
                as failed:
            sink.run_once()
        assert sink.status().state == "FAILED"
    finally:
        sink.stop()
    monkeypatch.setattr(coordinator_module, "crash_point", real_crash_point)
    # The exception, kept here as a notebook keeps its last error, holds the cycle's frames and so its
    # coordinator; the stopped coordinator's channel holds no producer, which would reconnect to the dead broker
    # until the interpreter exits.
    coordinator = next(e.frame.f_locals["self"] for e in failed.traceback
                       if isinstance(e.frame.f_locals.get("self"), coordinator_module.Coordinator))
    assert not [v for v in vars(coordinator.channel).values() if isinstance(v, Producer)]
    assert len(order_ids(stack, f"{unique}.a")) == 1500  # the table that committed before the broker died

    # `stack up` on the workdir: the broker alone starts again, on its old port.
    with Stack.embedded(stack.workdir, resume=stack.info) as restarted:
        assert set(restarted.info.pids) == {"broker", "catalog", "connect"}
        assert restarted.bootstrap_servers == stack.bootstrap_servers
        more = produce(stack, unique, 500, seed=22)
        sink = IcebergSink(stack, config)
        try:
            results = []
            while (result := sink.run_once()) is not None:
                results.append(result)
        finally:
            sink.stop()
        assert results
        for table in ("a", "b"):
            got = order_ids(stack, f"{unique}.{table}")
            assert len(got) == len(set(got)), f"duplicates in {table}"
            assert sorted(got) == sorted(first + more)


@pytest.mark.spark
def test_transactional_source_aborted_records_never_land(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    producer = Producer(stack.kafka_config(**{"transactional.id": f"src-{unique}"}))
    producer.init_transactions(30)

    def transaction(prefix: str, n: int, commit: bool) -> list[str]:
        producer.begin_transaction()
        keys = [f"{prefix}-{uuid.uuid4().hex[:8]}" for _ in range(n)]
        for i, key in enumerate(keys):
            value = {"order_id": key, "store_id": i % 5, "total": 1.5}
            producer.produce(unique, key=key, value=json.dumps(value), partition=i % 2)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
        return keys

    committed = transaction("c1", 100, True) + transaction("c1b", 7, True)
    transaction("ab", 60, False)
    committed += transaction("c2", 100, True)  # the ranges end right after this commit marker
    sink = IcebergSink(stack, sink_config(unique))
    try:
        first = sink.run_once()
        assert first is not None and first.records == 207  # marker and aborted offsets are not records
        assert sorted(order_ids(stack, f"{unique}.pizzas")) == sorted(committed)

        # An open transaction: the sink reads up to the last stable offset and does not wait for it.
        producer.begin_transaction()
        pending = [f"open-{i}" for i in range(40)]
        for i, key in enumerate(pending):
            producer.produce(unique, key=key, value=json.dumps({"order_id": key, "store_id": 1, "total": 2.0}),
                             partition=i % 2)
        producer.flush(30)
        assert sink.run_once() is None
        producer.commit_transaction(30)
        transaction("ab2", 30, False)
        assert sink.run_once().records == 40
    finally:
        sink.stop()
    got = order_ids(stack, f"{unique}.pizzas")
    assert len(got) == len(set(got))
    assert sorted(got) == sorted(committed + pending)
    assert not [k for k in got if k.startswith("ab")]
