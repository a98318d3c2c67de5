"""How a cycle's offset ranges become the Kafka source's options and read tasks (pure logic)."""

from __future__ import annotations

import json

from sinklab.sink.records.reader import source_options, task_count
from sinklab.sink.wire.offsets import OffsetRange


def test_a_small_cycle_is_one_task_and_an_empty_one_none() -> None:
    ranges = [OffsetRange("t", p, 0, 10) for p in range(6)]
    assert task_count(ranges, parallelism=8) == 1
    assert task_count([OffsetRange("t", 0, 3, 3)], parallelism=2) == 0


def test_never_more_tasks_than_cores() -> None:
    ranges = [OffsetRange("t", p, 0, 1_000_000) for p in range(6)]
    assert task_count(ranges, parallelism=2) == 2
    assert task_count(ranges, parallelism=4) == 4
    assert task_count(ranges, parallelism=4, min_task=2_000_000) == 3


def test_options_name_exactly_the_ranges_read_committed() -> None:
    ranges = [OffsetRange("t", 0, 5, 70), OffsetRange("t", 2, 0, 3), OffsetRange("u", 1, 9, 10)]
    options = source_options({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL"}, ranges, tasks=2)
    assert json.loads(options["assign"]) == {"t": [0, 2], "u": [1]}
    assert json.loads(options["startingOffsets"]) == {"t": {"0": 5, "2": 0}, "u": {"1": 9}}
    assert json.loads(options["endingOffsets"]) == {"t": {"0": 70, "2": 3}, "u": {"1": 10}}
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["kafka.bootstrap.servers"] == "127.0.0.1:1" and options["kafka.security.protocol"] == "SSL"
    assert options["minPartitions"] == "2"


def test_reader_group_differs_with_the_client_settings() -> None:
    # Spark's consumer pool refuses one group id with two different settings.
    a = source_options({"bootstrap.servers": "x:1"}, [OffsetRange("t", 0, 0, 1)], 1)["kafka.group.id"]
    b = source_options({"bootstrap.servers": "x:2"}, [OffsetRange("t", 0, 0, 1)], 1)["kafka.group.id"]
    assert a != b and a == source_options({"bootstrap.servers": "x:1"}, [OffsetRange("t", 5, 0, 9)], 3)[
        "kafka.group.id"]
    # A user's own fetch wait wins over sinklab's default.
    assert source_options({"fetch.max.wait.ms": "100"}, [OffsetRange("t", 0, 0, 1)], 1)[
        "kafka.fetch.max.wait.ms"] == "100"
