"""The cycle's two ways over the records (one pass, or a look before the write) and a publish whose
answer is lost: a real broker, the real REST catalog, real Spark."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from helpers import order_ids, produce, produce_raw, sink_config, sink_snapshots
from requests.adapters import HTTPAdapter
from test_bad_records import dead_letters

from sinklab.sink import IcebergSink
from sinklab.sink.tables.state import COMMIT_ID_PROP
from sinklab.stack import Stack

pytestmark = pytest.mark.spark


def test_each_trigger_of_two_passes_mid_stream_keeps_every_record_once(stack: Stack, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    table = f"{unique}.pizzas"
    dlq = f"{unique}-dlq"
    sink = IcebergSink(stack, sink_config(unique, **{
        "iceberg.tables.evolve-schema-enabled": "true", "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq}))
    try:
        first = produce(stack, unique, 100, seed=1)
        created = sink.run_once()
        assert created is not None and created.passes == 2  # auto-create looks first

        usual = produce(stack, unique, 100, seed=2)
        before = metadata_files(stack, table)
        result = sink.run_once()
        assert result is not None and result.passes == 1 and result.records == 100
        # One catalog commit for the cycle: Iceberg writes one metadata file per commit.
        assert len(metadata_files(stack, table) - before) == 1

        # A field the table lacks, with evolution on: the one pass notices it, and the cycle reads again.
        newer = produce(stack, unique, 50, seed=3)
        produce_raw(stack, unique, [json.dumps({"order_id": "with-coupon", "coupon": "PIZZA10"}).encode()])
        result = sink.run_once()
        assert result is not None and result.passes == 2 and result.records == 51
        assert "coupon" in stack.spark.table(f"sinklab.{table}").columns

        # A bad record stays one pass: it is looked up after the write, and dead-lettered.
        more = produce(stack, unique, 50, seed=4)
        produce_raw(stack, unique, [b"{not json"])
        result = sink.run_once()
        assert result is not None and result.passes == 1 and result.counters["dead-lettered"] == 1
        assert [letter["value"] for letter in dead_letters(stack, dlq)] == [b"{not json"]

        got = order_ids(stack, table)
        assert sorted(got) == sorted([*first, *usual, *newer, "with-coupon", *more])

        # The table dropped under the running sink: created again from what comes next.
        stack.spark.sql(f"DROP TABLE sinklab.{table}")
        after = produce(stack, unique, 40, seed=5)
        result = sink.run_once()
        assert result is not None and result.passes == 2
        assert sink.run_once() is None
    finally:
        sink.stop()
    assert sorted(order_ids(stack, table)) == sorted(after)


def metadata_files(stack: Stack, table: str) -> set[Path]:
    location = stack.catalog.load_table(tuple(table.split("."))).location()
    return set((Path(location.removeprefix("file:")) / "metadata").glob("*.metadata.json"))


@contextmanager
def answers_lost(stack: Stack, match: Callable[[requests.PreparedRequest], bool], reach_server: bool,
                 times: int = 1) -> Iterator[list[str]]:
    """The catalog client's next ``times`` requests that ``match`` lose their answer: a connection reset
    after the catalog received the request (``reach_server``), or before it did."""
    session = stack.catalog._session  # type: ignore[attr-defined]
    prefix = stack.info.catalog_uri
    lost: list[str] = []

    class LosingAdapter(HTTPAdapter):
        def send(self, request: requests.PreparedRequest, *args: object, **kwargs: object) -> requests.Response:
            if len(lost) < times and match(request):
                lost.append(request.url or "")
                if reach_server:
                    super().send(request, *args, **kwargs)  # type: ignore[arg-type]
                raise requests.ConnectionError("connection reset by peer (test fault: the answer is lost)")
            return super().send(request, *args, **kwargs)  # type: ignore[arg-type]

    session.mount(prefix, LosingAdapter())
    try:
        yield lost
    finally:
        del session.adapters[prefix]


def is_publish(request: requests.PreparedRequest) -> bool:
    body = request.body.decode() if isinstance(request.body, bytes) else str(request.body or "")
    return request.method == "POST" and '"add-snapshot"' in body and '"set-snapshot-ref"' in body


@pytest.mark.parametrize("reach_server", [True, False], ids=["commit-landed", "commit-never-arrived"])
def test_a_publish_whose_answer_is_lost_is_resolved_from_the_table_without_a_duplicate(
        stack: Stack, unique: str, reach_server: bool, caplog: pytest.LogCaptureFixture) -> None:
    stack.create_topic(unique, partitions=2)
    table = f"{unique}.pizzas"
    sink = IcebergSink(stack, sink_config(unique))
    try:
        first = produce(stack, unique, 60, seed=6)
        assert sink.run_once() is not None
        ids = produce(stack, unique, 80, seed=7)
        with caplog.at_level(logging.WARNING, logger="sinklab.sink"), answers_lost(stack, is_publish,
                                                                                   reach_server) as lost:
            result = sink.run_once()
        assert len(lost) == 1
        assert result is not None and result.records == 80 and result.tables[table].snapshot_id > 0
        assert sink.run_once() is None
    finally:
        sink.stop()
    said = "the table says it landed" if reach_server else "did not land; publishing again"
    assert said in caplog.text
    assert sorted(order_ids(stack, table)) == sorted([*first, *ids])
    commits = [s[COMMIT_ID_PROP] for s in sink_snapshots(stack, table) if COMMIT_ID_PROP in s]
    assert commits.count(result.commit_id) == 1
    main = stack.catalog.load_table(tuple(table.split("."))).metadata.refs["main"].snapshot_id
    assert main == result.tables[table].snapshot_id
