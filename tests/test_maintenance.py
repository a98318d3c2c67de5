"""Table maintenance beside the sink: compaction, expiry and orphan cleanup never cost a record."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest
from helpers import order_ids, produce, run_cli, sink_config

from sinklab import viz
from sinklab.generators import produce_json
from sinklab.maintenance import Target, compact, maintain, schedule
from sinklab.maintenance.operations import small_files
from sinklab.maintenance.retention import lineage, recovery_snapshots, snaps_of
from sinklab.sink import IcebergSink, load_config, read_control_log
from sinklab.sink.cycle import coordinator as coordinator_module
from sinklab.sink.tables.state import OFFSETS_PROP
from sinklab.stack import Stack

pytestmark = pytest.mark.spark


def data_files(stack: Stack, table: str) -> list[str]:
    return [r.file_path for r in stack.spark.sql(f"SELECT file_path FROM sinklab.{table}.files WHERE content = 0")
            .collect()]


def rows(stack: Stack, table: str) -> list[tuple]:
    return sorted(tuple(r) for r in stack.spark.table(f"sinklab.{table}").collect())


def files_on_disk(stack: Stack, table: str) -> set[str]:
    location = stack.catalog.load_table(tuple(table.split("."))).location()
    root = Path(location.removeprefix("file:")) / "data"
    return {f"file:{p}" if location.startswith("file:") else str(p) for p in root.rglob("*.parquet")}


def referenced_files(stack: Stack, table: str) -> set[str]:
    return {r.file_path for r in stack.spark.sql(f"SELECT file_path FROM sinklab.{table}.all_files").collect()}


def assert_exactly_once(stack: Stack, table: str, produced: list[str]) -> None:
    got = order_ids(stack, table)
    assert len(got) == len(set(got)), f"duplicates in {table}"
    assert sorted(got) == sorted(produced), f"{table} lost or gained records"


def resumes_exactly_once(stack: Stack, config: dict, topic: str, produced: list[str], count: int = 10) -> None:
    """A new instance of the sink, after maintenance: it reads only what came since, and lands it once."""
    produced += produce(stack, topic, count, seed=999)
    loaded = load_config(config)
    again = IcebergSink(stack, loaded, between_cycles=schedule(loaded))
    try:
        assert again.run_once().records == count
    finally:
        again.stop()
    assert_exactly_once(stack, f"{topic}.pizzas", produced)


def test_maintain_beside_a_sink_that_is_killed_and_restarted(stack: Stack, stack_file: Path, tmp_path: Path,
                                                            unique: str) -> None:
    table = f"{unique}.pizzas"
    stack.create_topic(unique, partitions=2)
    config = sink_config(unique, **{"iceberg.control.commit.interval-ms": "300"})
    config_file = tmp_path / "sink.json"
    config_file.write_text(json.dumps(config))

    # A cycle killed after writing its files: data files no commit will use.
    produced = produce(stack, unique, 20, seed=100)
    crashed = run_cli("sink", "run", "--config", str(config_file), "--stack", str(stack_file), "--once",
                      env={coordinator_module.CRASH_ENV: "after-data-files"})
    assert crashed.returncode == 86, crashed.stderr[-2000:]
    assert files_on_disk(stack, table) - referenced_files(stack, table), "the killed cycle wrote no files"

    # The sink restarted, committing every 300 ms while records arrive: the small-files problem, then
    # maintenance in the middle of it.
    stop = threading.Event()

    def producer() -> None:
        seed = 200
        while not stop.is_set():
            produced.extend(produce(stack, unique, 10, seed=seed))
            seed += 1
            time.sleep(0.2)

    thread = threading.Thread(target=producer)
    restarted = IcebergSink(stack, config)
    try:
        thread.start()
        restarted.start()
        deadline = time.monotonic() + 180
        while len(data_files(stack, table)) < 30:
            assert restarted.status().state == "RUNNING" and time.monotonic() < deadline, restarted.status()
            time.sleep(1)
        during = maintain(Target.on(stack, table), expire_older_than_ms=0, orphan_older_than_ms=5_000)
        time.sleep(1)  # a cycle or two on top of the maintenance
        stop.set()
        thread.join()
        restarted.run_until_idle(0)  # what arrived until the producer stopped
        assert restarted.status().state != "FAILED", restarted.status().trace
    finally:
        stop.set()
        restarted.stop()
    assert [r.operation for r in during] == ["compact", "rewrite-manifests", "expire", "clean"]
    assert during[0].counts["rewritten_data_files"] >= 30
    assert_exactly_once(stack, table, produced)

    # Maintained once more, the sink stopped: the table as the "done when" describes it (what
    # `sinklab table maintain --older-than 0s` runs; the CLI's own test is below).
    before = rows(stack, table)
    reports = maintain(Target.on(stack, table), expire_older_than_ms=0, orphan_older_than_ms=1_000)
    assert [r.operation for r in reports] == ["compact", "rewrite-manifests", "expire", "clean"]
    assert rows(stack, table) == before
    assert len(data_files(stack, table)) <= stack.spark.sparkContext.defaultParallelism  # unpartitioned: tasks x 1

    metadata = stack.catalog.load_table((unique, "pizzas")).metadata
    snaps, refs = snaps_of(metadata)
    assert [r.name for r in refs] == ["main"], "staging branches left"
    kept = recovery_snapshots(snaps, refs)[("main", config["name"])]
    chain = lineage(snaps, metadata.refs["main"].snapshot_id)
    assert set(snaps) == {s.snapshot_id for s in chain[:chain.index(kept) + 1]}, (
        "only the sink's newest commit and what came after it may survive an expiry of everything: "
        f"kept {kept.snapshot_id}, chain {[s.snapshot_id for s in chain]}, {reports}")
    assert sum(json.loads(kept.props[OFFSETS_PROP])[unique].values()) == len(produced), \
        "the kept snapshot is the sink's last commit, through every record produced"
    assert files_on_disk(stack, table) <= referenced_files(stack, table), "orphan files left"

    # Recovery after the expiry: the sink resumes exactly once from what was kept.
    resumes_exactly_once(stack, config, unique, produced)


def test_compaction_between_planning_and_publish_makes_the_sink_stage_again(
        stack: Stack, unique: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    table = f"{unique}.pizzas"
    stack.create_topic(unique, partitions=2)
    config = sink_config(unique)
    sink = IcebergSink(stack, config)
    produced: list[str] = []
    real_publish = coordinator_module.publish
    raced: list[int] = []

    def compaction_lands_first(catalog, state, staged):  # noqa: ANN001, ANN202 - the publish signature
        if not raced:
            raced.append(compact(Target.on(stack, table)).snapshot_id)
        return real_publish(catalog, state, staged)

    try:
        for batch in range(3):
            produced += produce(stack, unique, 20, seed=batch)
            sink.run_once()
        produced += produce(stack, unique, 20, seed=50)
        monkeypatch.setattr(coordinator_module, "publish", compaction_lands_first)
        with caplog.at_level(logging.WARNING, logger="sinklab.sink"):
            assert sink.run_once().records == 20
    finally:
        sink.stop()
    assert any("another writer" in r.getMessage() for r in caplog.records)
    assert_exactly_once(stack, table, produced)
    metadata = stack.catalog.load_table((unique, "pizzas")).metadata
    head = metadata.snapshot_by_id(metadata.refs["main"].snapshot_id)
    assert head.parent_snapshot_id == raced[0], "the sink's commit went on top of the compaction"
    assert head.summary.additional_properties["sinklab.sink"] == config["name"]


def test_sink_schedules_compaction_and_expiry_between_cycles(stack: Stack, unique: str) -> None:
    table = f"{unique}.pizzas"
    stack.create_topic(unique, partitions=2)
    config = sink_config(unique, **{
        "iceberg.control.commit.interval-ms": "200", "sinklab.cycle.max-records": "20",
        "sinklab.maintenance.compact.small-files": "4", "sinklab.maintenance.expire.older-than": "0s",
        "sinklab.maintenance.orphans.older-than": "1h"})
    produced = produce(stack, unique, 140, seed=3)
    loaded = load_config(config)
    sink = IcebergSink(stack, loaded, between_cycles=schedule(loaded))
    try:
        assert sink.run_until_idle(0.5) == 7
        status = sink.status()
    finally:
        sink.stop()
    runs = read_control_log(stack.bootstrap_servers, sink=config["name"]).query("type == 'maintenance'")
    assert len(runs) >= 1 and status.counters["maintenance-runs"] == len(runs)
    assert all(r["compact.rewritten_data_files"] > 4 and "expire.expired_snapshots" in r for r in runs.counters)
    assert all(t["table"] == table for ts in runs.tables for t in ts)
    target = Target.on(stack, table)
    assert small_files(target, 1 << 30) <= 4 + 2, "a partition kept more small files than the policy allows"
    metadata = target.load().metadata
    assert len(metadata.snapshots) < 7, "expiry did not run"

    # What the notebook shows: the runs, the sawtooth of files, metadata that shrinks at each expiry.
    frame = viz.maintenance_runs(stack, config["name"])
    assert len(frame) == len(runs) and (frame["rewritten_data_files"] > 4).all()
    meta = viz.metadata_history(stack, table)
    assert (meta["snapshots"].diff() < 0).any(), "no metadata version shows snapshots expired"
    snaps = viz.snapshots(stack, table)
    assert "replace" in set(snaps["operation"]) and (snaps["total_files"].diff() < 0).any()
    assert len(viz.plot_table_growth(snaps, frame).layout.shapes) == len(frame)
    board = viz.Dashboard(sink)
    board.refresh()
    assert len(board.frames["maintenance"]) == len(runs) and "maintenance runs" in board.header
    live = viz.files(stack, table)
    layout = viz.plot_file_layout(live, small_bytes=1 << 20)
    assert sum(sum(t.y) for t in layout.data if t.type == "bar") == (live["content"] == "data").sum()
    assert_exactly_once(stack, table, produced)
    resumes_exactly_once(stack, config, unique, produced)  # the expired table still says where to resume


@pytest.mark.parametrize("version", ["2", "3"])  # v3: the deletes are deletion vectors
def test_compacting_a_cdc_table_applies_its_deletes(stack: Stack, unique: str, version: str) -> None:
    table = f"{unique}.pizzas"
    stack.create_topic(unique)
    config = sink_config(unique, **{"iceberg.tables.cdc-field": "op", "iceberg.tables.default-id-columns": "id",
                                    "iceberg.tables.auto-create-props.format-version": version})
    sink = IcebergSink(stack, config)
    try:
        for batch in ([{"op": "I", "id": i, "v": f"v{i}"} for i in range(6)],
                      [{"op": "U", "id": 1, "v": "one"}, {"op": "D", "id": 2}],
                      [{"op": "D", "id": 3}, {"op": "U", "id": 4, "v": "four"}]):
            produce_json(stack.bootstrap_servers, unique, batch)
            assert sink.run_once() is not None
    finally:
        sink.stop()
    def id_v() -> list[tuple]:
        return sorted(tuple(r) for r in stack.spark.table(f"sinklab.{table}").select("id", "v").collect())

    before = id_v()
    loaded = Target.on(stack, table).load()
    assert loaded.format_version == int(version)
    assert int(loaded.current_snapshot().summary.additional_properties["total-delete-files"]) > 0
    report = compact(Target.on(stack, table))
    assert id_v() == before == sorted([(0, "v0"), (1, "one"), (4, "four"), (5, "v5")])
    head = Target.on(stack, table).load().current_snapshot().summary.additional_properties
    assert head["total-delete-files"] == "0" and report.counts["rewritten_data_files"] >= 3


def test_cli_names_a_missing_table_and_a_bad_age(stack_file: Path) -> None:
    missing = run_cli("table", "compact", "nowhere.nothing", "--stack", str(stack_file))
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        f"sinklab: error: table nowhere.nothing not found in the catalog at "
        f"{json.loads(stack_file.read_text())['catalog_uri']}"]
    bad = run_cli("table", "expire", "nowhere.nothing", "--stack", str(stack_file), "--older-than", "a week")
    assert bad.returncode == 1 and "--older-than: expected a duration" in bad.stderr


def test_a_publish_whose_sequence_number_was_taken_is_written_again(
        stack: Stack, unique: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    table = f"{unique}.pizzas"
    stack.create_topic(unique)
    produced = produce(stack, unique, 20, seed=1)
    sink = IcebergSink(stack, sink_config(unique))
    real_publish = coordinator_module.publish
    raced: list[int] = []

    def another_branch_commits_first(catalog, state, staged):  # noqa: ANN001, ANN202 - the publish signature
        if not raced:  # main does not move, but the sequence number the snapshot was built with is taken
            raced.append(staged.snapshot_id)
            stack.spark.sql(f"INSERT INTO sinklab.{table}.branch_audit SELECT * FROM sinklab.{table} LIMIT 1")
        return real_publish(catalog, state, staged)

    try:
        assert sink.run_once() is not None  # the table exists: the race is on its second cycle
        stack.spark.sql(f"ALTER TABLE sinklab.{table} CREATE BRANCH audit")
        produced += produce(stack, unique, 20, seed=2)
        monkeypatch.setattr(coordinator_module, "publish", another_branch_commits_first)
        with caplog.at_level(logging.WARNING, logger="sinklab.sink"):
            assert sink.run_once().records == 20
    finally:
        sink.stop()
    assert any("writing it again" in r.getMessage() for r in caplog.records)
    assert_exactly_once(stack, table, produced)
    metadata = stack.catalog.load_table((unique, "pizzas")).metadata
    assert metadata.snapshot_by_id(raced[0]) is None, "the refused snapshot is in the table"
    assert files_on_disk(stack, table) <= referenced_files(stack, table), "the refused write's files were left"
