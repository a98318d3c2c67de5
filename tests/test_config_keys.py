"""The key table (sinklab.sink.keys): what the validate endpoint answers, how it maps to the configuration
models, the docs' key reference made from it, and Apache's sink's own keys (from its jar). No stack."""

from __future__ import annotations

import re
import zipfile
from typing import Any

import pytest

from sinklab.connect.server import UNKNOWN_KEY_DOC, validate_response
from sinklab.maintenance.policy import MaintenancePolicy
from sinklab.sink.config import keys
from sinklab.sink.config.reference import PAGES, render_blocks
from sinklab.sink.config.sink_config import SinkConfig, read_value
from sinklab.stack import jars

PLUGIN = "org.apache.iceberg.connect.IcebergSinkConnector"


def answer(**config: Any) -> tuple[int, dict[str, dict[str, Any]]]:
    """The endpoint's error count, and its configs by key."""
    body = validate_response(PLUGIN, {"connector.class": PLUGIN, "topics": "t", "iceberg.tables": "ns.t", **config})
    return body["error_count"], {c["definition"]["name"]: c for c in body["configs"]}


def test_validate_answers_every_declared_key_with_its_real_definition() -> None:
    count, configs = answer()
    assert count == 0
    interval = configs["iceberg.control.commit.interval-ms"]
    assert interval["definition"]["type"] == "INT" and interval["definition"]["default_value"] == "300000"
    assert "cycle" in interval["definition"]["documentation"] and interval["definition"]["group"] == "Commits"
    assert interval["value"]["value"] == "300000"  # not given: the default
    auto = configs["iceberg.tables.auto-create-enabled"]["definition"]
    assert (auto["type"], auto["default_value"]) == ("BOOLEAN", "false") and auto["documentation"]
    assert configs["iceberg.control.topic"]["definition"]["default_value"] == keys.CONTROL_TOPIC
    assert configs["topics"]["definition"]["type"] == "LIST" and configs["name"]["definition"]["required"]
    assert configs["errors.tolerance"]["value"]["recommended_values"] == ["none", "all"]
    # Every key declared, given or not (as Connect lists a connector's whole ConfigDef); families are no keys.
    assert set(configs) >= {k.name for k in keys.KEYS if not k.family}
    assert not [name for name in configs if "<" in name or name.endswith("*")]
    # An ignored key says so; documentation is plain text.
    assert "Accepted, not used: Spark decides" in configs["tasks.max"]["definition"]["documentation"]
    assert not [n for n, c in configs.items() if "`" in c["definition"]["documentation"]]


def test_validate_answers_given_keys_of_a_family_and_unknown_ones() -> None:
    count, configs = answer(**{"iceberg.catalog.uri": "http://catalog", "some.unknown": "x",
                               "value.converter.basic.auth.user.info": "user:secret"})
    assert count == 0
    uri = configs["iceberg.catalog.uri"]
    assert uri["definition"]["group"] == "Catalog" and "catalog's properties" in uri["definition"]["documentation"]
    assert uri["value"]["value"] == "http://catalog"
    assert configs["some.unknown"]["definition"]["documentation"] == UNKNOWN_KEY_DOC
    assert configs["some.unknown"]["definition"]["group"] is None
    secret = configs["value.converter.basic.auth.user.info"]
    assert secret["definition"]["type"] == "PASSWORD" and secret["value"]["value"] == "[hidden]"


