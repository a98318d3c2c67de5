"""How the suite's Spark driver JVMs start: faster, with the same behaviour.

Every Spark driver the suite starts (its own session, sinks run as processes, notebook kernels,
JupyterLab's kernel) reads ``SPARK_SUBMIT_OPTS``, the JVM options pyspark's launcher adds to a
client-mode driver, so nothing in sinklab knows about this. Two options, measured on a fresh JVM's
first sink cycle (2 cores, Stack.embedded, 1,000 pizzas):

- ``-XX:TieredStopAtLevel=1``, C1 only: the suite's JVMs are short-lived and carry little data, and
  on 2 cores C2's compiler threads compete with the work. 43.7 s of CPU against 29.4 s; the first
  cycle 19.3 s against 16.3 s. Not sinklab's default: C2 drains a backlog 1.8x faster
  (``bench/ingest.py --quick``: 50k records/s against 28k).
- a class-data-sharing archive of the classes a sink cycle loads (Spark, Iceberg, Kafka), dumped
  once per checkout by a training run (about 45 s) into ``.sinklab/test-jvm/``: the first cycle
  9.7 s against 16.3 s. The JVM checks the archive against its classpath and ignores one that does
  not match; the options keep that silent.

``python tests/spark_jvm.py OUT WORKDIR`` is the training run: it writes the archive to ``OUT``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers import stop_leftovers

from sinklab.stack.process import pid_alive

# C1 alone reserves 48 MB of code cache, tiered 240 MB: the session's long-lived driver filled 48 MB
# ("CodeCache is full. Compiler has been disabled.") and went on interpreting, slowly.
C1 = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_path() -> Path:
    """One archive per Java build and set of driver jars (a stale one is ignored by the JVM anyway)."""
    from pyspark import __file__ as pyspark_init

    from sinklab.stack import jars
    from sinklab.stack.spark import SparkSettings, spark_jars

    version = subprocess.run([jars.java(), "-version"], capture_output=True, text=True, check=True).stderr
    driver = sorted((Path(pyspark_init).parent / "jars").glob("*.jar"))
    extra = [Path(p) for p in spark_jars(SparkSettings())["spark.jars"].split(",")]
    key = hashlib.sha256("\n".join([version, *(f"{p}:{p.stat().st_size}" for p in driver + extra)]).encode())
    # In the checkout, not in a shared cache: the JVM ties an archive to its classpath's paths, which
    # are this checkout's venv.
    return Path(__file__).resolve().parent.parent / ".sinklab" / "test-jvm" / f"spark-{key.hexdigest()[:16]}.jsa"


def configure() -> None:
    """Set ``SPARK_SUBMIT_OPTS`` for this process and every process it starts, training the
    archive first if this checkout has none. A user's own ``SPARK_SUBMIT_OPTS`` is left alone."""
    if "SPARK_SUBMIT_OPTS" in os.environ:
        return
    os.environ["SPARK_SUBMIT_OPTS"] = C1
    try:
        archive = archive_path()
    except Exception as exc:  # noqa: BLE001 - no Java or jars yet: the tests that need them say so
        print(f"\nsinklab tests: no class archive ({exc})", file=sys.stderr)
        return
    if not archive.exists():
        _train(archive)
    if archive.exists():
        os.environ["SPARK_SUBMIT_OPTS"] = f"{C1} -XX:SharedArchiveFile={archive} {QUIET}"


def _train(archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    # Written under a name of its own and moved in place only once the JVM exited cleanly: a
    # truncated archive crashes every JVM that maps it (SIGBUS).
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    for stale in archive.parent.glob("*.partial"):  # a training run that was itself killed
        if not pid_alive(int(stale.name.split(".")[-2])):
            stale.unlink(missing_ok=True)
    print(f"\nsinklab tests: training the Spark driver's class archive once for this checkout -> {archive}",
          file=sys.stderr)
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{C1} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
    workdir = tempfile.mkdtemp(prefix="sinklab-train-")
    try:
        done = subprocess.run([sys.executable, __file__, str(partial), workdir], env=env, capture_output=True,
                              text=True, timeout=600)
        failure = None if done.returncode == 0 and partial.exists() else \
            f"training exited {done.returncode}\n{done.stderr[-2000:]}"
    except subprocess.TimeoutExpired:
        failure = "training took over 600 s"
    finally:
        stop_leftovers(workdir, grace=5)  # a killed training run's broker and catalog
        shutil.rmtree(workdir, ignore_errors=True)
    if failure is None:
        for old in archive.parent.glob("spark-*.jsa"):
            old.unlink()
        partial.replace(archive)
    else:
        partial.unlink(missing_ok=True)
        print(f"sinklab tests: no class archive ({failure}); Spark starts without one", file=sys.stderr)


def _workload(out: Path, workdir: str) -> None:
    """What most tests do: a sink auto-creates a table, commits twice, and the table is read."""
    from pyspark import SparkContext

    from sinklab.generators import PizzaGenerator
    from sinklab.sink import IcebergSink
    from sinklab.stack import Stack

    with Stack.embedded(workdir, connect=False) as stack:
        stack.create_topic("pizzas", partitions=2)
        sink = IcebergSink(stack, {"name": "train", "config": {
            "topics": "pizzas", "iceberg.tables": "rpc.pizzas", "iceberg.tables.auto-create-enabled": "true",
            "iceberg.tables.evolve-schema-enabled": "true", "value.converter.schemas.enable": "false"}})
        for seed in (1, 2):
            PizzaGenerator(seed=seed).produce(stack, "pizzas", count=500, partitions=2).wait()
            sink.run_once()
        sink.stop()
        assert stack.spark.table("sinklab.rpc.pizzas").count() == 1000
        jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
        # The archive is written as the JVM exits (about 20 s here): wait for it, do not kill it.
        stack.stop_spark(timeout=300)
        if jvm.returncode != 0 or not out.exists():
            raise SystemExit(f"the driver JVM exited {jvm.returncode} without writing {out}")


if __name__ == "__main__":
    _workload(Path(sys.argv[1]), sys.argv[2])
