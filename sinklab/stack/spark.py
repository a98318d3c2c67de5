"""SparkSession factory: Iceberg runtime, extensions and the REST catalog, bound to loopback."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from sinklab.stack import jars, jvm_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
S3_SCHEMES = ("s3://", "s3a://", "s3n://")
# pyspark's own jars hold the Spark Connect server (spark-connect_2.13): a plugin starts it with the driver.
SPARK_CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"

# The JIT for a driver that lives a few cycles: C1 alone compiles sooner, and on 2 cores C2's compiler
# threads compete with the first cycles' work (bench/README.md, "A short-lived driver on C1"); C2's code
# drains a backlog 1.8x faster, so it stays the default. C1 alone reserves 48 MB of code cache, tiered
# 240 MB: a long-lived driver filled 48 MB ("CodeCache is full. Compiler has been disabled.") and went on
# interpreting, slowly.
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

# The collector for a driver whose JVM runs Spark's tasks (local mode): the parallel collector's
# throughput, not G1's short pauses; a sink's warm drains took 8-22% less time with it (bench/README.md,
# "The parallel collector"). A cluster's executors keep their own options. Without its GC overhead limit
# a heap too small for a cycle fails as under G1, in the thread that allocates (a task, whose
# OutOfMemoryError Spark's handler turns into exit 52, sinklab's CycleTooLarge), not in whichever thread
# asks for memory while the collector thrashes.
PARALLEL_GC = "-XX:+UseParallelGC -XX:-UseGCOverheadLimit"
# The JVM refuses to start with two collectors: one chosen in a JVM options variable wins.
_CHOSEN_GC = re.compile(r"-XX:\+Use\w+GC\b")
_JVM_OPTION_VARIABLES = ("SPARK_SUBMIT_OPTS", "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")

# Spark reads `format("kafka")` batches through its V1 source, which turns every record into an external
# Row and back, unless the source is off this list (Spark 4.1's default, without `kafka`): then through
# the V2 reader, the same records. A one-record read 0.20 s against 0.26 s, 500k records 0.56 s against
# 0.69 s (bench/README.md, "Kafka's V2 reader"). Every session of a driver sinklab builds has it.
KAFKA_V2_READS = {"spark.sql.sources.useV1SourceList": "avro,csv,json,orc,parquet,text"}
# Spark hides a setting's or a source option's value in its UI, event logs and plans when the key or the
# value matches: its default (secret, password, token, access.key) and a Kafka source's JAAS config and
# inline private key (``kafka.sasl.jaas.config``, ``kafka.ssl.keystore.key``), a REST catalog's credential.
REDACTION = {"spark.redaction.regex": r"(?i)secret|password|token|access[.]key|jaas|keystore[.]key|credential"}

# Settings of the sink's own session (IcebergSink makes one per sink, so the user's session keeps its
# own), measured with bench/ingest.py.
SINK_SESSION_CONF = {
    # A cycle caches its prepared records (JSON text, unique per record): compressing the cached
    # columns finds nothing to compress and cost ~0.9 s per million records to build.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Also on a driver sinklab did not build (a Spark Connect server's).
    **KAFKA_V2_READS,
}


def is_s3_location(location: str) -> bool:
    return location.startswith(S3_SCHEMES)


class SparkSettings(BaseModel):
    """How to build the session.

    The Iceberg runtime comes from ``jars`` (your own), else ``packages`` (Maven coordinates Spark
    resolves itself), else sinklab's pinned coordinates (``sinklab.stack.jars``: resolved once,
    then from the cache offline). When the warehouse is on S3, Iceberg's ``S3FileIO`` bundle comes
    from ``s3_jars``, else from ``packages`` (added as a coordinate when ``packages`` is the
    source), else from sinklab's pinned coordinate; never twice.
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
    # "c1": the driver's JVM compiles with C1 alone, for a driver that lives a few cycles (``sinklab demo``).
    compiler: Literal["tiered", "c1"] = "tiered"


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
        # Each commit otherwise POSTs its metrics to the catalog and waits for it: ~10 ms of a
        # one-record cycle's append (measured), for a report no catalog sinklab starts keeps.
        f"{prefix}.rest-metrics-reporting-enabled": "false",
    }
    if token:
        conf[f"{prefix}.token"] = token
    for key, value in (extra or {}).items():
        conf[f"{prefix}.{key}"] = value
    return conf


