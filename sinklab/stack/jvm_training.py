"""The class archive's training run (``jvm_archive``): what a sink cycle makes its driver load.

``python -m sinklab.stack.jvm_training OUT``, with ``-XX:ArchiveClassesAtExit=OUT`` in
``SPARK_SUBMIT_OPTS``: on a stack of its own, Spark's Kafka source reads JSON records
(read_committed), parses them, caches them, Iceberg appends them twice through the REST catalog and
the table is read back; the archive is written as the driver JVM exits.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from sinklab.stack.stack import Stack

RECORDS = 1000


def workload(out: Path) -> None:
    from confluent_kafka import Producer
    from pyspark import SparkContext
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    workdir = tempfile.mkdtemp(prefix="sinklab-jvm-training-")
    try:
        with Stack.embedded(workdir, connect=False) as stack:
            stack.create_topic("train", partitions=2)
            producer = Producer(stack.kafka_config())
            for i in range(RECORDS):
                producer.produce("train", json.dumps({"id": i, "name": f"pizza {i}", "price": i / 10}).encode(),
                                 str(i).encode())
            assert producer.flush(60) == 0, "the training stack's broker did not take its records"
            spark = stack.spark
            spark.sql("CREATE NAMESPACE IF NOT EXISTS training")
            for _ in range(2):
                raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", stack.bootstrap_servers)
                       .option("kafka.isolation.level", "read_committed").option("subscribe", "train")
                       .option("includeHeaders", "true").load())
                rows = raw.select(F.from_json(F.col("value").cast("string"), "id long, name string, price double")
                                  .alias("r"), "partition", "offset").select("r.*", "partition", "offset")
                rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
                rows.groupBy("partition").agg(F.count(F.lit(1)), F.max("offset")).collect()
                if spark.catalog.tableExists("training.pizzas"):
                    rows.writeTo("training.pizzas").append()
                else:
                    rows.writeTo("training.pizzas").using("iceberg").create()
                rows.unpersist()
            assert spark.table("training.pizzas").count() == 2 * RECORDS
            jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
            # The archive is written as the JVM exits (about 20 s): wait for it, do not kill it.
            stack.stop_spark(timeout=300)
            if jvm.returncode != 0 or not out.exists():
                raise SystemExit(f"the driver JVM exited {jvm.returncode} without writing {out}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    # A stopped training run (Training.stop) stops its stack on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workload(Path(sys.argv[1]))
