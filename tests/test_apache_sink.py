"""sinklab beside Apache Iceberg's own Kafka Connect sink (1.12, its jars from Maven Central by coordinate),
on one Kafka cluster and one catalog, both with their default control settings: neither makes the other
fail, each commits every record of its own topic to its own table, and sinklab refuses to write to a
control topic that carries Apache's events."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from helpers import produce, sink_config
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from sinklab.exceptions import ConfigError
from sinklab.generators import produce_json
from sinklab.sink import IcebergSink, control, keys
from sinklab.sink.topics import TopicReader
from sinklab.stack import Stack
from sinklab.stack.apache_sink import APACHE_CONTROL_TOPIC, ConnectWorker, connector_config, scratch_dir

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
    stack.catalog.create_table((unique, "apache"), Schema(NestedField(1, "id", LongType(), required=False),
                                                          NestedField(2, "name", StringType(), required=False)))
    config = connector_config(stack, connector, theirs, their_table, interval_ms=1000, tasks=1)
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

    # Apache's control topic holds only Apache's events; sinklab's are on its own.
    apache, other, groups = apache_records(stack, APACHE_CONTROL_TOPIC)
    assert apache > 0 and other == 0 and groups == {f"connect-{connector}"}
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
    assert f"group connect-{connector}" in str(refused.value) and keys.CONTROL_TOPIC in str(refused.value)
    assert apache_records(stack, APACHE_CONTROL_TOPIC)[1] == 0
    # And Apache's sink goes on committing.
    produce_json(stack.bootstrap_servers, theirs, [{"id": sent + i, "name": "late"} for i in range(10)])
    wait_rows(stack, worker, connector, their_table, sent + 10)
