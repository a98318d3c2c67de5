"""Row-level changes: each record's operation (I, U, D) and each row's newest change in a cycle."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from sinklab.sink.records.columns import (
    ERROR,
    OP,
)
from sinklab.sink.records.kinds import (
    MISSING_REQUIRED,
    TYPE_MISMATCH,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def with_operation(rows: DataFrame, ids: list[str], cdc_field: str | None) -> DataFrame:
    """Normalise each row's change to I, U or D (upsert mode without a CDC field: U), and make a
    change without its id, or with an operation sinklab cannot read, a bad record."""
    if cdc_field:
        first = F.upper(F.substring(F.trim(F.col(OP)), 1, 1))
        op = F.when(first.isin("I", "C", "R"), F.lit("I")).when(first == "U", F.lit("U")).when(first == "D", F.lit("D"))
        op_error = F.when(op.isNull(), F.concat(F.lit(f"{TYPE_MISMATCH}: {cdc_field}: "),
                                                F.coalesce(F.col(OP), F.lit("null")), F.lit(" is not I, U or D")))
    else:
        op, op_error = F.when(F.col(OP) == "D", F.lit("D")).otherwise(F.lit("U")), F.lit(None).cast("string")
    id_errors = [F.when(F.col(c).isNull(), F.lit(f"{MISSING_REQUIRED}: {c}: the row id is missing")) for c in ids]
    joined = F.concat_ws("; ", F.col(ERROR), op_error, *id_errors)
    return rows.withColumn(OP, op).withColumn(ERROR, F.when(joined != "", joined))


def newest_changes(rows: DataFrame, ids: list[str]) -> DataFrame:
    """Each id's last change of ``rows``, in (partition, offset) order: what a commit applies of them."""
    from pyspark.sql import Window

    newest = Window.partitionBy(*ids).orderBy(F.col("partition").desc(), F.col("offset").desc())
    return rows.withColumn("_sinklab_rank", F.row_number().over(newest)).where("_sinklab_rank = 1").drop(
        "_sinklab_rank")
