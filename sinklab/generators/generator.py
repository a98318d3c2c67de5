"""Generator: a spec turned into a reproducible stream of Kafka records.

Record ``i`` depends only on the spec and its seed, so ``sample(n)`` shows exactly the first ``n``
records ``produce`` sends. Drift, routing and bad records are applied here; ``produce.py`` only
paces and delivers.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sinklab.generators import cdc
from sinklab.generators.fields import Maker, compile_field, parse_time, stream, weighted, widen
from sinklab.generators.record import Record, Row
from sinklab.generators.spec import Spec, TimestampField, load_spec

if TYPE_CHECKING:
    import pandas as pd

    from sinklab.generators.produce import Clock, Production
    from sinklab.generators.spec import RateSpec
    from sinklab.generators.traffic import TrafficProfile
    from sinklab.stack import Stack

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
# Latin-1 text inside JSON: a producer that skipped UTF-8 encoding. 0xE8 followed by "m" is never UTF-8.
LATIN1_TAIL = b',"note":"Cr\xe8me br\xfbl\xe9e"}'
MISMATCH_WORDS = ("seven", "n/a", "twelve", "unknown", "NaN?", "1,000")
# Beyond signed and unsigned 64-bit integers.
OUT_OF_RANGE = 2**64
UNKNOWN_ROUTE = "no-such-destination"


class Generator:
    """A stream of events described by a spec (see ``data-generators/README.md``).

    ``Generator(spec, **overrides)`` takes a built-in name (``"pizzas"``), a YAML path, a mapping or
    a :class:`Spec`; overrides replace top-level spec keys (``seed=3``, ``bad_records=0.05``,
    ``rate=200``, ``route={...}``, ``drift=[...]``, ``key=...``, ``daily_topics=True``).
    """

    def __init__(self, spec: str | Path | Mapping[str, Any] | Spec, /, **overrides: Any):
        self.spec = load_spec(spec, overrides)

    @classmethod
    def from_spec(cls, source: str | Path | Mapping[str, Any] | Spec, /, **overrides: Any) -> Generator:
        """A generator from a built-in spec name or a YAML file."""
        return Generator(source, **overrides)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def key(self) -> str | None:
        return self.spec.key

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec.name!r}, seed={self.spec.seed})"

    # ---- the stream
    def records(self, count: int | None = None, *, timed: bool = False) -> Iterator[Record]:
        """The first `count` records (all of them, forever, if None); `timed` fills ``Record.time``."""
        spec, seed = self.spec, self.spec.seed
        stage_for = self._stages()
        route = (weighted(list(spec.route.mix), list(spec.route.mix.values()), stream(seed, "route"))
                 if spec.route else None)
        if spec.cdc is not None:
            changes = cdc.changes(spec, stage_for, route)
        else:
            changes = _plain(spec, stage_for, route, self._time_of() if timed else None)
        pick_bad = _bad_picker(spec)
        corrupt = _corrupter(spec) if pick_bad else None
        key_field = spec.key
        for index, (event, row, when) in enumerate(itertools.islice(changes, count)):
            key_value = row.get(key_field) if key_field else None
            key = None if key_value is None else str(key_value).encode()
            kind = pick_bad() if pick_bad else None
            if kind is None:
                yield Record(index, key, _encode(event).encode(), event, None, when)
            else:
                assert corrupt is not None
                bad_event, value = corrupt(kind, event, row)
                yield Record(index, key, value, bad_event, kind, when)

    def events(self, count: int | None = None) -> Iterator[Row]:
        """The events as dicts (bad records included, as in :class:`Record`)."""
        for record in self.records(count):
            yield record.event

    def sample(self, n: int = 10) -> pd.DataFrame:
        """The first `n` events as a DataFrame, without Kafka; with bad records, a `_bad` column names the kind."""
        import pandas as pd

        if self.spec.bad_records is None:
            return pd.DataFrame.from_records(list(self.events(n)))
        return pd.DataFrame.from_records([{**r.event, "_bad": r.bad} for r in self.records(n)])

    def produce(self, stack: Stack, topic: str, count: int | None = None,
                rate: float | RateSpec | Mapping[str, Any] | None = None, *, partitions: int = 6,
                daily_topics: bool | None = None, create_topics: bool = True,
                producer_config: Mapping[str, Any] | None = None, clock: Clock | None = None,
                format: str = "json", registry_url: str | None = None,
                subject_strategy: str = "TopicNameStrategy", traffic: TrafficProfile | None = None,
                speed: float = 1.0) -> Production:
        """Produce in the background; returns a handle (``.wait()``, ``.stop()``, delivered counts).

        ``format="avro"`` produces Confluent-framed Avro (``"json-schema"``: JSON with a JSON Schema), each
        drift stage's schema registered (under ``subject_strategy``) in the schema registry at
        ``registry_url``, by default the stack's.

        `count` and `rate` default to the spec's (None: until ``.stop()``; as fast as possible).
        With daily topics the events go to ``{topic}.YYYYMMDD`` by their event time (the spec's
        time field; CDC: the change time), or by today's UTC date when the events have none.
        `clock` replaces the monotonic clock the rate is paced by (tests).

        ``traffic``: a topic's traffic profile (``sinklab.generators.traffic``) to replay: its rate curve
        (``speed`` times faster; a ``rate`` given replaces it), its partitions' shares (the topic gets as
        many partitions as it had), its value sizes (JSON values padded) and hot keys.
        """
        from sinklab.generators.produce import produce_records, rate_schedule

        count = count if count is not None else self.spec.count
        daily = self.spec.daily_topics if daily_topics is None else daily_topics
        if traffic is not None and rate is None:
            rate = traffic.schedule(speed)
        schedule = rate_schedule(rate if rate is not None else self.spec.rate)
        records = self.records(count, timed=daily and self._has_time())
        if traffic is not None:
            if format != "json":
                raise ValueError(f"traffic: replayed as JSON only (its sizes pad JSON values), not {format!r}")
            records = traffic.reshape(records, self.spec.seed)
            partitions = traffic.partition_count
        if format in ("avro", "json-schema"):
            from sinklab.generators.avro import registry_records
            from sinklab.sink.wire import RegistryClient

            url = registry_url or stack.info.schema_registry_url
            if not url:
                raise ValueError(f"format={format!r} needs a schema registry: give registry_url, or start the "
                                 "stack's (`sinklab stack up --schema-registry`, Stack.start_schema_registry())")
            records = registry_records(self.spec, records, RegistryClient(url), topic, subject_strategy, format)
        elif format != "json":
            raise ValueError(f"format: expected json, avro or json-schema, got {format!r}")
        return produce_records(
            stack, topic, records, count=count, schedule=schedule,
            name=self.spec.name, partitions=partitions, daily=daily, create_topics=create_topics,
            producer_config=producer_config, clock=clock)

    # ---- internals
    def _stages(self) -> Callable[[int], Callable[[], Row]]:
        """The row maker for event i: the base fields, plus every drift step with ``after <= i``."""
        seed = self.spec.seed
        current: list[tuple[str, Maker]] = [(n, compile_field(f, seed, n)) for n, f in self.spec.fields.items()]
        afters, stages = [0], [_object(current)]
        for k, step in sorted(enumerate(self.spec.drift), key=lambda pair: pair[1].after):
            current = [(n, widen(m, self.spec.fields[n], step.widen[n]) if n in step.widen else m)
                       for n, m in current]
            current += [(n, compile_field(f, seed, f"drift{k}/{n}")) for n, f in step.add.items()]
            afters.append(step.after)
            stages.append(_object(current))
        if len(stages) == 1:
            only = stages[0]
            return lambda i: only
        return lambda i: stages[bisect.bisect_right(afters, i) - 1]

    def _has_time(self) -> bool:
        return self.spec.cdc is not None or self.spec.time_field_name() is not None

    def _time_of(self) -> Callable[[Row], datetime | None] | None:
        name = self.spec.time_field_name()
        if name is None:
            return None
        field = self.spec.fields[name]
        assert isinstance(field, TimestampField)
        fmt = field.format
        return lambda row: None if row.get(name) is None else parse_time(fmt, row[name])


def _object(makers: list[tuple[str, Maker]]) -> Callable[[], Row]:
    def make() -> Row:
        out: Row = {}
        for name, maker in makers:
            out[name] = maker(out)
        return out
    return make


def _plain(spec: Spec, stage_for: Callable[[int], Callable[[], Row]], route: Maker | None,
           time_of: Callable[[Row], datetime | None] | None) -> Iterator[tuple[Row, Row, datetime | None]]:
    field = spec.route.field if spec.route else ""
    for i in itertools.count():
        row = stage_for(i)()
        if route is not None:
            row[field] = route(row)
        yield row, row, (time_of(row) if time_of else None)


# ---- bad records

def _bad_picker(spec: Spec) -> Callable[[], str | None] | None:
    if spec.bad_records is None or spec.bad_records.ratio == 0:
        return None
    kinds = spec.bad_kinds()
    if not kinds:
        return None
    rng = stream(spec.seed, "bad")
    ratio, draw = spec.bad_records.ratio, rng.random
    which = weighted(list(kinds), list(kinds.values()), stream(spec.seed, "bad/kind"))
    return lambda: which({}) if draw() < ratio else None


def _corrupter(spec: Spec) -> Callable[[str, Row, Row], tuple[Row, bytes | None]]:
    rng = stream(spec.seed, "bad/value")
    mismatch, out_of_range, required = spec.mismatch_field(), spec.range_field(), spec.required_field()
    route_field = spec.route.field if spec.route else None

    def with_row(event: Row, row: Row, changes: Mapping[str, Any], drop: str | None = None) -> Row:
        new_row = {k: v for k, v in row.items() if k != drop}
        new_row.update(changes)
        if row is event:
            return new_row
        # A Debezium envelope: the row is its `after` (or `before`, for deletes).
        side = "after" if event.get("after") is row else "before"
        return {**event, side: new_row}

    def corrupt(kind: str, event: Row, row: Row) -> tuple[Row, bytes | None]:
        if kind == "tombstone":
            return event, None
        if kind == "malformed-json":
            return event, _encode(event).encode()[:-1]
        if kind == "not-an-object":
            return event, _encode(list(event.values())).encode()
        if kind == "undecodable":
            return event, _encode(event).encode()[:-1] + LATIN1_TAIL
        if kind == "type-mismatch":
            bad = with_row(event, row, {str(mismatch): rng.choice(MISMATCH_WORDS)})
        elif kind == "out-of-range":
            bad = with_row(event, row, {str(out_of_range): OUT_OF_RANGE + rng.randrange(1_000_000)})
        elif kind == "missing-required":
            bad = with_row(event, row, {}, drop=required)
        elif kind == "no-table":
            bad = with_row(event, row, {str(route_field): UNKNOWN_ROUTE})
        else:
            raise ValueError(f"unknown bad-record kind {kind!r}")
        return bad, _encode(bad).encode()
    return corrupt
