"""Schemaless JSON into VARIANT columns (format v3): fields whose shape changes too often for schema
evolution, or the whole value, queried with variant_get."""

from __future__ import annotations

import json

import pytest
from helpers import once, sink_config

from sinklab import readings as frames
from sinklab.exceptions import ConfigError
from sinklab.generators import produce_json
from sinklab.sink.config.sink_config import load_config
from sinklab.stack import Stack

pytestmark = pytest.mark.spark



def test_drifting_fields_land_as_variant_and_read_back_with_variant_get(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    table = f"{unique}.events"
    config = sink_config(unique, [table], **{"sinklab.tables.variant-columns": "attrs",
                                             "iceberg.tables.evolve-schema-enabled": "true"})
    produce_json(stack.bootstrap_servers, unique, [
        {"id": 1, "kind": "click", "attrs": {"a": 1}},
        {"id": 2, "kind": "view", "attrs": {"b": {"c": "x"}, "list": [1, 2]}},
        {"id": 3, "kind": "note", "attrs": "just text"},
        {"id": 4, "kind": "count", "attrs": 42},
        {"id": 5, "kind": "bare"},
    ])
    once(stack, config)
    # The next shape is one evolution cannot follow (a: int -> string); a VARIANT takes it as it comes.
    produce_json(stack.bootstrap_servers, unique, [{"id": 6, "kind": "click", "attrs": {"a": "now text"},
                                                    "extra": True}])
    once(stack, config)

    types = {f.name: f.dataType.simpleString() for f in stack.spark.table(f"sinklab.{table}").schema.fields}
    assert types == {"id": "bigint", "kind": "string", "attrs": "variant", "extra": "boolean"}
    rows = stack.spark.sql(f"""
        SELECT id, variant_get(attrs, '$.a', 'string') AS a, variant_get(attrs, '$.b.c', 'string') AS c,
               variant_get(attrs, '$.list[1]', 'int') AS second, variant_get(attrs, '$', 'string') AS whole,
               schema_of_variant(attrs) AS shape
        FROM sinklab.{table} ORDER BY id""").collect()
    assert [(r.id, r.a, r.c, r.second) for r in rows] == [
        (1, "1", None, None), (2, None, "x", 2), (3, None, None, None), (4, None, None, None), (5, None, None, None),
        (6, "now text", None, None)]
    assert [r.whole for r in rows[2:4]] == ["just text", "42"] and rows[4].shape is None
    assert rows[3].shape == "BIGINT" and rows[0].shape.startswith("OBJECT<a: BIGINT")

    # The sink's own metadata client reads the v3 table although pyiceberg has no VARIANT type.
    loaded = stack.catalog.load_table((unique, "events"))
    assert loaded.format_version == 3
    snaps = frames.snapshots(stack, table)
    assert len(snaps) == 2 and snaps["sink"].notna().all()


def test_the_whole_value_as_one_variant_column(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    table = f"{unique}.raw"
    events = [{"id": 1, "user": {"name": "ann"}}, {"id": "two", "tags": ["x", "y"]}, {"id": 3, "user": "bob"}]
    produce_json(stack.bootstrap_servers, unique, events)
    once(stack, sink_config(unique, [table], **{"sinklab.tables.variant-value": "doc",
                                                "iceberg.tables.evolve-schema-enabled": "true"}))
    assert [f.name for f in stack.spark.table(f"sinklab.{table}").schema.fields] == ["doc"]
    docs = stack.spark.sql(f"SELECT to_json(doc) AS j, variant_get(doc, '$.user.name', 'string') AS name "
                           f"FROM sinklab.{table}").collect()
    assert sorted(json.loads(d.j)["id"] for d in docs if isinstance(json.loads(d.j)["id"], int)) == [1, 3]
    assert sorted(json.dumps(json.loads(d.j), sort_keys=True) for d in docs) == sorted(
        json.dumps(e, sort_keys=True) for e in events)
    assert {d.name for d in docs} == {"ann", None}


def test_variant_keys_are_checked_at_start() -> None:
    base = {"name": "s", "topics": "t", "iceberg.tables": "n.t"}
    with pytest.raises(ConfigError, match="sinklab.tables.variant-columns: VARIANT columns need Iceberg format "
                                          "version 3"):
        load_config({**base, "sinklab.tables.variant-columns": "attrs",
                     "iceberg.tables.auto-create-props.format-version": "2"})
    with pytest.raises(ConfigError, match="sinklab.tables.variant-value: upsert/CDC"):
        load_config({**base, "sinklab.tables.variant-value": "doc", "iceberg.tables.cdc-field": "op"})
    config = load_config({**base, "sinklab.tables.variant-columns": "attrs, meta"})
    assert config.variant_columns == ["attrs", "meta"] and config.table_create_props == {"format-version": "3"}
    assert not [n for n in config.notes if "unknown" in n]
