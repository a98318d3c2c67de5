"""Record bytes as text in Spark: how ``convert`` reads JSON values and keys, and ``jsonschema`` the body
of a framed record (a module of its own below both, so that neither imports the other)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def utf8_text(binary: Column) -> Column:
    """Bytes as text, null when they are not UTF-8 (Spark 4's ``decode`` raises on those)."""
    from pyspark.sql import functions as F

    return F.try_validate_utf8(binary.cast("string"))
