"""`sinklab demo`: the seed's pizza story on the embedded stack."""

from __future__ import annotations

import json
from pathlib import Path

from sinklab.generators import pizza_events, produce_json
from sinklab.stack import Stack

TOPIC = "completed-pizzas"


def run_demo(workdir: Path | None = None, count: int = 20000, interval_ms: int = 3000) -> None:
    with Stack.embedded(workdir) as stack:
        print(f"stack: broker {stack.bootstrap_servers}, catalog {stack.info.catalog_uri}")
        stack.create_topic(TOPIC, partitions=6)
        produced = produce_json(stack.bootstrap_servers, TOPIC, pizza_events(count), key_field="order_id")
        print(f"produced {produced} pizzas to {TOPIC}; the first three:")
        for event in pizza_events(3):
            print("  " + json.dumps(event))
