"""The control topic's events and the one "read a topic to its end" loop, without Kafka: events round
trip and keep their wire bytes; readers skip other writers' records and stop on a clear end condition
(a fake consumer stands in for librdkafka, transaction markers and open transactions included)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import confluent_kafka
import pandas as pd
import pytest

from sinklab.exceptions import ControlEventError
from sinklab.sink.wire import apache_events, control, topics
from sinklab.sink.wire.control import (
    CONTROL_TOPIC,
    CommitComplete,
    CommitStart,
    Maintenance,
    PayloadType,
    TableCommit,
    decode,
    encode,
    events_of,
    log_frame,
    read_control_log,
)
from sinklab.sink.wire.topics import TopicReader

COMMIT_ID = "7f0c2a4e-3b1d-4c5e-9a8f-0123456789ab"
COMPLETE = CommitComplete(
    sink="pizzas", commit_id=COMMIT_ID, ts_ms=1718000000123, vtts_ms=1717999999000,
    offsets={"orders": {0: 120, 1: 98}}, counters={"records": 218, "tombstones": 2}, duration_ms=1543,
    tables=[TableCommit(table="rpc.pizzas", branch="main", snapshot_id=5937117119577207000, records=216,
                        data_files=["s3://w/rpc/pizzas/data/00000-0.parquet"], delete_files=[], bytes=40960,
                        offsets={"orders": {0: 120, 1: 98}}, vtts_ms=1717999999000, write_ms=812, commit_ms=97)])
START = CommitStart("pizzas", COMMIT_ID, 1718000000000)
MAINTENANCE = Maintenance(
    sink="pizzas", commit_id="c1", ts_ms=5, counters={"delay_ms": 3, "compact.rewritten_data_files": 7},
    duration_ms=9, tables=[TableCommit(table="rpc.pizzas", branch="main", snapshot_id=-1, records=0, data_files=[],
                                       delete_files=[], bytes=100, offsets={}, vtts_ms=None, write_ms=9, commit_ms=0)])

# What sinklab/sink/events.py (the dict encoder before the typed events) wrote for the same three events.
OLD_BYTES = {
    "complete": bytes.fromhex(
        "5c011e636f6d6d69742d636f6d706c6574650c70697a7a61734837663063326134652d336231642d346335652d396138"
        "662d303132333435363738396162f6f1bc8c806402b0e0bc8c8064367b226f7264657273223a7b2230223a3132302c22"
        "31223a39387d7d02147270632e70697a7a6173086d61696eb0c3d1e48ca4f0e4a401b003024c73333a2f2f772f727063"
        "2f70697a7a61732f646174612f30303030302d302e706172717565740000808005367b226f7264657273223a7b223022"
        "3a3132302c2231223a39387d7d02b0e0bc8c8064d80cc20100040e7265636f726473b40314746f6d6273746f6e657304"
        "008e18"),
    "start": bytes.fromhex(
        "5c0118636f6d6d69742d73746172740c70697a7a61734837663063326134652d336231642d346335652d396138662d30"
        "313233343536373839616280f0bc8c806400047b7d000000"),
    "maintenance": bytes.fromhex(
        "5c01166d61696e74656e616e63650c70697a7a61730463310a00047b7d02147270632e70697a7a6173086d61696e0100"
        "0000c801047b7d00120000041064656c61795f6d730638636f6d706163742e72657772697474656e5f646174615f6669"
        "6c65730e0012"),
}
# What Apache Iceberg's sink 1.12 writes to its control topic: AvroUtil.encode(new Event("connect-pizzas-java",
# new StartCommit(11111111-2222-3333-4444-555555555555))), its frame (C2 01, the schema, the datum).
APACHE_RECORD = bytes.fromhex(
        "c20102417b2274797065223a227265636f7264222c226e616d65223a224576656e74222c226e616d657370616365223a"
        "226f72672e6170616368652e696365626572672e636f6e6e6563742e6576656e7473222c226669656c6473223a5b7b22"
        "6e616d65223a226964222c2274797065223a7b2274797065223a226669786564222c226e616d65223a22757569645f66"
        "69786564222c226e616d657370616365223a22222c2273697a65223a31362c226c6f676963616c54797065223a227575"
        "6964227d2c226669656c642d6964223a31303530307d2c7b226e616d65223a2274797065222c2274797065223a22696e"
        "74222c226669656c642d6964223a31303530317d2c7b226e616d65223a2274696d657374616d70222c2274797065223a"
        "7b2274797065223a226c6f6e67222c226c6f676963616c54797065223a2274696d657374616d702d6d6963726f73222c"
        "2261646a7573742d746f2d757463223a747275657d2c226669656c642d6964223a31303530327d2c7b226e616d65223a"
        "2267726f75705f6964222c2274797065223a22737472696e67222c226669656c642d6964223a31303530337d2c7b226e"
        "616d65223a227061796c6f6164222c2274797065223a7b2274797065223a227265636f7264222c226e616d65223a2253"
        "74617274436f6d6d6974222c226669656c6473223a5b7b226e616d65223a22636f6d6d69745f6964222c227479706522"
        "3a22757569645f6669786564222c226669656c642d6964223a31303230307d5d7d2c226669656c642d6964223a313035"
        "30347d5d7d4dcfe17c9bfc49cd91f0d3b89a21c36200aae1b6a9c0c6b00626636f6e6e6563742d70697a7a61732d6a61"
        "766111111111222233334444555555555555")


@pytest.mark.parametrize("event", [START, COMPLETE, MAINTENANCE], ids=["start", "complete", "maintenance"])
def test_each_event_type_round_trips(event: control.ControlEvent) -> None:
    assert decode(encode(event)) == event
    assert type(decode(encode(event))) is type(event)


@pytest.mark.parametrize("name,event", [("complete", COMPLETE), ("start", START), ("maintenance", MAINTENANCE)])
def test_the_wire_format_is_the_dict_encoders(name: str, event: control.ControlEvent) -> None:
    assert encode(event) == OLD_BYTES[name]
    assert decode(OLD_BYTES[name]) == event


def test_payload_types_are_their_wire_strings() -> None:
    assert [START.type, COMPLETE.type, MAINTENANCE.type] == ["commit-start", "commit-complete", "maintenance"]
    assert PayloadType("commit-complete") is PayloadType.COMMIT_COMPLETE
    assert str(PayloadType.MAINTENANCE) == "maintenance"


def test_a_record_that_is_not_sinklabs_is_foreign() -> None:
    for data in (APACHE_RECORD, b"", b"\x00", b"{}"):
        with pytest.raises(ControlEventError) as info:
            decode(data)
        assert info.value.foreign and isinstance(info.value, ValueError)
    assert info.value.magic == ord("{") and info.value.version == ord("}")


def test_apaches_events_are_read_in_their_own_frame() -> None:
    schema, event = apache_events.unframe(APACHE_RECORD)
    assert (schema["namespace"], schema["name"]) == ("org.apache.iceberg.connect.events", "Event")
    assert event["group_id"] == "connect-pizzas-java" and event["type"] == 0  # START_COMMIT
    assert uuid.UUID(bytes=event["payload"]["commit_id"]) == uuid.UUID("11111111-2222-3333-4444-555555555555")
    assert apache_events.unframe(encode(START)) is None  # sinklab's are not in that frame


def test_an_unsupported_schema_version_is_a_clear_error() -> None:
    newer = bytes((control.MAGIC, 2)) + OLD_BYTES["start"][2:]
    with pytest.raises(ValueError, match="schema version 2 is not supported") as info:
        decode(newer)
    assert isinstance(info.value, ControlEventError)
    assert (info.value.magic, info.value.version, info.value.foreign) == (0x5C, 2, False)
    with pytest.raises(ControlEventError, match="does not decode"):
        decode(OLD_BYTES["complete"][:40])  # sinklab's header, a truncated body
    with pytest.raises(ControlEventError, match="does not decode"):
        decode(OLD_BYTES["complete"].replace(b'"0":120', b'"0":1x0'))  # offsets that are not JSON
    unknown = OLD_BYTES["start"].replace(b"\x18commit-start", b"\x18commit-stop!")
    with pytest.raises(ControlEventError, match="unknown type 'commit-stop!'"):
        decode(unknown)
    with pytest.raises(ControlEventError):
        list(events_of([message("c", 0, 0, newer)]))  # readers skip other writers' records, not these


def test_the_log_frame_has_the_same_columns_and_dtypes_empty_or_not() -> None:
    empty, full = log_frame([]), log_frame([START, COMPLETE, MAINTENANCE])
    assert list(empty.columns) == list(full.columns) == control.LOG_COLUMNS
    assert empty.dtypes.to_dict() == full.dtypes.to_dict()
    assert full["type"].tolist() == ["commit-start", "commit-complete", "maintenance"]
    assert type(full["type"][0]) is str
    assert full["ts"][1] == pd.Timestamp(1718000000123, unit="ms", tz="UTC")
    assert pd.isna(full["vtts"][0]) and pd.isna(full["vtts"][2]) and full["vtts"][1].year == 2024
    assert full["offsets"].tolist() == [{}, {"orders": {0: 120, 1: 98}}, {}]
    assert full["tables"][1][0]["offsets"] == {"orders": {0: 120, 1: 98}} and full["tables"][0] == []
    assert full["counters"][2]["delay_ms"] == 3 and full["duration_ms"].tolist() == [0, 1543, 9]


# ---- a fake librdkafka: one log per partition of messages, commit markers and an open transaction
MARKER = object()  # a transaction's commit marker: an offset with no message


@dataclass
class FakeMessage:
    _topic: str
    _partition: int
    _offset: int
    _value: bytes | None
    _timestamp: int = 0
    _headers: list[tuple[str, bytes]] = field(default_factory=list)

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return 1, self._timestamp

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers


def message(topic: str, partition: int, offset: int, value: bytes | None) -> FakeMessage:
    return FakeMessage(topic, partition, offset, value)


class Broker:
    """Partitions as lists: bytes (a committed record), MARKER, or ("open", bytes) for a record of a
    transaction still open, which read_committed consumers cannot pass."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[Any]] = {}
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class FakeConsumer:
    broker: Broker

    def __init__(self, conf: dict[str, Any]) -> None:
        assert conf["isolation.level"] == "read_committed" and conf["enable.auto.commit"] is False
        self.fetch: dict[tuple[str, int], int] = {}  # assigned partitions, the next offset to fetch
        self.app: dict[tuple[str, int], int] = {}  # what position() answers
        self.closed = False

    def list_topics(self, topic: str, timeout: float) -> Any:
        parts = {p: None for t, p in self.broker.logs if t == topic}
        meta = SimpleNamespace(partitions=parts, error=None) if parts else None
        return SimpleNamespace(topics={topic: meta} if meta else {})

    def get_watermark_offsets(self, tp: confluent_kafka.TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.broker.logs[(tp.topic, tp.partition)])

    def incremental_assign(self, tps: list[confluent_kafka.TopicPartition]) -> None:
        for tp in tps:
            assert (tp.topic, tp.partition) not in self.fetch
            self.fetch[(tp.topic, tp.partition)] = tp.offset
            self.app[(tp.topic, tp.partition)] = -1001

    def incremental_unassign(self, tps: list[confluent_kafka.TopicPartition]) -> None:
        for tp in tps:
            del self.fetch[(tp.topic, tp.partition)]

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        out: list[FakeMessage] = []
        for (topic, p), pos in self.fetch.items():
            log = self.broker.logs[(topic, p)]
            while pos < len(log) and len(out) < num_messages and not isinstance(log[pos], tuple):
                if log[pos] is not MARKER:
                    out.append(FakeMessage(topic, p, pos, log[pos], _timestamp=1000 + pos))
                pos += 1
                self.app[(topic, p)] = pos  # librdkafka moves the position past markers too
            self.fetch[(topic, p)] = pos
        if not out:
            self.broker.now += timeout  # a poll that finds nothing waits its timeout
        return out

    def position(self, tps: list[confluent_kafka.TopicPartition]) -> list[confluent_kafka.TopicPartition]:
        return [confluent_kafka.TopicPartition(tp.topic, tp.partition, self.app[(tp.topic, tp.partition)])
                for tp in tps]

    def close(self) -> None:
        self.closed = True


