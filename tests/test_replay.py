"""Dead letters replayed from the dead-letter table after a fix: into their tables, each once, across a
replay killed midway and replays run again (issue #43)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from helpers import run_cli, sink_config

from sinklab.exceptions import EXIT_NEEDS_LOOK, ReplayError
from sinklab.sink import IcebergSink, load_config
from sinklab.sink.cycle import coordinator as coordinator_module
from sinklab.stack import Stack

pytestmark = pytest.mark.spark

HUGE = 10_000_000_000  # too large for an INT column; a BIGINT holds it


def send(stack: Stack, topic: str, values: list[Any]) -> None:
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, value if isinstance(value, bytes) else json.dumps(value).encode(), f"k{i}".encode())
    assert producer.flush(30) == 0


def setup(stack: Stack, unique: str) -> tuple[str, str]:
    """Two tables a record fans out to: ``pizzas`` (size INT) takes pizzas, ``everything`` (size BIGINT) all."""
    stack.create_topic(unique)
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    pizzas, everything = f"{unique}.pizzas", f"{unique}.everything"
    stack.spark.sql(f"CREATE TABLE sinklab.{pizzas} (id BIGINT NOT NULL, kind STRING, size INT) USING iceberg")
    stack.spark.sql(f"CREATE TABLE sinklab.{everything} (id BIGINT NOT NULL, kind STRING, size BIGINT) USING iceberg")
    return pizzas, everything


def config(unique: str, tables: list[str], **extra: Any) -> dict[str, Any]:
    pizzas, everything = tables[:2]
    return sink_config(unique, tables, **{
        "iceberg.tables.route-field": "kind", f"iceberg.table.{pizzas}.route-regex": "pizza",
        f"iceberg.table.{everything}.route-regex": "pizza|pasta", "errors.tolerance": "all",
        "errors.deadletterqueue.table.name": f"{unique}.dead_letters", **extra})


def ids(stack: Stack, table: str) -> list[int]:
    return sorted(r.id for r in stack.spark.table(f"sinklab.{table}").collect())


def letters(stack: Stack, unique: str) -> dict[int, Any]:
    return {r.source_offset: r for r in stack.spark.table(f"sinklab.{unique}.dead_letters").collect()}


def waiting_in_status(stack: Stack, unique: str) -> int | None:
    """What `sinklab sink status` reports of the sink's dead-letter table."""
    from sinklab.connect.report import format_reports, sink_reports

    [report] = sink_reports(stack, [f"sink-{unique}"])
    [table] = [t for t in report.tables if t.table == f"{unique}.dead_letters"]
    assert f"dead letters: {table.dead_letters_waiting:,} wait for replay" in format_reports([report])
    return table.dead_letters_waiting


RECORDS = [
    {"id": 1, "kind": "pizza", "size": 30},
    {"id": 2, "kind": "pizza", "size": HUGE},  # 1: out of range for pizzas (INT), fine for everything
    {"id": 3, "kind": "dessert", "size": 1},  # 2: no table takes desserts
    b'{"id": 4, "kind": "pizza"',  # 3: malformed, whatever the config
    {"id": 5, "kind": "pasta", "size": 2},
]


def test_replay_after_the_fix_writes_each_record_once_into_its_table(stack: Stack, tmp_path: Path,
                                                                      unique: str) -> None:
    pizzas, everything = setup(stack, unique)
    send(stack, unique, RECORDS)
    sink = IcebergSink(stack, config(unique, [pizzas, everything]))
    try:
        sink.run_once()
        assert sink.replay("error_class = 'nothing-like-this'") == []  # claims nothing
        with pytest.raises(ReplayError) as bad_where:
            sink.replay("no_such_column = 1")
        assert bad_where.value.where == "no_such_column = 1" and "dead_letters" in str(bad_where.value)
    finally:
        sink.stop()
    assert ids(stack, pizzas) == [1] and ids(stack, everything) == [1, 2, 5]
    assert waiting_in_status(stack, unique) == 3
    waiting = letters(stack, unique)
    assert {o: (r.error_class, r.target_table) for o, r in waiting.items()} == {
        1: ("out-of-range", pizzas), 2: ("no-table", None), 3: ("malformed-json", None)}

    # The fixes: the column widened, and desserts get a table (auto-created on replay).
    stack.spark.sql(f"ALTER TABLE sinklab.{pizzas} ALTER COLUMN size TYPE BIGINT")
    desserts = f"{unique}.desserts"
    fixed = config(unique, [pizzas, everything, desserts], **{f"iceberg.table.{desserts}.route-regex": "dessert"})
    sink = IcebergSink(stack, fixed)
    try:
        [first] = sink.replay("error_class = 'out-of-range'")
        assert (first.claimed, first.replayed, first.failed, first.tables) == (1, 1, 0, {pizzas: 1})
        # Record 1 went to pizzas alone: everything had it already.
        assert ids(stack, pizzas) == [1, 2] and ids(stack, everything) == [1, 2, 5]
        [second] = sink.replay()
        assert (second.claimed, second.replayed, second.failed, second.tables) == (2, 1, 1, {desserts: 1})
        assert sink.replay() and ids(stack, desserts) == [3]  # the malformed one, tried and failing again
    finally:
        sink.stop()
    after = letters(stack, unique)
    assert after[1].replay_id == first.replay_id and after[1].replayed_at is not None
    assert after[2].replay_id == second.replay_id and after[2].replayed_at is not None
    assert after[3].replay_id is None and after[3].replayed_at is None and after[3].error_class == "malformed-json"
    assert ids(stack, pizzas) == [1, 2] and ids(stack, everything) == [1, 2, 5] and ids(stack, desserts) == [3]
    assert waiting_in_status(stack, unique) == 1
    # The settings the table keeps for fresh reads are the sink's own, not the narrowed copy a replay stages with.
    kept = stack.catalog.load_table((unique, "pizzas")).properties[f"sinklab.settings.sink-{unique}"]
    assert kept == load_config(fixed).shareable()
    head = stack.catalog.load_table((unique, "pizzas")).current_snapshot()
    assert head.summary["sinklab.replay"] == f"{first.replay_id}:{pizzas}"

    # The CLI: what it did, and exit 3 while a record still fails.
    path = tmp_path / "sink.json"
    path.write_text(json.dumps(fixed))
    done = run_cli("dlq", "replay", "--config", str(path), "--stack", str(stack.write(tmp_path / "stack.json")))
    assert done.returncode == EXIT_NEEDS_LOOK, done.stderr
    assert "1 dead letters, 0 replayed (no table), 1 still failing" in done.stdout
    assert ids(stack, pizzas) == [1, 2]


