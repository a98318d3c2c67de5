"""Figures a Spark action computes on its way (``DataFrame.observe``), read without a job of their own."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.records.columns import ERROR
from sinklab.sink.records.dead_letters import observed as letters_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class Observed:
    """A DataFrame (``df``) whose ``metrics`` (aggregates) the next action that runs it computes on the
    way, with no job of their own. Filters above it are not pushed below it: it sees every row."""

    def __init__(self, df: DataFrame, *metrics: Column):
        from pyspark.sql import Observation

        self._observation = Observation()
        self.df = df.observe(self._observation, *metrics)

    def result(self, wait_s: float = 0.0) -> dict[str, Any] | None:
        """The metrics; None when no action reported them within ``wait_s``. Spark hands them over
        from its listener bus, a moment after the action returns: a caller that knows an action ran
        waits for them. Never blocks for good, unlike ``Observation.get``, which waits forever for
        an action that did not run."""
        future = self._observation._jo.future()  # type: ignore[union-attr]
        deadline = time.monotonic() + wait_s
        while not future.isCompleted():
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.002)
        outcome = future.value().get()
        # Empty when Spark optimized the observed plan away (a table whose route takes nothing): no
        # figures, whatever the action did.
        if not outcome.isSuccess() or outcome.get().size() == 0:
            return None
        return self._observation.get


class BadRows(Observed):
    """A table's converted rows, with their bad ones (ERROR set) counted by the next action that
    runs them: the table's write. A clean write then needs no job of its own to look for bad rows
    (that job parsed every record a second time, measured ~20% of a cycle), and their letters (an
    aggregate of the bad rows, ``dead_letters.observed``) come along, so that a write with some needs
    none either.

    ``errors``: the columns that say why, when the rows are of several schemas (a fanned-out write's,
    ``convert.to_rows_by_schema``), counted apart by one observation (each observed node is a break in
    Spark's generated code); ``part(k)`` reads the k-th. ``extra``: columns the letters carry besides."""

    def __init__(self, rows: DataFrame, tolerance: str, *extra: str, errors: Sequence[str] = (ERROR,)):
        super().__init__(rows, *[metric for k, error in enumerate(errors) for metric in (
            F.count(F.col(error)).alias(f"bad{k}"),
            letters_of(tolerance, *extra, error=error).alias(f"letters{k}"))])
        self.source, self.errors, self.k = rows, tuple(errors), 0

    def part(self, k: int) -> BadRows:
        view = copy.copy(self)  # the same observation
        view.k = k
        return view

    def result(self, wait_s: float = 0.0) -> dict[str, Any] | None:
        """``bad`` (how many) and ``letters`` of this part's rows; None as ``Observed.result``."""
        seen = super().result(wait_s)
        return None if seen is None else {"bad": seen[f"bad{self.k}"], "letters": seen[f"letters{self.k}"]}

    def bad(self) -> DataFrame:
        error = self.errors[self.k]
        bad = self.source.where(F.col(error).isNotNull())
        return bad if error == ERROR else bad.withColumn(ERROR, F.col(error))