def spark_jars(settings: SparkSettings, s3: bool = False) -> dict[str, str]:
    """``spark.jars`` / ``spark.jars.packages`` for the session, by the rules in ``SparkSettings``.

    Spark's Kafka source, which the sink reads with, and Spark's Avro functions join by the same rule
    as the S3 bundle: from ``packages`` when those are the source, else sinklab's pinned jars; never twice."""
    paths = list(settings.jars)
    packages = list(settings.packages)
    if not paths and not packages:
        paths = [str(j) for j in jars.jars(jars.SPARK_ICEBERG)]
    _add_part(paths, packages, jars.SPARK_KAFKA, "spark-sql-kafka-0-10", [], bool(settings.jars))
    _add_part(paths, packages, jars.SPARK_AVRO, "spark-avro", [], bool(settings.jars))
    if s3:
        _add_part(paths, packages, jars.SPARK_S3, "iceberg-aws-bundle", settings.s3_jars, bool(settings.jars))
    conf = {}
    if paths:
        conf["spark.jars"] = ",".join(paths)
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
    return conf


def _add_part(paths: list[str], packages: list[str], part: jars.Part, artifact: str, own: list[str],
              own_jars: bool) -> None:
    if any(Path(j).name.startswith(artifact) for j in paths) or any(f":{artifact}" in p for p in packages):
        return
    if own:
        paths += [j for j in own if j not in paths]
    elif packages and not own_jars:
        # The first coordinate brings the rest: Spark resolves packages with their dependencies.
        packages.append(part.coordinates[0])
    else:
        paths += [str(j) for j in jars.jars(part)]


def spark_connect_conf(port: int) -> dict[str, str]:
    """Spark properties that make a driver serve Spark Connect on loopback ``port`` as it starts: each
    client gets a session of its own there (its SQL settings are its own), on the driver's one JVM."""
    return {
        "spark.plugins": SPARK_CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    }


def spark_connect_url(port: int) -> str:
    return f"sc://127.0.0.1:{port}"


def connect_session(url: str) -> SparkSession:
    """A new Spark Connect client session of the server at ``url`` (``sc://host:port``): no JVM here.

    Spark Connect's own builder, not ``SparkSession.builder.remote``: that one refuses a client in a
    process that also runs a driver (a kernel with a sink of its own), which the client never touches."""
    from pyspark import SparkContext
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    if SparkContext._active_spark_context is None:
        # pyspark.sql.functions builds Spark Connect's expressions only in a process it knows for a client
        # (this variable, which the generic builder sets); with a driver here, they stay the driver's.
        os.environ.setdefault("SPARK_CONNECT_MODE_ENABLED", "1")
    return RemoteSparkSession.builder.remote(url).create()


def log_conf(log_file: Path) -> dict[str, str]:
    """Spark properties that send the driver JVM's log4j2 output (Spark's, Hadoop's NativeCodeLoader
    warning, Iceberg's) to ``log_file`` instead of the console: a notebook's kernel shares its stderr
    with the JVM, so every console line would land in a cell's output. Set before the JVM starts."""
    from sinklab.stack.broker import LOG4J2_CONSOLE

    log_file.parent.mkdir(parents=True, exist_ok=True)
    config = log_file.with_suffix(".log4j2.properties")
    config.write_text(LOG4J2_CONSOLE.replace(
        "appender.out.type = Console", f"appender.out.type = File\nappender.out.fileName = {log_file}"))
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={config}"}


@contextlib.contextmanager
def _stderr_to(log_file: Path | None) -> Iterator[None]:
    """The JVM that starts in the block writes its stderr to ``log_file``, not to this process's: the
    launcher's own lines (``WARNING: Using incubator modules: jdk.incubator.vector``) come before log4j
    and would be a notebook's first output. The child inherits file descriptor 2 as it is at its start;
    this process's own is put back when the block ends."""
    if log_file is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_file, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def driver_options(settings: SparkSettings) -> list[str]:
    """The driver JVM's options sinklab adds beside its log file: the class archive, the collector (unless
    the environment chooses one), the compiler."""
    gc_chosen = any(_CHOSEN_GC.search(os.environ.get(v, "")) for v in _JVM_OPTION_VARIABLES)
    return [o for o in (jvm_archive.java_options(), "" if gc_chosen else PARALLEL_GC,
                        C1_ONLY if settings.compiler == "c1" else "") if o]


