"""The embedded broker is a real Kafka-protocol server: topics, transactions, persistence."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sinklab.stack import Stack
from sinklab.stack.broker import EmbeddedBroker


def consume_all(bootstrap: str, topic: str, partitions: int = 1, isolation: str = "read_committed") -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
        "isolation.level": isolation, "enable.auto.commit": False,
    })
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        consumer.assign(tps)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        values: list[bytes] = []
        positions = {p: 0 for p in range(partitions)}
        idle = 0
        while any(positions[p] < ends[p] for p in ends) and idle < 20:
            msgs = consumer.consume(500, timeout=0.5)
            idle = 0 if msgs else idle + 1
            if not msgs:
                # Transaction markers and aborted records take offsets but are never delivered.
                at = consumer.position([TopicPartition(topic, p) for p in ends])
                positions.update({tp.partition: max(positions[tp.partition], tp.offset) for tp in at})
            for m in msgs:
                if m.error():
                    continue
                positions[m.partition()] = m.offset() + 1
                values.append(m.value())
        return values
    finally:
        consumer.close()


def test_produce_consume(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=3)
    producer = Producer(stack.kafka_config(**{"enable.idempotence": True}))
    for i in range(300):
        producer.produce(unique, key=str(i), value=f"v{i}")
    assert producer.flush(30) == 0
    assert sorted(consume_all(stack.bootstrap_servers, unique, 3)) == sorted(f"v{i}".encode() for i in range(300))
    assert len(stack.admin().list_topics(unique).topics[unique].partitions) == 3


def test_transactions_read_committed(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    producer = Producer(stack.kafka_config(**{"transactional.id": f"tx-{unique}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(unique, value=b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(unique, value=b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    assert consume_all(stack.bootstrap_servers, unique) == [b"committed"]
    assert b"aborted" in consume_all(stack.bootstrap_servers, unique, isolation="read_uncommitted")


def test_restart_keeps_data(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path)
    broker.start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(50):
            producer.produce("kept", value=str(i))
        assert producer.flush(30) == 0
        broker.stop()
        broker = EmbeddedBroker(tmp_path, port=broker.port, controller_port=broker.controller_port)
        broker.start()
        assert consume_all(broker.bootstrap_servers, "kept") == [str(i).encode() for i in range(50)]
    finally:
        broker.stop()


def test_a_cluster_id_starting_with_a_dash_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One random id in 64 starts with '-', which Kafka's format tool would read as an option.
    from sinklab.stack import broker

    monkeypatch.setattr(broker, "_cluster_id", lambda: "-AbCdEfGhIjKlMnOpQrStU")
    b = EmbeddedBroker(tmp_path)
    b.home.mkdir(parents=True)
    b.config_path.write_text("".join(f"{k}={v}\n" for k, v in b.properties().items()))
    b._format(broker.jars.classpath(broker.jars.KAFKA))
    assert "cluster.id=-AbCdEfGhIjKlMnOpQrStU" in (b.data_dir / "meta.properties").read_text()


def test_free_port_never_hands_out_a_port_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port may look free again once handed out (its server not started yet): the broker once got one
    for its listener and its controller both."""
    from sinklab.stack import process

    offered = iter([21001, 21001, 21001, 21002])
    monkeypatch.setattr(process, "_handed_out", set())
    monkeypatch.setattr(process._random, "randrange", lambda low, high: next(offered))
    monkeypatch.setattr(process, "port_free", lambda port: True)
    assert [process.free_port(), process.free_port()] == [21001, 21002]


def test_free_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    """Outgoing connections take ports from the ephemeral range: a server's port chosen there can be
    gone by the time the server binds it. The test binds as the servers do, with SO_REUSEADDR: a port
    a stopped broker of an earlier test left in TIME_WAIT is free for a server (CI once failed here
    binding without it)."""
    import socket

    from sinklab.stack import process

    floor = process._ephemeral_floor()
    for _ in range(20):
        port = process.free_port()
        assert process.PORT_FLOOR <= port < floor
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((process.LOOPBACK, port))
            sock.listen()


def test_create_topic_waits_until_every_partition_has_a_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's metadata can show a new topic before all its partitions and their leaders."""
    from types import SimpleNamespace

    from sinklab.stack import StackInfo

    def meta(*leaders: int) -> SimpleNamespace:
        partitions = {i: SimpleNamespace(error=None, leader=leader) for i, leader in enumerate(leaders)}
        return SimpleNamespace(topics={"t": SimpleNamespace(error=None, partitions=partitions)})

    answers = [meta(), meta(2), meta(2, -1, 3), meta(2, 1, 3)]  # what three nodes said, in turn
    done = SimpleNamespace(result=lambda timeout: None)
    admin = SimpleNamespace(create_topics=lambda topics, request_timeout: {"t": done},
                            list_topics=lambda name, timeout: answers.pop(0))
    stack = Stack(StackInfo(bootstrap_servers="127.0.0.1:1", catalog_uri="http://127.0.0.1:1", warehouse="/w"))
    monkeypatch.setattr(stack, "admin", lambda: admin)
    partitions = stack.create_topic("t", partitions=3)
    assert answers == []  # returned only once the last answer showed three partitions, each with a leader
    assert {i: p.leader for i, p in partitions.items()} == {0: 2, 1: 1, 2: 3}  # and what that answer said
