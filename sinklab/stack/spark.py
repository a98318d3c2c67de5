"""SparkSession factory: Iceberg runtime, extensions and the REST catalog, bound to loopback."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_VERSION = "1.10.2"
SCALA_VERSION = "2.12"  # pyspark 3.5 wheels are built for Scala 2.12
ICEBERG_PACKAGE = f"org.apache.iceberg:iceberg-spark-runtime-3.5_{SCALA_VERSION}:{ICEBERG_VERSION}"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


class IcebergJarNotFound(RuntimeError):
    pass


def iceberg_runtime_jar() -> Path:
    """The runtime jar shipped inside the ``snowpark-connect-deps-iceberg`` wheel.

    Found by pattern inside the installed package, never by a hard-coded path: Maven Central is not
    reachable on the machines sinklab was built on, so ``spark.jars.packages`` cannot download it.
    """
    try:
        jars = Path(str(files("snowpark_connect_deps_iceberg").joinpath("jars")))
    except ModuleNotFoundError as exc:
        raise IcebergJarNotFound(
            "snowpark-connect-deps-iceberg is not installed; install it (pinned 1.0.2), pass "
            "iceberg_jar=PATH, or iceberg_packages=COORDINATES where Maven is reachable"
        ) from exc
    found = sorted(jars.glob(f"iceberg-spark-runtime-3.5_{SCALA_VERSION}-*.jar"))
    if not found:
        raise IcebergJarNotFound(f"no iceberg-spark-runtime-3.5_{SCALA_VERSION} jar in {jars}")
    return found[-1]


class SparkSettings(BaseModel):
    """How to build the session. Exactly one jar source is used: ``jars``, else ``packages``,
    else the jar inside the installed package."""

    master: str = "local[*]"
    app_name: str = "sinklab"
    jars: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)
    ui: bool = False
    driver_memory: str = "2g"
    shuffle_partitions: int = 4
    conf: dict[str, str] = Field(default_factory=dict)


def catalog_conf(name: str, uri: str, warehouse: str, token: str | None = None,
                 extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark properties registering an Iceberg REST catalog under ``name``."""
    prefix = f"spark.sql.catalog.{name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": uri,
        f"{prefix}.warehouse": warehouse,
        # Measured: with the cache on, a second session keeps reading a stale table.
        f"{prefix}.cache-enabled": "false",
    }
    if token:
        conf[f"{prefix}.token"] = token
    for key, value in (extra or {}).items():
        conf[f"{prefix}.{key}"] = value
    return conf


def build_spark(settings: SparkSettings, catalogs: Mapping[str, str]) -> SparkSession:
    from pyspark.sql import SparkSession

    # Without it Spark binds to whichever interface resolves the hostname.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Executors must run the interpreter that has sinklab and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    builder = (
        SparkSession.builder.master(settings.master)
        .appName(settings.app_name)
        .config("spark.sql.extensions", EXTENSIONS)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", str(settings.ui).lower())
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if settings.jars:
        builder = builder.config("spark.jars", ",".join(settings.jars))
    elif settings.packages:
        builder = builder.config("spark.jars.packages", ",".join(settings.packages))
    else:
        builder = builder.config("spark.jars", str(iceberg_runtime_jar()))
    for key, value in {**catalogs, **settings.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
