"""Schema evolution: what the records of a cycle need the table to become, and making it so.

Changes are only ever compatible ones (Iceberg's promotions): add an optional column (nested ones
too), widen int→long, float→double and decimal precision, make a required column optional when a
null arrives. Anything else is left to the conversion, which names the record and the column.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.sink.tables.create import all_optional, ddl, infer_schema, widen, with_variants
from sinklab.sink.tables.state import quote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("sinklab.sink")


@dataclass(frozen=True)
class Change:
    action: str  # add, widen, optional
    path: tuple[str, ...]
    dtype: T.DataType | None = None

    def describe(self) -> str:
        name = ".".join(self.path)
        if self.action == "optional":
            return f"{name} becomes optional"
        assert self.dtype is not None
        return f"{self.action} {name} {self.dtype.simpleString()}"


def plan_changes(table: T.StructType, incoming: T.StructType, nulls: set[str], case_insensitive: bool = False,
                 force_optional: bool = False, prefix: tuple[str, ...] = ()) -> list[Change]:
    """The changes that make ``table`` hold records of ``incoming``; ``nulls`` names the required
    top-level columns that records left null."""
    changes: list[Change] = []

    def norm(name: str) -> str:
        return name.lower() if case_insensitive else name

    existing = {norm(f.name): f for f in table.fields}
    for f in incoming.fields:
        current = existing.get(norm(f.name))
        if current is None:
            # Iceberg adds only optional columns: records written before have no value for them.
            changes.append(Change("add", (*prefix, f.name), all_optional(T.StructType([f]))[0].dataType))
            continue
        path = (*prefix, current.name)
        if isinstance(current.dataType, T.StructType) and isinstance(f.dataType, T.StructType):
            changes.extend(plan_changes(current.dataType, f.dataType, set(), case_insensitive, force_optional, path))
        elif current.dataType != f.dataType:
            wider = widen(current.dataType, f.dataType)
            if wider is not None and wider != current.dataType:
                changes.append(Change("widen", path, wider))
        if not current.nullable and (current.name in nulls and not prefix or f.nullable and force_optional):
            changes.append(Change("optional", path))
    return changes


def null_required(records: DataFrame, table: T.StructType) -> set[str]:
    """Required top-level columns that some record leaves null or out. Not tombstones: a delete
    names only the row's ids, and must not make the row's other columns optional."""
    required = [f.name for f in table.fields if not f.nullable]
    if not required:
        return set()
    nulls = [F.max(F.get_json_object("_payload", f"$.{name}").isNull().cast("int")).alias(name) for name in required]
    counts = records.where(F.col("value").isNotNull()).select(*nulls).first()
    return {name for name in required if counts is not None and counts[name]}


WIDENABLE = (T.IntegerType, T.ShortType, T.ByteType, T.FloatType, T.DecimalType, T.StructType)


def _only_new_fields_matter(table: T.StructType) -> bool:
    return all(f.nullable and not isinstance(f.dataType, WIDENABLE) for f in table.fields)


def new_field(table: T.StructType, case_insensitive: bool) -> Column | None:
    """Per record: whether it has a top-level field the table lacks (a key scan, much cheaper than
    inference); None when the table has columns a record could also widen or relax, which only
    inference tells."""
    if not _only_new_fields_matter(table):
        return None
    known = [f.name.lower() if case_insensitive else f.name for f in table.fields]
    keys = F.json_object_keys("_payload")
    return F.exists(keys, lambda k: ~(F.lower(k) if case_insensitive else k).isin(known))


def evolve(spark: SparkSession, catalog_name: str, table_name: str, table: T.StructType, records: DataFrame,
           schemas_enable: bool, case_insensitive: bool, force_optional: bool,
           variant_columns: list[str] | None = None) -> list[Change]:
    """Apply the changes the records need; returns them (empty when the table already fits).
    ``variant_columns`` are added as VARIANT, whatever shape their first values have."""
    flag = None if schemas_enable else new_field(table, case_insensitive)
    if flag is not None and not records.where(F.col("value").isNotNull() & flag).limit(1).count():
        return []  # the common cycle: known fields only, and no column that could widen or relax
    incoming = with_variants(infer_schema(spark, records, schemas_enable), variant_columns or [])
    changes = plan_changes(table, incoming, null_required(records, table), case_insensitive, force_optional)
    target = f"{catalog_name}.{quote(table_name)}"
    for change in changes:
        column = ".".join(f"`{p}`" for p in change.path)
        if change.action == "add":
            assert change.dtype is not None
            spark.sql(f"ALTER TABLE {target} ADD COLUMN {column} {ddl(spark, change.dtype)}")
        elif change.action == "widen":
            assert change.dtype is not None
            spark.sql(f"ALTER TABLE {target} ALTER COLUMN {column} TYPE {ddl(spark, change.dtype)}")
        else:
            spark.sql(f"ALTER TABLE {target} ALTER COLUMN {column} DROP NOT NULL")
    if changes:
        log.info("table %s evolved: %s", table_name, "; ".join(c.describe() for c in changes))
    return changes
