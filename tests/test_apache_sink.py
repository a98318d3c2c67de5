"""sinklab beside Apache Iceberg's own Kafka Connect sink (1.12, its jars from Maven Central by coordinate),
on one Kafka cluster and one catalog, both with their default control settings: neither makes the other
fail, each commits every record of its own topic to its own table, and sinklab refuses to write to a
control topic that carries Apache's events. And a connector handed back from sinklab to Apache's sink
(same name, group and table) goes on with every record once, whether sinklab stopped cleanly or was
killed (then one more sinklab cycle first: docs/protocol.md, "Handing a connector back")."""

from __future__ import annotations

import json
import random
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from beside_apache import order_id_counts, wait_for
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from faults import FaultProxy, publishes
from helpers import produce, run_cli, sink_config, steady
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from sinklab import readings as frames
from sinklab import viz
from sinklab.connect.report import sink_reports
from sinklab.exceptions import ConfigError
from sinklab.generators import PizzaGenerator, produce_json
from sinklab.sink import IcebergSink
from sinklab.sink.apache import takeover
from sinklab.sink.config import keys
from sinklab.sink.cycle import coordinator
from sinklab.sink.wire import control
from sinklab.sink.wire.topics import TopicReader
from sinklab.stack import Stack
from sinklab.stack.apache_sink import APACHE_CONTROL_TOPIC, ConnectWorker, connector_config, scratch_dir
from sinklab.viz import Dashboard, Observed

pytestmark = pytest.mark.spark


@pytest.fixture()
def worker(stack: Stack) -> Iterator[ConnectWorker]:
    """A Connect worker running Apache's sink on the shared stack, stopped by PID whatever the test did."""
    with ConnectWorker(stack, scratch_dir(stack)) as w:
        yield w


def apache_records(stack: Stack, topic: str) -> tuple[int, int, set[str]]:
    """Of every record on ``topic``: how many are Apache's events, how many are not, and their groups."""
    apache, other, groups = 0, 0, set()
    with TopicReader(stack.bootstrap_servers, topic) as reader:
        for batch in reader.read(timeout=20, idle_s=2):
            for m in batch:
                group = control._apache_event(m.value() or b"")
                if group is None:
                    other += 1
                else:
                    apache, groups = apache + 1, groups | {group}
    return apache, other, groups


def table_rows(stack: Stack, table: str) -> int:
    return stack.catalog.load_table(tuple(table.split("."))).scan().to_arrow().num_rows


