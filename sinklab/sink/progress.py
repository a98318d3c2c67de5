"""The offsets protocol: where a cycle starts and ends, and what each table has already recorded."""

from __future__ import annotations

import json
from typing import Any

Offsets = dict[str, dict[int, int]]  # topic -> partition -> next offset to read


def parse_offsets(text: str) -> Offsets:
    raw = json.loads(text)
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in raw.items()}


def format_offsets(offsets: Offsets) -> str:
    return json.dumps({t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())},
                      separators=(",", ":"))


def merge_max(recorded: Offsets, ends: Offsets) -> Offsets:
    """Per partition the larger of what a table carried and this cycle's end: offsets never go back."""
    out = {t: dict(parts) for t, parts in recorded.items()}
    for topic, parts in ends.items():
        slot = out.setdefault(topic, {})
        for partition, offset in parts.items():
            slot[partition] = max(slot.get(partition, -1), offset)
    return out


def start_offsets(partitions: list[tuple[str, int]], group: dict[tuple[str, int], int],
                  tables: list[Offsets], low: dict[tuple[str, int], int], high: dict[tuple[str, int], int],
                  reset: str) -> dict[tuple[str, int], int]:
    """Where each partition resumes: the group's committed offset (the last complete cycle); without
    it the lowest offset any table recorded (a half-finished cycle is filtered per table); without
    that ``auto.offset.reset``. Clamped to what the broker still has."""
    out = {}
    for tp in partitions:
        topic, partition = tp
        if group.get(tp, -1) >= 0:
            start = group[tp]
        else:
            recorded = [t[topic][partition] for t in tables if partition in t.get(topic, {})]
            if recorded and len(recorded) == len(tables):
                start = min(recorded)
            else:
                start = low[tp] if reset == "earliest" else high[tp]
        out[tp] = min(max(start, low[tp]), high[tp])
    return out


def nest(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in flat.items():
        out.setdefault(topic, {})[partition] = offset
    return out


def describe(offsets: dict[tuple[str, int], Any]) -> str:
    return ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(offsets.items()))
