"""Where the readings read from: a stack or a catalog for Iceberg's metadata, a stack or a bootstrap
address for Kafka (a stack's clients log in as its stack.json says); and the table or topic names a
reading takes, one or several."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from sinklab.stack import Stack

    MetadataSource = Stack | Catalog
    KafkaSource = Stack | str


def catalog_of(source: MetadataSource) -> Catalog:
    return source if hasattr(source, "load_table") else source.catalog


def kafka_of(source: KafkaSource) -> dict[str, Any]:
    """The client settings of a Kafka source: a stack's (its security included), or a bootstrap address's."""
    return {"bootstrap.servers": source} if isinstance(source, str) else source.kafka_config()


def names(tables: str | Iterable[str]) -> list[str]:
    """One name or several, as a list."""
    return [tables] if isinstance(tables, str) else list(tables)
