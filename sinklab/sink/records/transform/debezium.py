"""Debezium's ExtractNewRecordState (``io.debezium.transforms.ExtractNewRecordState``), which CDC users
put before the sink: the change event's row becomes the record."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.config import transforms as tf
from sinklab.sink.records.transform.parts import (
    Rec,
    appended,
    fields_of,
    keys_at,
    name_of,
    obj,
    ordered,
    scalar,
    schema_field,
    set_keys,
    var,
    why,
)


def unwrap(t: tf.ExtractNewRecordState, r: Rec) -> Rec:
    """A record that is no change event (no ``op``) passes as it is."""
    s = r.side(t)
    op = F.try_variant_get(s.m["op"], "$", "string")
    change = op.isNotNull()
    delete = op == "d"
    source = obj(s.m["source"])
    row = F.when(delete, s.m["before"]).otherwise(s.m["after"])
    added: dict[str, Column] = {}
    for name in t.add_fields:
        inner = name.removeprefix("source.")
        # As Debezium: a field of the envelope, else of its source block.
        added[t.prefix + name.replace(".", "_")] = (source[inner] if name.startswith("source.") else
                                                     F.coalesce(s.m[name], source[name]))
    if t.delete_handling == "rewrite":
        added[t.prefix + "deleted"] = scalar(F.when(delete, F.lit("true")).otherwise(F.lit("false")))
    row_m = ordered(obj(row), F.when(delete, keys_at("$.before")).otherwise(keys_at("$.after")))
    value = appended(row_m, added) if added else row_m
    tombstone = F.col("value").isNull()
    dropped = r.dropped | (tombstone & F.lit(t.drop_tombstones)) | (change & delete & F.lit(
        t.delete_handling == "drop"))
    if t.delete_handling == "none":  # the delete passes as a record without a value: skipped by the sink
        dropped = dropped | (change & delete)
    row_schema = F.element_at(F.filter(fields_of(s.schema), lambda f: name_of(f) == F.when(delete, F.lit("before"))
                                       .otherwise(F.lit("after"))), 1)
    extra = [schema_field(n, "string") for n in added]  # the envelope's fields, typed as their text
    # The row's schema is the record's now: without the name it had as a field of the envelope.
    row_only = var(F.map_filter(obj(row_schema), lambda k, _: k != "field"))
    schema = F.when(s.schema.isNotNull() & change, set_keys(row_only, {
        "fields": var(F.concat(fields_of(row_schema), F.array(*extra)))}))
    out = replace(r, dropped=dropped).fail(change & row_m.isNull() & ~delete, why(
        t, "the change event has no after row"))
    bare = F.when(row_m.isNull(), row) if not added else None
    return out.with_side(t, F.when(change, value).otherwise(s.m),
                         F.when(change, bare).otherwise(s.bare) if bare is not None else F.when(~change, s.bare),
                         F.when(change, schema).otherwise(s.schema))
