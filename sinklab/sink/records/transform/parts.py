"""A record's parts while the chain runs, and the expressions the steps share.

A value that is an object is held as a ``map<string,variant>`` read once from the record's JSON: a map
keeps the record's field order (a VARIANT object sorts its keys) and a step changes it without turning
a VARIANT into a map and back (bench/README.md, "Transforms as Spark expressions": 5-11x faster).
A value that is no object (a scalar, an array, JSON null) is held as a VARIANT beside it. The value's
Connect schema and the key are VARIANTs.

Outer expressions inside a lambda are evaluated again for every element: the helpers here pass what a
lambda needs as its argument (``aggregate``'s accumulator) or keep lambdas to column references.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.config import transforms as tf
from sinklab.sink.records.columns import PAYLOAD
from sinklab.sink.records.kinds import TRANSFORM

VALUE, BARE, SCHEMA, KEY, TOPIC, HEADERS, DROPPED, FAILED = (f"_sinklab_t_{p}" for p in (
    "value", "bare", "schema", "key", "topic", "headers", "dropped", "failed"))
PARTS = (VALUE, BARE, SCHEMA, KEY, TOPIC, HEADERS, DROPPED, FAILED)
ENTRIES = "array<struct<key:string,value:variant>>"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
ISO = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"


@dataclass(frozen=True)
class Side:
    """The part a step works on: an object as a map (``m``), anything else as a VARIANT (``bare``), and
    its Connect schema. Both null: the record has none (a tombstone's value)."""

    m: Column
    bare: Column
    schema: Column

    @property
    def present(self) -> Column:
        return self.m.isNotNull() | self.bare.isNotNull()

    def whole(self) -> Column:
        """The part as one VARIANT."""
        return F.coalesce(var(self.m), self.bare)


@dataclass(frozen=True)
class Rec:
    """One step's view of the record: a column per part."""

    value: Column  # map<string,variant>: the value when it is an object
    bare: Column  # variant: the value when it is anything else
    schema: Column
    key: Column
    topic: Column
    headers: Column
    dropped: Column
    failed: Column
    # Columns a step computes in a projection before its own, for expressions its own uses more than once
    # (a projection evaluates a column once; an expression as often as it is written).
    pre: tuple[tuple[str, Column], ...] = ()

    @staticmethod
    def named() -> Rec:
        return Rec(*(F.col(p) for p in PARTS))

    def columns(self) -> list[Column]:
        return [self.value, self.bare, self.schema, self.key, self.topic, self.headers, self.dropped, self.failed]

    def side(self, t: tf.Step) -> Side:
        """The part ``t`` works on (a key has no schema here: keys are read as text or JSON)."""
        if t.side == "value":
            return Side(self.value, self.bare, self.schema)
        m = obj(self.key)
        return Side(m, F.when(m.isNull(), self.key), F.lit(None).cast("variant"))

    def with_side(self, t: tf.Step, m: Column, bare: Column | None = None, schema: Column | None = None) -> Rec:
        """The record with ``t``'s part now ``m`` (an object) or ``bare`` (anything else)."""
        bare = F.lit(None).cast("variant") if bare is None else bare
        if t.side == "value":
            return replace(self, value=m, bare=bare, schema=self.schema if schema is None else schema)
        return replace(self, key=F.coalesce(var(m), bare))

    def fail(self, when: Column, why: Column | str) -> Rec:
        """The record fails here ``when`` so, unless an earlier step dropped it (it never got here)."""
        reason = F.lit(why) if isinstance(why, str) else why
        return replace(self, failed=F.coalesce(self.failed, F.when(when & ~self.dropped, reason)))


def why(t: tf.Step, what: str) -> str:
    return f"{TRANSFORM}: transform {t.alias!r} ({type(t).__name__}): {what}"


def need_object(r: Rec, t: tf.Step, s: Side) -> Rec:
    return r.fail(s.bare.isNotNull(), why(t, f"needs a struct or map, and the record's {t.side} is none"))


# ---- VARIANT values
def no_map() -> Column:
    return F.lit(None).cast("map<string,variant>")


def obj(v: Column) -> Column:
    """A VARIANT object as a map (null for anything else)."""
    return F.try_variant_get(v, "$", "map<string,variant>")


def var(c: Column) -> Column:
    """A map, struct or array as a VARIANT object."""
    return F.to_variant_object(c)


def scalar(c: Column) -> Column:
    return c.cast("variant")


def is_null(x: Column) -> Column:
    """No value, or JSON's null."""
    return x.isNull() | F.is_variant_null(x)


def string_of(v: Column) -> Column:
    """A VARIANT string as itself; null for anything else."""
    return F.when(F.schema_of_variant(v) == "STRING", F.variant_get(v, "$", "string"))


def text_of(v: Column) -> Column:
    """A VARIANT as text: a string as itself, anything else as its JSON."""
    return string_of(v).otherwise(F.to_json(v))


def kind_of(v: Column) -> Column:
    return F.schema_of_variant(v)


# ---- objects as maps
def entry(name: Column | str, value: Column) -> Column:
    return F.struct((F.lit(name) if isinstance(name, str) else name).alias("key"), value.alias("value"))


def with_keys(m: Column, entries: dict[str, Column]) -> Column:
    """The map ``m`` with ``entries`` set: a key it has keeps its place, a new one comes last."""
    updated = with_values(m, {n: (lambda _, c=c: c) for n, c in entries.items()})
    new = F.filter(F.array(*[F.when(~F.map_contains_key(m, n), entry(n, c)) for n, c in entries.items()]),
                   lambda e: e.isNotNull())
    return F.map_concat(updated, F.map_from_entries(new))


def appended(m: Column, entries: dict[str, Column]) -> Column:
    """The map ``m`` with ``entries`` last (replacing keys of the same names); ``m`` is evaluated once."""
    names = list(entries)
    return F.map_concat(F.map_filter(m, lambda k, _: ~k.isin(names)),
                        F.create_map(*[x for n, c in entries.items() for x in (F.lit(n), c)]))


def with_values(m: Column, change: dict[str, Callable[[Column], Column]]) -> Column:
    """The map ``m`` with the values of the keys in ``change`` replaced in place: each a function of the
    value it had (a key it lacks stays missing)."""
    def changed(k: Column, x: Column) -> Column:
        out = x
        for n, f in change.items():
            out = F.when(k == n, f(x)).otherwise(out)
        return out
    return F.transform_values(m, changed)


def unique_keys(keys: Column) -> Column:
    """Whether ``keys`` names no key twice (a map built from them would fail the whole job)."""
    return F.size(F.array_distinct(keys)) == F.size(keys)


def keys_at(path: str) -> Column:
    """The keys of the object at ``path`` of the record's value as it came, in their order there."""
    return F.map_keys(F.from_json(F.get_json_object(F.col(PAYLOAD), path), "map<string,string>"))


def ordered(m: Column, keys: Column) -> Column:
    """The map ``m`` with its keys in the order of ``keys``, then the others in ``m``'s order.

    For an object read out of a VARIANT (sorted), given the order it had in the record. ``m`` is
    ``aggregate``'s accumulator, so no lambda evaluates it again per key."""
    start = F.struct(m.alias("m"), F.array().cast(ENTRIES).alias("out"))

    def add(acc: Column, k: Column) -> Column:
        return F.struct(acc["m"].alias("m"), F.when(F.map_contains_key(acc["m"], k), F.concat(
            acc["out"], F.array(entry(k, acc["m"][k])))).otherwise(acc["out"]).alias("out"))

    def finish(acc: Column) -> Column:
        rest = F.filter(F.map_entries(acc["m"]), lambda e: ~F.exists(acc["out"], lambda x: x["key"] == e["key"]))
        return F.map_from_entries(F.concat(acc["out"], rest))

    return F.when(m.isNotNull(), F.aggregate(F.array_distinct(F.coalesce(keys, F.array().cast("array<string>"))),
                                             start, add, finish))


# ---- Connect schemas (VARIANTs)
def set_keys(v: Column, entries: dict[str, Column]) -> Column:
    """A VARIANT object with ``entries`` set (replacing keys of the same names)."""
    names = list(entries)
    kept = F.map_filter(obj(v), lambda k, _: ~k.isin(names))
    return var(F.map_concat(kept, F.create_map(*[x for n, c in entries.items() for x in (F.lit(n), c)])))


def fields_of(schema: Column) -> Column:
    return F.try_variant_get(schema, "$.fields", "array<variant>")


def name_of(field: Column) -> Column:
    return F.variant_get(field, "$.field", "string")


def with_fields(schema: Column, fields: Column) -> Column:
    return F.when(schema.isNotNull(), set_keys(schema, {"fields": var(fields)}))


def schema_field(name: str, kind: str, optional: bool = True, logical: str | None = None) -> Column:
    parts = [F.lit("field"), F.lit(name), F.lit("type"), F.lit(kind), F.lit("optional"), F.lit(optional)]
    if logical:
        parts += [F.lit("name"), F.lit(logical), F.lit("version"), F.lit(1)]
    return var(F.named_struct(*parts))


def field_schema(schema: Column, name: str) -> Column:
    return F.element_at(F.filter(fields_of(schema), lambda f: name_of(f) == name), 1)
