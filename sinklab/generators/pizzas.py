"""The seed's completed-pizza orders, and a JSON producer for any event stream."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

SAUCES = ["regular", "light", "extra", "none", "bbq", "alfredo"]
CHEESES = ["regular", "light", "extra", "none", "three cheese", "goat cheese"]
MEATS = ["pepperoni", "sausage", "ham", "anchovies", "salami", "bacon", "none"]
VEGGIES = ["olives", "onions", "peppers", "pineapple", "mushrooms", "tomatoes", "onions & pineapple", "none"]


def pizza_events(count: int, seed: int = 7, stores: int = 100,
                 start: datetime = datetime(2024, 1, 4, 12, 0, 0)) -> Iterator[dict[str, Any]]:
    """Completed pizza orders as in the seed; a few stores are far busier than the rest."""
    rng = random.Random(seed)
    # Zipf-like weights: store 1 sells the most.
    weights = [1.0 / (i ** 0.8) for i in range(1, stores + 1)]
    store_ids = list(range(1, stores + 1))
    ts = start
    for _ in range(count):
        ts += timedelta(seconds=rng.randint(0, 3))
        yield {
            "order_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "store_id": rng.choices(store_ids, weights)[0],
            "sauce": rng.choice(SAUCES),
            "cheese": rng.choice(CHEESES),
            "meats": rng.choice(MEATS),
            "veggies": rng.choice(VEGGIES),
            "date_ordered": ts.strftime("%Y-%m-%d %H:%M:%S"),
        }


def produce_json(bootstrap_servers: str, topic: str, events: Iterable[dict[str, Any]],
                 key_field: str | None = None) -> int:
    """Produce events as JSON with an idempotent producer; raises on any delivery error."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True,
                         "linger.ms": 20, "compression.type": "lz4"})
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(f"{msg.topic()}: {err}")
        else:
            delivered += 1

    for event in events:
        key = str(event[key_field]).encode() if key_field else None
        while True:
            try:
                producer.produce(topic, json.dumps(event).encode(), key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    if errors or remaining:
        raise RuntimeError(f"{len(errors)} events failed delivery, {remaining} undelivered; first: "
                           f"{errors[:1]}")
    return delivered