def wait_rows(stack: Stack, worker: ConnectWorker, connector: str, table: str, expected: int,
              timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while (seen := table_rows(stack, table)) < expected:
        worker.check(connector)  # its task failed: raises with the task's trace
        assert time.monotonic() < deadline, f"Apache's sink committed {seen} of {expected} rows to {table}"
        time.sleep(0.5)
    assert seen == expected


def test_both_sinks_share_a_cluster_with_their_default_control_settings(stack: Stack, worker: ConnectWorker,
                                                                        unique: str) -> None:
    # Apache's sink: its own topic into a table of its own, every control setting at its default.
    theirs, their_table, connector = f"{unique}-apache", f"{unique}.apache", f"apache-{unique}"
    stack.create_topic(theirs, partitions=2)
    stack.catalog.create_namespace_if_not_exists(unique)
    # Its rows carry their Kafka coordinates (Iceberg's KafkaMetadataTransform), for visibility without its log.
    stack.catalog.create_table((unique, "apache"), Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False),
        NestedField(3, "_kafka_metadata_topic", StringType(), required=False),
        NestedField(4, "_kafka_metadata_partition", IntegerType(), required=False),
        NestedField(5, "_kafka_metadata_offset", LongType(), required=False),
        NestedField(6, "_kafka_metadata_timestamp", LongType(), required=False)))
    config = connector_config(stack, connector, theirs, their_table, interval_ms=1000, tasks=1) | {
        "transforms": "meta", "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"}
    assert "iceberg.control.topic" not in config and "iceberg.control.group-id-prefix" not in config
    worker.add(config)
    worker.wait_assigned(connector, theirs)
    # sinklab: its own topic and table, also at its default control settings.
    stack.create_topic(unique, partitions=2)
    sink = IcebergSink(stack, sink_config(unique))
    assert sink.config.control_topic == keys.CONTROL_TOPIC != APACHE_CONTROL_TOPIC
    try:
        sent = 0
        for batch in range(3):  # several commits of each, interleaved
            produce_json(stack.bootstrap_servers, theirs, [{"id": sent + i, "name": f"n{sent + i}"} for i in range(50)])
            sent += 50
            produce(stack, unique, 100, seed=batch)
            assert sink.run_once() is not None
            wait_rows(stack, worker, connector, their_table, sent)
        assert table_rows(stack, f"{unique}.pizzas") == 300
        worker.check(connector)
        assert {t["state"] for t in worker.status(connector)["tasks"]} == {"RUNNING"}
    finally:
        sink.stop()

    # The workbench reads Apache's pipeline as it reads sinklab's: its commits from its control topic,
    # one per table commit, with the files and records its table's snapshots show.
    deadline = time.monotonic() + 30
    while (theirs_log := frames.commits(stack, connector, APACHE_CONTROL_TOPIC))["records"].sum() < sent:
        assert time.monotonic() < deadline, theirs_log
        time.sleep(0.5)
    assert set(theirs_log["table"]) == {their_table} and len(theirs_log) >= 2
    assert (theirs_log["data_files"] > 0).all() and theirs_log["records"].sum() == sent
    assert frames.cycles(stack, sink=connector, control_topic=APACHE_CONTROL_TOPIC)["read"].sum() == sent
    snaps = frames.snapshots(stack, their_table)
    theirs_snaps = snaps[snaps["sink"] == connector]
    assert set(theirs_log["snapshot_id"]) <= set(theirs_snaps["snapshot_id"])
    assert theirs_snaps["commit_id"].notna().all()
    assert len(frames.cadence(snaps, 1000, sink=connector)) == len(theirs_snaps) - 1
    assert not frames.commits(stack, sink=sink.config.name, control_topic=APACHE_CONTROL_TOPIC).shape[0]
    # Per-record visibility, as for sinklab's tables: the offsets each commit covered from its control topic
    # (its data-complete events), and where that is gone, from the rows each snapshot added.
    produced = frames.record_times(stack, theirs)
    vis = frames.visibility(frames.with_offsets(snaps, theirs_log), produced, sink=connector)
    assert len(vis) == sent and vis["visible_at"].notna().all() and (vis["latency_s"] > 0).all()
    added = dict(zip(theirs_snaps["snapshot_id"], theirs_snaps["added_records"], strict=True))
    assert {s: n for s, n in vis.groupby("snapshot_id").size().items()} == {s: n for s, n in added.items() if n}
    from_rows = frames.visibility(frames.with_offsets(snaps, frames.added_offsets(stack, their_table)), produced,
                                  sink=connector)
    assert from_rows[["offset", "snapshot_id"]].equals(vis[["offset", "snapshot_id"]])
    # ... its dashboard (watched through its config and its worker) and `sinklab sink status` too.
    observed = Observed(stack, config, connect_url=worker.url)
    dashboard = Dashboard(observed)
    try:
        panels = dashboard.refresh()
        header = repr(dashboard)
    finally:
        dashboard.stop()
        observed.close()
    assert panels["commits"]["records"].sum() == sent and not panels["cadence"].empty
    assert set(panels["snapshots"]["table"]) == {their_table} and not panels["lag"].empty
    # Its status reads the control topic a moment after the panels did: as many commits or more.
    counted = re.search(rf"{connector}: RUNNING · (\d+) cycles, {sent} records", header)
    assert counted and int(counted[1]) >= len(panels["cycles"]), header
    report = {r.name: r for r in sink_reports(stack)}[connector]
    assert report.runs_on.startswith("Apache's Iceberg sink") and report.cycles >= len(panels["cycles"])
    assert report.group_id == f"connect-{connector}" and [t.table for t in report.tables] == [their_table]

    # Apache's control topic holds only Apache's events (this connector's among those of others the shared
    # stack ran); sinklab's are on its own.
    apache, other, groups = apache_records(stack, APACHE_CONTROL_TOPIC)
    assert apache > 0 and other == 0 and f"connect-{connector}" in groups and sink.config.group_id not in groups
    log = control.read_control_log(stack.bootstrap_servers, keys.CONTROL_TOPIC, sink=sink.config.name)
    assert log["type"].tolist().count("commit-complete") == 3

    # Asked to use Apache's control topic, sinklab refuses before it writes a record there.
    shared = sink_config(unique, **{keys.CONTROL_TOPIC_KEY: APACHE_CONTROL_TOPIC})
    refusing = IcebergSink(stack, shared)
    try:
        with pytest.raises(ConfigError) as refused:
            refusing.run_once()
    finally:
        refusing.stop()
    assert refused.value.key == keys.CONTROL_TOPIC_KEY
    # It names the Apache groups among the topic's last events: on the shared stack those may be other
    # connectors' only, so the test asks for an Apache group (connect-...), not this connector's.
    assert "Apache's Iceberg sink (group connect-" in str(refused.value) and keys.CONTROL_TOPIC in str(refused.value)
    assert apache_records(stack, APACHE_CONTROL_TOPIC)[1] == 0
    # And Apache's sink goes on committing.
    produce_json(stack.bootstrap_servers, theirs, [{"id": sent + i, "name": "late"} for i in range(10)])
    wait_rows(stack, worker, connector, their_table, sent + 10)


