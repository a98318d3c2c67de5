"""A transform run as a Python function registered under its class's name (``register_transform``).

The function gets the records the step applies to as a frame of these columns, and returns the frame:

    key        VARIANT     the key (JSON, or its text)
    value      VARIANT     the value
    topic      STRING      the topic (a router before it may have renamed it)
    partition  INT         read only
    offset     BIGINT      read only
    timestamp  TIMESTAMP   read only
    headers    ARRAY<STRUCT<key: STRING, value: BINARY>>
    error      STRING      null; set it to make the record a bad record (the reason is named after the step)

and the column ``_sinklab_rest``, which it passes on as it came. A row it leaves out is dropped, as a
transform that returns null drops a record. A tombstone comes with a null value, as Connect passes it to
a transform. Records an earlier step failed or dropped, and those the step's predicate leaves out, pass
it by. It runs as Spark runs the frame it returns: built-in functions stay on the JVM; a Python UDF in
it runs in Python workers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.exceptions import ConfigError
from sinklab.sink.config import transforms as tf
from sinklab.sink.records.columns import ERROR
from sinklab.sink.records.kinds import TRANSFORM
from sinklab.sink.records.transform.parts import (
    BARE,
    DROPPED,
    FAILED,
    HEADERS,
    KEY,
    TOPIC,
    VALUE,
    obj,
    ordered,
    var,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

REST = "_sinklab_rest"
FRAME = ("key", "value", "topic", "partition", "offset", "timestamp", "headers", "error")


def run_python(records: DataFrame, t: tf.Python, millis: Column, applies: Column | None) -> DataFrame:
    """``records`` (the chain's frame) with the function registered for ``t.cls`` applied to those it takes."""
    function = tf.registered(t.cls)
    if function is None:
        raise ConfigError(f"transforms.{t.alias}.type", f"no Python function is registered for {t.cls!r} in this "
                          "process (sinklab.sink.register_transform, or sinklab.transforms.modules)")
    live = F.col(ERROR).isNull() & F.col(FAILED).isNull() & ~F.col(DROPPED)
    live = live if applies is None else live & F.coalesce(applies, F.lit(False))
    columns = records.columns
    frame = records.where(live).select(
        F.coalesce(var(F.col(VALUE)), F.col(BARE)).alias("value"),
        F.col(KEY).alias("key"), F.col(TOPIC).alias("topic"), F.col("partition").cast("int").alias("partition"),
        F.col("offset").alias("offset"), F.timestamp_millis(millis).alias("timestamp"),
        F.col(HEADERS).alias("headers"), F.lit(None).cast("string").alias("error"),
        F.struct(*[F.col(f"`{c}`") for c in columns]).alias(REST)).select(*FRAME, REST)
    try:
        out = function(frame, dict(t.settings))
    except Exception as exc:  # the user's code: named with the step it runs for, never swallowed
        raise ConfigError(f"transforms.{t.alias}.type", f"the Python function registered for {t.cls!r} failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    # Compared as types, whatever their nullability (a function's own arrays may say they hold nulls).
    expected = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    got = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    wrong = [f"{n} ({expected[n]})" for n in expected if n not in ("partition", "offset", "timestamp")
             and got.get(n) != expected[n]]
    if wrong:
        raise ConfigError(f"transforms.{t.alias}.type", f"the Python function registered for {t.cls!r} returned "
                          f"a frame without the columns {', '.join(wrong)}, as it was given them")
    value = F.col("value")
    m = ordered(obj(value), F.map_keys(F.col(f"{REST}.{VALUE}")))  # its fields in the order they had
    back = out.select(F.col(f"{REST}.*"), m.alias("_sinklab_m"), value.alias("_sinklab_v"),
                      F.col("key").alias("_sinklab_k"), F.col("topic").alias("_sinklab_tp"),
                      F.col("headers").alias("_sinklab_h"), F.col("error").alias("_sinklab_e"))
    back = back.withColumns({
        VALUE: F.col("_sinklab_m"), BARE: F.when(F.col("_sinklab_m").isNull(), F.col("_sinklab_v")),
        KEY: F.col("_sinklab_k"), TOPIC: F.col("_sinklab_tp"), HEADERS: F.col("_sinklab_h"),
        FAILED: F.when(F.col("_sinklab_e").isNotNull(), F.concat(
            F.lit(f"{TRANSFORM}: transform {t.alias!r} ({t.cls}): "), F.col("_sinklab_e")))})
    # The records the function does not see join those it returned. Spark runs the chain's earlier steps
    # once per side of the union: a Python step costs those twice.
    return back.select(*columns).unionByName(records.where(~live))