def build_spark(settings: SparkSettings, catalogs: Mapping[str, str], s3: bool = False,
                log_file: Path | None = None) -> SparkSession:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # A driver's process builds classic expressions and sessions, also when it inherited the variable from
    # a Spark Connect client's process (a kernel on a shared stack starting `sinklab sink run`): see
    # connect_session.
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    running = SparkContext._active_spark_context
    if s3 and running is not None and "iceberg-aws-bundle" not in (running.getConf().get("spark.jars") or "") + (
            running.getConf().get("spark.jars.packages") or ""):
        # getOrCreate would hand back that session, whose JVM cannot load S3FileIO.
        raise RuntimeError(
            "a Spark session without iceberg-aws-bundle is already running in this process (another Stack's?); "
            "stop it first (stack.stop_spark()) so that the S3 stack's session starts with S3FileIO"
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
    # A user's own driver options replace sinklab's (the log file, the class archive, the collector, the compiler).
    own = "spark.driver.extraJavaOptions" in settings.conf
    logged = log_file is not None and not own
    logs = log_conf(log_file) if log_file is not None and logged else {}
    options = "" if own else " ".join(
        o for o in (logs.get("spark.driver.extraJavaOptions", ""), *driver_options(settings)) if o)
    if options:
        logs["spark.driver.extraJavaOptions"] = options
    for key, value in {**logs, **KAFKA_V2_READS, **REDACTION, **catalogs, **settings.conf}.items():
        builder = builder.config(key, value)
    with _stderr_to(log_file if logged else None):
        spark = builder.getOrCreate()
    fast_py4j_bytes()
    no_local_checksums(spark._jvm, spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    if not logged:
        # Spark's own console configuration: keep its chatter off a notebook's outputs.
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _b64_bytes(encoded: str) -> bytes:
    return base64.standard_b64decode(encoded)


def fast_py4j_bytes() -> None:
    """py4j hands a JVM ``byte[]`` to Python (an observed row, pickled) decoding it one byte at a time in a
    Python loop: 19 ms for the 270 KB of a cycle's 460 dead letters. The same ``bytes``, decoded in C
    (bench/README.md, "Dead letters"). Installed once, for the whole process, where its session is made."""
    from py4j import protocol

    if protocol.decode_bytearray is not _b64_bytes:
        protocol.decode_bytearray = _b64_bytes


def no_local_checksums(jvm: Any, hadoop_conf: Any) -> None:
    """Hadoop's file:// in this JVM writes no ``.crc`` beside each file. With no native libhadoop (PySpark
    ships none) it forks ``chmod`` for every file it creates, its ``.crc`` too: six forks a one-record
    cycle (the data file, the manifest, the manifest list). It is the JVM's cached file system, the one
    Iceberg's HadoopFileIO and Spark's tasks in local mode get; executors of a cluster keep theirs.
    Files that have a ``.crc`` are still checked when read. Measured: bench/README.md, "Local files
    without checksums". (Hadoop's RawLocalFileSystem, which has no checksums at all, cannot be the
    ``fs.file.impl``: Iceberg's Spark scans ask its scheme, which it does not implement.)"""
    jvm.org.apache.hadoop.fs.FileSystem.getLocal(hadoop_conf).setWriteChecksum(False)


# The exit status Spark's uncaught-exception handler gives a JVM that ran out of memory (SparkExitCode.OOM).
OUT_OF_MEMORY_EXIT = 52


def driver_exit_status(wait_s: float = 60.0) -> int | None:
    """The exit status of the driver JVM pyspark launched for this process, once it has exited (waiting
    up to ``wait_s`` for it), or None while it runs or when there is none. Asked once its gateway is gone:
    a JVM out of memory runs Spark's shutdown hooks first, which took over 5 s on two busy cores (a
    fresh-clone suite run named no setting then), and Hadoop gives each hook 30 s before it moves on."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        return int(proc.wait(timeout=wait_s))
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: it runs on
        return None


def stop_spark(spark: SparkSession, timeout: float = 30) -> None:
    """Stop the session and the JVM pyspark launched for it.

    A driver's classpath is fixed when its JVM starts, so a later session with other jars (an S3
    stack after a local one, in one notebook) needs a fresh JVM, not just a fresh SparkContext.
    """
    from py4j.protocol import Py4JError
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if spark.sparkContext._jsc is None:
        # Stopped already, and its JVM with it: a process has one Spark driver, which another Stack of
        # the process (one whose ``spark`` got this same session) may have stopped first.
        return
    gateway = SparkContext._gateway
    try:
        spark.stop()
    except (Py4JError, OSError):
        # The JVM is gone or going (out of memory, killed): nothing to stop there; pyspark's own stop
        # gave up half way, so forget the session here, and a new one can start.
        spark.sparkContext._jsc = None
        SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Py4JError, OSError):
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