@pytest.mark.parametrize("stopped", ["cleanly", "killed"])
def test_a_connector_handed_back_to_apaches_sink_goes_on_with_every_record_once(
        stack: Stack, worker: ConnectWorker, stack_file: Path, tmp_path: Path, unique: str, stopped: str) -> None:
    stack.create_topic(unique, partitions=2)
    config = sink_config(unique)  # sink-<unique>: the consumer group connect-sink-<unique>
    name, table = config["name"], f"{unique}.pizzas"
    with steady(stack, unique, 100) as produced:
        if stopped == "cleanly":
            sink = IcebergSink(stack, config)
            sink.start()
            deadline = time.monotonic() + 120
            while sink.status().cycles < 3:
                assert time.monotonic() < deadline and sink.status().state == "RUNNING", sink.status()
                time.sleep(0.2)
            sink.stop()
        else:
            config_file = tmp_path / "sink.json"
            config_file.write_text(json.dumps(config))
            run = ["sink", "run", "--config", str(config_file), "--stack", str(stack_file), "--once"]
            # Killed after its table commit, before its Kafka transaction: the group is a cycle behind the table.
            crashed = run_cli(*run, env={coordinator.CRASH_ENV: "after-table-commits"})
            assert crashed.returncode == 86, crashed.stderr[-3000:]
            # The hand-back after a crash: one more cycle, which records the group's offsets for what landed.
            settled = run_cli(*run)
            assert settled.returncode == 0, settled.stderr[-3000:]
        by_sinklab = sum(order_id_counts(stack, table).values())
        assert by_sinklab > 0
        # Apache's sink takes the connector over: the same name (so the same group) and table.
        worker.add(connector_config(stack, name, unique, table, interval_ms=1000, tasks=1))
        worker.wait_assigned(name, unique)
        deadline = time.monotonic() + 120
        while sum(order_id_counts(stack, table).values()) < by_sinklab + 200:  # it committed some of its own
            worker.check(name)
            assert time.monotonic() < deadline, "Apache's sink committed nothing after the hand-back"
            time.sleep(0.5)
    deadline = time.monotonic() + 180
    while len(counts := order_id_counts(stack, table)) < len(produced):
        worker.check(name)
        assert time.monotonic() < deadline, f"{len(counts)} of {len(produced)} records in {table} after 180 s"
        time.sleep(0.5)
    assert sorted(counts) == sorted(produced)  # none missing
    assert {n for n in counts.values()} == {1}, {k: n for k, n in counts.items() if n > 1}  # none twice


