"""The remote sink's wire, without a server: a cycle's result and a sink's failure survive the trip."""

from __future__ import annotations

import json

from sinklab.exceptions import CycleTooLarge, RemoteSinkError
from sinklab.sink import ConfigError, RecordError
from sinklab.sink.cycle.coordinator import CycleResult
from sinklab.sink.remote import error_from_json, error_json, result_from_json, result_json
from sinklab.sink.tables.write import Staged


def test_a_cycle_result_comes_back_as_it_left_but_the_servers_own_objects() -> None:
    staged = Staged(table="rpc.pizzas", stage=None, snapshot_id=7, records=3, bytes=300, data_files=["a.parquet"],
                    delete_files=[], write_ms=12, commit_ms=4, loaded=object(), snapshot=object())  # type: ignore[arg-type]
    result = CycleResult(commit_id="c1", records=3, tables={"rpc.pizzas": staged}, offsets={"pizzas": {0: 2, 1: 1}},
                         vtts_ms=1700000000000, counters={"bytes": 300}, duration_ms=900, passes=2)
    back = result_from_json(json.loads(json.dumps(result_json(result))))  # as the server sends it
    assert back == result  # Staged compares without loaded and snapshot
    assert back is not None and back.offsets == {"pizzas": {0: 2, 1: 1}}  # partitions are numbers again
    assert back.tables["rpc.pizzas"].loaded is None and back.tables["rpc.pizzas"].snapshot is None
    assert result_from_json(result_json(None)) is None


def test_a_sinks_failure_is_raised_again_as_its_class() -> None:
    record = RecordError("pizzas", 2, 41, "rpc.pizzas", "not JSON: Expecting value")
    again = error_from_json(500, error_json(record), "cycle")
    assert isinstance(again, RecordError) and str(again) == str(record) and again.kind == "not JSON"
    too_large = error_from_json(500, error_json(CycleTooLarge("a cycle of 9 records did not fit")), "cycle")
    assert type(too_large) is CycleTooLarge and "9 records" in str(too_large)
    assert isinstance(error_from_json(400, {"error_code": 400, "message": "topics: missing"}, "creating"), ConfigError)
    other = error_from_json(500, error_json(KeyError("x")), "sink s: POST /cycle")
    assert type(other) is RemoteSinkError and str(other).startswith("sink s: POST /cycle: ")
    # A name that is no sinklab error is never looked up as one.
    assert type(error_from_json(500, {"message": "m", "exception": "text_of"}, "c")) is RemoteSinkError
