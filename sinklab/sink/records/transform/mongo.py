"""Iceberg's MongoDebeziumTransform (1.9 to 1.12: the class, and the Debezium ``MongoDataConverter`` Iceberg
vendors): a Debezium MongoDB change event's ``before`` and ``after``, texts of BSON's extended JSON, become
structs whose Connect schema is inferred from each record's values, as the class infers it; a partial
update's ``updateDescription`` is merged over ``before``; the key becomes ``{id}``.

The documents are converted in Python, a batch of records at a time (``convert``, a Spark UDF): a
document nests to any depth, and Spark expressions do not recurse. Written out as expressions eight
levels deep, the conversion took Spark's analyzer past its iteration limit and the driver past 1 GB; one
level deep, it planned in 25 s (bench/README.md, "MongoDebeziumTransform"). The envelope around the
documents (which fields, the malformed and non-envelope records, the new key) stays in expressions.

Where sinklab differs from the class, on records the class fails on or types by accident (docs/connect.md,
"Iceberg's MongoDebeziumTransform"): an array of dates or timestamps is converted (the class throws); a
JavaScript-with-scope value fails the record (the class's conversion of its scope is broken); the elements of
an array of documents must agree on each field's whole type (the class compares only the top-level kind and
fails later, at put, on most of the rest); ``document`` mode orders ``_0``, ``_1``, ... by index (Java's
HashMap order differs from 12 elements on); a key's schema name is not checked for ``.Key`` (sinklab reads
a key without its schema).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.sink.config import transforms as tf
from sinklab.sink.records.transform.parts import Rec, fields_of, is_null, name_of, obj, string_of, text_of, var, why

CONVERTED = "_sinklab_t_mongo"
IMAGES = ("after", "before", "key")
RESULT_FIELDS = [*(f for i in IMAGES for f in (i, f"{i}_schema")), "err"]  # JSON texts, and the error
Schema = dict[str, Any]


def _optional(kind: str, name: str | None = None) -> Schema:
    return {"type": kind, "optional": True, **({"name": name, "version": 1} if name else {})}


STRING, TIMESTAMP = _optional("string"), _optional("int64", "org.apache.kafka.connect.data.Timestamp")
REGEX = {"type": "struct", "optional": True, "name": "io.debezium.mongodb.regex",
         "fields": [{"field": "regex", **_optional("string")}, {"field": "options", **_optional("string")}]}
# Extended JSON's wrappers (their keys, sorted) -> the kind the converter gives them.
WRAPPERS = {("$oid",): "objectId", ("$numberInt",): "int32", ("$numberLong",): "int64",
            ("$numberDouble",): "double", ("$numberDecimal",): "decimal128", ("$date",): "dateTime",
            ("$timestamp",): "timestamp", ("$binary",): "binary", ("$binary", "$type"): "binary",
            ("$uuid",): "binary", ("$code",): "javascript", ("$code", "$scope"): "javascriptWithScope",
            ("$regularExpression",): "regex", ("$options", "$regex"): "regex", ("$regex",): "regex",
            ("$symbol",): "symbol", ("$minKey",): "minKey", ("$maxKey",): "maxKey", ("$undefined",): "undefined",
            ("$dbPointer",): "dbPointer"}
DROPPED = ("symbol", "minKey", "maxKey", "undefined", "dbPointer")
# What an array may hold, in array mode: the kinds the class types (documents and arrays apart).
PRIMITIVE = ("null", "string", "objectId", "int32", "int64", "double", "decimal128", "boolean", "javascript",
             "binary", "dateTime", "timestamp")
EMPTY = ("document{}", "array[]")  # an empty document or array: a field the class leaves out of a union


class Bad(Exception):
    """A value the conversion cannot take; its message is the record's error."""


class Doc(list[tuple[str, Any]]):
    """A document's fields in document order (a dict would merge a field named twice)."""


@dataclass(frozen=True)
class Node:
    kind: str
    value: Any
    schema: Schema
    fields: tuple[tuple[str, Node], ...] = ()


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=Doc)
    except ValueError:
        raise Bad(f"{what} is not BSON's extended JSON: {text[:100]}") from None


