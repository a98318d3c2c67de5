"""Warm cycles on one JVM, for comparing two commits back to back: 150,000-record drains into one
table and fanned out to three (static routing on ``sauce``), and one-record cycles.

One embedded stack; per shape, one sink that creates its tables in a first cycle of 5,000 records,
then drains 150,000 new pizzas in one cycle, four times; then (one table) eleven one-record cycles.
Prints each drain's seconds, the median one-record cycle (the first left out) and records/s of the
median drain, as one JSON line. Run it on each commit alternately (``PYTHONPATH`` at a worktree of the
other), twice each: the machine's noise is of the size of what it compares.

    .venv/bin/python bench/warm_cycles.py
"""

from __future__ import annotations

import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sinklab.generators import PizzaGenerator, produce_json
from sinklab.sink import IcebergSink
from sinklab.stack import Stack

RECORDS = 150_000


def config(shape: str, topic: str) -> dict[str, Any]:
    tables = [f"bench.{shape}_{s}" for s in ("a", "b", "c")] if shape == "fan" else [f"bench.{shape}"]
    out = {"name": f"s-{shape}", "topics": topic, "iceberg.tables": ",".join(tables), "iceberg.catalog": "sinklab",
           "iceberg.tables.auto-create-enabled": "true", "value.converter.schemas.enable": "false"}
    if shape == "fan":
        out |= {"iceberg.tables.route-field": "sauce", f"iceberg.table.{tables[0]}.route-regex": "regular",
                f"iceberg.table.{tables[1]}.route-regex": "alfredo",
                f"iceberg.table.{tables[2]}.route-regex": "(?!regular|alfredo).*"}
    return out


def main() -> None:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, Stack.embedded(Path(tmp) / "stack") as stack:
        for shape in ("one", "fan"):
            topic = f"t-{shape}"
            stack.create_topic(topic, partitions=6)
            sink = IcebergSink(stack, config(shape, topic))
            generator = PizzaGenerator(seed=3)
            try:
                drains = []
                for round_ in range(5):
                    count = RECORDS if round_ else 5000  # the first creates the tables
                    generator.produce(stack, topic, count=count, partitions=6, create_topics=False).wait()
                    began = time.perf_counter()
                    assert sink.run_once() is not None
                    drains.append(time.perf_counter() - began)
                out[shape] = [round(t, 2) for t in drains[1:]]
                if shape == "one":
                    fixed = []
                    for event in itertools.islice(PizzaGenerator(seed=4).events(11), 11):
                        produce_json(stack.bootstrap_servers, topic, [event])
                        began = time.perf_counter()
                        sink.run_once()
                        fixed.append(time.perf_counter() - began)
                    out["fixed"] = round(statistics.median(fixed[1:]), 3)
            finally:
                sink.stop()
    out |= {f"{shape}_rps": round(RECORDS / statistics.median(out[shape])) for shape in ("one", "fan")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
