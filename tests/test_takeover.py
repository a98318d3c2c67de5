"""Unit tests of the takeover's pure parts: Apache's data files as pyiceberg's, and the wait for a group
that Apache's tasks still hold."""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFileContent, FileFormat

from sinklab.exceptions import SinkError
from sinklab.sink.apache import takeover


def test_a_data_file_of_apaches_event_keeps_its_path_counts_and_bounds() -> None:
    avro = {"content": 0, "file_path": "file:///w/t/data/00000-1.parquet", "file_format": "PARQUET", "spec_id": 0,
            "partition": {"day": 19725}, "record_count": 42, "file_size_in_bytes": 1234,
            "column_sizes": [{"key": 1, "value": 100}], "value_counts": [{"key": 1, "value": 42}],
            "null_value_counts": [{"key": 1, "value": 0}], "nan_value_counts": None,
            "lower_bounds": [{"key": 1, "value": b"a"}], "upper_bounds": [{"key": 1, "value": b"z"}],
            "key_metadata": None, "split_offsets": [4], "equality_ids": None, "sort_order_id": 0}
    f = takeover.data_file(avro, 2)
    assert f.content == DataFileContent.DATA and f.file_format == FileFormat.PARQUET
    assert (f.file_path, f.record_count, f.file_size_in_bytes) == (avro["file_path"], 42, 1234)
    assert f.partition[0] == 19725
    assert f.value_counts == {1: 42} and f.lower_bounds == {1: b"a"} and f.upper_bounds == {1: b"z"}
    assert f.nan_value_counts is None and f.split_offsets == [4]


def test_a_takeover_waits_for_the_groups_members_to_leave_and_names_them_if_they_stay() -> None:
    answers = iter([("STABLE", ["connector-consumer-x-0@/127.0.0.1"]), ("EMPTY", [])])
    takeover.wait_group_empty(lambda: next(answers), "connect-x", "x", timeout_s=5)  # returns once empty
    with pytest.raises(SinkError) as stays:
        takeover.wait_group_empty(lambda: ("STABLE", ["connector-consumer-x-0@/127.0.0.1"]), "connect-x", "x",
                                  timeout_s=0)
    assert stays.value.sink == "x"
    assert "connect-x" in str(stays.value) and "connector-consumer-x-0" in str(stays.value)