@pytest.mark.parametrize("stopped", ["cleanly", "killed-before-its-table-commit", "killed-anywhere"])
def test_a_connector_taken_over_from_apaches_sink_keeps_every_record_once(
        stack: Stack, worker: ConnectWorker, unique: str, stopped: str) -> None:
    """Apache's sink runs the connector (its auto-create makes the table), under a steady stream; it is
    stopped, or SIGKILLed (also in the window after its workers' transaction, which committed the group's
    offsets, and before its coordinator's table commit); sinklab takes the connector over under the same
    name, so the same group and table, and every record ends in the table once."""
    stack.create_topic(unique, partitions=2)
    config = sink_config(unique)
    name, table = config["name"], f"{unique}.pizzas"
    catalog = stack.info.catalog_uri.split("://", 1)[1].split("/", 1)[0]
    with FaultProxy(catalog) as proxy, steady(stack, unique, 100) as produced:
        theirs = connector_config(stack, name, unique, table, interval_ms=1000, tasks=1)
        theirs.update({"iceberg.tables.auto-create-enabled": "true",
                       "iceberg.catalog.uri": stack.info.catalog_uri.replace(catalog, proxy.address),
                       # A killed task's consumer leaves the group when its session times out (45 s by default),
                       # and so does its coordinator's (its control topic's clients take iceberg.kafka.*).
                       "consumer.override.session.timeout.ms": "6000", "iceberg.kafka.session.timeout.ms": "6000"})
        worker.add(theirs)
        wait_for("Apache's sink committed nothing", lambda: snapshots(stack, table) >= 3, worker, name)
        process = worker.process.popen
        assert process is not None
        if stopped == "cleanly":
            worker.remove(name)
        elif stopped == "killed-before-its-table-commit":
            # The next table commit never reaches the catalog: the worker dies holding it.
            held = proxy.on_request(publishes, lambda _: process.send_signal(signal.SIGKILL), pass_on=False)
            # Not watched through its REST API: the worker may be dead by the next look.
            wait_for("Apache's sink made no further table commit", lambda: held.hits == 1, None, name)
        else:
            time.sleep(random.uniform(0, 2))
            process.send_signal(signal.SIGKILL)
        if stopped != "cleanly":
            process.wait(30)
        by_apache = sum(order_id_counts(stack, table).values())
        sink = IcebergSink(stack, config)
        try:
            sink.start()
            deadline = time.monotonic() + 180
            while sink.status().cycles < 3:
                assert time.monotonic() < deadline and sink.status().state == "RUNNING", sink.status()
                time.sleep(0.2)
        except BaseException:
            sink.stop()
            raise
    try:
        deadline = time.monotonic() + 120
        while len(counts := order_id_counts(stack, table)) < len(produced):
            assert sink.status().state == "RUNNING", sink.status()
            assert time.monotonic() < deadline, f"{len(counts)} of {len(produced)} records in {table} after 120 s"
            time.sleep(0.5)
        # Apache's coordinator's group moves to where the takeover read (as that coordinator does after a
        # commit), so a later start reads only what came since; a killed coordinator's consumer holds the
        # group until its session times out, and the sink tries again after each cycle meanwhile.
        probe = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": f"probe-{unique}"})
        try:
            _, end = probe.get_watermark_offsets(KafkaPartition(APACHE_CONTROL_TOPIC, 0), timeout=10)
        finally:
            probe.close()
        wait_for("the group -coord did not move to the control topic's end", lambda: takeover.committed(
            stack.admin(), f"connect-{name}-coord").get(APACHE_CONTROL_TOPIC, {}).get(0) == end, None, name, 60)
    finally:
        sink.stop()
    assert by_apache > 0
    assert sorted(counts) == sorted(produced)  # none missing
    assert {n for n in counts.values()} == {1}, {k: n for k, n in counts.items() if n > 1}  # none twice
    log = control.read_control_log(stack.bootstrap_servers, keys.CONTROL_TOPIC, sink=name)
    finished = [c.get("taken-over", 0) for c in log[log["type"] == "commit-complete"]["counters"]]
    if stopped == "killed-before-its-table-commit":
        # The commit Apache's sink never made is the one sinklab finished, in its first transaction.
        assert finished[0] > 0, finished


def snapshots(stack: Stack, table: str) -> int:
    try:
        return len(stack.catalog.load_table(tuple(table.split("."))).metadata.snapshots)
    except NoSuchTableError:
        return 0


