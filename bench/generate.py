"""Events/s of the generators: making records only, and producing them to the embedded broker.

    .venv/bin/python bench/generate.py [--records 200000]

Prints a table, then one JSON object as the last line. Not a test: nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import json
import time

from sinklab.generators import CdcGenerator, Generator, PaymentGenerator, PizzaGenerator
from sinklab.stack import Stack


def streams() -> dict[str, Generator]:
    return {
        "pizzas": PizzaGenerator(),
        "payments": PaymentGenerator(),
        "cdc-debezium": CdcGenerator(format="debezium"),
        "pizzas+1%bad": PizzaGenerator(bad_records=0.01),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    for name, gen in streams().items():
        started = time.monotonic()
        for _ in gen.records(args.records):
            pass
        figures[name] = {"make_per_s": args.records / (time.monotonic() - started)}
    with Stack.embedded(connect=False) as stack:  # the REST API is not measured
        for name, gen in streams().items():
            topic = f"bench-{name.replace('+', '-').replace('%', '')}"
            stack.create_topic(topic, partitions=args.partitions)
            run = gen.produce(stack, topic, count=args.records).wait()
            assert run.delivered == args.records
            figures[name]["produce_per_s"] = run.events_per_second
    print(f"{'stream':<16}{'make events/s':>16}{'produce events/s':>20}")
    for name, f in figures.items():
        print(f"{name:<16}{f['make_per_s']:>16,.0f}{f['produce_per_s']:>20,.0f}")
    print(json.dumps({"records": args.records, "partitions": args.partitions,
                      **{name: {k: round(v) for k, v in f.items()} for name, f in figures.items()}}))


if __name__ == "__main__":
    main()
