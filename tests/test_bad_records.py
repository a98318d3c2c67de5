"""Bad records: stop with a clear error (errors.tolerance=none) or dead-letter them (all); nothing lost."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import once, run_cli, sink_config
from pyspark.sql import functions as F

from sinklab import viz
from sinklab.sink import IcebergSink, RecordError, read_control_log
from sinklab.sink.cycle import coordinator as coordinator_module
from sinklab.sink.records.observed import Observed
from sinklab.stack import Stack

pytestmark = pytest.mark.spark

GOOD = [{"id": i, "kind": "pizza", "name": f"n{i}"} for i in range(5)]
# kind -> a value that is bad in that way, for a table (id BIGINT NOT NULL, kind STRING, name STRING)
BAD: dict[str, bytes | None] = {
    "malformed-json": b'{"id": 1, "kind": "pizza"',
    "not-an-object": b"[1, 2, 3]",
    "undecodable": b'{"id": 1, "name": "\xff\xfe"}',
    "type-mismatch": b'{"id": "seven", "kind": "pizza"}',
    "missing-required": b'{"kind": "pizza", "name": "no id"}',
    "out-of-range": b'{"id": 99999999999999999999, "kind": "pizza"}',
    "no-table": b'{"id": 7, "kind": "dessert"}',
    "tombstone": None,
}


def setup_table(stack: Stack, unique: str) -> str:
    stack.create_topic(unique)
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    stack.spark.sql(f"CREATE TABLE sinklab.{unique}.t (id BIGINT NOT NULL, kind STRING, name STRING) USING iceberg")
    return f"{unique}.t"


def send(stack: Stack, topic: str, values: list[bytes | None]) -> None:
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, value, f"key-{i}".encode(), headers=[("origin", f"h{i}".encode())])
    assert producer.flush(30) == 0


def config(unique: str, table: str, **extra: Any) -> dict[str, Any]:
    return sink_config(unique, [table], **{"iceberg.tables.route-field": "kind",
                                           f"iceberg.table.{table}.route-regex": "pizza", **extra})


def dead_letters(stack: Stack, topic: str) -> list[dict[str, Any]]:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    out: list[dict[str, Any]] = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        while True:
            msgs = consumer.consume(100, timeout=1.0)
            out.extend({"key": m.key(), "value": m.value(), "headers": dict(m.headers() or [])}
                       for m in msgs if m.error() is None)
            if not msgs and consumer.position([TopicPartition(topic, 0)])[0].offset >= high:
                return out
    finally:
        consumer.close()


def encoded(events: list[dict[str, Any]]) -> list[bytes | None]:
    return [json.dumps(e).encode() for e in events]


@pytest.mark.parametrize("kind", [k for k in BAD if k not in ("no-table", "tombstone")])
def test_tolerance_none_stops_naming_the_record(stack: Stack, unique: str, kind: str) -> None:
    table = setup_table(stack, unique)
    send(stack, unique, encoded(GOOD[:2]) + [BAD[kind]] + encoded(GOOD[2:]))
    sink = IcebergSink(stack, config(unique, table))
    try:
        with pytest.raises(RecordError) as info:
            sink.run_once()
        assert (info.value.topic, info.value.partition, info.value.offset, info.value.kind) == (unique, 0, 2, kind)
        status = sink.status()
        assert status.state == "FAILED" and f"{unique}[0]@2" in (status.trace or "")
        assert stack.spark.table(f"sinklab.{table}").count() == 0  # nothing of the cycle committed
    finally:
        sink.stop()


@pytest.mark.parametrize("kind", ["malformed-json", "not-an-object", "type-mismatch"])
def test_one_table_without_routing_names_the_record(stack: Stack, unique: str, kind: str) -> None:
    # Its values are parsed once, by the conversion into the table's columns, which also finds those
    # that are no JSON object: the record and its kind are named as when they are checked first.
    table = setup_table(stack, unique)
    send(stack, unique, encoded(GOOD[:2]) + [BAD[kind]] + encoded(GOOD[2:]))
    sink = IcebergSink(stack, sink_config(unique, [table]))
    try:
        with pytest.raises(RecordError) as info:
            sink.run_once()
        assert (info.value.topic, info.value.partition, info.value.offset, info.value.kind) == (unique, 0, 2, kind)
        assert stack.spark.table(f"sinklab.{table}").count() == 0
    finally:
        sink.stop()


@pytest.mark.parametrize("kind", ["no-table", "tombstone"])
def test_tolerance_none_skips_and_counts(stack: Stack, unique: str, kind: str) -> None:
    table = setup_table(stack, unique)
    send(stack, unique, encoded(GOOD[:2]) + [BAD[kind]] + encoded(GOOD[2:]))
    sink = IcebergSink(stack, config(unique, table))
    try:
        result = sink.run_once()
        assert result is not None and result.counters[kind.replace("tombstone", "tombstones")] == 1
        assert stack.spark.table(f"sinklab.{table}").count() == len(GOOD)
    finally:
        sink.stop()


def test_cli_exits_non_zero_with_the_record_on_stderr(stack: Stack, tmp_path: Path, unique: str) -> None:
    table = setup_table(stack, unique)
    send(stack, unique, [BAD["type-mismatch"]])
    path = tmp_path / "sink.json"
    path.write_text(json.dumps(config(unique, table)))
    done = run_cli("sink", "run", "--config", str(path), "--stack", str(stack.write(tmp_path / "s.json")), "--once")
    assert done.returncode != 0
    assert f"{unique}[0]@0" in done.stderr and table in done.stderr and "seven" in done.stderr


def dead_letter_rows(stack: Stack, table: str) -> list[Any]:
    return stack.spark.table(f"sinklab.{table}").orderBy("source_topic", "source_offset").collect()


def test_tolerance_all_dead_letters_every_kind(stack: Stack, unique: str) -> None:
    table = setup_table(stack, unique)
    dlq, dlq_table = f"{unique}-dlq", f"{unique}.dead_letters"
    values = encoded(GOOD[:2]) + list(BAD.values()) + encoded(GOOD[2:])
    send(stack, unique, values)
    sink = IcebergSink(stack, config(unique, table, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "errors.deadletterqueue.table.name":
        dlq_table, "errors.deadletterqueue.context.headers.enable": "true", "errors.log.enable": "true"}))
    try:
        result = sink.run_once()
        status = sink.status()
    finally:
        sink.stop()
    assert result is not None
    assert stack.spark.table(f"sinklab.{table}").count() == len(GOOD)
    letters = dead_letters(stack, dlq)
    # Nothing lost: every record is a row, a dead letter or a counted tombstone.
    assert len(GOOD) + len(letters) + result.counters["tombstones"] == len(values)
    by_kind = {letter["headers"]["__sinklab.errors.kind"].decode(): letter for letter in letters}
    assert set(by_kind) == set(BAD) - {"tombstone"}
    for kind, letter in by_kind.items():
        offset = values.index(BAD[kind])
        assert letter["value"] == BAD[kind] and letter["key"] == f"key-{offset}".encode()
        headers = letter["headers"]
        assert headers["origin"] == f"h{offset}".encode()  # the original headers are kept
        assert headers["__connect.errors.topic"] == unique.encode()
        assert headers["__connect.errors.partition"] == b"0"
        assert headers["__connect.errors.offset"] == str(offset).encode()
        assert headers["__connect.errors.exception.class.name"]
        assert headers["__connect.errors.exception.message"].decode().startswith(kind)
    assert by_kind["type-mismatch"]["headers"]["__sinklab.errors.table"] == table.encode()
    for kind in set(BAD) - {"tombstone"}:
        assert result.counters[kind] == 1 and status.counters[kind] == 1
    log = read_control_log(stack.bootstrap_servers, sink=f"sink-{unique}")
    complete = log[log["type"] == "commit-complete"].iloc[-1]
    assert complete["counters"]["type-mismatch"] == 1 and complete["counters"]["dead-lettered"] == len(letters)

    # The same letters in the dead-letter table, published in the cycle's commit, with why and where.
    rows = dead_letter_rows(stack, dlq_table)
    assert [(r.source_topic, r.source_partition, r.value) for r in rows] == [
        (unique, 0, BAD[k]) for k in BAD if k != "tombstone"]
    stages = {"malformed-json": "VALUE_CONVERTER", "not-an-object": "VALUE_CONVERTER", "undecodable": "VALUE_CONVERTER"}
    fields = {"type-mismatch": "id", "out-of-range": "id", "missing-required": "id"}
    for r in rows:
        kind = r.error_class
        assert r.source_offset == values.index(BAD[kind]) and r.key == f"key-{r.source_offset}".encode()
        assert [(h.key, h.value) for h in r.headers] == [("origin", f"h{r.source_offset}".encode())]
        assert r.stage == stages.get(kind, "TASK_PUT") and r.message.startswith(f"{kind}: ")
        assert r.field == fields.get(kind), (kind, r.message)
        assert r.target_table == (table if kind in fields else None), kind
        assert (r.sink, r.commit_id) == (f"sink-{unique}", result.commit_id)
        assert r.source_timestamp is not None
    assert result.tables[dlq_table].records == len(rows)

    # Where the records went, each counted once: the letters in the dead-letter table, none left over for
    # the dead-letter topic's node (it holds the same letters), and not among the rows the cycle wrote.
    cycle_frame = viz.cycles(stack, sink=f"sink-{unique}")
    flow = viz.flows(cycle_frame, viz.commits(stack, sink=f"sink-{unique}")).set_index("target")["records"]
    assert flow.to_dict() == {f"sink-{unique}": len(values), table: len(GOOD), dlq_table: len(BAD) - 1,
                              "tombstones (skipped)": 1}
    assert cycle_frame["written"].tolist() == [len(GOOD)]
    assert "dead-letter-table" not in {t.name for t in viz.plot_counters(cycle_frame).data}


def test_fanned_out_every_malformed_record_is_dead_lettered_once(stack: Stack, unique: str) -> None:
    # A record that goes to exactly one table is checked to be a JSON object by that table's parse; one
    # that goes to several, or none, is checked before routing: each is one dead letter either way.
    first = setup_table(stack, unique)
    second = f"{unique}.t2"
    stack.spark.sql(f"CREATE TABLE sinklab.{second} (id BIGINT NOT NULL, kind STRING, name STRING) USING iceberg")
    dlq = f"{unique}-dlq"
    malformed = [b'{"id": 1, "kind": "pizza", "name": ', b'{"id": 2, "kind": "pasta", "name": ', b'{"id": 3']
    good = [{"id": 10, "kind": "pizza", "name": "p"}, {"id": 11, "kind": "pasta", "name": "q"},
            {"id": 12, "kind": "dessert", "name": "r"}]
    send(stack, unique, encoded(good[:1]) + malformed + encoded(good[1:]))
    sink = IcebergSink(stack, sink_config(unique, [first, second], **{
        "iceberg.tables.route-field": "kind", f"iceberg.table.{first}.route-regex": "pizza",
        f"iceberg.table.{second}.route-regex": "pasta|pizza",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.context.headers.enable": "true"}))
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.counters["malformed-json"] == 3 and result.counters["no-table"] == 1
    kinds = [(letter["headers"]["__sinklab.errors.kind"], letter["value"]) for letter in dead_letters(stack, dlq)]
    assert sorted(kinds) == sorted([(b"malformed-json", v) for v in malformed] + [(b"no-table", encoded(good)[2])])
    assert sorted(r.id for r in stack.spark.table(f"sinklab.{first}").collect()) == [10]
    assert sorted(r.id for r in stack.spark.table(f"sinklab.{second}").collect()) == [10, 11]


def test_tolerance_all_needs_a_dead_letter_topic_or_table(unique: str) -> None:
    from sinklab.exceptions import ConfigError
    from sinklab.sink.config.sink_config import load_config
    with pytest.raises(ConfigError, match="errors.deadletterqueue.topic.name"):
        load_config(sink_config(unique, **{"errors.tolerance": "all"}))
    assert load_config(sink_config(unique, **{"errors.tolerance": "all", "errors.deadletterqueue.table.name":
                                               "ns.dead"})).dlq_table == "ns.dead"
    for extra, why in [({"errors.deadletterqueue.table.name": "ns.dead"}, "errors.tolerance=all"),
                       ({"errors.tolerance": "all", "errors.deadletterqueue.table.name": "dead"}, "namespace"),
                       ({"errors.tolerance": "all", "errors.deadletterqueue.table.name": f"{unique}.pizzas"},
                        "destination table")]:
        with pytest.raises(ConfigError, match=why) as info:
            load_config(sink_config(unique, **extra))
        assert info.value.key == "errors.deadletterqueue.table.name"


def test_crash_with_dead_letters_then_restart_no_duplicates(stack: Stack, tmp_path: Path, unique: str) -> None:
    table = setup_table(stack, unique)
    dlq = f"{unique}-dlq"
    values = encoded(GOOD) + [BAD["type-mismatch"], BAD["malformed-json"]]
    send(stack, unique, values)
    path = tmp_path / "sink.json"
    path.write_text(json.dumps(config(unique, table, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq})))
    stack_file = stack.write(tmp_path / "stack.json")
    crashed = run_cli("sink", "run", "--config", str(path), "--stack", str(stack_file), "--once",
                      env={coordinator_module.CRASH_ENV: "inside-kafka-transaction"})
    assert crashed.returncode == 86, crashed.stderr
    assert stack.spark.table(f"sinklab.{table}").count() == len(GOOD)  # the table commit landed
    recovered = run_cli("sink", "run", "--config", str(path), "--stack", str(stack_file), "--once")
    assert recovered.returncode == 0, recovered.stderr
    assert stack.spark.table(f"sinklab.{table}").count() == len(GOOD)
    letters = dead_letters(stack, dlq)
    assert sorted(letter["value"] for letter in letters) == sorted([BAD["type-mismatch"], BAD["malformed-json"]])


def test_dead_letter_table_alone_takes_transform_failures(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    dlq_table = f"{unique}.dead_letters"
    change = {"op": "c", "after": {"id": 1, "name": "margherita"}, "source": {"db": "shop", "table": "pizzas"}}
    send(stack, unique, encoded([change, {"op": "x", "after": {"id": 2}}, {**change, "after": {"id": 3}}]))
    sink = IcebergSink(stack, sink_config(unique, [f"{unique}.pizzas"], **{
        "transforms": "dbz", "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
        "errors.tolerance": "all", "errors.deadletterqueue.table.name": dlq_table}))
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.counters["transform"] == 1
    assert sorted(r.id for r in stack.spark.table(f"sinklab.{unique}.pizzas").collect()) == [1, 3]
    [row] = dead_letter_rows(stack, dlq_table)
    assert (row.source_offset, row.stage, row.error_class, row.target_table) == (1, "TRANSFORMATION", "transform", None)
    assert "not a Debezium change event" in row.message and row.field is None


def test_an_evolution_the_table_refuses_is_a_dead_letter(stack: Stack, unique: str) -> None:
    """With evolution on, a new field becomes a column; a string for the BIGINT column is no evolution
    Iceberg allows (only widening is): that record alone goes to the dead-letter table, naming the field."""
    table = setup_table(stack, unique)
    dlq_table = f"{unique}.dead_letters"
    send(stack, unique, encoded([{"id": 1, "kind": "pizza", "name": "a"},
                                 {"id": 2, "kind": "pizza", "name": "b", "size": "L"},
                                 {"id": "three", "kind": "pizza", "name": "c", "size": "M"}]))
    result = once(stack, sink_config(unique, [table], **{
        "iceberg.tables.evolve-schema-enabled": "true", "errors.tolerance": "all",
        "errors.deadletterqueue.table.name": dlq_table}))
    assert result.counters["type-mismatch"] == 1
    rows = stack.spark.table(f"sinklab.{table}").orderBy("id").collect()
    assert [(r.id, r.size) for r in rows] == [(1, None), (2, "L")]
    [letter] = dead_letter_rows(stack, dlq_table)
    assert (letter.source_offset, letter.stage, letter.error_class, letter.field, letter.target_table) == (
        2, "TASK_PUT", "type-mismatch", "id", table)


@pytest.mark.parametrize("point", coordinator_module.CRASH_POINTS)
def test_crash_with_data_and_dead_letter_table_then_restart(stack: Stack, tmp_path: Path, unique: str,
                                                            point: str) -> None:
    # Every record ends in exactly one place, the table or the dead letters, whichever step the crash hit.
    table = setup_table(stack, unique)
    dlq, dlq_table = f"{unique}-dlq", f"{unique}.dead_letters"
    bad = [BAD["type-mismatch"], BAD["malformed-json"], BAD["no-table"]]
    send(stack, unique, encoded(GOOD[:3]) + bad[:1] + encoded(GOOD[3:]) + bad[1:])
    path = tmp_path / "sink.json"
    path.write_text(json.dumps(config(unique, table, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.table.name": dlq_table})))
    stack_file = stack.write(tmp_path / "stack.json")
    crashed = run_cli("sink", "run", "--config", str(path), "--stack", str(stack_file), "--once",
                      env={coordinator_module.CRASH_ENV: point})
    assert crashed.returncode == 86, crashed.stderr
    recovered = IcebergSink(stack, json.loads(path.read_text()))
    try:
        recovered.run_once()
    finally:
        recovered.stop()
    assert sorted(r.id for r in stack.spark.table(f"sinklab.{table}").collect()) == [g["id"] for g in GOOD]
    assert [r.value for r in dead_letter_rows(stack, dlq_table)] == bad, point
    assert sorted(letter["value"] for letter in dead_letters(stack, dlq)) == sorted(bad), point
    for name in (table, dlq_table):
        assert list(stack.catalog.load_table(tuple(name.split("."))).metadata.refs) == ["main"], name


# The record-level check takes a cheap parse first and the dearer one only for what it rejects; both
# must agree with the parse that fills the columns, or a record could pass as clean and land as nulls.
SHAPES = {
    '{"a": 1}': None, '  {"a": {"b": [1, {"c": 2}]}}': None, '{"a": "\\u00e9\\"x"}': None, '{}': None,
    '{"a": "\\q"}': "malformed-json", '{"a":1,}': "malformed-json", '{"a": 1': "malformed-json",
    '': "malformed-json", '   ': "malformed-json", '{"a": NaN}': "malformed-json", '{"a": 01}': "malformed-json",
    '{a: 1}': "malformed-json", '[1]': "not-an-object", '"s"': "not-an-object", '12': "not-an-object",
    'null': "not-an-object",
}


def test_record_shapes_are_classified_like_the_parse_that_fills_columns(stack: Stack) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from sinklab.sink.records.columns import ERROR
    from sinklab.sink.records.convert import error_kind, to_rows
    from sinklab.sink.records.prepare import prepare, with_payload
    from sinklab.sink.records.reader import RAW_DDL

    texts = list(SHAPES)
    raw = stack.spark.createDataFrame([("t", 0, i, 0, None, v.encode(), None) for i, v in enumerate(texts)], RAW_DDL)
    prepared = with_payload(prepare(raw, False, [], None))
    rows = to_rows(prepared.where(F.col(ERROR).isNull()), T.StructType([T.StructField("a", T.StringType())]))
    kinds = {r.offset: r.kind for r in prepared.select("offset", error_kind(F.col(ERROR)).alias("kind")).collect()}
    assert {texts[o]: k for o, k in kinds.items()} == SHAPES
    # Every record that passed is an object the column parse reads.
    parsed = {r.offset: r.a for r in rows.select("offset", "a").collect()}
    assert sorted(parsed) == sorted(o for o, k in kinds.items() if k is None)
    assert parsed[texts.index('{"a": 1}')] == "1"
    # Without prepare's own object check (one table), the rows' parse names the same kinds.
    alone = with_payload(prepare(raw, False, [], None, check_objects=False))
    passed = alone.where(F.col(ERROR).isNull())
    later = {r.offset: r.kind for r in to_rows(passed, T.StructType([T.StructField("a", T.StringType())])).select(
        "offset", error_kind(F.col(ERROR)).alias("kind")).collect()}
    first = {r.offset: r.kind for r in alone.select("offset", error_kind(F.col(ERROR)).alias("kind")).collect()}
    assert len(later) < len(texts)  # not vacuous: prepare still rejects what costs no parse
    assert {texts[o]: later.get(o, k) for o, k in first.items()} == SHAPES


# Values that Spark 4's ANSI mode turns from a null into a failed query when cast: each must stay one
# record's error. (column, its type in the table, a bad JSON value for it)
ANSI_BAD = [
    ("n", "INT", "99999999999"),  # an integer, but past int
    ("ts", "TIMESTAMP", '"not a time"'),
    ("ts", "TIMESTAMP", "99999999999999999"),  # epoch millis past year 9999
    ("d", "DATE", '"2024-13-45"'),
    ("d", "DATE", "2147483647"),  # epoch days past year 9999
    ("b", "BINARY", '"not base64!"'),
    ("amount", "DECIMAL(5,2)", "123456.78"),  # past decimal(5,2)
]
ANSI_GOOD = '{"id": 0, "n": 7, "ts": "2024-01-04 12:28:13", "d": "2024-01-04", "b": "AQI=", "amount": 12.5}'


@pytest.mark.parametrize("converter", ["json", "connect-envelope", "avro", "json-schema"])
def test_bad_values_stay_per_record_errors_under_ansi_mode(stack: Stack, unique: str, converter: str,
                                                           request: pytest.FixtureRequest) -> None:
    from sinklab.generators.avro import frame

    assert stack.spark.conf.get("spark.sql.ansi.enabled") == "true"  # Spark 4's default, left on
    stack.create_topic(unique)
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    columns = ", ".join(dict.fromkeys(f"{c} {t}" for c, t, _ in ANSI_BAD))
    stack.spark.sql(f"CREATE TABLE sinklab.{unique}.t (id BIGINT NOT NULL, {columns}) USING iceberg")
    records = [json.loads(ANSI_GOOD)] + [{"id": i + 1, column: json.loads(bad)}
                                         for i, (column, _, bad) in enumerate(ANSI_BAD)]
    extra: dict[str, str] = {"value.converter.schemas.enable": "false"}
    if converter == "json":
        values = [json.dumps(r).encode() for r in records]
    elif converter == "connect-envelope":
        # Every field as Connect sends what it does not type: a string or an int64 in the payload.
        def field(name: str, value: Any) -> dict[str, Any]:
            return {"field": name, "type": "int64" if isinstance(value, int) else
                    "double" if isinstance(value, float) else "string", "optional": True}

        values = [json.dumps({"schema": {"type": "struct", "fields": [field(k, v) for k, v in r.items()]},
                              "payload": r}).encode() for r in records]
        extra = {"value.converter.schemas.enable": "true"}
    else:
        from sinklab.sink.wire.avro import AVRO_CONVERTER
        from sinklab.sink.wire.jsonschema import JSON_SCHEMA_CONVERTER
        from sinklab.sink.wire.registry import RegistryClient

        url = request.getfixturevalue("schema_registry")
        registry = RegistryClient(url)
        # The producer's types are looser than the table's (strings, doubles): the table's types decide.
        if converter == "avro":
            import io

            import fastavro

            def kind(column: str) -> list[str]:
                return ["null", "string"] if column in ("ts", "d", "b") else ["null", "double"] \
                    if column == "amount" else ["null", "long"]

            schema = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}] + [
                {"name": c, "type": kind(c), "default": None} for c in ("n", "ts", "d", "b", "amount")]}
            parsed = fastavro.parse_schema(schema)
            sid = registry.register(f"{unique}-value", schema)

            def body(record: dict[str, Any]) -> bytes:
                buf = io.BytesIO()
                full = {c: None for c in ("n", "ts", "d", "b", "amount")} | record
                full = {k: v if v is None else float(v) if k == "amount" else str(v) if kind(k)[1] == "string" else v
                        for k, v in full.items()}
                fastavro.schemaless_writer(buf, parsed, full)
                return buf.getvalue()

            extra = {"value.converter": AVRO_CONVERTER, "value.converter.schema.registry.url": url}
        else:
            schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
            sid = registry.register(f"{unique}-value", schema, "JSON")

            def body(record: dict[str, Any]) -> bytes:
                return json.dumps(record).encode()

            extra = {"value.converter": JSON_SCHEMA_CONVERTER, "value.converter.schema.registry.url": url}
        values = [frame(sid, body(r)) for r in records]
    send(stack, unique, values)
    dlq = f"{unique}-dlq"
    config = sink_config(unique, [f"{unique}.t"], **{**extra, "errors.tolerance": "all",
                                                     "errors.deadletterqueue.topic.name": dlq,
                                                     "errors.deadletterqueue.context.headers.enable": "true"})
    if "value.converter.schemas.enable" not in extra:
        del config["config"]["value.converter.schemas.enable"]
    once(stack, config)
    rows = stack.spark.table(f"sinklab.{unique}.t").collect()
    assert [(r.id, r.n, str(r.ts), str(r.d), bytes(r.b), float(r.amount)) for r in rows] == [
        (0, 7, "2024-01-04 12:28:13", "2024-01-04", b"\x01\x02", 12.5)]
    letters = {int(x["headers"]["__connect.errors.offset"]): x["headers"] for x in dead_letters(stack, dlq)}
    assert sorted(letters) == list(range(1, len(ANSI_BAD) + 1))  # each bad record, nothing else, nothing lost
    for offset, (column, _, bad) in enumerate(ANSI_BAD, start=1):
        message = letters[offset]["__connect.errors.exception.message"].decode()
        assert f"{column}: " in message and bad.strip('"')[:8] in message, (converter, column, message)


# Values for each parsed-straight type: the one-parse path must give what the text path gives (the
# value, or the error naming the field and why) for each, in a record of its own and beside others.
ONE_PARSE_VALUES = {
    "l": ["1", "-9223372036854775808", "9223372036854775808", '"12"', '""', "1.0", "1e3", "true", "null", '" 7 "'],
    "i": ["2147483647", "2147483648", "-2147483649", '"5"', "[1]"],
    "s": ["127", "128", "-129"],
    "y": ["-128", "200", "255"],
    "f": ["1.5", "1e39", "-3.5e38", "1e400", '"NaN"', '"2.5"', "3"],
    "d": ["2.5", "1e400", '"Infinity"', '"1"', "{}", "7"],
    "b": ["true", "false", '"true"', '"FALSE"', "1", '"yes"'],
    "t": ['"x"', "5", "{\"a\": 1}", "[1, 2]", "null"],
    "ts": ['"2024-01-04 12:28:13"', "1704371293000", '"no"'],
}
ONE_PARSE_SCHEMA = ("l BIGINT, i INT NOT NULL, s SMALLINT, y TINYINT, f FLOAT, d DOUBLE, b BOOLEAN, t STRING, "
                    "ts TIMESTAMP")


def test_one_parse_into_the_fields_types_gives_what_the_text_path_gives(stack: Stack) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from sinklab.sink.records.columns import ERROR
    from sinklab.sink.records.convert import convert, to_rows
    from sinklab.sink.records.prepare import prepare, with_payload
    from sinklab.sink.records.reader import RAW_DDL

    assert stack.spark is not None  # parsing a type string needs a session; this test may ask first
    schema = T._parse_datatype_string(ONE_PARSE_SCHEMA)
    assert isinstance(schema, T.StructType)
    texts = ['{"i": 1, "l": 2, "b": true, "t": "x", "f": 1.25, "d": 0.5, "ts": 0}', '{"l": 3}',
             '{"i": 1, "l": 1, "l": "x"}']
    for name, values in ONE_PARSE_VALUES.items():
        texts += [f'{{"i": 0, "{name}": {v}}}' if name != "i" else f'{{"i": {v}}}' for v in values]
        texts += [f'{{"i": 3, "{name}": {v}, "t": "beside", "l": "bad"}}' if name != "i" else f'{{"i": {v}, "l": 9}}'
                  for v in values]
    raw = stack.spark.createDataFrame([("t", 0, n, 0, None, v.encode(), None) for n, v in enumerate(texts)], RAW_DDL)
    records = with_payload(prepare(raw, False, [], None)).where(F.col(ERROR).isNull())
    got = {r.offset: r for r in to_rows(records, schema).collect()}
    # The text path: every field as its JSON text, each converted from it.
    text = F.from_json("_payload", T.StructType([T.StructField(f.name, T.StringType()) for f in schema.fields]))
    columns, errors = [], []
    for field in schema.fields:
        value, error = convert(text[field.name], field.dataType, field.name)
        columns.append(value.alias(field.name))
        errors.append(error)
    errors.append(F.when(text["i"].isNull(), F.lit("missing-required: i: missing required field")))
    joined = F.concat_ws("; ", *errors)
    expected = records.select("offset", *columns, F.when(joined != "", joined).alias(ERROR))
    want = {r.offset: r for r in expected.collect()}
    assert sorted(got) == sorted(want) == list(range(len(texts)))
    for offset, row in want.items():
        assert {k: got[offset][k] for k in row.asDict()} == row.asDict(), texts[offset]
    # Not vacuous: clean records, and each kind of error, are among them.
    assert got[0][ERROR] is None and got[0]["i"] == 1 and got[0]["f"] == 1.25
    kinds = {e.split(":")[0] for r in got.values() if (e := r[ERROR])}
    assert {"type-mismatch", "out-of-range", "missing-required"} <= kinds


# A timestamp or date column reads an integer as Connect's epoch millis or days, and anything else as
# its text: both sides of ``convert``'s test for an integer, its edges included (a sign the regex
# refuses, a number the cast cannot hold).
EPOCH_OR_TEXT = [
    ("timestamp", "1704371293000", 1704371293000), ("timestamp", "\t-1000 ", -1000), ("timestamp", "2024", 2024),
    ("timestamp", "2024-01-04T12:28:13Z", 1704371293000), ("timestamp", "+5", None),
    ("timestamp", "99999999999999999999", None), ("timestamp", "253402300800000", None), ("timestamp", "1.5", None),
    ("date", "19724", 19724), ("date", "2024", 2024), ("date", "2024-01-04", 19726), ("date", "+5", None),
    ("date", "99999999999", None), ("date", "-2932897", None), ("date", "1704371293000", None),
]


def test_a_timestamp_or_date_reads_an_integer_as_epoch_and_other_text_as_a_date(stack: Stack) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from sinklab.sink.records.convert import convert

    spark = stack.spark
    got = []
    for kind, dtype, as_number in (("timestamp", T.TimestampType(), F.unix_millis),
                                   ("date", T.DateType(), F.unix_date)):
        values = spark.createDataFrame([(raw,) for k, raw, _ in EPOCH_OR_TEXT if k == kind], "raw string")
        value, error = convert(F.col("raw"), dtype, "c")
        for row in values.select("raw", as_number(value).alias("n"), error.alias("e")).collect():
            assert (row.n is None) == (row.e is not None), row  # a value, or an error naming it
            got.append((kind, row.raw, row.n))
    assert got == EPOCH_OR_TEXT


def test_bytes_from_the_jvm_arrive_whole_through_the_faster_decoding(stack: Stack) -> None:
    """Observed rows (dead letters among them) come to Python as a JVM byte[]; sinklab decodes those in C
    instead of py4j's byte-by-byte loop (stack.spark.fast_py4j_bytes): the same bytes, of every value."""
    import py4j.protocol

    Observed(stack.spark.range(1), F.count("id"))  # the session installed it when it was made
    assert py4j.protocol.decode_bytearray.__module__ == "sinklab.stack.spark"
    data = os.urandom(300_000) + bytes(range(256))
    got = stack.spark._jvm.java.util.Base64.getDecoder().decode(base64.b64encode(data).decode())
    assert isinstance(got, bytes)
    assert got == data
