"""The embedded broker's JVM options: CPU to start, to idle and to carry records, per set of options.

Each round starts a single node (a three-node cluster with ``--idle``) with each set of options in
turn: the seconds to answer, the node's CPU seconds by then, 20,000 and 1,000,000 records produced
(idempotent, acks=all) and consumed back, and its CPU after them (with ``--idle``: per idle minute).

    python bench/broker_jvm.py [--rounds 2] [--idle]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sinklab.stack import broker

# The broker's options before 2026-11-28, against its own (copied: a round sets broker.JVM_OPTS in place).
OPTIONS = {
    "G1, tiered (before)": ["-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                            "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"],
    "serial, C1 (the broker's)": list(broker.JVM_OPTS),
}
VALUE = b'{"order_id":"o-000001","pizza":"margherita","size":"large","price":12.5,"ts":"2026-01-01T00:00:00"}'


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def carry(bootstrap: str, records: int) -> tuple[float, float]:
    """Records/s produced and consumed back."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    began = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce("t", VALUE, str(i).encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0
    produced = records / (time.monotonic() - began)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["t"])
    got, began = 0, time.monotonic()
    while got < records and time.monotonic() - began < 120:
        got += len(consumer.consume(10_000, 1.0))
    consumer.close()
    assert got >= records
    return produced, records / (time.monotonic() - began)


def one_node(options: list[str], records: int) -> dict[str, float]:
    broker.JVM_OPTS[:] = options
    with tempfile.TemporaryDirectory() as tmp:
        node = broker.EmbeddedBroker(Path(tmp))
        began = time.monotonic()
        node.start()
        try:
            ready_s, pid = time.monotonic() - began, node.process.pid
            assert pid is not None
            ready_cpu = cpu_s(pid)
            admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
            admin.create_topics([NewTopic("t", 6, 1)])["t"].result()
            produced, consumed = carry(node.bootstrap_servers, records)
            return {"ready_s": ready_s, "ready_cpu_s": ready_cpu, "produce_rps": produced, "consume_rps": consumed,
                    "cpu_s": cpu_s(pid)}
        finally:
            node.stop()


def idle_cluster(options: list[str]) -> dict[str, float]:
    broker.JVM_OPTS[:] = options
    with tempfile.TemporaryDirectory() as tmp:
        nodes = broker.cluster(Path(tmp), 3)
        try:
            for node in nodes:
                node.begin()
            for node in nodes:
                node.wait_ready(120)
            time.sleep(10)
            pids = [n.process.pid for n in nodes if n.process.pid is not None]
            started = sum(map(cpu_s, pids))
            time.sleep(60)
            return {"start_cpu_s": started, "idle_cpu_s_per_min": sum(map(cpu_s, pids)) - started}
        finally:
            for node in nodes:
                node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle", action="store_true", help="also a three-node cluster, idle for a minute")
    args = parser.parse_args()
    out: list[dict[str, object]] = []
    for _ in range(args.rounds):
        for name, options in OPTIONS.items():
            for records in (20_000, 1_000_000):
                r = one_node(options, records)
                out.append({"options": name, "records": records, **r})
                print(f"{name:26s} {records:>9,} records: ready {r['ready_s']:4.1f} s ({r['ready_cpu_s']:4.1f} s CPU), "
                      f"produce {r['produce_rps']:9,.0f}/s, consume {r['consume_rps']:9,.0f}/s, "
                      f"CPU {r['cpu_s']:5.1f} s", flush=True)
    if args.idle:
        for name, options in OPTIONS.items():
            r = idle_cluster(options)
            out.append({"options": name, "cluster": 3, **r})
            print(f"{name:26s} three nodes: {r['start_cpu_s']:5.1f} s CPU to start, "
                  f"{r['idle_cpu_s_per_min']:4.1f} s CPU per idle minute", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
