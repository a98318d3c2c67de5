"""The Spark side of a ``Stack``: its session (this process's driver, started on first use, or a Spark
Connect client of the stack's server), the stack's catalog in it, warming and stopping it.

A base of ``Stack``, whose ``__init__`` sets the state declared here: a job of its own (a session, its
lock, its catalogs, the class archive's training) that keeps its attributes on the stack, where callers
and tests find them (``stack.spark``, ``stack._spark``).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sinklab.exceptions import ProcessError
from sinklab.security import resolve, resolve_all
from sinklab.stack import jvm_archive
from sinklab.stack.spark import (
    S3_FILE_IO,
    SparkSettings,
    build_spark,
    catalog_conf,
    connect_session,
    is_s3_location,
    stop_spark,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sinklab.stack.info import StackInfo

# The logger these lines went to while they were in stack.py: filters and log configs keep working.
log = logging.getLogger("sinklab.stack.stack")


class StackSpark:
    """A stack's Spark session and what goes with it (``Stack`` is one)."""

    # Set by Stack.__init__ (the comments on them are there).
    info: StackInfo
    spark_settings: SparkSettings
    spark_client: bool
    _spark: SparkSession | None
    _spark_catalogs: set[str]
    _spark_lock: threading.RLock
    _training: jvm_archive.Training | None

    @property
    def spark_log(self) -> Path:
        """The log of the Spark driver's JVM: ``WORKDIR/logs/spark.log``, or in the temporary directory
        for a stack without a workdir."""
        if self.info.workdir:  # Stack.workdir's test
            return Path(self.info.workdir) / "logs" / "spark.log"
        return Path(tempfile.gettempdir()) / "sinklab" / f"spark-{os.getpid()}.log"

    @property
    def spark(self) -> SparkSession:
        """This process's Spark session (its driver starts on first use), or a Spark Connect client session
        of the stack's server when this object was made with ``spark="connect"``."""
        with self._spark_lock:
            if self.spark_client:
                if self._spark is None:
                    self._spark = connect_session(str(self.info.spark_connect_url))
                return self._spark
            if self._spark is None or self._spark.sparkContext._jsc is None:  # none yet, or stopped elsewhere
                conf = self.spark_catalog_conf(self.info.catalog_name)
                conf["spark.sql.defaultCatalog"] = self.info.catalog_name
                self._spark = build_spark(self.spark_settings, conf, s3=self.uses_s3, log_file=self.spark_log)
                self._spark_catalogs = {self.info.catalog_name}
                if self._training is None:
                    # Without a class archive this driver started cold; the next ones will not.
                    self._training = jvm_archive.train_in_background()
            return self._spark

    def register_spark_catalog(self, name: str) -> None:
        """Expose the stack's catalog in Spark under another name too (a config's ``iceberg.catalog``)."""
        with self._spark_lock:
            spark = self.spark
            if name in self._spark_catalogs:
                return
            for key, value in self.spark_catalog_conf(name).items():
                spark.conf.set(key, value)
            self._spark_catalogs.add(name)

    @property
    def uses_s3(self) -> bool:
        """Whether the warehouse is on S3, so Spark needs Iceberg's S3FileIO (iceberg-aws-bundle)."""
        return is_s3_location(self.info.warehouse) or "s3.endpoint" in self.info.catalog_properties

    def spark_catalog_conf(self, name: str) -> dict[str, str]:
        extra = resolve_all(self.info.catalog_properties)  # Spark hides them (spark.REDACTION)
        if self.uses_s3:
            # The stack's own properties win: a cluster's own io-impl stays.
            extra = {"io-impl": S3_FILE_IO, **extra}
        token = resolve(self.info.catalog_token, "catalog_token") if self.info.catalog_token else None
        return catalog_conf(name, self.info.catalog_uri, self.info.warehouse, token, extra)

    def stop_spark(self, timeout: float = 30) -> None:
        """Stop this stack's Spark session and its JVM; ``stack.spark`` starts a new one on next use.

        One process holds one Spark driver: stop one stack's Spark before another stack (with other
        jars, such as an S3 stack) starts its own.
        """
        with self._spark_lock:  # a driver still starting (warm_spark) is stopped once it has started
            if self._spark is None:
                return
            spark, self._spark = self._spark, None
            self._spark_catalogs = set()
            if self.spark_client:
                spark.stop()  # the client's session on the server; the server's driver runs on
                return
            stop_spark(spark, timeout)

    def warm_spark(self) -> None:
        """Start this process's Spark driver now, in the background, and run a small job and a catalog
        query in it: a fresh driver takes 4 s to start and a first cycle 8 s more, 5 s once such a job
        has run (2 cores, bench/README.md), and that time passes while the stack starts and the cells
        before the first cycle (or the demo's producer) run. A driver that fails to start here is
        started again, and fails with its error, at first use of ``spark``."""
        if self.spark_client or self._spark is not None:
            return

        def start() -> None:
            try:
                spark = self.spark
                spark.range(10).selectExpr("id % 2 AS k").groupBy("k").count().collect()
                spark.sql(f"SHOW NAMESPACES IN {self.info.catalog_name}").collect()
            except Exception as exc:  # noqa: BLE001 - a driver that did not start fails again at first use
                log.info("warming Spark's driver in the background stopped (%s): a driver that did not start is "
                         "started at first use of stack.spark", exc)

        threading.Thread(target=start, name="sinklab-warm-spark", daemon=True).start()

    def driver(self, what: str) -> SparkSession:
        """``spark``, for a part of sinklab that drives Iceberg's Java API through py4j (``what``: a sink,
        a maintenance run): a Spark Connect client has no JVM in its process to do that with."""
        if self.spark_client:
            raise ProcessError(
                f"{what} needs a Spark driver in this process (it calls Iceberg's Java API through py4j), and this "
                f"stack's spark is a Spark Connect client of {self.info.spark_connect_url}: run it on the stack's "
                f"Connect server ({self.info.connect_url}), as sinklab.sink.open_sink(stack, config) does for a "
                "sink, or from a Stack made without spark='connect'")
        return self.spark
