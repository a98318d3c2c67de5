"""Change streams: inserts, updates and deletes over a key space, flat or in Debezium envelopes.

Live keys are tracked so that an update or delete always targets a row that exists and an insert
never reuses a live key, the way a real table's change log behaves.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from sinklab.generators.fields import EPOCH, Maker, start_time, stepper, stream, weighted
from sinklab.generators.spec import Spec

Row = dict[str, Any]
DEBEZIUM_OPS = {"I": "c", "U": "u", "D": "d", "r": "r"}
_MS = timedelta(milliseconds=1)


class KeySpace:
    """Live and free keys, each pickable at random in O(1) (swap-remove)."""

    def __init__(self, size: int | None, rng: random.Random):
        self.rng = rng
        self.live: list[int] = []
        self._live_at: dict[int, int] = {}
        self._free: list[int] | None = list(range(1, size + 1)) if size else None
        self._next = itertools.count(1)

    @property
    def full(self) -> bool:
        return self._free is not None and not self._free

    def take_new(self) -> int:
        free = self._free
        key = next(self._next) if free is None else _swap_remove(free, self.rng.randrange(len(free)))
        self._live_at[key] = len(self.live)
        self.live.append(key)
        return key

    def pick_live(self) -> int:
        return self.live[self.rng.randrange(len(self.live))]

    def release(self, key: int) -> None:
        at = self._live_at.pop(key)
        moved = self.live[-1]
        _swap_remove(self.live, at)
        if moved != key:
            self._live_at[moved] = at
        if self._free is not None:
            self._free.append(key)


def _swap_remove(items: list[int], at: int) -> int:
    item = items[at]
    items[at] = items[-1]
    items.pop()
    return item


def changes(spec: Spec, stage_for: Callable[[int], Callable[[], Row]],
            route: Maker | None) -> Iterator[tuple[Row, Row, datetime]]:
    """(event, the row inside it, change time) for every change, forever."""
    assert spec.cdc is not None and spec.key is not None
    conf, key_field, seed = spec.cdc, spec.key, spec.seed
    keys = KeySpace(conf.key_space, stream(seed, "cdc/keys"))
    pick_op = weighted(list(conf.mix), list(conf.mix.values()), stream(seed, "cdc/op"))
    rows: dict[int, Row] = {}
    when, advance = start_time(conf.start), stepper(conf.step, stream(seed, "cdc/ts"))
    update_fields = conf.update_fields
    route_field = spec.route.field if spec.route else ""
    debezium, op_field = conf.format == "debezium", conf.op_field
    source = conf.source.model_dump()

    for i in itertools.count():
        op = "r" if i < conf.snapshot else pick_op({})
        if op in ("U", "D") and not keys.live:
            op = "I"
        elif op == "I" and keys.full:
            op = "U"
        before: Row | None
        after: Row | None
        if op in ("I", "r"):
            key = keys.take_new()
            after = {key_field: key, **stage_for(i)()}
            if route is not None:
                # The destination belongs to the row: every change of a key goes to the same table.
                after[route_field] = route(after)
            before, rows[key] = None, after
        elif op == "U":
            key = keys.pick_live()
            before, fresh = rows[key], stage_for(i)()
            if update_fields is not None:
                # Only the listed fields change; fields added by drift since the insert appear too.
                fresh = {k: v for k, v in fresh.items() if k in update_fields or k not in before}
            after = rows[key] = {**before, **fresh}
        else:
            key = keys.pick_live()
            keys.release(key)
            before, after = rows.pop(key), None
        if debezium:
            ts_ms = (when - EPOCH) // _MS
            event: Row = {"before": before, "after": after, "op": DEBEZIUM_OPS[op], "ts_ms": ts_ms,
                          "source": source}
            yield event, (after if after is not None else before) or {}, when
        else:
            row = (after if after is not None else before) or {}
            flat = {key_field: key, op_field: "I" if op == "r" else op}
            flat.update((k, v) for k, v in row.items() if k != key_field)
            yield flat, flat, when
        when += advance()

