"""What dead letters cost a cycle, in one run (bench/README.md, "Dead letters").

One embedded stack, two topics of the same pizzas: one clean, one with ``--bad`` (1 %) of them bad
(malformed JSON, an array for an object, bytes that are not UTF-8; kinds that leave the table's
inferred columns alone). Each sink reads its topic in ``--cycles`` cycles of equal size
(``sinklab.cycle.max-records``), the sinks taking turns cycle by cycle; the first cycle, which creates
the table, is left out. Per sink the median cycle, its records/s, and the median over the rounds of its cycle's
ratio to the clean, the unwritten and the topic sink's cycle of the same round, with what its tables' writes and
commits took:

- ``clean``: the clean topic, ``errors.tolerance=none`` (no bad records at all);
- ``unwritten``: the bad topic, its dead letters found and carried to the driver as ``topic`` does, and
  written nowhere: the bench turns the dead-letter topic's writing off (sinklab itself never drops a record).
  #43's "without": what writing them costs is each sink's ratio to this one;
- ``topic``: the bad topic, dead letters to a topic (Kafka Connect's way);
- ``table``: the bad topic, dead letters to the dead-letter table;
- ``both``: topic and table.

    python bench/dead_letters.py            # 800,000 pizzas per topic, 18 cycles (about 2 min)
    python bench/dead_letters.py --quick    # 100,000
    python bench/dead_letters.py --count 4000000 --cycles 90   # #43's figure: 89 rounds (about 9 min)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path

from sinklab.generators import PizzaGenerator
from sinklab.sink import IcebergSink
from sinklab.stack import Stack

PARTITIONS = 2
KINDS = ["malformed-json", "not-an-object", "undecodable"]


def config(name: str, topic: str, per_cycle: int, **extra: str) -> dict[str, object]:
    return {"name": name, "config": {
        "topics": topic, "iceberg.tables": f"bench.{name}", "iceberg.catalog": "sinklab",
        "iceberg.tables.auto-create-enabled": "true", "value.converter.schemas.enable": "false",
        "sinklab.cycle.max-records": str(per_cycle), **extra}}


def run(stack: Stack, confs: dict[str, dict[str, object]]) -> dict[str, dict[str, float]]:
    """The sinks' cycles taken in turn, one of each at a time, the order turning each round: the driver
    warming up (JIT, caches) and whatever a cycle leaves to the next (garbage) favour none of them."""
    sinks = {name: IcebergSink(stack, conf) for name, conf in confs.items()}
    if "unwritten" in sinks:  # the letters found, not produced: what writing them costs is the difference
        sinks["unwritten"]._connect().channel.dead_letters = lambda letters: 0  # type: ignore[method-assign]
    durations: dict[str, list[float]] = {name: [] for name in sinks}
    records: dict[str, list[int]] = {name: [] for name in sinks}
    letters = dict.fromkeys(sinks, 0)
    parts: dict[str, dict[str, list[int]]] = {name: {} for name in sinks}  # per table: write and commit ms
    try:
        active, order = set(sinks), sorted(sinks)
        while active:
            order = order[1:] + order[:1]  # each round starts with the next sink: no sink keeps one place
            for name in [n for n in order if n in active]:
                result = sinks[name].run_once()
                if result is None:
                    active.discard(name)
                    continue
                durations[name].append(result.duration_ms / 1000)
                records[name].append(result.records)
                letters[name] += result.counters.get("dead-lettered", 0)
                for table, staged in result.tables.items():
                    parts[name].setdefault(f"{table} write ms", []).append(staged.write_ms)
                    parts[name].setdefault(f"{table} commit ms", []).append(staged.commit_ms)
    finally:
        for sink in sinks.values():
            sink.stop()
    out = {}
    for name in sinks:
        cycle_s = statistics.median(durations[name][1:])  # the first cycle creates the table
        out[name] = {"cycles": len(durations[name]), "cycle_s": cycle_s,
                     "records_per_s": statistics.median(records[name][1:]) / cycle_s, "dead_letters": letters[name],
                     "tables": {part: statistics.median(ms[1:] or ms) for part, ms in parts[name].items()},
                     "durations_s": durations[name]}
    for name in sinks:
        # Each round's cycles ran back to back: their ratio leaves out what slowed the machine for the round.
        for base in ("clean", "unwritten", "topic"):
            ratios = [mine / theirs for mine, theirs in zip(durations[name][1:], durations[base][1:], strict=False)]
            out[name][f"vs_{base}"] = statistics.median(ratios)
            out[name][f"vs_{base}_95"] = interval(ratios)
    return out


def interval(ratios: list[float], resamples: int = 2000) -> tuple[float, float]:
    """Where the median of the rounds' ratios lies, 95 % of the time (a percentile bootstrap): with ~20
    rounds it spans about ±10 %, more than the cost it measures (bench/README.md, "Dead letters")."""
    rng = random.Random(43)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return medians[int(resamples * 0.025)], medians[int(resamples * 0.975) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=800_000)
    parser.add_argument("--cycles", type=int, default=18)
    parser.add_argument("--bad", type=float, default=0.01)
    parser.add_argument("--quick", action="store_true", help="100,000 pizzas per topic")
    args = parser.parse_args()
    count = 100_000 if args.quick else args.count
    per_cycle = -(-count // args.cycles)
    with tempfile.TemporaryDirectory(prefix="sinklab-bench-dlq-") as tmp, Stack.embedded(Path(tmp)) as stack:
        for topic, bad in (("clean", 0.0), ("bad", args.bad)):
            spec = {"ratio": bad, "kinds": KINDS} if bad else None
            PizzaGenerator(seed=7, bad_records=spec).produce(stack, topic, count=count, partitions=PARTITIONS).wait()
        stack.spark.range(1).count()  # a warm driver for every sink alike
        runs = run(stack, {
            "clean": config("clean", "clean", per_cycle),
            "unwritten": config("unwritten", "bad", per_cycle, **{
                "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq-unwritten"}),
            "topic": config("topic", "bad", per_cycle, **{
                "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq-topic"}),
            "table": config("table", "bad", per_cycle, **{
                "errors.tolerance": "all", "errors.deadletterqueue.table.name": "bench.dead_letters"}),
            "both": config("both", "bad", per_cycle, **{
                "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq-both",
                "errors.deadletterqueue.table.name": "bench.dead_letters_both"}),
        })
    print(f"\n{count:,} pizzas per topic, {args.bad:.1%} bad, {per_cycle:,} records per cycle, {PARTITIONS} partitions")
    print(f"{'':9} {'cycle s':>8} {'records/s':>10} {'dead letters':>13} {'vs clean':>9} {'vs unwritten':>13} "
          f"{'its 95 %':>11} {'vs topic':>9}   (the median of each round's ratio)")
    for name, r in runs.items():
        low, high = r["vs_unwritten_95"]
        print(f"{name:9} {r['cycle_s']:8.2f} {r['records_per_s']:10,.0f} {r['dead_letters']:13,.0f} "
              f"{r['vs_clean']:8.2f}x {r['vs_unwritten']:12.2f}x {low:5.2f}-{high:4.2f}x {r['vs_topic']:8.2f}x   "
              + ", ".join(f"{part} {ms:.0f}" for part, ms in r["tables"].items()))
    print(json.dumps({"count": count, "bad": args.bad, "per_cycle": per_cycle, "runs": runs}))


if __name__ == "__main__":
    main()
