"""Calls about a consumer group (its committed offsets, its members), tried again while the group's
coordinator moves or still loads its partition of ``__consumer_offsets`` (a broker just started or
restarted): librdkafka does not retry group calls on these, a Java client does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from sinklab.retry import retrying

T = TypeVar("T")
COORDINATOR_MOVING = frozenset({KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                KafkaError.NOT_COORDINATOR})


def coordinator_moving(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and exc.args[0].code() in COORDINATOR_MOVING


def group_call(call: Callable[[], T], timeout_s: float = 30.0) -> T:
    """``call()``, tried again every 0.2 s within ``timeout_s`` while the group's coordinator moves."""
    return retrying(call, coordinator_moving, timeout_s=timeout_s, delay_s=0.2)
