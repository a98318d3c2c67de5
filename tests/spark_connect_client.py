"""One client of a stack's Spark Connect server, as a notebook would be: ``python spark_connect_client.py
STACK_FILE NAME ZONE BARRIER_DIR COUNT HOW``. Sets session settings of its own, starts its own sink (HOW:
``connector``, through the Kafka Connect REST API; ``remote``, ``open_sink``'s sink on the server), waits
for its table to hold COUNT rows, and prints what it saw as JSON. The connector's client also reads its
table fresh under a steady stream."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import requests
from helpers import KafkaLog, fresh_reads, steady

from sinklab.sink import open_sink
from sinklab.stack import Stack

WAIT_S = 180


def main(stack_file: str, name: str, zone: str, barrier: Path, count: int, how: str) -> None:
    stack = Stack.from_file(stack_file, spark="connect")
    spark = stack.spark
    spark.conf.set("spark.sql.session.timeZone", zone)
    spark.conf.set("sinklab.test.client", name)
    (barrier / name).touch()
    deadline = time.monotonic() + WAIT_S
    while len(list(barrier.iterdir())) < 2:  # the other client has set its own settings too
        assert time.monotonic() < deadline, "the other client never set its settings"
        time.sleep(0.1)
    config = {"connector.class": "org.apache.iceberg.connect.IcebergSinkConnector", "topics": name,
              "iceberg.tables": f"clients.{name}", "iceberg.catalog": "sinklab",
              "iceberg.tables.auto-create-enabled": "true", "iceberg.control.commit.interval-ms": "1000",
              "value.converter.schemas.enable": "false"}
    sink = None
    if how == "connector":
        created = requests.put(f"{stack.info.connect_url}/connectors/{name}/config", timeout=30, json=config)
        assert created.status_code == 201, created.text
    else:
        sink = open_sink(stack, {"name": name, "config": config}).start()
    table = f"sinklab.clients.{name}"
    while not spark.catalog.tableExists(table) or spark.table(table).count() < count:
        assert time.monotonic() < deadline, f"{table} never reached {count} rows"
        time.sleep(0.5)
    ids = [r.order_id for r in spark.table(table).select("order_id").collect()]
    fresh: dict[str, int] = {}
    if how == "connector":
        # Fresh reads from this client (no py4j on their path) while the connector commits each second
        # under a steady stream; fresh_reads asserts each holds every record up to its watermark, once.
        kafka = KafkaLog(stack, name)
        try:
            with steady(stack, name, 200) as streamed:
                reads = fresh_reads(stack, f"clients.{name}", kafka, lambda vs: [v["order_id"] for v in vs if v])
        finally:
            kafka.close()
        fresh = {"fresh_reads": len(reads), "fresh_snapshots": len({r.snapshot_id for r in reads}),
                 "streamed": len(streamed)}
        while spark.table(table).count() < count + len(streamed):  # committed too, before the stack goes down
            assert time.monotonic() < deadline + WAIT_S, f"{table} never took the stream"
            time.sleep(0.5)
    shown = spark.sql("SELECT CAST(TIMESTAMP'2026-01-01 00:00:00 UTC' AS STRING) AS t").first().t
    if sink is not None:
        sink.stop()
    print(json.dumps({"ids": ids, "zone": spark.conf.get("spark.sql.session.timeZone"),
                      "client": spark.conf.get("sinklab.test.client"), "midnight_utc_shown_as": shown,
                      "status": sink.status().state if sink is not None else None,
                      "cycles": sink.status().cycles if sink is not None else None, **fresh}))
    stack.stop_spark()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
