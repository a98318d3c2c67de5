"""A dead letter's Kafka Connect context headers, without a stack: what a consumer of the dead-letter
topic reads to tell where a record failed and why."""

import importlib

from sinklab.exceptions import RecordError
from sinklab.sink.records.dead_letters import DeadLetter


def _letter(reason: str, table: str | None = None) -> DeadLetter:
    return DeadLetter("pizzas", 2, 41, 1_700_000_000_000, b"k", b"{oops", [], table, reason)


def test_the_exception_class_header_names_the_class_where_it_lives() -> None:
    headers = dict(_letter("malformed-json: value is malformed JSON").context("pizzas-on-ice"))
    module, _, name = headers["__connect.errors.exception.class.name"].decode().rpartition(".")
    assert getattr(importlib.import_module(module), name) is RecordError


def test_the_headers_name_the_record_the_connector_and_the_stage() -> None:
    headers = dict(_letter("type-mismatch: price: abc is not a double", "rpc.pizzas").context("pizzas-on-ice"))
    assert headers["__connect.errors.topic"] == b"pizzas"
    assert (headers["__connect.errors.partition"], headers["__connect.errors.offset"]) == (b"2", b"41")
    assert headers["__connect.errors.connector.name"] == b"pizzas-on-ice"
    assert headers["__connect.errors.stage"] == b"TASK_PUT"  # past conversion: the sink's put
    assert headers["__sinklab.errors.kind"] == b"type-mismatch"
    assert headers["__sinklab.errors.table"] == b"rpc.pizzas"
