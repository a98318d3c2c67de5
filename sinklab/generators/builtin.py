"""The built-in streams: the seeds' pizzas and payments, and a CDC change log."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal

import yaml

from sinklab.generators.generator import Generator
from sinklab.generators.spec import builtin_text

# "Not given", where None is a meaningful value (key_space=None: unbounded keys).
UNSET: Any = object()


def _builtin(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(builtin_text(name))
    return data


class PizzaGenerator(Generator):
    """The seed's completed pizzas (``data-generators/pizzas.yaml``): store 1 is the busiest of `stores`."""

    def __init__(self, *, stores: int | None = None, start: datetime | None = None, **overrides: Any):
        data = _builtin("pizzas")
        if stores is not None:
            data["fields"]["store_id"]["max"] = stores
        if start is not None:
            data["fields"]["date_ordered"]["start"] = start
        super().__init__(data, **overrides)


class PaymentGenerator(Generator):
    """The seed's faker payments (``data-generators/payments.yaml``)."""

    def __init__(self, **overrides: Any):
        super().__init__(_builtin("payments"), **overrides)


class CdcGenerator(Generator):
    """Row changes of a customer table (``data-generators/cdc.yaml``), flat (`op` I/U/D) or Debezium."""

    def __init__(self, *, format: Literal["flat", "debezium"] = UNSET, mix: dict[str, float] = UNSET,
                 key_space: int | None = UNSET, snapshot: int = UNSET, op_field: str = UNSET, **overrides: Any):
        data = _builtin("cdc")
        given = {"format": format, "mix": mix, "key_space": key_space, "snapshot": snapshot, "op_field": op_field}
        data["cdc"].update({k: v for k, v in given.items() if v is not UNSET})
        super().__init__(data, **overrides)


def pizza_events(count: int, seed: int = 7, stores: int = 100,
                 start: datetime | None = None) -> Iterator[dict[str, Any]]:
    """Shorthand for ``PizzaGenerator(seed=seed, stores=stores).events(count)``."""
    return PizzaGenerator(seed=seed, stores=stores, start=start).events(count)
