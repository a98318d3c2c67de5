"""Row-level changes: upsert mode and CDC (I/U/D and Debezium envelopes), merge-on-read, exactly once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import once, produce_raw, run_cli, sink_config

from sinklab import readings as frames
from sinklab.exceptions import ConfigError
from sinklab.generators import produce_json
from sinklab.sink import IcebergSink
from sinklab.sink.cycle import coordinator as coordinator_module
from sinklab.stack import Stack

pytestmark = pytest.mark.spark


def cdc_config(unique: str, tables: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return sink_config(unique, tables, **{"iceberg.tables.cdc-field": "op", "iceberg.tables.default-id-columns": "id",
                                          **extra})



def table_rows(stack: Stack, table: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in stack.spark.table(f"sinklab.{table}").select("id", "v", "region").collect())


CLASSIC = [
    {"op": "I", "id": 1, "v": "one", "region": "eu"},
    {"op": "I", "id": 2, "v": "two", "region": "eu"},
    {"op": "I", "id": 3, "v": "three", "region": "eu"},
    {"op": "D", "id": 1},
    {"op": "U", "id": 3, "v": "three!", "region": "us"},  # moves to another partition value
]


@pytest.mark.parametrize("partitioned", [False, True])
def test_classic_sequence_in_one_cycle(stack: Stack, unique: str, partitioned: bool) -> None:
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, CLASSIC)
    extra = {"iceberg.tables.default-partition-by": "region"} if partitioned else {}
    once(stack, cdc_config(unique, **extra))
    table = f"{unique}.pizzas"
    assert table_rows(stack, table) == [(2, "two", "eu"), (3, "three!", "us")]
    loaded = stack.catalog.load_table((unique, "pizzas"))
    assert loaded.schema().identifier_field_names() == {"id"} and loaded.format_version == 2
    assert len(loaded.spec().fields) == (1 if partitioned else 0)
    snap = loaded.current_snapshot()
    assert snap is not None and snap.summary is not None
    assert json.loads(snap.summary.additional_properties["sinklab.offsets"]) == {unique: {"0": 5}}


def test_changes_across_cycles_write_deletes_merge_on_read(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    table = f"{unique}.pizzas"
    produce_json(stack.bootstrap_servers, unique, CLASSIC[:3])
    once(stack, cdc_config(unique))
    produce_json(stack.bootstrap_servers, unique, CLASSIC[3:])
    once(stack, cdc_config(unique))
    assert table_rows(stack, table) == [(2, "two", "eu"), (3, "three!", "us")]
    loaded = stack.catalog.load_table((unique, "pizzas"))
    assert loaded.properties["write.merge.mode"] == "merge-on-read"
    delete_files = stack.spark.sql(f"SELECT * FROM sinklab.{table}.delete_files").count()
    assert delete_files >= 1  # position deletes, no rewrite of the data files
    summaries = [s.summary.additional_properties for s in loaded.snapshots() if s.summary]
    main_chain = {s.snapshot_id for s in loaded.snapshots()}
    assert len(main_chain) >= 2 and all("sinklab.commit-id" in p and "sinklab.offsets" in p for p in summaries)


def test_format_v3_by_auto_create_props_writes_deletion_vectors(stack: Stack, unique: str) -> None:
    """The Java sink's way of passing table properties: a v3 table, whose row-level deletes are
    deletion vectors (Puffin blobs, one per data file) instead of position-delete files."""
    stack.create_topic(unique)
    config = cdc_config(unique, **{"iceberg.tables.auto-create-props.format-version": "3"})
    table = f"{unique}.pizzas"
    produce_json(stack.bootstrap_servers, unique, CLASSIC[:3])
    once(stack, config)
    produce_json(stack.bootstrap_servers, unique, CLASSIC[3:])
    once(stack, config)
    produce_json(stack.bootstrap_servers, unique, [{"op": "U", "id": 2, "v": "two!", "region": "eu"}])
    once(stack, config)
    assert table_rows(stack, table) == [(2, "two!", "eu"), (3, "three!", "us")]
    loaded = stack.catalog.load_table((unique, "pizzas"))
    assert loaded.format_version == 3
    deletes = stack.spark.sql(f"SELECT file_format, content, referenced_data_file FROM sinklab.{table}.delete_files"
                              ).collect()
    assert deletes and all(d.file_format == "PUFFIN" and d.content == 1 and d.referenced_data_file for d in deletes)
    # One vector per data file: the second delete in the first data file replaced its vector.
    assert len({d.referenced_data_file for d in deletes}) == len(deletes)
    snaps = frames.snapshots(stack, table)
    assert snaps["added_dvs"].sum() >= 2 and snaps["total_delete_files"].iloc[-1] == len(deletes)
    assert set(frames.files(stack, table)["content"]) == {"data", "deletion-vector"}


def test_upsert_mode_across_cycles(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    config = sink_config(unique, **{"iceberg.tables.upsert-mode-enabled": "true",
                                    "iceberg.tables.default-id-columns": "id"})
    produce_json(stack.bootstrap_servers, unique, [{"id": i, "v": f"a{i}", "region": "eu"} for i in range(5)],
                 key_field="id")
    once(stack, config)
    produce_json(stack.bootstrap_servers, unique, [{"id": i, "v": f"b{i}", "region": "eu"} for i in range(3, 8)]
                 + [{"id": 4, "v": "last", "region": "eu"}], key_field="id")
    once(stack, config)
    expected = [(i, f"a{i}", "eu") for i in range(3)] + [(3, "b3", "eu"), (4, "last", "eu")] + [
        (i, f"b{i}", "eu") for i in range(5, 8)]
    assert table_rows(stack, f"{unique}.pizzas") == expected


def test_debezium_envelopes(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    source = {"db": "shop", "table": "orders"}

    def change(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
        return {"op": op, "before": before, "after": after, "source": source, "ts_ms": 1700000000000}

    changes = [
        change("r", None, {"id": 1, "v": "snap", "region": "eu"}),
        change("c", None, {"id": 2, "v": "new", "region": "eu"}),
        change("c", None, {"id": 3, "v": "gone soon", "region": "eu"}),
        change("u", {"id": 1, "v": "snap", "region": "eu"}, {"id": 1, "v": "changed", "region": "us"}),
        change("d", {"id": 3, "v": "gone soon", "region": "eu"}, None),
    ]
    # Keyed as Debezium keys them with JsonConverter: the row's ids in Connect's envelope.
    key_schema = {"type": "struct", "fields": [{"field": "id", "type": "int32"}]}
    keys = [json.dumps({"schema": key_schema, "payload": {"id": (c["after"] or c["before"])["id"]}}).encode()
            for c in changes]
    produce_raw(stack, unique, [json.dumps(c).encode() for c in changes], keys=keys)
    once(stack, sink_config(unique, **{
        "transforms": "dbz", "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
        "iceberg.tables.cdc-field": "_cdc.op", "iceberg.tables.default-id-columns": "id",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter"}))
    table = f"{unique}.pizzas"
    assert table_rows(stack, table) == [(1, "changed", "us"), (2, "new", "eu")]
    cdc = {r.id: (r["_cdc"].op, r["_cdc"].source, r["_cdc"].key)
           for r in stack.spark.table(f"sinklab.{table}").collect()}
    assert cdc == {1: ("U", "shop.orders", '{"id":1}'), 2: ("I", "shop.orders", '{"id":2}')}


def test_bad_operations_and_missing_ids_are_bad_records(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [{"op": "I", "id": 1, "v": "x", "region": "eu"},
                                                   {"op": "X", "id": 2}, {"op": "U", "v": "no id"}])
    dlq = f"{unique}-dlq"
    sink = IcebergSink(stack, cdc_config(unique, **{"errors.tolerance": "all",
                                                    "errors.deadletterqueue.topic.name": dlq}))
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.counters["type-mismatch"] == 1 and result.counters["missing-required"] == 1
    assert table_rows(stack, f"{unique}.pizzas") == [(1, "x", "eu")]


def test_format_v1_table_is_refused(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    stack.spark.sql(f"CREATE TABLE sinklab.{unique}.old (id BIGINT, v STRING, region STRING) USING iceberg "
                    f"TBLPROPERTIES ('format-version'='1')")
    produce_json(stack.bootstrap_servers, unique, CLASSIC[:1])
    sink = IcebergSink(stack, cdc_config(unique, [f"{unique}.old"]))
    try:
        with pytest.raises(ConfigError, match=f"{unique}.old.*format version 2"):
            sink.run_once()
    finally:
        sink.stop()


def test_crash_mid_cycle_then_restart_same_rows(stack: Stack, tmp_path: Path, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    tables = [f"{unique}.a", f"{unique}.b"]
    config = tmp_path / "sink.json"
    config.write_text(json.dumps(cdc_config(unique, tables)))
    stack_file = stack.write(tmp_path / "stack.json")
    first = [{"op": "I", "id": i, "v": f"v{i}", "region": "eu"} for i in range(20)]
    produce_json(stack.bootstrap_servers, unique, first, key_field="id")
    sink = IcebergSink(stack, cdc_config(unique, tables))  # warm, in this process; the crash is a process
    try:
        assert sink.run_once().records == 20
    finally:
        sink.stop()
    changes = [{"op": "D", "id": i} for i in range(0, 20, 3)] + [
        {"op": "U", "id": i, "v": f"w{i}", "region": "us"} for i in range(1, 20, 3)] + [
        {"op": "I", "id": 100 + i, "v": "n", "region": "eu"} for i in range(5)]
    produce_json(stack.bootstrap_servers, unique, changes, key_field="id")
    crashed = run_cli("sink", "run", "--config", str(config), "--stack", str(stack_file), "--once",
                      env={coordinator_module.CRASH_ENV: "between-table-commits"})
    assert crashed.returncode == 86, crashed.stderr
    recovered = run_cli("sink", "run", "--config", str(config), "--stack", str(stack_file), "--once")
    assert recovered.returncode == 0, recovered.stderr
    expected = sorted([(i, f"w{i}", "us") if i % 3 == 1 else (i, f"v{i}", "eu") for i in range(20) if i % 3 != 0]
                      + [(100 + i, "n", "eu") for i in range(5)])
    for table in tables:
        assert table_rows(stack, table) == expected, table


def test_tombstone_deletes_the_row_its_key_names(stack: Stack, unique: str) -> None:
    from confluent_kafka import Producer

    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [*CLASSIC[:3], {"op": "I", "id": 4, "v": "four", "region": "eu"}],
                 key_field="id")
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    producer.produce(unique, None, b"2")  # the key as the id's value
    producer.produce(unique, None, b'{"id": 3}')  # the key as a JSON object of the ids
    # JsonConverter's default for keys: the schema envelope (what Debezium writes with it).
    envelope = {"schema": {"type": "struct", "fields": [{"field": "id", "type": "int32"}]}, "payload": {"id": 1}}
    producer.produce(unique, None, json.dumps(envelope).encode())
    assert producer.flush(30) == 0
    sink = IcebergSink(stack, cdc_config(unique, **{"key.converter": "org.apache.kafka.connect.json.JsonConverter"}))
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.counters["tombstones"] == 3
    assert table_rows(stack, f"{unique}.pizzas") == [(4, "four", "eu")]
