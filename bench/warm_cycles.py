"""Warm cycles on one JVM, for comparing two commits back to back: 150,000-record drains into one
table and fanned out to three (static routing on ``sauce``), and one-record cycles.

One embedded stack; per shape, one sink that creates its tables in a first cycle of 5,000 records,
then drains 150,000 new pizzas in one cycle, four times; then (one table) eleven one-record cycles.
Prints each drain's seconds, the median one-record cycle (the first left out) and records/s of the
median drain, as one JSON line. Run it on each commit alternately (``PYTHONPATH`` at a worktree of the
other), twice each: the machine's noise is of the size of what it compares.

    .venv/bin/python bench/warm_cycles.py
    .venv/bin/python bench/warm_cycles.py --fixed-only 30   # one-record cycles only (about 1 min)

``--fixed-only N``: no drains; a first cycle of 5,000 records, six one-record cycles left out, then the
median of N more (the JSON line adds their mean).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import shape_config

from sinklab.generators import PizzaGenerator, produce_json
from sinklab.sink import IcebergSink
from sinklab.stack import Stack

RECORDS = 150_000


def one_record_cycles(stack: Stack, sink: IcebergSink, topic: str, count: int, skip: int) -> list[float]:
    """Seconds of ``count`` cycles of one record each, after ``skip`` left out."""
    seconds = []
    for event in itertools.islice(PizzaGenerator(seed=4).events(skip + count), skip + count):
        produce_json(stack.bootstrap_servers, topic, [event])
        began = time.perf_counter()
        sink.run_once()
        seconds.append(time.perf_counter() - began)
    return seconds[skip:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fixed-only", type=int, metavar="N", help="only N one-record cycles, no drains")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    shapes = ("one",) if args.fixed_only else ("one", "fan")
    with tempfile.TemporaryDirectory() as tmp, Stack.embedded(Path(tmp) / "stack") as stack:
        for shape in shapes:
            topic = f"t-{shape}"
            stack.create_topic(topic, partitions=6)
            sink = IcebergSink(stack, shape_config(shape, topic))
            generator = PizzaGenerator(seed=3)
            try:
                drains = []
                for round_ in range(1 if args.fixed_only else 5):
                    count = RECORDS if round_ else 5000  # the first creates the tables
                    generator.produce(stack, topic, count=count, partitions=6, create_topics=False).wait()
                    began = time.perf_counter()
                    assert sink.run_once() is not None
                    drains.append(time.perf_counter() - began)
                if args.fixed_only:
                    fixed = one_record_cycles(stack, sink, topic, args.fixed_only, skip=6)
                    out |= {"fixed": round(statistics.median(fixed), 4), "fixed_mean": round(statistics.mean(fixed), 4)}
                    continue
                out[shape] = [round(t, 2) for t in drains[1:]]
                if shape == "one":
                    out["fixed"] = round(statistics.median(one_record_cycles(stack, sink, topic, 10, skip=1)), 3)
            finally:
                sink.stop()
    if not args.fixed_only:
        out |= {f"{shape}_rps": round(RECORDS / statistics.median(out[shape])) for shape in shapes}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
