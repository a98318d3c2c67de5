"""Fake event streams driven by specs: the seeds' pizzas and payments, CDC change logs, your own.

    from sinklab.generators import PizzaGenerator, Generator
    PizzaGenerator(seed=1).sample(5)                      # a DataFrame, no Kafka
    run = Generator.from_spec("payments", bad_records=0.01).produce(stack, "payments", count=10_000, rate=500)
    run.wait().delivered
"""

from sinklab.exceptions import DeliveryError, SpecError
from sinklab.generators.builtin import CdcGenerator, PaymentGenerator, PizzaGenerator, pizza_events
from sinklab.generators.generator import Generator
from sinklab.generators.produce import BadOffset, Production, RateSchedule, produce_json
from sinklab.generators.record import Record
from sinklab.generators.spec import BAD_KINDS, Spec, builtin_specs, load_spec

__all__ = [
    "BAD_KINDS", "BadOffset", "CdcGenerator", "DeliveryError", "Generator", "PaymentGenerator", "PizzaGenerator",
    "Production", "RateSchedule", "Record", "Spec", "SpecError", "builtin_specs", "load_spec", "pizza_events",
    "produce_json",
]
