"""sinklab's pyiceberg client of a REST catalog: pyiceberg's ``RestCatalog``, able to load v3 tables
with VARIANT columns.

pyiceberg 0.12 (the newest release) has no VARIANT type and refuses a whole table whose schema holds
one ("Unsupported field type: 'variant'"). sinklab reads tables through pyiceberg only for metadata
(refs, snapshots and their summaries, properties, manifests) and commits only ref and property
updates through it; schemas are Spark's to read and change. So the client shows a VARIANT column to
pyiceberg as ``binary``: every metadata operation works, and a pyiceberg scan of that column fails
loudly instead of returning wrong values. Remove this once pyiceberg parses ``variant``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog.rest import RestCatalog

if TYPE_CHECKING:
    from requests import Response, Session

STAND_IN = "binary"
# Where a type sits in Iceberg's JSON schema, with the key that marks that object as a field, a list
# or a map (so that a property or a column *named* "variant" is left alone).
_TYPE_SLOTS = (("type", "id"), ("element", "element-id"), ("key", "key-id"), ("value", "value-id"))


class SinklabRestCatalog(RestCatalog):
    def _create_session(self) -> Session:
        session = super()._create_session()
        session.hooks["response"].append(_variant_as_stand_in)
        return session


def rest_catalog(name: str, properties: dict[str, str]) -> RestCatalog:
    return SinklabRestCatalog(name, **properties)


def _variant_as_stand_in(response: Response, *_: Any, **__: Any) -> Response:
    if b'"variant"' not in response.content or "json" not in response.headers.get("Content-Type", ""):
        return response
    body = json.loads(response.content)
    if retype_variants(body):
        response._content = json.dumps(body).encode()
    return response


def retype_variants(node: Any) -> bool:
    """Replace every VARIANT type in ``node`` (Iceberg JSON) by the stand-in; whether any was."""
    changed = False
    if isinstance(node, dict):
        for slot, marker in _TYPE_SLOTS:
            if node.get(slot) == "variant" and marker in node:
                node[slot] = STAND_IN
                changed = True
        for value in node.values():
            changed = retype_variants(value) or changed
    elif isinstance(node, list):
        for value in node:
            changed = retype_variants(value) or changed
    return changed
