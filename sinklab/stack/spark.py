"""SparkSession factory: Iceberg runtime, extensions and the REST catalog, bound to loopback."""

from __future__ import annotations

import importlib.util
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
# Spark 3.5 is built on the Hadoop 3.3.4 client; hadoop-aws brings the matching aws-java-sdk-bundle.
HADOOP_AWS_PACKAGE = "org.apache.hadoop:hadoop-aws:3.3.4"
S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
HADOOP_FILE_IO = "org.apache.iceberg.hadoop.HadoopFileIO"
S3_SCHEMES = ("s3://", "s3a://", "s3n://")


# Settings of the sink's own session (IcebergSink makes one per sink, so the user's session keeps its
# own), measured with bench/ingest.py.
SINK_SESSION_CONF = {
    # A cycle caches its prepared records (JSON text, unique per record): compressing the cached
    # columns finds nothing to compress and cost ~0.9 s per million records to build.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


class IcebergJarNotFound(RuntimeError):
    pass


class S3JarsNotFound(RuntimeError):
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


def hadoop_aws_jars() -> list[Path]:
    """``hadoop-aws`` and ``aws-java-sdk-bundle``, the jars Spark's ``s3a`` filesystem needs.

    The only reachable package that ships them is the sdist ``sagemaker-pyspark==1.4.5``, which
    installs them into ``site-packages/sagemaker_pyspark/jars``. It pins ``pyspark==3.3.0``, so it is
    installed with ``--no-deps`` (``make setup`` does); only its two jars are used, never its code.
    """
    # find_spec on a top-level package locates it without running its __init__ (which imports
    # the SageMaker wrappers).
    spec = importlib.util.find_spec("sagemaker_pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise S3JarsNotFound(
            "S3 storage in Spark needs hadoop-aws and aws-java-sdk-bundle: install them with "
            "`pip install --no-deps sagemaker-pyspark==1.4.5` (make setup does), pass "
            "SparkSettings(s3_jars=[...]) with your own jars, or packages=[...] where Maven is reachable"
        )
    found: list[Path] = []
    for pattern in ("hadoop-aws-*.jar", "aws-java-sdk-bundle-*.jar"):
        jars = sorted(
            jar for location in spec.submodule_search_locations for jar in (Path(location) / "jars").glob(pattern)
        )
        if not jars:
            raise S3JarsNotFound(f"no {pattern} in {list(spec.submodule_search_locations)}/jars; "
                                 "reinstall sagemaker-pyspark==1.4.5 or pass SparkSettings(s3_jars=[...])")
        found.append(jars[-1])
    return found


def is_s3_location(location: str) -> bool:
    return location.startswith(S3_SCHEMES)


class SparkSettings(BaseModel):
    """How to build the session.

    The Iceberg runtime comes from ``jars`` (your own), else ``packages`` (Maven coordinates), else
    the jar inside the installed package. When the warehouse is on S3, ``hadoop-aws`` comes from
    ``s3_jars``, else from ``packages`` (added as a coordinate when ``packages`` is the source),
    else from the installed package; never twice, if your ``jars``/``packages`` already have it.
    """

    master: str = "local[*]"
    app_name: str = "sinklab"
    jars: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)
    s3_jars: list[str] = Field(default_factory=list)
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


def s3a_catalog_conf(properties: Mapping[str, str]) -> dict[str, str]:
    """Catalog properties that let Spark's Iceberg catalog read and write an S3 warehouse.

    Iceberg's own ``S3FileIO`` needs AWS SDK v2, which no reachable package ships, so tables are read
    and written through ``HadoopFileIO`` and Hadoop's ``s3a`` filesystem. ``hadoop.*`` catalog
    properties go into that catalog's Hadoop configuration (Iceberg's SparkCatalog applies them),
    so they travel with the catalog into every session that registers it. ``s3://`` is mapped to
    ``s3a`` so that table locations stay ``s3://``, the scheme every other Iceberg client reads.
    The connection comes from Iceberg's ``s3.*`` client properties.
    """
    conf = {
        "io-impl": HADOOP_FILE_IO,
        "hadoop.fs.s3.impl": S3A_FILESYSTEM,
        "hadoop.fs.s3a.impl": S3A_FILESYSTEM,
    }
    endpoint = properties.get("s3.endpoint")
    if endpoint:
        conf["hadoop.fs.s3a.endpoint"] = endpoint
        conf["hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https:")).lower()
    if properties.get("s3.access-key-id") and properties.get("s3.secret-access-key"):
        conf["hadoop.fs.s3a.access.key"] = properties["s3.access-key-id"]
        conf["hadoop.fs.s3a.secret.key"] = properties["s3.secret-access-key"]
        # Otherwise s3a also walks the environment and the EC2 metadata service, which hangs
        # off AWS.
        conf["hadoop.fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    if "s3.path-style-access" in properties:
        conf["hadoop.fs.s3a.path.style.access"] = properties["s3.path-style-access"]
    region = properties.get("s3.region") or properties.get("client.region")
    if region:
        conf["hadoop.fs.s3a.endpoint.region"] = region
    return conf


def spark_jars(settings: SparkSettings, s3: bool = False) -> dict[str, str]:
    """``spark.jars`` / ``spark.jars.packages`` for the session, by the rules in ``SparkSettings``."""
    jars = list(settings.jars)
    packages = list(settings.packages)
    if not jars and not packages:
        jars.append(str(iceberg_runtime_jar()))
    if s3:
        has_aws = any(Path(j).name.startswith("hadoop-aws") for j in jars) or any(
            ":hadoop-aws:" in p for p in packages)
        if settings.s3_jars:
            jars += [j for j in settings.s3_jars if j not in jars]
        elif not has_aws and packages and not settings.jars:
            packages.append(HADOOP_AWS_PACKAGE)
        elif not has_aws:
            jars += [str(j) for j in hadoop_aws_jars()]
    conf = {}
    if jars:
        conf["spark.jars"] = ",".join(jars)
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
    return conf


def build_spark(settings: SparkSettings, catalogs: Mapping[str, str], s3: bool = False) -> SparkSession:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    running = SparkContext._active_spark_context
    if s3 and running is not None and "hadoop-aws" not in (running.getConf().get("spark.jars") or "") + (
            running.getConf().get("spark.jars.packages") or ""):
        # getOrCreate would hand back that session, whose JVM cannot load s3a.
        raise RuntimeError(
            "a Spark session without hadoop-aws is already running in this process (another Stack's?); "
            "stop it first (stack.stop_spark()) so that the S3 stack's session starts with the s3a jars"
        )

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
    for key, value in spark_jars(settings, s3).items():
        builder = builder.config(key, value)
    for key, value in {**catalogs, **settings.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_spark(spark: SparkSession, timeout: float = 30) -> None:
    """Stop the session and the JVM pyspark launched for it.

    A driver's classpath is fixed when its JVM starts, so a later session with other jars (an S3
    stack after a local one, in one notebook) needs a fresh JVM, not just a fresh SparkContext.
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is None:
        return
    # The gateway JVM exits when its stdin closes (pyspark's own shutdown signal).
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=timeout)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired; the JVM is ours, so escalate
        proc.kill()
        proc.wait(timeout=10)