def _millis(inner: Any) -> int:
    if isinstance(inner, int) and not isinstance(inner, bool):
        return inner
    if isinstance(inner, Doc) and [k for k, _ in inner] == ["$numberLong"]:
        return int(inner[0][1])
    if isinstance(inner, str):
        return int(datetime.fromisoformat(inner.replace("Z", "+00:00")).timestamp() * 1000)
    raise ValueError(inner)


def _wrapped(kind: str, doc: Doc) -> Node | None:
    """A wrapper's value: its kind's value and schema (None for the kinds the class drops)."""
    items = dict(doc)
    inner = items[min(items)]  # the first key's value, sorted: $binary before $type, $code before $scope
    if kind in DROPPED:
        return None
    if kind == "javascriptWithScope":
        raise Bad("a JavaScript-with-scope value, which sinklab does not convert (Iceberg's class fails on most "
                  "of them)")
    try:
        if kind == "objectId":
            return Node(kind, str(inner).lower(), STRING)
        if kind in ("int32", "int64"):
            return Node(kind, int(inner), _optional(kind))
        if kind == "double":
            return Node(kind, float(inner), _optional("float64"))
        if kind in ("decimal128", "javascript"):
            return Node(kind, str(inner), STRING)
        if kind == "dateTime":
            return Node(kind, _millis(inner), TIMESTAMP)
        if kind == "timestamp":
            return Node(kind, int(dict(inner)["t"]) * 1000, TIMESTAMP)
        if kind == "binary":
            if "$uuid" in items:
                return Node(kind, base64.b64encode(bytes.fromhex(str(inner).replace("-", ""))).decode(),
                            _optional("bytes"))
            return Node(kind, dict(inner)["base64"] if isinstance(inner, Doc) else str(inner), _optional("bytes"))
        # Canonical {"$regularExpression": {"pattern", "options"}}, or the legacy {"$regex", "$options"}.
        regex = dict(items["$regularExpression"]) if "$regularExpression" in items else {
            "pattern": items.get("$regex"), "options": items.get("$options")}
        return Node(kind, {"regex": regex.get("pattern"), "options": regex.get("options")}, REGEX)
    except (ValueError, KeyError, TypeError):
        if kind == "dateTime":
            raise Bad(f"not a date: {json.dumps(dict(doc))}") from None
        raise Bad(f"not a BSON {kind}: {json.dumps(dict(doc))}") from None


def struct_schema(name: str | None, fields: tuple[tuple[str, Node], ...]) -> Schema:
    return {"type": "struct", "optional": True, **({"name": name} if name is not None else {}),
            "fields": [{"field": k, **n.schema} for k, n in fields]}


def _struct(kind: str, name: str | None, children: list[tuple[str, Any]], document_arrays: bool) -> Node:
    parent = "null" if name is None else name
    if len({k for k, _ in children}) != len(children):
        raise Bad(f"a document names a field twice ({parent})")
    converted = ((k, node(x, f"{parent}.{k}", document_arrays)) for k, x in children)
    fields = tuple((k, n) for k, n in converted if n is not None)
    return Node(kind if children else kind + ("{}" if kind == "document" else "[]"),
                {k: n.value for k, n in fields}, struct_schema(name, fields), fields)


