"""`sinklab demo`: the seed's pizza story on the embedded stack."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from sinklab.generators import PizzaGenerator
from sinklab.maintenance import schedule
from sinklab.sink import IcebergSink, load_config
from sinklab.stack import SparkSettings, Stack

TOPIC = "completed-pizzas"
SEED_CONFIG = Path(__file__).parent / "configs" / "pizzas-on-ice.json"


def run_demo(workdir: Path | None = None, count: int = 20000, interval_ms: int = 3000, batches: int = 3) -> None:
    """Pizzas arrive in batches; the sink commits once per interval; then the seed's two queries."""
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # Spark's driver starts beside the servers, and compiles with C1 alone: it lives three cycles
    # (bench/README.md, "A short-lived driver on C1").
    with Stack.embedded(workdir, spark=SparkSettings(compiler="c1"), warm=True) as stack:
        print(f"stack: broker {stack.bootstrap_servers}, catalog {stack.info.catalog_uri}")
        stack.create_topic(TOPIC, partitions=6)
        seed = load_config(SEED_CONFIG)
        config = seed.model_copy(update={"commit_interval_ms": interval_ms})
        print(f"sink {config.name}: the seed's pizzas-on-ice.json, commit interval {seed.commit_interval_ms} ms "
              f"shortened to {interval_ms} ms")
        sink = IcebergSink(stack, config, between_cycles=schedule(config))
        per_batch = max(1, count // batches)
        try:
            for batch in range(batches):
                produced = PizzaGenerator(seed=batch).produce(stack, TOPIC, count=per_batch).wait().delivered
                began = time.monotonic()
                result = sink.run_once()
                took = time.monotonic() - began
                # The first runs in a fresh driver, started with the stack: what a fresh kernel's first
                # cycle costs.
                print(f"cycle {batch + 1}: produced {produced}, committed "
                      f"{result.records if result else 0} records in {took:.1f}s"
                      + (" (the first, in a fresh Spark driver)" if batch == 0 else ""))
                time.sleep(max(0.0, interval_ms / 1000 - took))
        finally:
            sink.stop()
        spark = stack.spark
        df = spark.table("demo.rpc.pizzas")
        print(f"demo.rpc.pizzas holds {df.count()} pizzas; the top stores:")
        df.groupBy("store_id").count().sort("count", ascending=False).show(5)
        print("its history (one snapshot per cycle):")
        spark.table("demo.rpc.pizzas.history").show(truncate=False)