def test_the_explorer_measures_apaches_sink_at_each_interval(stack: Stack, unique: str) -> None:
    # The real sink in a Connect worker of the explorer's own, a connector per interval, its knobs from a
    # connector config; measured from its table and its control topic as sinklab's runs are.
    ex = viz.explore_intervals(stack, PizzaGenerator(seed=9), intervals_ms=(1000, 4000), count=600, rate=150,
                               partitions=2, namespace=unique, sink="apache",
                               config={"name": "mine", "tasks.max": "1", "topics": "ignored",
                                       "iceberg.control.commit.timeout-ms": "20000"})
    assert ex.results["sink"].tolist() == ["apache", "apache"] and ex.results["interval_ms"].tolist() == [1000, 4000]
    assert ex.results["records"].tolist() == [600, 600]  # every record of the stream committed and measured
    for row, run in zip(ex.results.itertuples(), ex.runs, strict=True):
        measured = ex.snapshots[ex.snapshots["interval_ms"] == row.interval_ms]
        snaps = frames.snapshots(stack, run["table"])
        assert set(measured["snapshot_id"]) < set(snaps["snapshot_id"])  # the priming commit is not measured
        assert set(measured["sink"]) == {run["sink"]} and measured["added_records"].sum() == 600
        assert 0 < row.p50_s <= row.p99_s <= row.max_s and row.mean_cycle_ms > 0  # its commit round
        vis = ex.visibility[ex.visibility["interval_ms"] == row.interval_ms]
        assert vis["snapshot_id"].isin(set(measured["snapshot_id"])).all()
    fast, slow = ex.results.itertuples()
    assert fast.snapshots > slow.snapshots and fast.p50_s < slow.p50_s
    assert fast.commit_gap_s >= 0.9  # a commit a second, not faster
    assert "apache, interval 1 s" not in set(ex.visibility["series"])  # one sink: the series named by interval


def test_sinklab_explore_runs_both_sinks_from_the_command_line(stack: Stack, unique: str, tmp_path: Path) -> None:
    config = tmp_path / "connector.json"
    config.write_text(json.dumps({"name": "mine", "config": {"tasks.max": "1", "topics": "ignored"}}))
    out = tmp_path / "runs.json"
    done = run_cli("explore", "--sink", "apache,sinklab", "--config", str(config), "--stack",
                   str(stack.write(tmp_path / "stack.json")), "--intervals", "2s", "--rate", "150", "--seconds", "2",
                   "--partitions", "2", "--json", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())
    assert runs["sink"] == "apache,sinklab" and [r["sink"] for r in runs["runs"]] == ["apache", "sinklab"]
    for run in runs["runs"]:
        assert set(run) == {"sink", "interval_ms", "records", "snapshots", "p50_visibility_s", "p99_visibility_s",
                            "snapshots_per_hour", "data_files_per_hour", "mean_file_bytes", "commit_round_s",
                            "table", "note"}
        assert run["interval_ms"] == 2000 and run["records"] == 300 and run["p50_visibility_s"] > 0
        assert run["commit_round_s"] > 0 and run["mean_file_bytes"] > 0
        assert run["snapshots_per_hour"] is None and "not enough data" in run["note"]  # a 2 s stream
        # Its snapshots, counted in the table's metadata: the run's are the last ones, adding its 300 records
        # (the one before them, the priming commit, others).
        added = [int(snap.summary.additional_properties.get("added-records", 0)) for snap in sorted(
            stack.catalog.load_table(tuple(run["table"].split("."))).metadata.snapshots, key=lambda s: s.timestamp_ms)]
        assert run["snapshots"] >= 1 and sum(added[-run["snapshots"]:]) == 300 and sum(added) > 300, added
        assert run["table"] in done.stdout
    header = done.stdout.splitlines()[0].split()
    assert header[:3] == ["sink", "interval", "records"]
    # sinklab's figures against the table and a plain consumer: each record's Kafka timestamp to the time
    # main reached the first snapshot recording an offset past it (its snapshot log).
    mine = runs["runs"][1]
    token = mine["table"].rsplit("_", 1)[1]
    topic = f"explorer-sinklab-2000ms-{token}"
    table = stack.catalog.load_table(tuple(mine["table"].split(".")))
    reached = {e.snapshot_id: e.timestamp_ms for e in table.metadata.snapshot_log}
    marks = [(reached[snap.snapshot_id], json.loads(snap.summary.additional_properties["sinklab.offsets"])[topic])
             for snap in table.metadata.snapshots
             if topic in snap.summary.additional_properties.get("sinklab.offsets", "")]
    latencies = []
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": f"check-{unique}"})
    try:
        for p in range(2):
            low, high = consumer.get_watermark_offsets(KafkaPartition(topic, p), timeout=10)
            consumer.assign([KafkaPartition(topic, p, low)])
            seen = 0
            while seen < high - low:
                for m in consumer.consume(500, timeout=5):
                    visible = min(at for at, offsets in marks if offsets.get(str(p), 0) > m.offset())
                    latencies.append((visible - m.timestamp()[1]) / 1000)
                    seen += 1
    finally:
        consumer.close()
    assert len(latencies) == mine["records"] == 300
    assert mine["p50_visibility_s"] == pytest.approx(float(np.percentile(latencies, 50)), abs=0.002)
    assert mine["p99_visibility_s"] == pytest.approx(float(np.percentile(latencies, 99)), abs=0.002)


