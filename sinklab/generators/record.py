"""What a generator makes: an event (``Row``), and the Kafka record that carries it (``Record``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record: its key and value bytes, the event it encodes, and whether it is bad."""

    index: int
    key: bytes | None
    value: bytes | None  # None: a tombstone
    # The event as a dict; for byte-level bad kinds (malformed-json, not-an-object, undecodable, tombstone)
    # the event before it was mangled.
    event: Row
    bad: str | None = None
    time: datetime | None = None  # the event time, when asked for (daily topics)
    partition: int | None = None  # where it goes; None: by its key (a traffic profile's replay picks one)
