"""A soak run: the sink for tens of minutes under load while faults come and go.

    .venv/bin/python bench/soak.py [--minutes 20] [--rate 5000] [--window-s 120]

On a stack of three Kafka brokers and an S3 warehouse, with the REST catalog and the S3 server behind
the suite's fault injector (``sinklab.stack.faults``), a steady stream of pizza events (``--rate`` per
second, idempotent, acks=all) fans out through one sink process into three tables (static routing on
the sauce) with maintenance scheduled (compaction every 10 commits, snapshots expired after 5 minutes).
The first window runs without a fault; each later one begins with a fault of the matrix
(tests/test_faults.py), in turn. At the end the stream stops, the sink drains it and stops; then it
prints, per window: the fault, p50/p99 visibility latency of the records produced in it (Kafka
timestamp to the publish of the snapshot that holds them), and overall: duplicates and lost records
per table (must be 0), cycles retried, peak RSS of the sink's process tree, and the data files and
snapshots each table keeps. The last line is one JSON object.

Not a test, nothing here asserts a duration; run it alone, it takes ``--minutes`` plus about two.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer
from harness import RssSampler, completed_cycles, record_visibility

from sinklab.generators import PizzaGenerator
from sinklab.stack import Stack
from sinklab.stack.faults import FaultProxy, injected, kill, leader, publishes, writes
from sinklab.stack.process import stop_pid

NAME = "soak"
TOPIC = "soak"
TABLES = {"soak.mild": "regular|light", "soak.rich": "extra|none", "soak.special": "bbq|alfredo"}


class Soak:
    def __init__(self, stack: Stack, catalog: FaultProxy, s3: FaultProxy):
        self.stack, self.catalog, self.s3 = stack, catalog, s3

    def kill(self, name: str) -> None:
        kill(self.stack, name)

    def leader(self, topic: str) -> str:
        return leader(self.stack, topic)

    def later(self, seconds: float, action: Callable[[], Any]) -> None:
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        timer.start()

    def revive(self) -> None:
        self.stack.revive()

    # ---- the matrix's faults, each over within 60 s
    def leader_killed(self) -> str:
        leader = self.leader(TOPIC)
        self.kill(leader)
        self.later(30, self.revive)
        return f"leader of {TOPIC}[0] ({leader}) killed, back after 30 s"

    def coordinator_killed(self) -> str:
        coordinator = self.leader("__transaction_state")
        self.catalog.on_request(publishes, lambda _: (self.kill(coordinator), self.later(30, self.revive)))
        return f"transaction coordinator ({coordinator}) killed during a publish, back after 30 s"

    def broker_killed(self) -> str:
        self.kill("broker-3")
        self.later(30, self.revive)
        return "broker-3 killed, back after 30 s"

    def catalog_killed(self) -> str:
        self.catalog.on_request(publishes, lambda _: (self.kill("catalog"), self.later(5, self.revive)))
        return "catalog killed during a publish, back after 5 s"

    def answer_lost(self) -> str:
        self.catalog.swallow(publishes, times=1)
        return "the catalog's answer to a publish lost"

    def catalog_slow(self) -> str:
        self.catalog.delay(5, seconds=60)
        return "every catalog answer 5 s late for 60 s"

    def catalog_503(self) -> str:
        self.catalog.fail(503, seconds=20)
        return "catalog answering 503 for 20 s"

    def s3_refusing_writes(self) -> str:
        self.s3.fail(503, seconds=20, match=writes)
        return "object store answering 503 to writes for 20 s"

    def s3_down(self) -> str:
        self.s3.down()
        self.later(15, self.s3.up)
        return "object store refusing connections for 15 s"

    def faults(self) -> list[Callable[[], str]]:
        return [self.leader_killed, self.catalog_503, self.coordinator_killed, self.s3_refusing_writes,
                self.catalog_killed, self.answer_lost, self.broker_killed, self.catalog_slow, self.s3_down]


def stream(stack: Stack, rate: int, stop: threading.Event, acked: list[str]) -> None:
    """``rate`` pizzas a second in batches every 0.1 s, keyed by order id; the acknowledged ones in ``acked``."""
    producer = Producer({**stack.kafka_config(), "enable.idempotence": True, "acks": "all", "linger.ms": 20,
                         "compression.type": "lz4"})
    generator = PizzaGenerator(seed=11)
    events = generator.events(10**12)
    batch = max(1, rate // 10)
    started = time.monotonic()
    sent = 0

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.key().decode())

    while not stop.is_set():
        for _ in range(batch):
            event = next(events)
            producer.produce(TOPIC, json.dumps(event, default=str).encode(), event["order_id"].encode(),
                             on_delivery=delivered)
        sent += batch
        producer.poll(0)
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            stop.wait(ahead)
    if producer.flush(300):
        raise RuntimeError("records the cluster never acknowledged")


def main() -> None:  # noqa: C901 - one run, told in order
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--window-s", type=float, default=120)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sinklab-soak-") as tmp, \
            Stack.embedded(Path(tmp) / "stack", brokers=3, storage="s3", connect=False) as stack:
        stack_file = Path(tmp) / "sink-stack.json"
        with injected(stack, stack_file) as (catalog, s3):
            stack.create_topic(TOPIC, partitions=6)
            config = Path(tmp) / "sink.json"
            config.write_text(json.dumps({"name": NAME, "config": {
                "topics": TOPIC, "iceberg.tables": ",".join(TABLES), "iceberg.tables.route-field": "sauce",
                **{f"iceberg.table.{t}.route-regex": regex for t, regex in TABLES.items()},
                "iceberg.catalog": "sinklab", "iceberg.tables.auto-create-enabled": "true",
                "iceberg.control.commit.interval-ms": "1000", "iceberg.control.commit.timeout-ms": "30000",
                "value.converter.schemas.enable": "false",
                "sinklab.maintenance.compact.every-commits": "10", "sinklab.maintenance.expire.older-than": "5m"}}))
            soak = Soak(stack, catalog, s3)
            acked: list[str] = []
            stop = threading.Event()
            producer = threading.Thread(target=stream, args=(stack, args.rate, stop, acked), daemon=True)
            log_path = Path(tmp) / "sink.log"
            windows: list[tuple[float, str]] = []
            with RssSampler(set(stack.info.pids.values()), every=1.0) as rss, open(log_path, "wb") as log:
                sink = subprocess.Popen([sys.executable, "-m", "sinklab.cli", "sink", "run", "--config", str(config),
                                         "--stack", str(stack_file)], stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                try:
                    began = time.time()
                    producer.start()
                    faults = soak.faults()
                    for i in range(int(args.minutes * 60 // args.window_s)):
                        at = began + i * args.window_s
                        time.sleep(max(0.0, at - time.time()))
                        label = "none" if i == 0 else faults[(i - 1) % len(faults)]()
                        windows.append((at, label))
                        print(f"{time.strftime('%H:%M:%S')} window {i + 1}: {label}", flush=True)
                        if sink.poll() is not None:
                            raise RuntimeError(f"the sink exited ({sink.returncode}); log {log_path}")
                    time.sleep(max(0.0, began + args.minutes * 60 - time.time()))
                    stop.set()
                    producer.join()
                    catalog.clear()
                    s3.clear()
                    stack.revive()
                    produced = len(acked)
                    deadline = time.monotonic() + 600
                    while time.monotonic() < deadline and sink.poll() is None:
                        rows = sum(len(stack.catalog.load_table(tuple(t.split("."))).scan(
                            selected_fields=("order_id",)).to_arrow()) for t in TABLES)
                        if rows >= produced:
                            break
                        time.sleep(5)
                finally:
                    still_running = sink.poll() is None
                    stop_pid(sink.pid, timeout=60)
                peak = rss.peak
            text = log_path.read_text(errors="replace")
            retried = len(re.findall(r"cycle failed .* trying again", text))
            report = summarize(stack, windows, acked, args.window_s)
            report.update(still_running=still_running, cycles_retried=retried,
                          peak_rss_mib={k: round(v / 2**20) for k, v in peak.items()}, minutes=args.minutes,
                          rate=args.rate)
            print_report(report)
            print(json.dumps(report))


def summarize(stack: Stack, windows: list[tuple[float, str]], acked: list[str], window_s: float) -> dict[str, Any]:
    complete = completed_cycles(stack, NAME)
    tables: dict[str, Any] = {}
    wanted = set(acked)
    landed: set[str] = set()
    for name in TABLES:
        table = stack.catalog.load_table(tuple(name.split(".")))
        ids = table.scan(selected_fields=("order_id",)).to_arrow().column("order_id").to_pylist()
        landed.update(ids)
        files = len(table.inspect.files())
        tables[name] = {"rows": len(ids), "duplicates": len(ids) - len(set(ids)), "data_files": files,
                        "snapshots": len(table.metadata.snapshots)}
    # A cycle commits every table with the whole topic's offsets: one table's commits date every record.
    produced_ms, visible_ms, _, _ = record_visibility(stack, TOPIC, next(iter(TABLES)), NAME, complete)
    stamps = produced_ms / 1000
    latency = visible_ms / 1000 - stamps
    rows = []
    for i, (at, label) in enumerate(windows):
        inside = (stamps >= at) & (stamps < at + window_s)
        lat = latency[inside]
        rows.append({"window": i + 1, "fault": label, "records": int(inside.sum()),
                     "p50_s": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
                     "p99_s": round(float(np.percentile(lat, 99)), 2) if len(lat) else None})
    return {"windows": rows, "tables": tables, "produced": len(acked), "lost": len(wanted - landed),
            "duplicates": sum(t["duplicates"] for t in tables.values()), "cycles": len(complete)}


def print_report(report: dict[str, Any]) -> None:
    print(f"\n{'window':>6}  {'fault':<62} {'records':>9} {'p50 s':>7} {'p99 s':>7}")
    for w in report["windows"]:
        print(f"{w['window']:>6}  {w['fault']:<62} {w['records']:>9,} {w['p50_s'] or '-':>7} {w['p99_s'] or '-':>7}")
    print(f"\nproduced {report['produced']:,}; lost {report['lost']}; duplicates {report['duplicates']}; "
          f"{report['cycles']} cycles, {report['cycles_retried']} retried; sink still running at the end: "
          f"{report['still_running']}")
    print(f"peak RSS (MiB): {report['peak_rss_mib']}")
    for name, t in report["tables"].items():
        print(f"  {name}: {t['rows']:,} rows, {t['data_files']} data files, {t['snapshots']} snapshots kept")


if __name__ == "__main__":
    main()