@pytest.mark.parametrize(("config", "key"), [
    ({"iceberg.tables.auto-create-enabled": "yes"}, "iceberg.tables.auto-create-enabled"),
    ({"iceberg.control.commit.interval-ms": "soon"}, "iceberg.control.commit.interval-ms"),
    ({"tasks.max": "many"}, "tasks.max"),
    ({"iceberg.tables.route-field": "k", "iceberg.table.ns.t.route-regex": "a("}, "iceberg.table.ns.t.route-regex"),
    ({"transforms": "x"}, "transforms.x.type"),  # a key not given: listed for its error
    ({"sinklab.maintenance.compact.every": "3"}, "sinklab.maintenance.compact.every"),
    ({"errors.log.enable": {"nested": True}}, "errors.log.enable"),  # a BadRequest of the herder's normalize
])
def test_an_invalid_value_errs_on_its_key(config: dict[str, Any], key: str) -> None:
    count, configs = answer(**config)
    assert count == 1
    assert [name for name, c in configs.items() if c["value"]["errors"]] == [key]
    assert configs[key]["value"]["errors"][0].startswith(key)


def test_each_key_maps_to_a_field_its_default_reads_as() -> None:
    sink_fields, policy_fields = SinkConfig.model_fields, MaintenancePolicy.model_fields
    for key in keys.SINK_KEYS:
        assert key.doc and "|" not in key.doc, key.name
        if key.field is None:
            continue
        assert key.field in sink_fields, key.name
        # Connect's "" default means not set; value.converter.schemas.enable's is JsonConverter's, and the
        # field follows the converter.
        if key.default not in (None, "") and key.name != keys.VALUE_SCHEMAS_ENABLE:
            assert read_value(key, key.name, key.default) == sink_fields[key.field].get_default(
                call_default_factory=True), key.name
    for key in keys.MAINTENANCE_KEYS:
        assert key.field in policy_fields, key.name
        assert policy_fields[key.field].default == (key.default if key.type != "STRING" else None), key.name


def test_lookup_finds_a_key_or_its_most_specific_family() -> None:
    assert keys.lookup("iceberg.catalog") is not None and keys.lookup("iceberg.catalog").name == "iceberg.catalog"
    route = keys.lookup("iceberg.table.rpc.pizzas.route-regex")
    assert route is not None and route.entry("iceberg.table.rpc.pizzas.route-regex") == "rpc.pizzas"
    assert keys.lookup("transforms.meta.type").name == "transforms.<alias>.type"  # type: ignore[union-attr]
    assert keys.lookup("transforms.meta.nested").name == "transforms.*"  # type: ignore[union-attr]
    assert keys.lookup("iceberg.table.rpc.pizzas.unknown") is None and keys.lookup("some.unknown") is None


def test_every_key_apaches_sink_declares_is_declared_here() -> None:
    """A connector's config moved from Apache's sink, at the version sinklab pins (`make test` fetches it),
    meets no key sinklab does not know: each is read, or accepted and said why it is not used."""
    jar = next(j for j in jars.jars(jars.JAVA_SINK) if j.name == f"iceberg-kafka-connect-{jars.ICEBERG_VERSION}.jar")
    with zipfile.ZipFile(jar) as z:
        code = z.read("org/apache/iceberg/connect/IcebergSinkConfig.class")
    # Its key names are string constants of the class (a prefix ends with a dot).
    declared = {m.decode() for m in re.findall(rb"iceberg\.[a-z0-9.-]+", code)}
    assert "iceberg.control.commit.max-consecutive-failures" in declared  # new in 1.12
    # Set by the connector for its own tasks; and the prefix of iceberg.table.<table>.<setting>, looked up above.
    declared -= {"iceberg.coordinator.transactional.suffix", "iceberg.table."}
    unknown = [k for k in sorted(declared) if keys.lookup(f"{k}x" if k.endswith(".") else k) is None]
    assert not unknown, f"keys of Apache's sink {jars.ICEBERG_VERSION} missing from sinklab.sink.keys: {unknown}"


def test_the_docs_key_reference_is_the_table() -> None:
    pages = {name: path.read_text() for name, path in PAGES.items()}
    for name, text in pages.items():
        assert f"<!-- keys:begin {name} -->" in text, name
        assert render_blocks(text) == text, f"{PAGES[name]}: out of date: python -m sinklab.sink.config.reference"
    for key in keys.KEYS:
        assert any(f"| `{key.name}` |" in text for text in pages.values()), key.name
