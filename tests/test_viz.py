"""sinklab.viz on the embedded stack: frames checked against the real snapshots, files and control
events; figures checked against the frames they draw; the dashboard refreshing while a sink runs;
the commit-interval explorer."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pytest
from confluent_kafka import Producer
from helpers import produce_raw, sink_config

from sinklab import viz
from sinklab.generators import PizzaGenerator, produce_json
from sinklab.sink import IcebergSink, read_control_log
from sinklab.sink.wire import control
from sinklab.stack import Stack

pytestmark = pytest.mark.spark

BATCHES = (300, 200, 250)
META = {"transforms": "meta", "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"}


@dataclass
class Run:
    topic: str
    tables: list[str]
    sink: str
    config: dict[str, Any]
    snaps: pd.DataFrame


@pytest.fixture(scope="module")
def run(stack: Stack) -> Iterator[Run]:
    """Three cycles of pizzas into two tables (every record to both), with Kafka metadata columns."""
    unique = "v" + uuid.uuid4().hex[:10]
    tables = [f"{unique}.pizzas", f"{unique}.copy"]
    config = sink_config(unique, tables, **META)
    stack.create_topic(unique, partitions=3)
    sink = IcebergSink(stack, config)
    try:
        for i, n in enumerate(BATCHES):
            PizzaGenerator(seed=i).produce(stack, unique, count=n, partitions=3).wait()
            assert sink.run_once() is not None
    finally:
        sink.stop()
    yield Run(unique, tables, f"sink-{unique}", config, viz.snapshots(stack, tables))


def lineage(stack: Stack, table: str, branch: str = "main") -> list[Any]:
    meta = stack.catalog.load_table(tuple(table.split("."))).metadata
    chain, snapshot_id = [], meta.refs[branch].snapshot_id
    while snapshot_id is not None:
        snap = meta.snapshot_by_id(snapshot_id)
        chain.append(snap)
        snapshot_id = snap.parent_snapshot_id
    return chain[::-1]


def keys(stack: Stack, table: str, snapshot_id: int | None) -> set[tuple[int, int]]:
    """(partition, offset) of every row a snapshot holds."""
    if snapshot_id is None:
        return set()
    scan = viz.load_table(stack, table).scan(
        snapshot_id=snapshot_id, selected_fields=("_kafka_metadata_partition", "_kafka_metadata_offset")).to_arrow()
    # By name: a scan's columns come in the table's order, not the order asked for.
    partitions, offsets = (scan.column(f"_kafka_metadata_{n}").to_pylist() for n in ("partition", "offset"))
    return set(zip(partitions, offsets, strict=True))


def test_snapshots_are_the_branch_lineage_with_sink_properties(stack: Stack, run: Run) -> None:
    for table in run.tables:
        frame = run.snaps[run.snaps["table"] == table]
        chain = lineage(stack, table)
        assert frame["snapshot_id"].tolist() == [s.snapshot_id for s in chain]
        assert frame["parent_id"].tolist()[1:] == [s.snapshot_id for s in chain][:-1]
        assert frame["added_records"].tolist() == list(BATCHES)
        assert frame["total_records"].tolist() == [300, 500, 750]
        props = [s.summary.additional_properties for s in chain]
        assert frame["offsets"].tolist() == [
            {t: {int(p): o for p, o in parts.items()} for t, parts in json.loads(p["sinklab.offsets"]).items()}
            for p in props]
        assert [sum(o[run.topic].values()) for o in frame["offsets"]] == [300, 500, 750]
        assert frame["commit_id"].tolist() == [p["sinklab.commit-id"] for p in props]
        assert set(frame["sink"]) == {run.sink}
        assert [int(v.timestamp() * 1000) for v in frame["vtts"]] == [int(p["sinklab.vtts"]) for p in props]
        assert frame["added_files"].tolist() == [int(p["added-data-files"]) for p in props]
        # visible_at is when main moved to the snapshot (the snapshot log), after it was written on its stage.
        log = {e.snapshot_id: e.timestamp_ms for e in stack.catalog.load_table(tuple(table.split("."))).metadata
               .snapshot_log}
        assert [int(v.timestamp() * 1000) for v in frame["visible_at"]] == [log[s.snapshot_id] for s in chain]
        assert (frame["visible_at"] >= frame["committed_at"]).all()
    history = viz.history(stack, run.tables[0])
    assert history["snapshot_id"].tolist() == run.snaps[run.snaps["table"] == run.tables[0]]["snapshot_id"].tolist()
    assert history["is_current_ancestor"].all()


def test_other_writers_and_other_branches(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    produce_json(stack.bootstrap_servers, unique, [{"id": i} for i in range(5)])
    table = f"{unique}.t"
    sink = IcebergSink(stack, sink_config(unique, [table]))
    try:
        sink.run_once()
    finally:
        sink.stop()
    stack.spark.sql(f"ALTER TABLE sinklab.{table} CREATE BRANCH audit")
    stack.spark.sql(f"INSERT INTO sinklab.{table}.branch_audit VALUES (100), (101)")
    stack.spark.sql(f"INSERT INTO sinklab.{table} VALUES (7)")
    main = viz.snapshots(stack, table)
    assert main["sink"].tolist() == [f"sink-{unique}", None]  # a user's insert: no sink properties
    assert main["added_records"].tolist() == [5, 1]
    audit = viz.snapshots(stack, table, branch="audit")
    assert audit["total_records"].tolist() == [5, 7]  # the branch's own lineage, not main's
    assert audit["snapshot_id"].iloc[1] not in set(main["snapshot_id"])
    assert (audit["visible_at"] == audit["committed_at"]).all()  # no snapshot log for other branches
    assert set(viz.refs(stack, table)["name"]) == {"main", "audit"}
    live = viz.files(stack, table)
    assert live["record_count"].sum() == 6 and set(live["added_by"]) == set(main["snapshot_id"])
    assert viz.cadence(main, 500).empty  # one sink commit: no gap yet

    stack.spark.sql(f"ALTER TABLE sinklab.{table} ADD COLUMN note STRING")
    schemas = viz.schemas(stack, table)
    assert schemas.groupby("schema_id")["column"].apply(list).tolist() == [["id"], ["id", "note"]]
    assert schemas.drop_duplicates("column").set_index("column")["field_id"].to_dict() == {"id": 1, "note": 2}
    assert schemas[schemas["current"]]["column"].tolist() == ["id", "note"]
    grid = viz.plot_schemas(schemas).data[0]
    assert list(grid.y) == ["id", "note"] and [list(row) for row in grid.z] == [[1, 1], [0, 2]]  # 2: new here


def test_commits_and_cycles_are_the_control_events(stack: Stack, run: Run) -> None:
    log = read_control_log(stack.bootstrap_servers, sink=run.sink)
    complete = log[log["type"] == "commit-complete"].reset_index(drop=True)
    commit_frame = viz.commits(stack, sink=run.sink)
    assert len(commit_frame) == 2 * len(BATCHES)
    assert commit_frame["cycle"].tolist() == [1, 1, 2, 2, 3, 3]
    assert commit_frame["records"].tolist() == [n for n in BATCHES for _ in range(2)]
    for table in run.tables:
        mine = commit_frame[commit_frame["table"] == table]
        assert mine["snapshot_id"].tolist() == run.snaps[run.snaps["table"] == table]["snapshot_id"].tolist()
        assert mine["data_files"].tolist() == run.snaps[run.snaps["table"] == table]["added_files"].tolist()
        assert mine["bytes"].tolist() == run.snaps[run.snaps["table"] == table]["added_bytes"].tolist()
    cycle_frame = viz.cycles(stack, sink=run.sink)
    assert cycle_frame["commit_id"].tolist() == complete["commit_id"].tolist()
    assert cycle_frame["read"].tolist() == list(BATCHES)
    assert cycle_frame["written"].tolist() == [2 * n for n in BATCHES]  # every record into both tables
    assert cycle_frame["tables"].tolist() == [2, 2, 2]
    assert (cycle_frame["started_at"] <= cycle_frame["completed_at"]).all()
    assert [sum(o[run.topic].values()) for o in cycle_frame["offsets"]] == [300, 500, 750]


def test_control_log_reads_incrementally_and_never_waits_on_an_open_transaction(stack: Stack, unique: str) -> None:
    topic = f"{unique}-control"
    stack.create_topic(topic)
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "transactional.id": f"{unique}-tx"})
    producer.init_transactions(30)

    def send(commit_id: str, sink: str = "s") -> None:
        producer.produce(topic, control.encode(control.CommitStart(sink, commit_id, int(time.time() * 1000))))

    producer.begin_transaction()
    send("a")
    send("other", sink="t")
    producer.commit_transaction(30)
    producer.begin_transaction()
    send("b")  # a sink killed mid-commit leaves its transaction open like this
    producer.flush(30)
    log = viz.ControlLog(stack, sink="s", control_topic=topic)
    try:
        assert log.read()["commit_id"].tolist() == ["a"]  # returns what is committed, without waiting
        producer.commit_transaction(30)
        deadline = time.monotonic() + 30
        while (seen := log.read()["commit_id"].tolist()) == ["a"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert seen == ["a", "b"]  # the new event once, the old one not read again
    finally:
        log.close()
    assert viz.control_log(stack, control_topic=topic)["commit_id"].tolist() == ["a", "other", "b"]


def test_dead_letters_counters_and_flows(stack: Stack, unique: str) -> None:
    stack.create_topic(unique)
    good = [json.dumps({"id": i, "kind": "pizza"}).encode() for i in range(4)]
    values = [*good[:2], b'{"id": 1, "kind"', b"[1, 2]", None, *good[2:]]
    produce_raw(stack, unique, values)
    name = f"sink-{unique}"
    sink = IcebergSink(stack, sink_config(unique, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{unique}-dlq",
        "errors.deadletterqueue.context.headers.enable": "true"}))
    try:
        sink.run_once()
    finally:
        sink.stop()
    letters = viz.dead_letters(stack, f"{unique}-dlq")
    assert letters[["source_topic", "source_partition", "source_offset", "kind"]].values.tolist() == [
        [unique, 0, 2, "malformed-json"], [unique, 0, 3, "not-an-object"]]
    assert letters["value"].tolist() == [values[2], values[3]] and letters["key"].tolist() == [b"k2", b"k3"]
    assert letters["message"].str.startswith(tuple(letters["kind"])).all()
    cycle_frame = viz.cycles(stack, sink=name)
    bars = {t.name: list(t.y) for t in viz.plot_counters(cycle_frame).data}
    assert bars == {"malformed-json": [1], "not-an-object": [1], "tombstones": [1]}  # no double-counted total
    assert viz.dead_letter_stages(cycle_frame) == {"VALUE_CONVERTER": 2}  # the dashboard's header says so
    flow = viz.flows(cycle_frame, viz.commits(stack, sink=name)).set_index("target")["records"].to_dict()
    assert flow == {name: 7, f"{unique}.pizzas": 4, "dead letters": 2, "tombstones (skipped)": 1}


def test_visibility_finds_the_snapshot_that_first_holds_each_record(stack: Stack, run: Run) -> None:
    from_kafka = viz.record_times(stack, run.topic)
    assert len(from_kafka) == sum(BATCHES)
    from_table = viz.table_record_times(stack, run.tables[0])
    merged = from_kafka.merge(from_table, on=["topic", "partition", "offset"])
    assert len(merged) == sum(BATCHES) and (merged["produced_at_x"] == merged["produced_at_y"]).all()

    vis = viz.visibility(run.snaps, from_kafka)
    assert len(vis) == 2 * sum(BATCHES) and vis["latency_s"].notna().all()
    for table in run.tables:
        mine = vis[vis["table"] == table]
        chain = run.snaps[run.snaps["table"] == table]
        # The records each snapshot added are exactly the records whose visibility it is.
        for snap in chain.itertuples():
            added = keys(stack, table, snap.snapshot_id) - keys(stack, table, snap.parent_id if pd.notna(
                snap.parent_id) else None)
            found = mine[mine["snapshot_id"] == snap.snapshot_id]
            assert set(zip(found["partition"], found["offset"], strict=True)) == added
            assert (found["visible_at"] == snap.visible_at).all()
        assert (mine["latency_s"] == (mine["visible_at"] - mine["produced_at"]).dt.total_seconds()).all()
        assert (mine["latency_s"] > 0).all()
    per_table = viz.visibility(run.snaps, from_table)  # its own records only
    assert set(per_table["table"]) == {run.tables[0]} and len(per_table) == sum(BATCHES)
    # The first cycle's records (the warm-up) are flagged and kept out of the percentiles.
    first = run.snaps[run.snaps["table"] == run.tables[0]]["snapshot_id"].iloc[0]
    mine = vis[vis["table"] == run.tables[0]]
    assert (mine["warmup"] == (mine["snapshot_id"] == first)).all() and mine["warmup"].sum() == BATCHES[0]
    pct = viz.latency_percentiles(vis).set_index("table")
    assert pct.loc[run.tables[0], "records"] == sum(BATCHES[1:])
    assert pct.loc[run.tables[0], "warmup_records"] == BATCHES[0]
    assert pct.loc[run.tables[0], "p50"] == mine[~mine["warmup"]]["latency_s"].quantile(0.5)
    assert viz.latency_percentiles(vis, warmup=True).set_index("table").loc[run.tables[0], "records"] == sum(BATCHES)

    late = produce_json(stack.bootstrap_servers, run.topic, [{"order_id": "late"}])
    pending = viz.visibility(run.snaps, viz.record_times(stack, run.topic))
    assert late == 1 and pending["visible_at"].isna().sum() == 2  # not committed yet, in either table


def test_cadence_freshness_and_lag(stack: Stack, run: Run) -> None:
    own = run.snaps[run.snaps["table"] == run.tables[0]]
    cad = viz.cadence(run.snaps, 500)
    mine = cad[cad["table"] == run.tables[0]]
    assert mine["gap_s"].tolist() == own["visible_at"].diff().dropna().dt.total_seconds().tolist()
    assert (mine["interval_s"] == 0.5).all() and (mine["ratio"] == mine["gap_s"] / 0.5).all()

    now = pd.Timestamp.now(tz="UTC")
    fresh = viz.freshness(run.snaps, now)
    mine = fresh[fresh["table"] == run.tables[0]]
    assert mine["fresh_s"].tolist() == (own["visible_at"] - own["vtts"]).dt.total_seconds().tolist()
    assert mine["until"].tolist() == [*own["visible_at"].iloc[1:], now]
    assert (mine["stale_s"] >= mine["fresh_s"]).all()

    cycle_frame = viz.cycles(stack, sink=run.sink)
    group = f"connect-sink-{run.topic}"
    before = viz.consumer_lag(stack, group, run.topic)
    extra = 120
    produce_json(stack.bootstrap_servers, run.topic, [{"order_id": f"x{i}"} for i in range(extra)],
                 key_field="order_id")
    lag = viz.consumer_lag(stack, group, run.topic)
    assert lag["committed"].tolist() == [cycle_frame["offsets"].iloc[-1][run.topic][p] for p in lag["partition"]]
    assert lag["lag"].sum() - before["lag"].sum() == extra
    assert (lag["lag"] == lag["end"] - lag["committed"]).all()
    # Reconstructed afterwards from Kafka's timestamps: nothing was waiting when each cycle ended...
    history = viz.lag_history(stack, cycle_frame)
    assert len(history) == 3 * len(BATCHES) and history.groupby("at")["committed"].sum().tolist() == [300, 500, 750]
    assert (history["lag"] == 0).all()
    # ...and as of now, everything produced since the last cycle.
    as_of_now = viz.lag_history(stack, cycle_frame.tail(1).assign(completed_at=pd.Timestamp.now(tz="UTC")))
    assert as_of_now["lag"].sum() == lag["lag"].sum()


def test_pace_names_what_binds_the_commits() -> None:
    frame = pd.DataFrame({"duration_ms": [400, 450, 5000, 420]})
    assert viz.pace(frame, 1000) == {"cycle_s": 0.435, "interval_s": 1.0, "cycles": 4, "binds": "interval"}
    assert viz.pace(frame, 300)["binds"] == "cycle"  # type: ignore[index]
    assert viz.pace(frame.tail(2), 1000, last=1)["cycle_s"] == 0.42  # type: ignore[index]
    assert viz.pace(frame.iloc[:0], 1000) is None


def test_figures_draw_the_frames(stack: Stack, run: Run) -> None:
    fig = viz.plot_snapshots(run.snaps)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == set(run.tables)
    trace = by_name[run.tables[0]]
    assert list(trace.y) == [300, 500, 750]
    assert all(run.topic in row[5] for row in trace.customdata)  # offsets in the hover
    assert [row[2] for row in trace.customdata] == list(BATCHES)

    fig = viz.plot_cadence(viz.cadence(run.snaps), interval_ms=500)
    assert [s.y0 for s in fig.layout.shapes] == [0.5]
    cycle_frame = viz.cycles(stack, sink=run.sink)
    fig = viz.plot_cadence(viz.cadence(run.snaps), interval_ms=500, cycle_frame=cycle_frame)
    took = next(t for t in fig.data if t.name == "cycle time")
    assert list(took.y) == (cycle_frame["duration_ms"] / 1000).tolist() and len(took.y) == len(BATCHES)

    commit_frame = viz.commits(stack, sink=run.sink)
    cycle_frame = viz.cycles(stack, sink=run.sink)
    fig = viz.plot_fan_out(commit_frame, cycle_frame=cycle_frame)
    assert fig.layout.barmode == "group"  # every record is in both tables: stacked bars would count it twice
    assert {t.name: list(t.y) for t in fig.data} == {**{t: list(BATCHES) for t in run.tables},
                                                     "read from Kafka": list(BATCHES)}

    flow = viz.flows(viz.cycles(stack, sink=run.sink), commit_frame)
    assert flow.set_index("target")["records"].to_dict() == {run.sink: 750, run.tables[0]: 750, run.tables[1]: 750}
    sankey = viz.plot_sankey(flow).data[0]
    assert list(sankey.link.value) == flow["records"].tolist()
    assert set(sankey.node.label) == {f"{name}: 750" for name in (run.topic, run.sink, *run.tables)}

    fig = viz.plot_files(run.snaps)
    bars = [t for t in fig.data if t.type == "bar"]
    assert sum(sum(t.y) for t in bars) == run.snaps["added_files"].sum()

    vis = viz.visibility(run.snaps, viz.record_times(stack, run.topic, until=run.snaps["offsets"].iloc[-1]))
    fig = viz.plot_visibility(vis)
    assert sum(sum(t.y) for t in fig.data if t.type == "bar") == len(viz.steady(vis)) == len(vis) - 2 * 300
    assert [len(t.x) for t in fig.data if t.name == "first cycle (warm-up)"] == [2 * 300]
    assert {a.text.split()[0] for a in fig.layout.annotations if a.text.startswith("p")} >= {"p50", "p99"}

    fresh = viz.plot_freshness(viz.freshness(run.snaps))
    assert len(fresh.data) == 2 * len(run.tables)

    grid = viz.combine([viz.plot_snapshots(run.snaps), viz.plot_files(run.snaps)])
    assert len(grid.data) == 3 * len(run.tables)  # a line per table, bars and a mean-size line per table
    assert {t.yaxis for t in grid.data if t.type == "scatter" and t.name.endswith("mean KiB")} == {"y4"}


def test_dashboard_refreshes_while_the_sink_runs(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    table = f"{unique}.pizzas"
    sink = IcebergSink(stack, sink_config(unique, [table]))
    dash = viz.Dashboard(sink, every_s=0.3)
    frames = dash.refresh()  # nothing yet: empty panels, no error
    assert frames["snapshots"].empty and dash.refreshes == 1 and frames["lag"]["lag"].sum() == 0
    try:
        sink.start()
        dash.start()
        PizzaGenerator(seed=5).produce(stack, unique, count=400, partitions=2).wait()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            snaps = dash.frames.get("snapshots")
            if snaps is not None and not snaps.empty and snaps["total_records"].iloc[-1] == 400:
                break
            time.sleep(0.2)
        PizzaGenerator(seed=6).produce(stack, unique, count=100, partitions=2).wait()
        while time.monotonic() < deadline and dash.frames["snapshots"]["total_records"].iloc[-1] < 500:
            time.sleep(0.2)
    finally:
        dash.stop()
        sink.stop()
    assert dash._thread is None and dash.error is None
    frames = dash.refresh()
    snaps = viz.snapshots(stack, table)
    assert frames["snapshots"]["snapshot_id"].tolist() == snaps["snapshot_id"].tolist()
    assert snaps["total_records"].iloc[-1] == 500 and len(snaps) >= 2
    history = dash.figures["snapshots"].data
    assert [t.name for t in history] == [table] and list(history[0].y) == snaps["total_records"].tolist()
    fan_out = dash.figures["fan_out"].data
    assert sum(sum(t.y) for t in fan_out) == 500
    lag = dash.figures["lag"].data
    assert sorted(t.name for t in lag) == [f"{unique}[0]", f"{unique}[1]"]
    assert all(t.y[-1] == 0 for t in lag)
    assert len(dash.frames["lag"]["at"].unique()) == len(lag[0].x) > 2  # sampled at every refresh
    assert f"{sink.status().cycles} cycles" in dash.header and "500 records" in dash.header
    paced = viz.pace(dash.frames["cycles"], 500)
    assert paced is not None and f"cycles take {paced['cycle_s']:.2f} s" in dash.header
    assert any(t.name == "cycle time" for t in dash.figures["cadence"].data)
    static = dash.figure()
    assert len(static.data) == sum(len(f.data) for f in dash.figures.values())
    assert f"{sink.config.name}: STOPPED" in static.layout.title.text and "500 records" in static.layout.title.text
    # One legend entry per series, whichever panels draw it, in one colour.
    named = [t for t in static.data if t.showlegend]
    assert sorted(t.name for t in named) == sorted([table, f"{unique}[0]", f"{unique}[1]", "cycle time"])
    assert len({t.line.color for t in static.data if t.type == "scatter" and t.legendgroup == table
                and t.line.color}) == 1


def test_explorer_measures_each_interval(stack: Stack) -> None:
    ex = viz.explore_intervals(stack, PizzaGenerator(seed=9), intervals_ms=(500, 3000), count=600, rate=300,
                               partitions=2, namespace="ex" + uuid.uuid4().hex[:6])
    assert ex.results["interval_ms"].tolist() == [500, 3000] and set(ex.results["sink"]) == {"sinklab"}
    assert ex.results["records"].tolist() == [600, 600]  # every record of the stream committed and measured
    assert ex.results["table"].tolist() == [r["table"] for r in ex.runs]
    for row, info in zip(ex.results.itertuples(), ex.runs, strict=True):
        snaps = viz.snapshots(stack, info["table"])
        measured = ex.snapshots[ex.snapshots["interval_ms"] == row.interval_ms]
        assert measured["snapshot_id"].tolist() == snaps["snapshot_id"].tolist()[1:]  # all but the priming cycle
        assert row.snapshots == len(measured) and measured["added_records"].sum() == 600
        assert row.files == measured["added_files"].sum()
        if row.snapshots >= viz.explorer.MIN_COMMITS:
            assert row.snapshots_per_hour == pytest.approx(row.snapshots / row.window_s * 3600)
            assert "not enough data" not in row.note
        else:  # too few commits to project a rate per hour from
            assert pd.isna(row.snapshots_per_hour) and pd.isna(row.files_per_table_per_hour)
            assert row.note == f"not enough data: {row.snapshots} commits (< 5)"
        assert row.mean_file_kib == pytest.approx(measured["added_bytes"].sum() / row.files / 1024)
        assert 0 < row.p50_s <= row.p99_s <= row.max_s
    short, long = ex.results.itertuples()
    assert short.snapshots >= long.snapshots and long.snapshots < viz.explorer.MIN_COMMITS  # a 2 s stream
    fig = ex.figure()
    projected = ex.results.dropna(subset=["snapshots_per_hour"])
    assert list(fig.data[0].x) == projected["snapshots_per_hour"].tolist()
    assert list(fig.data[0].y) == projected["p50_s"].tolist()
    assert "3 s: not enough data" in fig.layout.annotations[-1].text
    assert set(ex.snapshots["series"]) == {"interval 0.5 s", "interval 3 s"}