def _array(name: str, items: list[Any], document_arrays: bool) -> Node:
    """An array in array mode: its type is its first element's (an empty array: of strings); its elements
    must agree, as the class checks them."""
    if document_arrays:
        return _struct("array", name, [(f"_{i}", x) for i, x in enumerate(items)], document_arrays)
    cs = [node(x, name, document_arrays) for x in items]
    value = [c.value for c in cs if c is not None and c.kind != "null"]
    if not cs:
        return Node("array[]", value, {"type": "array", "items": STRING, "optional": True})
    head = cs[0]
    if head is not None and head.kind.startswith("document"):
        if any(c is None or not c.kind.startswith("document") for c in cs):
            raise Bad(f"field {name} is an array of documents and of other values")
        every = [f for c in cs for f in c.fields]
        chosen: dict[str, Node] = {}
        for k, n in every:  # the first occurrence types a field; empty documents and arrays only if no other
            if n.kind not in EMPTY:
                chosen.setdefault(k, n)
        if not chosen:
            for k, n in every:
                chosen.setdefault(k, n)
        for k, n in every:
            if k not in chosen:
                raise Bad(f"Failed to find field '{k}' in schema {name}")
            if n.kind not in ("null", *EMPTY) and n.schema != chosen[k].schema:
                raise Bad(f"the documents of array {name} give field {k} different types")
        items_schema = struct_schema(name, tuple(chosen.items()))
    else:
        kinds = [c.kind if c is not None else "dropped" for c in cs]
        if "array[]" in kinds:
            raise Bad(f"field {name} holds an empty array inside an array, which the class cannot type")
        if head is None or head.kind not in (*PRIMITIVE, "array"):
            raise Bad(f"The value type '{kinds[0]}' is not supported inside an array (field {name})")
        if any(c is None or (c.kind, c.schema) != (head.kind, head.schema) for c in cs):
            raise Bad(f"Field {name} is not a homogenous array")
        items_schema = head.schema
    return Node("array", value, {"type": "array", "items": items_schema, "optional": True})


def node(x: Any, name: str | None, document_arrays: bool) -> Node | None:
    """The BSON value ``x`` (parsed extended JSON) as the class converts it, None for one it drops;
    ``name`` is the struct name the class gives it if it is a document (None at before's and after's top:
    the class names them nothing, and their fields ``null.<field>``)."""
    if isinstance(x, Doc):
        kind = WRAPPERS.get(tuple(sorted(k for k, _ in x)))
        return _wrapped(kind, x) if kind else _struct("document", name, x, document_arrays)
    if isinstance(x, list):
        return _array("null" if name is None else name, x, document_arrays)
    if x is None:
        return Node("null", None, STRING)
    if isinstance(x, bool):
        return Node("boolean", x, _optional("boolean"))
    if isinstance(x, int):
        if -(2 ** 31) <= x < 2 ** 31:
            return Node("int32", x, _optional("int32"))
        if -(2 ** 63) <= x < 2 ** 63:
            return Node("int64", x, _optional("int64"))
        raise Bad(f"an integer beyond a long's range: {x}")
    if isinstance(x, float):
        return Node("double", x, _optional("float64"))
    return Node("string", x, _optional("string"))


def _top(text: str | None, what: str, document_arrays: bool) -> Node | None:
    if text is None:
        return None
    parsed = _load(text, what)
    if not isinstance(parsed, Doc) or WRAPPERS.get(tuple(sorted(k for k, _ in parsed))):
        raise Bad(f"{what} is no document")
    try:
        return node(parsed, None, document_arrays)
    except Bad as e:
        raise Bad(f"{what}: {e}") from None


def convert(after: str | None, before: str | None, updated: str | None, removed: list[str] | None,
            key_id: str | None, document_arrays: bool) -> dict[str, str | None]:
    """One change event's images and key id, converted: each value and its Connect schema as JSON text, or
    the error that stops the record. A partial update (``updated`` without ``after``): updatedFields'
    top-level entries put over before's (dotted paths are literal names, as the class puts them),
    removedFields taken out, and ``_id`` from the key when the result has none."""
    out: dict[str, str | None] = dict.fromkeys(RESULT_FIELDS)
    try:
        images = {"after": _top(after, "after", document_arrays), "before": _top(before, "before", document_arrays)}
        key = None
        if key_id is not None:
            try:
                key = node(_load(key_id, "the key's id"), "null.id", document_arrays)
            except Bad as e:
                raise Bad(str(e) if str(e).startswith("the key's id") else f"the key's id: {e}") from None
        if images["after"] is None and updated is not None:
            changes = dict(_top(updated, "updateDescription.updatedFields", document_arrays).fields)
            base = dict(images["before"].fields if images["before"] else ())
            merged = {**{k: changes.get(k, n) for k, n in base.items()},
                      **{k: n for k, n in changes.items() if k not in base}}
            fields = tuple((k, n) for k, n in merged.items() if k not in (removed or ()))
            if "_id" not in merged and key is not None:
                fields += (("_id", key),)
            images["after"] = Node("document", {k: n.value for k, n in fields}, struct_schema(None, fields), fields)
        images["key"] = key
    except Bad as e:
        out["err"] = str(e)
        return out
    for image, n in images.items():
        if n is not None:
            out[image], out[f"{image}_schema"] = json.dumps(n.value), json.dumps(n.schema)
    return out