@pytest.fixture()
def broker(monkeypatch: pytest.MonkeyPatch) -> Broker:
    b = Broker()
    FakeConsumer.broker = b
    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    monkeypatch.setattr(topics, "time", b)
    return b


def offsets_read(reader: TopicReader, **kwargs: Any) -> list[tuple[str, int, int]]:
    return [(m.topic(), m.partition(), m.offset()) for batch in reader.read(**kwargs) for m in batch]


def test_a_read_from_the_tail_starts_that_many_records_before_each_end(broker: Broker) -> None:
    broker.logs = {("t", 0): [b"a", b"b", b"c", MARKER], ("t", 1): [b"d"]}
    with TopicReader("kafka:9092", "t", tail=2) as reader:
        assert sorted(offsets_read(reader, timeout=5)) == [("t", 0, 2), ("t", 1, 0)]  # the marker is one of the 2


def test_a_read_ends_at_the_high_watermark_even_on_a_transaction_marker(broker: Broker) -> None:
    broker.logs = {("t", 0): [b"a", b"b", MARKER], ("t", 1): [b"c", MARKER, b"d", MARKER], ("t", 2): []}
    with TopicReader("kafka:9092", "t") as reader:
        assert sorted(offsets_read(reader, timeout=5)) == [("t", 0, 0), ("t", 0, 1), ("t", 1, 0), ("t", 1, 2)]
        assert broker.now < 1  # it ended on the positions, not on a timeout
        # Done partitions stay assigned at their end (the next read continues there, markers and all).
        assert reader._consumer.fetch == {("t", 0): 3, ("t", 1): 4}


