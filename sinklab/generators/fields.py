"""Field kinds: each spec compiles to a function that draws the next value.

A maker takes the object being built so far (templates read earlier fields from it) and returns a
value. Every field draws from its own random stream, seeded by the spec seed and the field's path,
so adding a field or a drift step never changes the values of the others.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sinklab.generators import names
from sinklab.generators.spec import (
    ArrayField,
    BoolField,
    ChoiceField,
    ConstantField,
    FieldSpec,
    FloatField,
    IntField,
    NameField,
    ObjectField,
    SequenceField,
    Step,
    TemplateField,
    TimestampField,
    UuidField,
)

Maker = Callable[[dict[str, Any]], Any]
EPOCH = datetime(1970, 1, 1)
# Added to integers that widen to long: every value leaves the 32-bit range.
LONG_OFFSET = 2**32
# Floats that widen to double leave the float32 range (max ~3.4e38): (|v| + 1) * 1e39, sign kept.
DOUBLE_SCALE = 1e39


def stream(seed: int, path: str) -> random.Random:
    # String seeds go through SHA-512 in CPython, so the stream is the same in every process.
    return random.Random(f"{seed}/{path}")


def compile_field(spec: FieldSpec, seed: int, path: str) -> Maker:
    rng = stream(seed, path)
    make = _compile(spec, rng, seed, path)
    if spec.as_string:
        inner = make

        def make(ctx: dict[str, Any]) -> Any:
            value = inner(ctx)
            return value if value is None else str(value)
    if spec.null_ratio > 0:
        base, ratio, nulls = make, spec.null_ratio, stream(seed, path + "#null")

        def make(ctx: dict[str, Any]) -> Any:
            return None if nulls.random() < ratio else base(ctx)
    return make


def compile_object(fields: dict[str, FieldSpec], seed: int, path: str = "") -> Callable[[], dict[str, Any]]:
    makers = [(name, compile_field(spec, seed, f"{path}{name}")) for name, spec in fields.items()]

    def make() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, maker in makers:
            out[name] = maker(out)
        return out
    return make


def _compile(spec: FieldSpec, rng: random.Random, seed: int, path: str) -> Maker:
    if isinstance(spec, UuidField):
        bits = rng.getrandbits
        return lambda ctx: str(uuid.UUID(int=bits(128), version=4))
    if isinstance(spec, IntField):
        if spec.distribution == "zipf":
            return _zipf(spec, rng)
        low, high, randint = spec.min, spec.max, rng.randint
        return lambda ctx: randint(low, high)
    if isinstance(spec, FloatField):
        low, high, decimals, uniform = spec.min, spec.max, spec.decimals, rng.uniform
        if decimals is None:
            return lambda ctx: uniform(low, high)
        return lambda ctx: round(uniform(low, high), decimals)
    if isinstance(spec, BoolField):
        ratio, draw = spec.ratio, rng.random
        return lambda ctx: draw() < ratio
    if isinstance(spec, ChoiceField):
        return weighted(*spec.pairs(), rng)
    if isinstance(spec, NameField):
        return _name(spec, rng)
    if isinstance(spec, TimestampField):
        return _timestamp(spec, rng)
    if isinstance(spec, SequenceField):
        counter = itertools.count(spec.start, spec.step)
        return lambda ctx: next(counter)
    if isinstance(spec, ConstantField):
        value = spec.value
        return lambda ctx: value
    if isinstance(spec, TemplateField):
        template = spec.template
        return lambda ctx: template.format_map(ctx)
    if isinstance(spec, ObjectField):
        make_object = compile_object(spec.fields, seed, path + ".")
        return lambda ctx: make_object()
    if isinstance(spec, ArrayField):
        item = compile_field(spec.items, seed, path + "[]")
        low, high, randint = spec.min_items, spec.max_items, rng.randint
        return lambda ctx: [item({}) for _ in range(randint(low, high))]
    raise TypeError(f"unknown field kind {spec!r}")  # the discriminated union makes this unreachable


def weighted(values: list[Any], weights: list[float] | None, rng: random.Random) -> Maker:
    if weights is None:
        count, draw = len(values), rng.random
        return lambda ctx: values[int(draw() * count)]
    cum = list(itertools.accumulate(weights))
    total, draw, hi = cum[-1], rng.random, len(cum) - 1
    return lambda ctx: values[bisect.bisect(cum, draw() * total, 0, hi)]


def _zipf(spec: IntField, rng: random.Random) -> Maker:
    n = spec.max - spec.min + 1
    cum = list(itertools.accumulate(1.0 / k ** spec.exponent for k in range(1, n + 1)))
    total, draw, low, hi = cum[-1], rng.random, spec.min, n - 1
    return lambda ctx: low + bisect.bisect(cum, draw() * total, 0, hi)


def _name(spec: NameField, rng: random.Random) -> Maker:
    first, last, titles, ratio = names.FIRST, names.LAST, names.TITLES, spec.title_ratio
    if spec.part == "first":
        return lambda ctx: rng.choice(first)
    if spec.part == "last":
        return lambda ctx: rng.choice(last)

    def full(ctx: dict[str, Any]) -> str:
        name = f"{rng.choice(first)} {rng.choice(last)}"
        # Always draw, so the names that follow do not depend on title_ratio.
        title = rng.choice(titles)
        return f"{title} {name}" if rng.random() < ratio else name
    return full


def start_time(start: datetime | str) -> datetime:
    if start == "now":
        return datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    assert isinstance(start, datetime)
    # An aware start is kept as its UTC wall time: timestamps are written without a zone.
    return start.astimezone(UTC).replace(tzinfo=None) if start.tzinfo else start


def stepper(step: Step, rng: random.Random) -> Callable[[], timedelta]:
    low, high = step if isinstance(step, tuple) else (step, step)
    if low == high:
        fixed = timedelta(seconds=low)
        return lambda: fixed
    if float(low).is_integer() and float(high).is_integer():
        a, b = int(low), int(high)
        return lambda: timedelta(seconds=rng.randint(a, b))
    return lambda: timedelta(seconds=rng.uniform(low, high))


def formatter(fmt: str) -> Callable[[datetime], Any]:
    if fmt == "iso":
        return datetime.isoformat
    if fmt.startswith("epoch_"):
        scale = {"epoch_s": 1, "epoch_ms": 1_000, "epoch_us": 1_000_000}[fmt]
        return lambda t: (t - EPOCH) // timedelta(microseconds=1_000_000 // scale)
    return lambda t: t.strftime(fmt)


def parse_time(fmt: str, value: Any) -> datetime:
    """The datetime a formatted timestamp stands for (to name daily topics by event time)."""
    if fmt == "iso":
        return datetime.fromisoformat(value)
    if fmt.startswith("epoch_"):
        scale = {"epoch_s": 1, "epoch_ms": 1_000, "epoch_us": 1_000_000}[fmt]
        return EPOCH + timedelta(microseconds=int(value) * (1_000_000 // scale))
    return datetime.strptime(value, fmt)


def _timestamp(spec: TimestampField, rng: random.Random) -> Maker:
    state = [start_time(spec.start)]
    advance, fmt = stepper(spec.step, rng), formatter(spec.format)

    def make(ctx: dict[str, Any]) -> Any:
        now = state[0]
        state[0] = now + advance()
        return fmt(now)
    return make


def widen(make: Maker, spec: FieldSpec, to: str) -> Maker:
    """The same values, shifted out of the narrower type's range (drift: a type widens)."""
    if to == "long":
        def wide(ctx: dict[str, Any]) -> Any:
            value = make(ctx)
            return value if value is None else value + LONG_OFFSET
    elif isinstance(spec, FloatField):
        def wide(ctx: dict[str, Any]) -> Any:
            value = make(ctx)
            return value if value is None else math.copysign((abs(value) + 1) * DOUBLE_SCALE, value)
    else:
        def wide(ctx: dict[str, Any]) -> Any:
            value = make(ctx)
            return value if value is None else value + 0.5
    return wide
