"""Figures a Spark action computes on its way (``DataFrame.observe``), read without a job of their own."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from sinklab.sink.records.columns import (
    ERROR,
)

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
    (that job parsed every record a second time, measured ~20% of a cycle), and ``letters`` (an
    aggregate of the bad rows, ``dead_letters.observed``) brings them along, so that a write with some needs
    none either."""

    def __init__(self, rows: DataFrame, letters: Column):
        super().__init__(rows, F.count(F.col(ERROR)).alias("bad"), letters)
        self.source = rows

    def bad(self) -> DataFrame:
        return self.source.where(F.col(ERROR).isNotNull())