def test_the_planner_fits_apaches_commit_rounds_and_recommends_only_its_keys(stack: Stack, unique: str) -> None:
    cal = viz.calibrate(stack, sizes=(500, 1500), repeats=2, partitions=2, namespace=unique, sink="apache",
                        config={"tasks.max": "1"})
    # Its points are Apache's commits (start-commit to commit-complete), at 1 s and 3 s of a 500/s stream.
    assert cal.sink == "apache" and len(cal.points) >= 4 and (cal.points["seconds"] > 0).all()
    assert cal.points["records"].min() < 1000 < cal.points["records"].max()
    assert "Apache's sink: a commit round" in repr(cal)
    plan = viz.frontier(cal, rate=500)
    target = float(plan["latency_s"].median())
    settings = viz.recommend(plan, target_s=target)
    assert [k for k in settings if "." in k] == [keys.COMMIT_INTERVAL_MS]  # its own key: no sinklab.* one
    longest = plan[plan["latency_s"] <= target]["interval_s"].max()  # the fewest files that meet the target
    assert int(settings[keys.COMMIT_INTERVAL_MS]) == int(longest * 1000)
    assert "compact every" in settings["maintenance"]


def test_a_watched_apache_sink_is_retuned_paused_and_resumed_through_its_worker(
        stack: Stack, worker: ConnectWorker, unique: str) -> None:
    # The control panel's knobs for Apache's sink go through Connect's REST API, as its users turn them.
    topic, table, connector = f"{unique}-apache", f"{unique}.apache", f"apache-{unique}"
    stack.create_topic(topic, partitions=1)
    stack.catalog.create_namespace_if_not_exists(unique)
    stack.catalog.create_table((unique, "apache"), Schema(NestedField(1, "id", LongType(), required=False),
                                                          NestedField(2, "name", StringType(), required=False)))
    config = connector_config(stack, connector, topic, table, interval_ms=120_000, tasks=1)
    worker.add(config)
    worker.wait_assigned(connector, topic)
    observed = Observed(stack, config, connect_url=worker.url)
    panel = viz.ControlPanel(observed)
    try:
        panel.interval.value = 1.0  # two minutes to a second, as the slider does
        assert requests.get(f"{worker.url}/connectors/{connector}/config", timeout=10).json()[
            keys.COMMIT_INTERVAL_MS] == "1000"
        worker.wait_assigned(connector, topic)  # its tasks restarted with the new interval
        produce_json(stack.bootstrap_servers, topic, [{"id": i, "name": "a"} for i in range(10)])
        wait_rows(stack, worker, connector, table, 10, timeout=60)  # not two minutes
        panel.paused.value = True
        deadline = time.monotonic() + 30
        while worker.status(connector).get("connector", {}).get("state") != "PAUSED":
            assert time.monotonic() < deadline, worker.status(connector)
            time.sleep(0.3)
        produce_json(stack.bootstrap_servers, topic, [{"id": 10 + i, "name": "b"} for i in range(5)])
        time.sleep(5)  # five intervals
        assert table_rows(stack, table) == 10
        panel.paused.value = False
        wait_rows(stack, worker, connector, table, 15, timeout=60)
        assert [m["kind"] for m in observed.status().marks] == ["tuned", "paused", "resumed"]
    finally:
        observed.close()
    assert observed.config.commit_interval_ms == 1000 and [e["what"] for e in panel.log] == ["interval", "sink", "sink"]
