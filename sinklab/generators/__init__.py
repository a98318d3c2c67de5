"""Fake event streams driven by specs: the seeds' pizzas and payments, CDC change logs, your own.

    from sinklab.generators import PizzaGenerator, Generator
    PizzaGenerator(seed=1).sample(5)                      # a DataFrame, no Kafka
    run = Generator.from_spec("payments", bad_records=0.01).produce(stack, "payments", count=10_000, rate=500)
    run.wait().delivered
    shape = profile_topic(stack.kafka_config(), "orders")   # a real topic's rates, sizes, hot keys
    Generator.from_spec("pizzas").produce(stack, "replay", count=50_000, traffic=shape, speed=60)
"""

from sinklab.exceptions import DeliveryError, SpecError
from sinklab.generators.builtin import CdcGenerator, PaymentGenerator, PizzaGenerator, pizza_events
from sinklab.generators.generator import Generator
from sinklab.generators.produce import BadOffset, Production, RateSchedule, produce_json
from sinklab.generators.record import Record
from sinklab.generators.spec import BAD_KINDS, Spec, builtin_specs, load_spec
from sinklab.generators.traffic import TrafficProfile, profile_topic

__all__ = [
    "BAD_KINDS", "BadOffset", "CdcGenerator", "DeliveryError", "Generator", "PaymentGenerator", "PizzaGenerator",
    "Production", "RateSchedule", "Record", "Spec", "SpecError", "TrafficProfile", "builtin_specs", "load_spec",
    "pizza_events", "produce_json", "profile_topic",
]
