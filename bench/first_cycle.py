"""A fresh process's first sink cycle, and its drain rate: with and without the class archive
(``--compare archive``), or with and without ``Stack.warm_spark()`` (``--compare warm``).

What a user meets when a kernel (or `sinklab sink run`) starts: Python imports, the Spark driver's
JVM, the sink's first cycle on 1,000 pizzas, which auto-creates its table. Then the same process
drains a backlog twice, to show whether the archive costs throughput. Each mode runs ``--rounds`` times,
alternating (ABBA: each round starts with the other mode), in fresh processes on one embedded stack;
nothing of the suite's JVM options applies. With ``--compare warm`` each process produces its 1,000
pizzas itself, as the demo and notebook 01 do, while a warmed driver starts beside it.

    python bench/first_cycle.py [--compare archive|warm] [--rounds 2] [--backlog 200000] [--drains 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sinklab.generators import PizzaGenerator
from sinklab.stack import Stack, jvm_archive

PARTITIONS = 2


def child(stack_file: str, name: str, backlog: int, drains: int, warm: str) -> None:
    """In a fresh process: the first cycle, then ``drains`` drains of ``backlog`` records; prints JSON.
    ``warm``: "warm" or "cold" (the process produces its first records, after warm_spark() or not), or
    "-" (they were produced before it started)."""
    from sinklab.sink import IcebergSink

    stack = Stack.from_file(stack_file)
    if warm == "warm":
        stack.warm_spark()
    if warm != "-":
        PizzaGenerator(seed=1).produce(stack, name, count=1000, partitions=PARTITIONS).wait()
    sink = IcebergSink(stack, {"name": name, "config": {
        "topics": name, "iceberg.tables": f"bench.{name}", "iceberg.tables.auto-create-enabled": "true",
        "value.converter.schemas.enable": "false", "sinklab.cycle.max-records": str(10 * backlog)}})
    called = time.monotonic()
    first = sink.run_once()
    committed_at, once_s = time.time(), time.monotonic() - called
    assert first is not None and first.records == 1000
    rates = []
    for seed in range(2, 2 + drains):  # the later drains run on a JIT that has seen the earlier ones
        PizzaGenerator(seed=seed).produce(stack, name, count=backlog, partitions=PARTITIONS).wait()
        began = time.monotonic()
        drained = sink.run_once()
        rates.append(backlog / (time.monotonic() - began))
        assert drained is not None and drained.records == backlog
    sink.stop()
    stack.stop_spark()
    print(json.dumps({"committed_at": committed_at, "once_s": once_s, "rates": rates}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--drains", type=int, default=2, help="backlogs each process drains after its first cycle")
    parser.add_argument("--compare", choices=("archive", "warm"), default="archive")
    args = parser.parse_args()
    archive = jvm_archive.path()
    if args.compare == "archive" and not archive.exists():
        raise SystemExit(f"no class archive at {archive}: `sinklab jvm train` first")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}  # sinklab's defaults, as a user has
    first_mode = "with the archive" if args.compare == "archive" else "warm_spark()"
    results: dict[str, list[dict[str, float]]] = {first_mode: [], "without": []}
    with tempfile.TemporaryDirectory(prefix="sinklab-bench-") as workdir, Stack.embedded(workdir) as stack:
        stack_file = str(stack.write(Path(workdir)))
        for round_ in range(args.rounds):
            # ABBA: neither mode always runs first, after the other's process and backlog.
            for mode in list(results)[::1 if round_ % 2 == 0 else -1]:
                name = f"first{round_}{'a' if mode == first_mode else 'n'}"
                stack.create_topic(name, partitions=PARTITIONS)
                if args.compare == "archive":
                    PizzaGenerator(seed=1).produce(stack, name, count=1000, partitions=PARTITIONS).wait()
                mode_env = {**env, jvm_archive.ENV: "on" if mode == "with the archive" else "off"}
                warm = "-" if args.compare == "archive" else "warm" if mode == first_mode else "cold"
                started = time.time()
                done = subprocess.run([sys.executable, __file__, "--child", stack_file, name, str(args.backlog),
                                       str(args.drains), warm],
                                      env=mode_env, capture_output=True, text=True, timeout=900)
                if done.returncode != 0:
                    raise SystemExit(f"{mode}: exited {done.returncode}\n{done.stderr[-3000:]}")
                run = json.loads(done.stdout.strip().splitlines()[-1])
                results[mode].append({**run, "first_s": run["committed_at"] - started})
                print(f"round {round_ + 1}, {mode}: {results[mode][-1]}", flush=True)
    size = f" ({archive.stat().st_size / 1e6:.0f} MB)" if args.compare == "archive" else ", not used"
    print(f"\narchive: {archive}{size}; {os.cpu_count()} cores; {args.rounds} rounds, alternating ABBA; medians")
    # The first run_once starts the driver's JVM: what `sinklab demo` prints as its first cycle.
    print(f"{'':18s} {'process start to commit':>24s} {'first run_once':>15s} "
          + " ".join(f"{f'drain {d + 1} rec/s':>15s}" for d in range(args.drains)))
    for mode, runs in results.items():
        print(f"{mode:18s} {statistics.median(r['first_s'] for r in runs):22.1f} s "
              f"{statistics.median(r['once_s'] for r in runs):13.1f} s "
              + " ".join(f"{statistics.median(r['rates'][d] for r in runs):15,.0f}" for d in range(args.drains)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    else:
        main()
