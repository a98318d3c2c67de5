"""Where the readings read from: a stack or a catalog for Iceberg's metadata, a stack or a bootstrap
address for Kafka; and the table or topic names a reading takes, one or several."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from sinklab.stack import Stack

    MetadataSource = Stack | Catalog
    KafkaSource = Stack | str


def catalog_of(source: MetadataSource) -> Catalog:
    return source if hasattr(source, "load_table") else source.catalog


def bootstrap_of(source: KafkaSource) -> str:
    return source if isinstance(source, str) else source.bootstrap_servers


def names(tables: str | Iterable[str]) -> list[str]:
    """One name or several, as a list."""
    return [tables] if isinstance(tables, str) else list(tables)
