"""Fan-out, topic patterns, auto-create with partitions, schema evolution, metadata columns,
flattening and branch commits: each through the same commit cycle, on the embedded stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli, sink_config, sink_snapshots

from sinklab.exceptions import ConfigError
from sinklab.generators import produce_json
from sinklab.sink import IcebergSink, read_control_log
from sinklab.sink.cycle import coordinator as coordinator_module
from sinklab.stack import Stack

pytestmark = pytest.mark.spark


def rows(stack: Stack, table: str, *columns: str, branch: str | None = None) -> list[tuple[Any, ...]]:
    reader = stack.spark.read.option("branch", branch) if branch else stack.spark.read
    df = reader.table(f"sinklab.{table}").select(*columns)
    return sorted(tuple(r) for r in df.collect())


def run(stack: Stack, config: dict[str, Any]) -> dict[str, int]:
    sink = IcebergSink(stack, config)
    try:
        result = sink.run_once()
        assert result is not None
        return dict(result.counters)
    finally:
        sink.stop()


def kinds(n: int) -> list[dict[str, Any]]:
    cycle = ["pizza", "calzone", "drink", "dessert", None]
    return [{"id": i, **({"kind": cycle[i % 5]} if cycle[i % 5] else {})} for i in range(n)]


def test_static_routing_fans_out_and_counts_the_rest(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    produce_json(stack.bootstrap_servers, unique, kinds(100))
    food, oven, drinks, other = (f"{unique}.{t}" for t in ("food", "oven", "drinks", "other"))
    config = sink_config(unique, [other, food, oven, drinks], **{
        "iceberg.tables.route-field": "kind",
        f"iceberg.table.{food}.route-regex": "pizza|calzone",
        f"iceberg.table.{oven}.route-regex": "calzone",
        f"iceberg.table.{drinks}.route-regex": "drink",
    })
    counters = run(stack, config)
    assert [r[0] for r in rows(stack, food, "id")] == [i for i in range(100) if i % 5 in (0, 1)]
    assert [r[0] for r in rows(stack, oven, "id")] == [i for i in range(100) if i % 5 == 1]  # in two tables
    assert [r[0] for r in rows(stack, drinks, "id")] == [i for i in range(100) if i % 5 == 2]
    assert not stack.catalog.table_exists((unique, "other"))  # no route regex: takes nothing
    assert counters["no-table"] == 40  # desserts and records without the field
    for table in (food, oven, drinks):
        snaps = sink_snapshots(stack, table)
        assert len(snaps) == 1 and snaps[0]["sinklab.sink"] == f"sink-{unique}"
        assert sum(json.loads(snaps[0]["sinklab.offsets"])[unique].values()) == 100

    # With every table there, the next cycle takes one pass; the table without a route regex is a write
    # Spark optimizes away, whose observations come back empty (its metrics are not the cycle's).
    stack.spark.sql(f"CREATE TABLE sinklab.{other} (id BIGINT, kind STRING) USING iceberg")
    produce_json(stack.bootstrap_servers, unique, [{"id": 100 + i, **k} for i, k in enumerate(
        [{"kind": "pizza"}, {"kind": "drink"}, {}])])
    sink = IcebergSink(stack, config)
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.passes == 1
    counters = result.counters
    assert counters["records"] == 3 and counters["no-table"] == 1
    assert [r[0] for r in rows(stack, food, "id")][-1] == 100 and [r[0] for r in rows(stack, drinks, "id")][-1] == 101
    assert stack.spark.table(f"sinklab.{other}").count() == 0


def test_dynamic_routing_skips_missing_tables_unless_auto_create(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    stack.spark.sql(f"CREATE TABLE sinklab.{unique}.eu (id BIGINT, region STRING) USING iceberg")
    events = [{"id": i, "region": f"{unique}.{'EU' if i % 2 else 'us'}"} for i in range(10)] + [{"id": 99}]
    produce_json(stack.bootstrap_servers, unique, events)
    base = {"iceberg.tables": "", "iceberg.tables.dynamic-enabled": "true", "iceberg.tables.route-field": "region"}
    counters = run(stack, sink_config(unique, **base, **{"iceberg.tables.auto-create-enabled": "false"}))
    assert [r[0] for r in rows(stack, f"{unique}.eu", "id")] == [1, 3, 5, 7, 9]  # route values are lower-cased
    assert counters["no-table"] == 6 and not stack.catalog.table_exists((unique, "us"))

    produce_json(stack.bootstrap_servers, unique, [{"id": 100, "region": f"{unique}.us"}])
    run(stack, sink_config(unique, **base, **{"name": f"sink-{unique}"}))
    assert rows(stack, f"{unique}.us", "id") == [(100,)]


def test_fifty_dynamic_tables_in_one_cycle(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    produce_json(stack.bootstrap_servers, unique,
                 [{"id": i, "dest": f"{unique}.t{i % 50:02d}", "v": i * 1.5} for i in range(1000)])
    run(stack, sink_config(unique, **{"iceberg.tables": "", "iceberg.tables.dynamic-enabled": "true",
                                      "iceberg.tables.route-field": "dest"}))
    for t in (0, 17, 49):
        assert [r[0] for r in rows(stack, f"{unique}.t{t:02d}", "id")] == list(range(t, 1000, 50))
    assert len(stack.catalog.list_tables(unique)) == 50
    log = read_control_log(stack.bootstrap_servers, sink=f"sink-{unique}")
    complete = log[log["type"] == "commit-complete"].iloc[0]
    assert len(complete["tables"]) == 50  # one cycle, one commit per table
    commit_ms = sorted(t["commit_ms"] for t in complete["tables"])
    write_ms = sorted(t["write_ms"] for t in complete["tables"])
    print(f"\n50 tables: median table commit {commit_ms[25]} ms, median staged write {write_ms[25]} ms, "
          f"cycle {complete['duration_ms']} ms")


def test_topic_regex_picks_up_new_daily_topics(stack: Stack, unique: str) -> None:
    stack.create_topic(f"{unique}.20240102")
    produce_json(stack.bootstrap_servers, f"{unique}.20240102", [{"id": 1}, {"id": 2}])
    config = sink_config(unique, [f"{unique}.logs"], topics=None, **{"topics.regex": rf"{unique}\.\d{{8}}"})
    del config["config"]["topics"]
    sink = IcebergSink(stack, config)
    try:
        sink.run_once()
        stack.create_topic(f"{unique}.20240103")
        stack.create_topic(f"{unique}.other")
        produce_json(stack.bootstrap_servers, f"{unique}.20240103", [{"id": 3}])
        produce_json(stack.bootstrap_servers, f"{unique}.other", [{"id": 4}])
        sink.run_once()  # same instance: the pattern is evaluated again every cycle
    finally:
        sink.stop()
    assert rows(stack, f"{unique}.logs", "id") == [(1,), (2,), (3,)]
    offsets = json.loads(sink_snapshots(stack, f"{unique}.logs")[-1]["sinklab.offsets"])
    assert offsets == {f"{unique}.20240102": {"0": 2}, f"{unique}.20240103": {"0": 1}}


def test_auto_create_partitioned_with_props(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [
        {"id": i, "store_id": i % 7, "sauce": ["bbq", "regular"][i % 2],
         "date_ordered": f"2024-01-0{1 + i % 3} 12:00:00"} for i in range(30)])
    a, b = f"{unique}.ns.a", f"{unique}.ns.b"
    run(stack, sink_config(unique, [a, b], **{
        "iceberg.tables.default-partition-by": "day(date_ordered), bucket(4, store_id)",
        f"iceberg.table.{b}.partition-by": "truncate(sauce, 2), hour(date_ordered)",
        "iceberg.tables.auto-create-props.commit.retry.num-retries": "7",
    }))
    ta = stack.catalog.load_table((unique, "ns", "a"))
    assert [(f.name, str(f.transform)) for f in ta.spec().fields] == [
        ("date_ordered_day", "day"), ("store_id_bucket", "bucket[4]")]
    assert str(ta.schema().find_field("date_ordered").field_type) == "timestamptz"
    assert ta.properties["commit.retry.num-retries"] == "7" and ta.format_version == 2
    tb = stack.catalog.load_table((unique, "ns", "b"))
    assert [str(f.transform) for f in tb.spec().fields] == ["truncate[2]", "hour"]
    assert rows(stack, a, "id") == [(i,) for i in range(30)]
    assert stack.spark.table(f"sinklab.{a}.files").select("partition").distinct().count() > 3


def test_auto_create_partition_errors_name_the_key(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [{"id": 1, "label": "not a time"}])
    for spec, key, words in [("day(nope)", "default-partition-by", "nope"), ("day(label)", "default-partition-by",
                                                                          "not a time")]:
        sink = IcebergSink(stack, sink_config(unique, **{"iceberg.tables.default-partition-by": spec}))
        with pytest.raises(ConfigError, match=key) as info:
            sink.run_once()
        assert words in str(info.value)
        sink.stop()
    with pytest.raises(ConfigError, match="iceberg.tables.default-partition-by"):
        IcebergSink(stack, sink_config(unique, **{"iceberg.tables.default-partition-by": "weekly(ts)"}))


def test_schema_evolution_adds_widens_and_relaxes(stack: Stack, unique: str) -> None:
    table = f"{unique}.t"
    stack.create_topic(unique)
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    stack.spark.sql(f"CREATE TABLE sinklab.{table} (id INT NOT NULL, score FLOAT, info STRUCT<a: STRING>, "
                    f"name STRING) USING iceberg TBLPROPERTIES ('format-version'='2')")
    produce_json(stack.bootstrap_servers, unique, [
        {"id": 1, "score": 0.5, "info": {"a": "x"}, "name": "plain"},
        {"id": 5_000_000_000, "score": 1e300, "info": {"a": "y", "b": 2}, "NAME": "shouty", "extra": True},
        {"score": 2.5, "name": "no id"},
    ])
    extra = {"iceberg.tables.evolve-schema-enabled": "true", "iceberg.tables.schema-case-insensitive": "true"}
    run(stack, sink_config(unique, [table], **extra))
    schema = stack.catalog.load_table((unique, "t")).schema()
    assert str(schema.find_field("id").field_type) == "long" and not schema.find_field("id").required
    assert str(schema.find_field("score").field_type) == "double"
    assert str(schema.find_field("info.b").field_type) == "long"
    assert str(schema.find_field("extra").field_type) == "boolean"
    assert "NAME" not in [f.name for f in schema.fields]  # matched to `name` case-insensitively
    assert rows(stack, table, "name", "id", "info.b", "extra") == [
        ("no id", None, None, None), ("plain", 1, None, None), ("shouty", 5_000_000_000, 2, True)]


def test_without_evolution_unknown_fields_are_ignored(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [{"id": 1}])
    table = f"{unique}.t"
    run(stack, sink_config(unique, [table]))
    produce_json(stack.bootstrap_servers, unique, [{"id": 2, "surprise": "x"}])
    run(stack, sink_config(unique, [table]))
    assert rows(stack, table, "*") == [(1,), (2,)]


def test_force_optional_with_connect_schema(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    envelope = {"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64", "optional": False}]},
                "payload": {"id": 1}}
    produce_json(stack.bootstrap_servers, unique, [envelope])
    run(stack, sink_config(unique, **{"value.converter.schemas.enable": "true",
                                      "iceberg.tables.schema-force-optional": "true"}))
    assert not stack.catalog.load_table((unique, "pizzas")).schema().find_field("id").required


def test_metadata_columns_flat_and_nested_and_flattening(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [{"id": i, "addr": {"city": "Rome", "geo": {"lat": 41.9}}}
                                                   for i in range(3)])
    flat, nested = f"{unique}.flat", f"{unique}.nested"
    transform = {"transforms": "meta",
                 "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"}
    run(stack, sink_config(unique, [flat], **transform, **{"sinklab.flatten.separator": "_"}))
    assert rows(stack, flat, "id", "addr_city", "addr_geo_lat", "_kafka_metadata_topic",
                "_kafka_metadata_partition", "_kafka_metadata_offset") == [
        (i, "Rome", 41.9, unique, 0, i) for i in range(3)]
    ts = stack.catalog.load_table((unique, "flat")).schema().find_field("_kafka_metadata_timestamp")
    assert str(ts.field_type) == "long"  # epoch millis without a Connect schema, as in Java
    second = sink_config(unique, [nested], **transform, **{"transforms.meta.nested": "true"})
    second["name"] = f"sink2-{unique}"
    run(stack, second)
    assert rows(stack, nested, "id", "addr.geo.lat", "_kafka_metadata.offset") == [(i, 41.9, i) for i in range(3)]


def test_branch_commits(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [{"id": i} for i in range(5)])
    audit, direct = f"{unique}.audit", f"{unique}.direct"
    run(stack, sink_config(unique, [audit, direct], **{"iceberg.tables.default-commit-branch": "staging",
                                                        f"iceberg.table.{direct}.commit-branch": "main"}))
    meta = stack.catalog.load_table((unique, "audit")).metadata
    assert "staging" in meta.refs and "main" not in meta.refs
    assert stack.spark.table(f"sinklab.{audit}").count() == 0  # main holds nothing
    assert rows(stack, audit, "id", branch="staging") == [(i,) for i in range(5)]
    assert rows(stack, direct, "id") == [(i,) for i in range(5)]
    produce_json(stack.bootstrap_servers, unique, [{"id": 5}])
    run(stack, sink_config(unique, [audit, direct], **{"iceberg.tables.default-commit-branch": "staging",
                                                        f"iceberg.table.{direct}.commit-branch": "main"}))
    assert rows(stack, audit, "id", branch="staging") == [(i,) for i in range(6)]


def test_crash_between_fan_out_commits(stack: Stack, tmp_path: Path, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    stack_file = stack.write(tmp_path / "stack.json")
    food, drinks = f"{unique}.food", f"{unique}.drinks"
    config = tmp_path / "sink.json"
    config.write_text(json.dumps(sink_config(unique, [food, drinks], **{
        "iceberg.tables.route-field": "kind", f"iceberg.table.{food}.route-regex": "pizza|calzone",
        f"iceberg.table.{drinks}.route-regex": "drink"})))
    produce_json(stack.bootstrap_servers, unique, kinds(200), key_field="id")
    crashed = run_cli("sink", "run", "--config", str(config), "--stack", str(stack_file), "--once",
                      env={coordinator_module.CRASH_ENV: "between-table-commits"})
    assert crashed.returncode == 86, crashed.stderr
    committed = [t for t in ("food", "drinks") if "main" in stack.catalog.load_table((unique, t)).metadata.refs]
    assert len(committed) == 1  # one table committed before the crash, the other only staged
    produce_json(stack.bootstrap_servers, unique, [{"id": 1000 + i, "kind": "drink"} for i in range(10)])
    recovered = run_cli("sink", "run", "--config", str(config), "--stack", str(stack_file), "--once")
    assert recovered.returncode == 0, recovered.stderr
    assert [r[0] for r in rows(stack, food, "id")] == [i for i in range(200) if i % 5 in (0, 1)]
    assert [r[0] for r in rows(stack, drinks, "id")] == [i for i in range(200) if i % 5 == 2] + list(
        range(1000, 1010))


def test_missing_table_without_auto_create_stops(stack: Stack, unique: str) -> None:
    from sinklab.exceptions import TableMissing
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [{"id": 1}])
    sink = IcebergSink(stack, sink_config(unique, **{"iceberg.tables.auto-create-enabled": "false"}))
    try:
        with pytest.raises(TableMissing, match=f"{unique}.pizzas does not exist"):
            sink.run_once()
    finally:
        sink.stop()
    assert not stack.catalog.table_exists((unique, "pizzas"))


def test_evolution_on_a_table_of_plain_columns(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    table = f"{unique}.t"
    evolve = {"iceberg.tables.evolve-schema-enabled": "true"}
    produce_json(stack.bootstrap_servers, unique, [{"id": 1, "name": "a"}])
    run(stack, sink_config(unique, [table], **evolve))
    produce_json(stack.bootstrap_servers, unique, [{"id": 2, "name": "b"}])
    run(stack, sink_config(unique, [table], **evolve))  # known fields only: nothing changes
    assert stack.catalog.load_table((unique, "t")).schema().schema_id == 0
    produce_json(stack.bootstrap_servers, unique, [{"id": 3, "name": "c", "late": 1.5}])
    run(stack, sink_config(unique, [table], **evolve))
    assert rows(stack, table, "id", "late") == [(1, None), (2, None), (3, 1.5)]


def test_evolution_adds_a_new_object_field_as_a_struct_column(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    table = f"{unique}.t"
    evolve = {"iceberg.tables.evolve-schema-enabled": "true"}
    produce_json(stack.bootstrap_servers, unique, [{"id": 1}])
    run(stack, sink_config(unique, [table], **evolve))
    produce_json(stack.bootstrap_servers, unique, [{"id": 2, "delivery": {"driver": "Ana", "minutes": 25}}])
    run(stack, sink_config(unique, [table], **evolve))
    field = stack.catalog.load_table((unique, "t")).schema().find_field("delivery.minutes")
    assert str(field.field_type) == "long"
    assert rows(stack, table, "id", "delivery.driver") == [(1, None), (2, "Ana")]