def test_a_read_stops_at_until_and_the_next_read_continues_there(broker: Broker) -> None:
    broker.logs = {("t", 0): [b"a", b"b", b"c"], ("u", 0): [b"x", b"y"]}
    with TopicReader("kafka:9092", ["t", "u"]) as reader:
        first = offsets_read(reader, until={"t": {0: 1}}, timeout=5)
        assert sorted(first) == [("t", 0, 0), ("u", 0, 0), ("u", 0, 1)]
        broker.logs[("u", 0)].append(b"z")
        assert sorted(offsets_read(reader, timeout=5)) == [("t", 0, 1), ("t", 0, 2), ("u", 0, 2)]
        assert offsets_read(reader, timeout=5) == []


def test_an_open_transaction_times_out_naming_the_partition_or_ends_an_idle_read(broker: Broker) -> None:
    broker.logs = {("t", 0): [b"a", MARKER, ("open", b"b")], ("t", 1): [b"c"]}
    with TopicReader("kafka:9092", "t") as reader, \
            pytest.raises(TimeoutError, match=r"no progress for 3 s reading t\[0\] \(at 2, end 3\)"):
        offsets_read(reader, timeout=3)
    started = broker.now
    with TopicReader("kafka:9092", "t") as reader:
        assert sorted(offsets_read(reader, timeout=30, idle_s=0.5)) == [("t", 0, 0), ("t", 1, 0)]
        assert broker.now - started < 1  # back once idle, not at the timeout
        broker.logs[("t", 0)][2:] = [b"b", MARKER]  # the transaction commits
        assert offsets_read(reader, timeout=30, idle_s=0.5) == [("t", 0, 2)]


def test_a_missing_topic_has_nothing_to_read_unless_it_must_exist(broker: Broker) -> None:
    with TopicReader("kafka:9092", "gone") as reader:
        assert offsets_read(reader) == []
        with pytest.raises(ValueError, match="topic 'gone' not found on kafka:9092"):
            offsets_read(reader, missing_ok=False)


def test_the_control_log_skips_other_writers_records_and_filters_by_sink(broker: Broker) -> None:
    other = CommitStart("other", "o1", 7)
    broker.logs = {(CONTROL_TOPIC, 0): [APACHE_RECORD, encode(START), MARKER, None, encode(other), MARKER,
                                            encode(COMPLETE), MARKER]}
    log = read_control_log("kafka:9092")
    assert log["commit_id"].tolist() == [COMMIT_ID, "o1", COMMIT_ID]
    mine = read_control_log("kafka:9092", sink="pizzas")
    assert mine["type"].tolist() == ["commit-start", "commit-complete"]
    assert mine.dtypes.to_dict() == read_control_log("kafka:9092", topic="none").dtypes.to_dict()