def _convert(*columns: Column) -> Column:
    """``convert`` as a Spark UDF (made per chain: a UDF object keeps the JVM it was first used in, and a
    process may start Spark again). Rows pickled, not Arrow batches: faster here (bench/README.md)."""
    result = T.StructType([T.StructField(f, T.StringType()) for f in RESULT_FIELDS])
    return F.udf(convert, returnType=result, useArrow=False)(*columns)


def mongo_debezium(t: tf.MongoDebezium, r: Rec, meta: dict[str, Column]) -> Rec:
    s = r.side(t)
    envelope = F.try_variant_get(s.schema, "$.name", "string")
    valid = s.m.isNotNull() & F.coalesce(envelope.endswith(".Envelope"), F.lit(False))
    update = obj(s.m["updateDescription"])
    key = obj(r.key)
    removed = F.try_variant_get(update["removedFields"], "$", "array<string>")
    texts = (string_of(s.m["after"]), string_of(s.m["before"]), string_of(update["updatedFields"]))
    converted = F.when(valid, _convert(*texts, removed, text_of(key["id"]), F.lit(t.array_mode == "document")))
    c = F.col(CONVERTED)
    # A record that is no Debezium envelope becomes one with neither key nor value, which a sink skips.
    out = replace(r, pre=((CONVERTED, converted),), dropped=r.dropped | (s.present & ~valid))
    names = F.transform(fields_of(s.schema), name_of)
    for field in ("after", "before", "updateDescription"):
        out = out.fail(valid & ~F.array_contains(names, field), why(t, f"Unknown field: {field}"))
    out = out.fail(valid & ~F.coalesce(F.map_contains_key(key, "id"), F.lit(False)), why(
        t, "the key has no field id (Unknown field: id)"))
    out = out.fail(valid & is_null(s.m["after"]) & is_null(s.m["before"]) & is_null(s.m["updateDescription"]),
                   F.concat(F.lit(why(t, "malformed record topic: ")), r.topic, F.lit(", partition: "),
                            meta["partition"].cast("string"), F.lit(", offset: "), meta["offset"].cast("string")))
    for field in ("after", "before"):
        out = out.fail(valid & ~is_null(s.m[field]) & string_of(s.m[field]).isNull(), why(
            t, f"{field} is not text (the io.debezium.data.Json string Debezium's MongoDB connector writes)"))
    out = out.fail(valid & is_null(s.m["after"]) & update.isNotNull() & is_null(update["updatedFields"]),
                   why(t, "updateDescription has no updatedFields"))
    out = out.fail(valid & c["err"].isNotNull(), F.concat(F.lit(why(t, "")), c["err"]))

    def image_schema(field: str) -> Column:
        return F.try_parse_json(F.concat(F.lit(f'{{"field":"{field}",'), F.substring(c[f"{field}_schema"], 2, 1 << 30)))

    fields = F.filter(F.transform(fields_of(s.schema), lambda f: F.when(name_of(f).isin("after", "before"), F.when(
        name_of(f) == "after", image_schema("after")).otherwise(image_schema("before"))).otherwise(f)),
        lambda f: f.isNotNull())
    schema = var(F.named_struct(F.lit("type"), F.lit("struct"), F.lit("name"), envelope,
                                                F.lit("optional"), F.lit(False), F.lit("fields"), fields))
    images = {field: F.try_parse_json(c[field]) for field in ("after", "before")}
    value = F.map_filter(F.transform_values(s.m, lambda k, x: F.when(k == "after", images["after"]).when(
        k == "before", images["before"]).otherwise(x)), lambda k, x: ~(k.isin("after", "before") & x.isNull()))
    new_key = var(F.create_map(F.lit("id"), F.try_parse_json(c["key"])))
    return replace(out, value=F.when(valid, value).otherwise(s.m), schema=F.when(valid, schema).otherwise(s.schema),
                   key=F.when(valid, new_key).otherwise(r.key))
