"""Fake event streams: the seed's completed pizzas and payments."""

from sinklab.generators.pizzas import pizza_events, produce_json

__all__ = ["pizza_events", "produce_json"]
