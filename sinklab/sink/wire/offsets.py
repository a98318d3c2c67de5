"""Offsets, in one vocabulary for the whole sink, the workbench and the Connect API.

- ``TopicPartition``: a source partition, printed ``topic[partition]``.
- ``OffsetRange``: what a cycle reads of one partition, ``[start, end)``.
- ``Offsets``: the next offset to read per partition, nested ``{topic: {partition: offset}}`` (a
  plan's ends, what a table recorded, what a cycle committed). The snapshot property
  ``sinklab.offsets`` is its JSON (``to_property`` / ``from_property``); nothing else turns offsets
  into text and back.
- ``Lag``: records per partition not yet committed, ``{TopicPartition: n}``; shown (the status JSON,
  the CLI) as ``{"topic[partition]": n}``, a form nothing reads back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

Offsets = dict[str, dict[int, int]]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # first offset not to read

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


Lag = dict[TopicPartition, int]


def lag_json(lag: Lag) -> dict[str, int]:
    """For people and JSON output: ``{"topic[partition]": n}``, in (topic, partition) order."""
    return {str(tp): n for tp, n in sorted(lag.items())}


def get(offsets: Offsets, tp: TopicPartition, default: int = -1) -> int:
    return offsets.get(tp.topic, {}).get(tp.partition, default)


def put(offsets: Offsets, tp: TopicPartition, value: int) -> None:
    offsets.setdefault(tp.topic, {})[tp.partition] = value


def entries(offsets: Offsets) -> Iterator[tuple[TopicPartition, int]]:
    """Every partition's number, in (topic, partition) order."""
    for topic in sorted(offsets):
        for partition in sorted(offsets[topic]):
            yield TopicPartition(topic, partition), offsets[topic][partition]


def of(pairs: Iterable[tuple[TopicPartition, int]] | Mapping[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for tp, value in (pairs.items() if isinstance(pairs, Mapping) else pairs):
        put(out, TopicPartition(*tp), value)
    return out


def total(offsets: Offsets) -> int:
    return sum(n for parts in offsets.values() for n in parts.values())


def merge_max(recorded: Offsets, ends: Offsets) -> Offsets:
    """Per partition the larger of what a table carried and this cycle's end: offsets never go back."""
    out = {t: dict(parts) for t, parts in recorded.items()}
    for tp, offset in entries(ends):
        put(out, tp, max(get(out, tp), offset))
    return out


def to_property(offsets: Offsets) -> str:
    """The snapshot property's (and the control events') text: compact JSON, sorted."""
    return json.dumps({t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())},
                      separators=(",", ":"))


def from_property(text: str | Mapping[str, Mapping[str, int]]) -> Offsets:
    """``to_property``'s text (or its JSON already parsed, partitions as strings) back as Offsets."""
    raw = json.loads(text) if isinstance(text, str) else text
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in raw.items()}


def describe(offsets: Offsets) -> str:
    """For messages: ``topic[0]=12, topic[1]=40``."""
    return ", ".join(f"{tp}={n}" for tp, n in entries(offsets))
