"""A Python transform for the tests: jcustenborder's PatternMapString$Value (kafka-connect-transform-common),
as a user would register it so that a published config naming it runs unchanged: the text of
``src.field.name`` with ``value.pattern`` replaced by ``value.replacement``, into ``dest.field.name``.
A record without the field is a bad record; one whose ``id`` is negative is dropped; a tombstone passes."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sinklab.sink import register_transform

CLASS = "com.github.jcustenborder.kafka.connect.transform.common.PatternMapString$Value"


def pattern_map(frame: DataFrame, settings: Mapping[str, str]) -> DataFrame:
    source = settings["src.field.name"]
    target = settings.get("dest.field.name", source)
    fields = F.try_variant_get("value", "$", "map<string,variant>")
    text = F.try_variant_get(fields[source], "$", "string")
    mapped = F.regexp_replace(text, settings["value.pattern"], settings["value.replacement"]).cast("variant")
    kept = F.map_filter(fields, lambda k, _: k != target)
    value = F.to_variant_object(F.map_concat(kept, F.create_map(F.lit(target), mapped)))
    return (frame.where(F.coalesce(F.try_variant_get("value", "$.id", "int"), F.lit(0)) >= 0)
            .withColumn("error", F.when(F.col("value").isNotNull() & text.isNull(),
                                        F.lit(f"the value has no text field {source}")))
            .withColumn("value", F.when(text.isNotNull(), value).otherwise(F.col("value"))))


def dropping_a_column(frame: DataFrame, settings: Mapping[str, str]) -> DataFrame:
    return frame.drop("headers")


def raising(frame: DataFrame, settings: Mapping[str, str]) -> DataFrame:
    raise KeyError("pattern")


register_transform(CLASS, pattern_map)
register_transform("com.example.Raising", raising)
register_transform("com.example.Broken", dropping_a_column)