@pytest.mark.parametrize("point", coordinator_module.REPLAY_CRASH_POINTS)
def test_replay_killed_midway_then_run_again_writes_each_record_once(stack: Stack, tmp_path: Path, unique: str,
                                                                     point: str) -> None:
    pizzas, everything = setup(stack, unique)
    send(stack, unique, RECORDS)
    sink = IcebergSink(stack, config(unique, [pizzas, everything]))
    try:
        sink.run_once()
    finally:
        sink.stop()
    stack.spark.sql(f"ALTER TABLE sinklab.{pizzas} ALTER COLUMN size TYPE BIGINT")
    path = tmp_path / "sink.json"
    path.write_text(json.dumps(config(unique, [pizzas, everything])))
    crashed = run_cli("dlq", "replay", "--config", str(path), "--stack", str(stack.write(tmp_path / "stack.json")),
                      env={coordinator_module.CRASH_ENV: point})
    assert crashed.returncode == 86, crashed.stderr

    sink = IcebergSink(stack, config(unique, [pizzas, everything]))
    try:
        # The crashed replay is finished first; then the two that still fail are tried again.
        resumed, again = sink.replay()
        [last] = sink.replay()
    finally:
        sink.stop()
    assert (resumed.claimed, resumed.replayed, resumed.failed) == (3, 1, 2)
    assert (again.claimed, again.replayed, last.claimed, last.replayed) == (2, 0, 2, 0)
    assert ids(stack, pizzas) == [1, 2] and ids(stack, everything) == [1, 2, 5]
    assert letters(stack, unique)[1].replayed_at is not None
    assert list(stack.catalog.load_table((unique, "pizzas")).metadata.refs) == ["main"]


def test_a_cdc_replay_neither_overwrites_a_newer_row_nor_brings_back_a_deleted_one(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    table = f"{unique}.rows"
    stack.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS sinklab.{unique}")
    stack.spark.sql(f"CREATE TABLE sinklab.{table} (id BIGINT NOT NULL, v STRING, size INT) USING iceberg "
                    "TBLPROPERTIES ('format-version'='2')")
    stack.spark.sql(f"ALTER TABLE sinklab.{table} SET IDENTIFIER FIELDS id")
    send(stack, unique, [
        {"op": "I", "id": 1, "v": "a", "size": 1},
        {"op": "I", "id": 2, "v": "b", "size": 1},
        {"op": "U", "id": 1, "v": "older", "size": HUGE},  # 2: bad; offset 4 changes row 1 again
        {"op": "U", "id": 2, "v": "new", "size": HUGE},  # 3: bad; the last change of row 2
        {"op": "U", "id": 1, "v": "newest", "size": 2},
        {"op": "I", "id": 3, "v": "c", "size": HUGE},  # 5: bad; offset 6 deletes row 3
        {"op": "D", "id": 3},
    ])
    config = sink_config(unique, [table], **{
        "iceberg.tables.cdc-field": "op", "iceberg.tables.default-id-columns": "id", "errors.tolerance": "all",
        "errors.deadletterqueue.table.name": f"{unique}.dead_letters"})
    sink = IcebergSink(stack, config)
    try:
        sink.run_once()
        rows = sorted(tuple(r) for r in stack.spark.table(f"sinklab.{table}").select("id", "v").collect())
        assert rows == [(1, "newest"), (2, "b")]
        stack.spark.sql(f"ALTER TABLE sinklab.{table} ALTER COLUMN size TYPE BIGINT")
        [replay] = sink.replay()
    finally:
        sink.stop()
    assert (replay.claimed, replay.replayed, replay.failed, replay.tables) == (3, 1, 2, {table: 1})
    rows = sorted(tuple(r) for r in stack.spark.table(f"sinklab.{table}").select("id", "v").collect())
    assert rows == [(1, "newest"), (2, "new")]  # row 1 not overwritten, row 3 not brought back
    after = letters(stack, unique)
    assert after[3].replayed_at is not None
    for offset, later in ((2, 4), (5, 6)):
        assert after[offset].error_class == "superseded" and after[offset].replay_id is None
        assert f"offset {later}" in after[offset].message
