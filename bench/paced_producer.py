"""A producer that is not what binds: pre-encoded pizzas, sent by one librdkafka producer at a paced rate.

The bench's sustained-rate contract (``bench/ingest.py``) needs a source that outruns every sink it
measures. A JSON generator does not (about 67k events/s produced, ``bench/generate.py``): here the
pizzas are encoded once, written to a file, and a child process (this file run as a script, so
that neither the bench's GIL nor its Spark driver shares its interpreter) reads them into a list
and hands bytes to ``Producer.produce`` at the rate asked, on the monotonic clock. Without a rate
it produces as fast as it can for the seconds given: the producer's own ceiling.

Each record's key is its pizza's ``order_id``, made unique by writing the record's sequence number
into the last 12 hex digits of the UUID (in the key and in the value): the Java sink's visibility
finds a record by that key in the data files each snapshot added. The record goes to partition
``sequence % partitions``; its Kafka timestamp is the producer's CreateTime (the ``produce`` call).

The child prints one JSON line (``PacedRun``); the parent's ``produce_paced`` runs it and waits.
Only the standard library and confluent-kafka are imported here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = b'{"order_id":"'
UUID_LEN = 36
SEQ_DIGITS = 12  # the UUID's last group
# How many records one pass of the loop hands over at most before it serves delivery reports.
CHUNK = 2_000


@dataclass
class PacedRun:
    rate: float | None  # records/s asked for; None: as fast as it could
    produced: int  # records handed to the producer
    delivered: int  # records the broker acknowledged (produced - failed)
    started_ms: float  # wall clock of the first record (its CreateTime, give or take a ms)
    last_ms: float  # wall clock of the last record handed over: the window's end
    flushed_ms: float  # every record acknowledged
    behind_s: float  # the most the producer ever fell behind its schedule

    @property
    def seconds(self) -> float:
        return max((self.last_ms - self.started_ms) / 1000, 1e-9)

    @property
    def rps(self) -> float:
        """Records handed over per second of the window."""
        return self.produced / self.seconds

    @property
    def delivered_rps(self) -> float:
        """Records acknowledged per second, from the first record to the last acknowledgement."""
        return self.delivered / max((self.flushed_ms - self.started_ms) / 1000, 1e-9)

    def kept_pace(self, tolerance_s: float = 1.0) -> bool:
        """Whether the schedule held: never more than ``tolerance_s`` behind it (a second's hiccup on a
        busy machine is not a producer that cannot keep the rate)."""
        return self.rate is None or self.behind_s <= tolerance_s


# ---- the parent's side

def write_payloads(path: Path, values: Iterable[bytes]) -> tuple[int, float]:
    """Write pre-encoded pizza values, one a line (JSON text holds no raw newline); returns how many
    and their mean size in bytes."""
    count = size = 0
    with path.open("wb") as f:
        for value in values:
            if not value.startswith(PREFIX) or b"\n" in value:
                raise ValueError(f"not a pizza value this producer can number: {value[:60]!r}")
            f.write(value + b"\n")
            count += 1
            size += len(value)
    return count, size / max(count, 1)


def produce_paced(bootstrap: str, topic: str, payloads: Path, partitions: int, seconds: float,
                  rate: float | None = None, config: dict[str, Any] | None = None,
                  timeout: float | None = None) -> PacedRun:
    """Run the child: ``rate`` records/s for ``seconds`` (``rate * seconds`` records), or as many as
    it can in ``seconds`` without a rate; returns once every record is acknowledged."""
    argv = [sys.executable, __file__, "--bootstrap", bootstrap, "--topic", topic, "--payloads", str(payloads),
            "--partitions", str(partitions), "--seconds", str(seconds), "--config", json.dumps(config or {})]
    if rate is not None:
        argv += ["--rate", str(rate)]
    # subprocess.run kills the child if this process is interrupted or the timeout passes.
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout or seconds * 3 + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the paced producer exited with {done.returncode}: {done.stderr[-2000:]}")
    return PacedRun(**json.loads(done.stdout.strip().splitlines()[-1]))


# ---- the child

def _load(payloads: Path) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Each value split around the 12 digits a record's number replaces: (value head, key head, tail)."""
    cut = len(PREFIX) + UUID_LEN - SEQ_DIGITS
    heads, keys, tails = [], [], []
    for value in payloads.read_bytes().split(b"\n"):
        if value:
            heads.append(value[:cut])
            keys.append(value[len(PREFIX):cut])
            tails.append(value[cut + SEQ_DIGITS:])
    return heads, keys, tails


def run(bootstrap: str, topic: str, payloads: Path, partitions: int, seconds: float, rate: float | None,
        config: dict[str, Any]) -> PacedRun:
    from confluent_kafka import Producer

    heads, keys, tails = _load(payloads)
    pool = len(heads)
    failed = 0

    def on_error(err: Any, _msg: Any) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    producer = Producer({**config, "bootstrap.servers": bootstrap, "delivery.report.only.error": True,
                         "on_delivery": on_error, "queue.buffering.max.messages": 500_000})
    producer.list_topics(topic, timeout=30)  # metadata and connections before the clock starts
    produce, poll = producer.produce, producer.poll
    total = int(rate * seconds) if rate is not None else None
    sent, behind = 0, 0.0
    started = time.monotonic()
    started_ms = time.time() * 1000
    while True:
        elapsed = time.monotonic() - started
        if total is None:
            if elapsed >= seconds:
                break
            due = sent + CHUNK
        else:
            if sent >= total:
                break
            due = min(total, int(rate * elapsed) + 1)  # type: ignore[operator]
            if due <= sent:
                poll(0)
                time.sleep(0.001)
                continue
            behind = max(behind, (due - sent) / rate)  # type: ignore[operator]
        end = min(due, sent + CHUNK)
        i = sent
        try:
            while i < end:
                j = i % pool
                seq = b"%012x" % i
                produce(topic, heads[j] + seq + tails[j], keys[j] + seq, i % partitions)
                i += 1
        except BufferError:  # the local queue is full: let librdkafka send, then go on from record i
            poll(0.005)
        sent = i
        poll(0)
    last_ms = time.time() * 1000
    left = producer.flush(120)
    return PacedRun(rate, sent, sent - failed - left, started_ms, last_ms, time.time() * 1000, behind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--payloads", type=Path, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--rate", type=float, help="records/s; without it, as fast as it can")
    parser.add_argument("--config", default="{}", help="producer settings, as JSON")
    args = parser.parse_args()
    result = run(args.bootstrap, args.topic, args.payloads, args.partitions, args.seconds, args.rate,
                 json.loads(args.config))
    print(json.dumps(result.__dict__))


if __name__ == "__main__":
    main()
